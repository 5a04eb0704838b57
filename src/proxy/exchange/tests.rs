//! The exchange against a fake child on a real unix socket pair, with
//! the web server played through an in-memory pipe.
use super::*;
use crate::fastcgi::{
    encode_end_request, encode_pair, encode_record, Deframer, EndRequest, Header, Piece, RecordType,
};
use crate::pool::Fate;
use crate::proxy::client::Next;
use crate::proxy::verdict::{verdict, Verdict};
use crate::proxy::{script, Charge, Ctx};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::UnixStream;

fn rec(kind: u8, id: u16, content: &[u8], padding: &[u8]) -> Vec<u8> {
    let h = Header {
        kind,
        request_id: id,
        content_length: content.len() as u16,
        padding_length: padding.len() as u8,
    };
    let mut v = h.encode().to_vec();
    v.extend_from_slice(content);
    v.extend_from_slice(padding);
    v
}

fn head(id: u16, content_length: Option<&str>) -> Vec<u8> {
    let mut p = Vec::new();
    encode_pair(
        &mut p,
        b"SCRIPT_FILENAME",
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/php/hello.php").as_bytes(),
    );
    encode_pair(&mut p, b"REQUEST_URI", b"/x.php");
    if let Some(cl) = content_length {
        encode_pair(&mut p, b"CONTENT_LENGTH", cl.as_bytes());
    }
    let mut v = rec(1, id, &[0, 1, 1, 0, 0, 0, 0, 0], &[]);
    v.extend(rec(4, id, &p, &[]));
    v.extend(rec(4, id, &[], &[]));
    v
}

fn stdin(id: u16, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for c in body.chunks(65_535) {
        v.extend(rec(5, id, c, &[]));
    }
    v
}

/// What the fake child saw: the STDIN content, whether the empty STDIN
/// record came (else it read end of input), and every record header
/// had no padding.
#[derive(Debug, Default)]
struct Seen {
    stdin: Vec<u8>,
    ended: bool,
    eof: bool,
}

/// A child that reads one request and answers `answer` (raw bytes).
async fn child(mut s: UnixStream, id: u16, answer: Vec<u8>) -> Seen {
    let mut seen = Seen::default();
    let mut d = Deframer::new();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    'read: loop {
        loop {
            if d.at_boundary() && buf.len() >= 8 {
                assert_eq!(buf[6], 0, "fpmd sends no padding");
            }
            let (p, used) = d.next(&buf).unwrap();
            let got = p.is_some();
            if let Some(Piece::Data {
                kind: RecordType::Stdin,
                data,
                request_id,
            }) = p
            {
                assert_eq!(request_id, id);
                seen.stdin.extend_from_slice(data);
            }
            if let Some(Piece::End {
                kind: RecordType::Stdin,
                ..
            }) = p
            {
                seen.ended = true;
            }
            buf.drain(..used);
            if seen.ended {
                break 'read;
            }
            if !got {
                break;
            }
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                seen.eof = true;
                break;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    assert!(
        buf.is_empty(),
        "bytes after the empty STDIN record: {buf:?}"
    );
    let _ = s.write_all(&answer).await;
    seen
}

fn answer(id: u16) -> Vec<u8> {
    let mut a = Vec::new();
    encode_record(&mut a, RecordType::Stdout, id, b"Status: 200 OK\r\n\r\nok").unwrap();
    crate::fastcgi::encode_empty(&mut a, RecordType::Stdout, id);
    encode_end_request(&mut a, id, EndRequest::COMPLETE);
    a
}

/// Reads one request from `client`, writes its head on `conn` and runs
/// the exchange, as the proxy's dispatch does.
async fn one_request(
    client: &mut ClientConn<ReadHalf<DuplexStream>, WriteHalf<DuplexStream>>,
    conn: &mut ChildConn,
) -> Report {
    let ctx = Ctx {
        pool: "t",
        peer: "test",
        script: &script::Options::default(),
        access_log: false,
        report: crate::process::sapi::Report::NOTHING,
    };
    let (_tx, mut rx) = tokio::sync::watch::channel(false);
    let Next::Request(mut req) = client.read_request(&ctx, &mut rx).await.unwrap() else {
        panic!("no request")
    };
    conn.writer.write_all(&req.head).await.unwrap();
    run(
        conn,
        None,
        Timers::default(),
        client,
        &mut req,
        None,
        |_| {},
    )
    .await
}

/// Runs one request: `client_bytes` from the web server (then it closes
/// when `close` is set), a child answering `child_answer`.
/// fpmd's end of a child connection, as [`crate::pool::Worker::connect`]
/// makes it, and the child's end.
fn child_pair() -> (crate::sys::stream::Stream, UnixStream) {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    theirs.set_nonblocking(true).unwrap();
    (
        crate::sys::stream::Stream::new(ours.into(), false).unwrap(),
        UnixStream::from_std(theirs).unwrap(),
    )
}

async fn exchange(
    client_bytes: Vec<u8>,
    close: bool,
    child_answer: Vec<u8>,
) -> (Verdict, Outcome, Seen, Vec<u8>) {
    let (ours, theirs) = child_pair();
    let (r, w) = ours.into_split();
    let mut conn = ChildConn {
        reader: r,
        writer: w,
        buf: bytes::BytesMut::with_capacity(70_000),
    };
    let (fpmd_side, mut web) = tokio::io::duplex(1 << 20);
    let (cr, cw): (ReadHalf<DuplexStream>, WriteHalf<DuplexStream>) = tokio::io::split(fpmd_side);
    let mut client = ClientConn::new(cr, cw, Charge::new());
    let id = u16::from_be_bytes([client_bytes[2], client_bytes[3]]);
    let feeder = tokio::spawn(async move {
        web.write_all(&client_bytes).await.unwrap();
        if close {
            drop(web);
            return Vec::new();
        }
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_millis(300), web.read_to_end(&mut out)).await;
        out
    });
    let kid = tokio::spawn(child(theirs, id, child_answer));
    let report = one_request(&mut client, &mut conn).await;
    drop(conn);
    drop(client);
    let seen = kid.await.unwrap();
    let web_got = feeder.await.unwrap();
    (verdict(&report.outcome), report.outcome, seen, web_got)
}

#[tokio::test]
async fn clean_request_keeps_the_child() {
    let mut c = head(1, Some("5"));
    c.extend(stdin(1, b"hello"));
    c.extend(rec(5, 1, &[], &[]));
    let (v, o, seen, web) = exchange(c, false, answer(1)).await;
    assert_eq!(seen.stdin, b"hello");
    assert!(seen.ended);
    assert_eq!(o.body, BodyEnd::Complete);
    assert_eq!(v.child, Fate::Keep);
    assert!(String::from_utf8_lossy(&web).contains("ok"));
}

#[tokio::test]
async fn body_past_content_length_never_reaches_the_child() {
    let mut c = head(1, Some("3"));
    c.extend(stdin(1, b"hello"));
    c.extend(rec(5, 1, &[], &[]));
    let (v, o, seen, _) = exchange(c, false, answer(1)).await;
    assert_eq!(seen.stdin, b"hel");
    assert_eq!(o.body, BodyEnd::Excess);
    assert_eq!(v.child, Fate::Keep);
}

#[tokio::test]
async fn chunked_post_without_content_length_gives_php_no_body() {
    let mut c = head(1, None);
    c.extend(stdin(1, b"chunked body"));
    c.extend(rec(5, 1, &[], &[]));
    let (v, _, seen, _) = exchange(c, false, answer(1)).await;
    assert_eq!(seen.stdin, b"");
    assert!(seen.ended);
    assert_eq!(v.child, Fate::Keep);
}

#[tokio::test]
async fn padding_on_terminators_is_dropped() {
    // A forged request hidden in the padding of the empty records.
    let forged = head(2, None);
    let pad = &forged[..forged.len().min(255)];
    let mut c = rec(1, 1, &[0, 1, 1, 0, 0, 0, 0, 0], &[]);
    let mut p = Vec::new();
    encode_pair(&mut p, b"CONTENT_LENGTH", b"2");
    encode_pair(
        &mut p,
        b"SCRIPT_FILENAME",
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/php/hello.php").as_bytes(),
    );
    c.extend(rec(4, 1, &p, &[]));
    c.extend(rec(4, 1, &[], pad));
    c.extend(rec(5, 1, b"ab", &[7; 6]));
    c.extend(rec(5, 1, &[], pad));
    let (v, _, seen, _) = exchange(c, false, answer(1)).await;
    assert_eq!(seen.stdin, b"ab");
    assert!(seen.ended);
    assert_eq!(v.child, Fate::Keep);
}

#[tokio::test]
async fn aborted_upload_half_closes_and_php_finishes() {
    // Past the dispatch buffer, so the request is in flight when the
    // web server goes away.
    let body = vec![b'x'; DISPATCH_BUFFER_FOR_TESTS + 10_000];
    let mut c = head(1, Some("1000000"));
    c.extend(stdin(1, &body));
    let (v, o, seen, _) = exchange(c, true, answer(1)).await;
    assert!(seen.eof && !seen.ended, "the child read end of input");
    assert_eq!(seen.stdin.len(), body.len());
    assert_eq!(o.body, BodyEnd::Cut);
    assert_eq!(o.child, ChildEnd::Ended);
    assert_eq!(v.child, Fate::Reconnect);
}

/// STDIN ends short of CONTENT_LENGTH, after dispatch (past the dispatch
/// buffer) or before it: the child gets what came and the empty STDIN
/// record (php-cgi's `fcgi_read` returns what it read there), then end of
/// input; its connection is not reused.
#[tokio::test]
async fn short_body_ends_stdin_and_half_closes() {
    for len in [DISPATCH_BUFFER_FOR_TESTS + 1, 10] {
        let body = vec![b'x'; len];
        let mut c = head(1, Some("1000000"));
        c.extend(stdin(1, &body));
        c.extend(rec(5, 1, &[], &[]));
        let (v, o, seen, _) = exchange(c, false, answer(1)).await;
        assert!(seen.ended, "{len}: no empty STDIN record");
        assert_eq!(seen.stdin, body, "{len}");
        assert_eq!(o.body, BodyEnd::Short, "{len}");
        assert_eq!(v.child, Fate::Reconnect, "{len}");
        assert!(v.keep_client, "{len}");
    }
}

#[tokio::test]
async fn child_garbage_and_death() {
    let mut c = head(1, None);
    c.extend(rec(5, 1, &[], &[]));
    let mut bad = Vec::new();
    encode_record(&mut bad, RecordType::Stdout, 9, b"other id").unwrap();
    let (v, o, _, web) = exchange(c.clone(), false, bad).await;
    assert_eq!(o.child, ChildEnd::Garbage);
    assert_eq!(v.child, Fate::Kill);
    assert!(web.is_empty(), "nothing of it forwarded");
    let (v, o, _, _) = exchange(c, false, Vec::new()).await;
    assert_eq!(o.child, ChildEnd::Eof);
    assert_eq!(v.child, Fate::Lost);
    assert_eq!(v.reply, crate::proxy::verdict::Reply::BadGateway);
}

#[tokio::test]
async fn second_begin_in_flight_breaks_the_client_only() {
    let mut c = head(1, None);
    c.extend(rec(5, 1, &[], &[]));
    c.extend(rec(1, 2, &[0, 1, 1, 0, 0, 0, 0, 0], &[]));
    let (v, o, seen, _) = exchange(c, false, answer(1)).await;
    assert!(seen.ended);
    assert_eq!(o.client, ClientEnd::Broke);
    assert_eq!(v.child, Fate::Keep);
    assert!(!v.keep_client);
}

#[tokio::test]
async fn negative_content_length_ends_the_childs_input() {
    // php-cgi reads past the empty STDIN record when CONTENT_LENGTH is
    // negative: only the end of its input lets it answer. A child that
    // does the same must see EOF after the whole body.
    let mut c = head(1, Some("-1"));
    c.extend(stdin(1, &[b'z'; 9000]));
    c.extend(rec(5, 1, &[], &[]));
    let (ours, mut theirs) = child_pair();
    let (r, w) = ours.into_split();
    let mut conn = ChildConn {
        reader: r,
        writer: w,
        buf: bytes::BytesMut::with_capacity(70_000),
    };
    let (fpmd_side, mut web) = tokio::io::duplex(1 << 20);
    let (cr, cw) = tokio::io::split(fpmd_side);
    let mut client = ClientConn::new(cr, cw, Charge::new());
    web.write_all(&c).await.unwrap();
    let kid = tokio::spawn(async move {
        let mut all = Vec::new();
        // Reads to EOF, as php-cgi does here; hangs if fpmd never ends it.
        tokio::time::timeout(Duration::from_secs(10), theirs.read_to_end(&mut all))
            .await
            .expect("the child's input ended")
            .unwrap();
        theirs.write_all(&answer(1)).await.unwrap();
        all.len()
    });
    let report = one_request(&mut client, &mut conn).await;
    assert!(kid.await.unwrap() > 9000);
    assert_eq!(report.outcome.child, ChildEnd::Ended);
    assert_eq!(verdict(&report.outcome).child, Fate::Reconnect);
}

const DISPATCH_BUFFER_FOR_TESTS: usize = crate::proxy::client::DISPATCH_BUFFER;
