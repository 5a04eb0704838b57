//! Raw FastCGI 1.0 bytes written by hand (8-byte record headers, name-value
//! pairs), and a blocking reader, to play a web server that misbehaves.
//! Independent of the daemon's own codec on purpose.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

pub const VERSION: u8 = 1;
pub const BEGIN_REQUEST: u8 = 1;
pub const ABORT_REQUEST: u8 = 2;
pub const END_REQUEST: u8 = 3;
pub const PARAMS: u8 = 4;
pub const STDIN: u8 = 5;
pub const STDOUT: u8 = 6;
pub const STDERR: u8 = 7;
pub const DATA: u8 = 8;
pub const GET_VALUES: u8 = 9;
pub const GET_VALUES_RESULT: u8 = 10;
pub const UNKNOWN_TYPE: u8 = 11;

pub const RESPONDER: u16 = 1;
pub const KEEP_CONN: u8 = 1;

pub fn header(ty: u8, id: u16, content_len: u16, padding: u8) -> [u8; 8] {
    let [i1, i0] = id.to_be_bytes();
    let [l1, l0] = content_len.to_be_bytes();
    [VERSION, ty, i1, i0, l1, l0, padding, 0]
}

/// One record, padded to a multiple of 8 as the spec recommends.
pub fn record(ty: u8, id: u16, content: &[u8]) -> Vec<u8> {
    assert!(content.len() <= 65535);
    let pad = (8 - content.len() % 8) % 8;
    let mut v = header(ty, id, content.len() as u16, pad as u8).to_vec();
    v.extend_from_slice(content);
    v.extend(std::iter::repeat_n(0, pad));
    v
}

/// One record with exactly these padding bytes after its content (FastCGI
/// allows 0 to 255 of any value; the receiver must skip them).
pub fn record_padded(ty: u8, id: u16, content: &[u8], padding: &[u8]) -> Vec<u8> {
    assert!(content.len() <= 65535 && padding.len() <= 255);
    let mut v = header(ty, id, content.len() as u16, padding.len() as u8).to_vec();
    v.extend_from_slice(content);
    v.extend_from_slice(padding);
    v
}

pub fn begin_request(id: u16, flags: u8) -> Vec<u8> {
    let [r1, r0] = RESPONDER.to_be_bytes();
    record(BEGIN_REQUEST, id, &[r1, r0, flags, 0, 0, 0, 0, 0])
}

fn nv_len(v: &mut Vec<u8>, n: usize) {
    if n < 128 {
        v.push(n as u8);
    } else {
        v.extend_from_slice(&((n as u32) | 0x8000_0000).to_be_bytes());
    }
}

pub fn name_value(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    nv_len(&mut v, name.len());
    nv_len(&mut v, value.len());
    v.extend_from_slice(name);
    v.extend_from_slice(value);
    v
}

/// A stream (PARAMS, STDIN) cut in records of at most 65535 bytes, plus the empty end record.
pub fn stream(ty: u8, id: u16, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for chunk in data.chunks(65535) {
        v.extend(record(ty, id, chunk));
    }
    v.extend(record(ty, id, &[]));
    v
}

/// The CGI parameters nginx would send for `GET /<script>?<query>` from `docroot`.
pub fn params_for(
    docroot: &Path,
    script: &str,
    query: &str,
    method: &str,
    body_len: usize,
) -> Vec<(String, String)> {
    let uri = if query.is_empty() {
        format!("/{script}")
    } else {
        format!("/{script}?{query}")
    };
    let mut p = vec![
        (
            "SCRIPT_FILENAME".to_string(),
            docroot.join(script).display().to_string(),
        ),
        ("SCRIPT_NAME".into(), format!("/{script}")),
        ("DOCUMENT_ROOT".into(), docroot.display().to_string()),
        ("REQUEST_URI".into(), uri),
        ("QUERY_STRING".into(), query.into()),
        ("REQUEST_METHOD".into(), method.into()),
        ("SERVER_PROTOCOL".into(), "HTTP/1.1".into()),
        ("GATEWAY_INTERFACE".into(), "CGI/1.1".into()),
        ("SERVER_SOFTWARE".into(), "fpmd-tests".into()),
        ("REMOTE_ADDR".into(), "127.0.0.1".into()),
        ("REMOTE_PORT".into(), "40000".into()),
        ("SERVER_ADDR".into(), "127.0.0.1".into()),
        ("SERVER_PORT".into(), "80".into()),
        ("SERVER_NAME".into(), "localhost".into()),
        ("HTTP_HOST".into(), "localhost".into()),
    ];
    if body_len > 0 {
        p.push(("CONTENT_LENGTH".into(), body_len.to_string()));
        p.push(("CONTENT_TYPE".into(), "application/octet-stream".into()));
    }
    p
}

pub fn encode_params(params: &[(String, String)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (k, val) in params {
        v.extend(name_value(k.as_bytes(), val.as_bytes()));
    }
    v
}

/// A whole request: BEGIN_REQUEST, PARAMS stream, STDIN stream.
pub fn request(id: u16, flags: u8, params: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut v = begin_request(id, flags);
    v.extend(stream(PARAMS, id, &encode_params(params)));
    v.extend(stream(STDIN, id, body));
    v
}

#[derive(Clone, Debug)]
pub struct Record {
    pub ty: u8,
    pub id: u16,
    pub content: Vec<u8>,
}

/// How a read of the peer's records ended.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// The peer closed (EOF or reset).
    Closed,
    /// We stopped because `stop` said so; the connection is still open.
    Stopped,
    /// Nothing more came within the timeout; the connection is still open.
    TimedOut,
}

/// Reads records until `stop(&records)` is true, the peer closes, or `timeout`.
/// Returns the records and how it ended; trailing partial bytes are dropped.
pub fn read_records(
    s: &mut TcpStream,
    timeout: Duration,
    mut stop: impl FnMut(&[Record]) -> bool,
) -> (Vec<Record>, End) {
    let t0 = Instant::now();
    let mut buf = Vec::new();
    let mut recs = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        // parse what is buffered
        while buf.len() >= 8 {
            let len = u16::from_be_bytes([buf[4], buf[5]]) as usize;
            let pad = buf[6] as usize;
            if buf.len() < 8 + len + pad {
                break;
            }
            recs.push(Record {
                ty: buf[1],
                id: u16::from_be_bytes([buf[2], buf[3]]),
                content: buf[8..8 + len].to_vec(),
            });
            buf.drain(..8 + len + pad);
        }
        if stop(&recs) {
            return (recs, End::Stopped);
        }
        let left = timeout.saturating_sub(t0.elapsed());
        if left.is_zero() {
            return (recs, End::TimedOut);
        }
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut chunk) {
            Ok(0) => return (recs, End::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                return (recs, End::TimedOut)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return (recs, End::Closed), // reset
        }
    }
}

/// Waits for the peer to close the connection, discarding whatever it sends.
/// Returns how long it took, or None if it was still open after `timeout`.
pub fn wait_closed(s: &mut TcpStream, timeout: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let (_, end) = read_records(s, timeout, |_| false);
    (end == End::Closed).then(|| t0.elapsed())
}

/// STDOUT of request `id` concatenated.
pub fn stdout_of(recs: &[Record], id: u16) -> Vec<u8> {
    recs.iter()
        .filter(|r| r.ty == STDOUT && r.id == id)
        .flat_map(|r| r.content.clone())
        .collect()
}

/// STDERR of request `id` concatenated.
pub fn stderr_of(recs: &[Record], id: u16) -> Vec<u8> {
    recs.iter()
        .filter(|r| r.ty == STDERR && r.id == id)
        .flat_map(|r| r.content.clone())
        .collect()
}

/// Sends `bytes` on a new connection to `addr` and reads until the
/// END_REQUEST of `id`, the peer closes, or `timeout`.
pub fn exchange(addr: SocketAddr, bytes: &[u8], id: u16, timeout: Duration) -> (Vec<Record>, End) {
    let mut c = connect(addr);
    // The server may close while we write (and answer first): read anyway.
    let _ = c.write_all(bytes);
    read_records(&mut c, timeout, |r| has_end_request(r, id))
}

/// `GET /<script>?<query>` from `docroot` straight over FastCGI at `addr`
/// (as nginx would ask it): the CGI status and the body, as text.
pub fn get_script(addr: SocketAddr, docroot: &Path, script: &str, query: &str) -> (u16, String) {
    let params = params_for(docroot, script, query, "GET", 0);
    let (recs, _) = exchange(addr, &request(1, 0, &params, b""), 1, super::LONG);
    let (status, _, body) = cgi_response(&stdout_of(&recs, 1));
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A CGI response (STDOUT) split into its status (200 when PHP sent no
/// `Status:` header), headers and body.
pub fn cgi_response(stdout: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let text = stdout;
    let (head, body) = match text.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => (&text[..i], &text[i + 4..]),
        None => match text.windows(2).position(|w| w == b"\n\n") {
            Some(i) => (&text[..i], &text[i + 2..]),
            None => (text, &[][..]),
        },
    };
    let mut status = 200;
    let mut headers = Vec::new();
    for line in String::from_utf8_lossy(head).lines() {
        if let Some((k, v)) = line.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            if k == "status" {
                status = v
                    .split_whitespace()
                    .next()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    (status, headers, body.to_vec())
}

pub fn has_end_request(recs: &[Record], id: u16) -> bool {
    recs.iter().any(|r| r.ty == END_REQUEST && r.id == id)
}

/// Decodes FastCGI name-value pairs (e.g. a GET_VALUES_RESULT body).
pub fn decode_pairs(mut b: &[u8]) -> Vec<(String, String)> {
    fn len(b: &mut &[u8]) -> Option<usize> {
        let first = *b.first()?;
        if first < 128 {
            *b = &b[1..];
            Some(first as usize)
        } else {
            if b.len() < 4 {
                return None;
            }
            let n = u32::from_be_bytes([b[0] & 0x7f, b[1], b[2], b[3]]) as usize;
            *b = &b[4..];
            Some(n)
        }
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let (Some(n), Some(v)) = (len(&mut b), len(&mut b)) else {
            break;
        };
        if b.len() < n + v {
            break;
        }
        out.push((
            String::from_utf8_lossy(&b[..n]).into_owned(),
            String::from_utf8_lossy(&b[n..n + v]).into_owned(),
        ));
        b = &b[n + v..];
    }
    out
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Connects to `to` from the local address `from` (e.g. 127.0.0.2).
pub fn connect_from(from: std::net::IpAddr, to: SocketAddr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(to), Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::new(from, 0).into())
        .unwrap_or_else(|e| panic!("bind {from}: {e}"));
    sock.connect_timeout(&to.into(), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect {to} from {from}: {e}"));
    let s: TcpStream = sock.into();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

pub fn send(s: &mut TcpStream, bytes: &[u8]) {
    s.write_all(bytes)
        .unwrap_or_else(|e| panic!("sending {} bytes: {e}", bytes.len()));
}

/// Deterministic pseudo-random bytes (xorshift), no extra crate needed.
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
