//! A live mutation fuzzer against the real daemon.
//!
//! fpmd runs two pools of 4 static children, one on a unix socket and one
//! on TCP, each behind its own nginx with upstream keep-alive, both with
//! `request_terminate_timeout = "5s"` (a fuzzed request cannot hold a child
//! for ever). For `FPMD_LIVE_FUZZ_SECS` (default 20 s), on each listener:
//!
//! - good requests through nginx, 3 threads taking turns at GET hello.php
//!   with a query, a POST of a random body to body.php checked by md5, and a
//!   PATH_INFO request of server_vars.php: every answer must be right;
//! - a mutation fuzzer, 2 threads connecting straight to fpmd's listener:
//!   many raw FastCGI connections, some kept open (slowloris drips among
//!   them), some in bursts, some closed abruptly, some half-closed. Each
//!   follows a [`Plan`] drawn from the seed: mutated versions of valid
//!   requests ([`mutate_params`], [`mutate_records`], [`mutate_bytes`]),
//!   CONTENT_LENGTH lies in well-formed requests, a valid request with
//!   something else sent while it runs, slow readers of big responses,
//!   management records (GET_VALUES small, huge, floods; unknown types),
//!   noise, idle connections; sent at various paces ([`Pacing`]).
//!
//! Answers to garbage are read and thrown away; they must only be
//! well-formed FastCGI ([`Got::take`]) and carry no other connection's
//! marker: every connection (and every good request) has its own marker in
//! the query string of hello.php, which echoes it, so a request or a
//! response that reached the wrong client shows. A quarter of the
//! connections send only legal FastCGI, cut and paced oddly (records split
//! anywhere, any padding, 4-byte lengths, several requests on a kept
//! connection, GET_VALUES before and during a request, byte by byte,
//! slowly, a big response read slowly): their answers must be right too.
//!
//! Afterwards: fpmd runs, each pool serves 4 requests at once, 8 live
//! children and no zombie, no panic in fpmd's log, an RSS under 200 MiB,
//! and no child was kept on the request of a client that had left
//! ([`held_for_gone_clients`]).
//!
//! The seed is printed; `FPMD_LIVE_FUZZ_SEED=N` replays it: the bytes
//! each connection of each fuzz thread sends follow from the seed (the
//! interleaving of the threads, and so fpmd's answers, do not). With
//! FPMD_KEEP_TMP=1 the test dir keeps `fuzz-unix.log` and `fuzz-tcp.log`,
//! one line per connection (when, who, its marker and plan), next to
//! fpmd's log.

use crate::harness::fcgi::{self, *};
use crate::harness::http::{agent, try_get_with, try_post_with};
use crate::harness::*;
use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

const CHILDREN: usize = 4;
const LISTENERS: [&str; 2] = ["unix", "tcp"];
const GOOD_THREADS: usize = 3;
const FUZZ_THREADS: usize = 2;
/// Connections one fuzz thread keeps open at most between its others.
const HELD_MAX: usize = 20;
/// How long a legal request sent straight to fpmd may wait for its answer
/// (and a legal write for fpmd to read it): far more than a slow machine
/// needs, since the pool turns over every few ms.
const LEGAL_WAIT: Duration = Duration::from_secs(60);
/// How long a write of a fuzzed connection may block (fpmd stops reading
/// a queued request's connection after 64 KiB).
const FUZZ_WRITE_WAIT: Duration = Duration::from_secs(5);
const RSS_BAR: u64 = 200 << 20;

// ---------------------------------------------------------------------------
// PRNG and markers
// ---------------------------------------------------------------------------

/// xorshift64, seeded through splitmix64 so that close seeds differ.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// 0..n (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// lo..=hi.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        noise(self.next(), n)
    }
    fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())].clone()
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo + 1))
    }
}

/// Every marker handed out (its 64-bit value) and the connection or good
/// request that owns it: `listener << 56 | thread << 48 | counter`.
fn markers() -> &'static Mutex<HashMap<u64, u64>> {
    static M: OnceLock<Mutex<HashMap<u64, u64>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

const MARK: &[u8] = b"FZMK";

/// `FZMK` and 16 hex digits, owned by `owner`.
fn new_marker(rng: &mut Rng, owner: u64) -> String {
    let v = rng.next();
    markers().lock().unwrap().insert(v, owner);
    format!("FZMK{v:016x}")
}

fn owner(listener: usize, thread: usize, n: u64) -> u64 {
    (listener as u64) << 56 | (thread as u64) << 48 | n
}

fn owner_name(o: u64) -> String {
    let (l, t, n) = (o >> 56, (o >> 48) & 0xff, o & 0xffff_ffff_ffff);
    let who = if t >= 0x80 {
        format!("good{}", t - 0x80)
    } else {
        format!("fuzz{t}")
    };
    format!("{}/{who}#{n}", LISTENERS[l as usize])
}

/// Markers in `text` that belong to someone else than `own`.
fn foreign_markers(text: &[u8], own: u64) -> Vec<String> {
    let reg = markers().lock().unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].windows(MARK.len()).position(|w| w == MARK) {
        let start = at + i + MARK.len();
        at = start;
        let Some(hex) = text.get(start..start + 16) else {
            break;
        };
        if !hex
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        {
            continue;
        }
        let v = u64::from_str_radix(std::str::from_utf8(hex).unwrap(), 16).unwrap();
        if let Some(&o) = reg.get(&v) {
            if o != own {
                out.push(format!(
                    "FZMK{} (owned by {})",
                    String::from_utf8_lossy(hex),
                    owner_name(o)
                ));
            }
        }
    }
    out
}

fn short(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let mut t: String = s.chars().take(300).collect();
    if s.chars().count() > 300 {
        t.push_str("...");
    }
    t
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------
// Sockets
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Target {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl From<Addr> for Target {
    fn from(a: Addr) -> Target {
        match a {
            Addr::Unix(p) => Target::Unix(p),
            Addr::Tcp(a) => Target::Tcp(a),
        }
    }
}

enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn connect(t: &Target) -> io::Result<Sock> {
        use socket2::{Domain, SockAddr, Socket, Type};
        let (domain, addr) = match t {
            Target::Unix(p) => (Domain::UNIX, SockAddr::unix(p)?),
            Target::Tcp(a) => (Domain::for_address(*a), SockAddr::from(*a)),
        };
        let s = Socket::new(domain, Type::STREAM, None)?;
        s.connect_timeout(&addr, Duration::from_secs(10))?;
        Ok(match t {
            Target::Unix(_) => Sock::Unix(s.into()),
            Target::Tcp(_) => {
                s.set_nodelay(true)?;
                Sock::Tcp(s.into())
            }
        })
    }
    fn set_read_timeout(&self, d: Duration) {
        let d = Some(d.max(Duration::from_millis(1)));
        let _ = match self {
            Sock::Tcp(s) => s.set_read_timeout(d),
            Sock::Unix(s) => s.set_read_timeout(d),
        };
    }
    fn set_write_timeout(&self, d: Duration) {
        let d = Some(d.max(Duration::from_millis(1)));
        let _ = match self {
            Sock::Tcp(s) => s.set_write_timeout(d),
            Sock::Unix(s) => s.set_write_timeout(d),
        };
    }
    fn set_nonblocking(&self, on: bool) {
        let _ = match self {
            Sock::Tcp(s) => s.set_nonblocking(on),
            Sock::Unix(s) => s.set_nonblocking(on),
        };
    }
    fn shutdown_write(&self) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Write),
            Sock::Unix(s) => s.shutdown(Shutdown::Write),
        };
    }
    /// Closes with a reset (TCP: SO_LINGER 0); a unix socket just closes.
    fn reset(self) {
        if let Sock::Tcp(s) = &self {
            let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
        }
    }
}

impl Read for Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(b),
            Sock::Unix(s) => s.read(b),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(b),
            Sock::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// What a connection sent, as fpmd frames it, and what fpmd answered
// ---------------------------------------------------------------------------

/// The records a connection sent, framed by their headers as fpmd frames
/// them (padding skipped, so a record hidden in padding is no record).
#[derive(Default)]
struct Sent {
    hdr: [u8; 8],
    have: usize,
    skip: usize,
    /// BEGIN_REQUEST records per request id (not 0).
    begins: HashMap<u16, u32>,
    /// GET_VALUES records of request id 0.
    get_values: u32,
    /// Types of the other records of request id 0.
    mgmt: Vec<u8>,
    records: u64,
    bytes: u64,
    /// The first 64 KiB sent, for reports.
    log: Vec<u8>,
}

impl Sent {
    fn feed(&mut self, mut b: &[u8]) {
        self.bytes += b.len() as u64;
        let room = (64usize << 10).saturating_sub(self.log.len());
        self.log.extend_from_slice(&b[..room.min(b.len())]);
        while !b.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(b.len());
                self.skip -= n;
                b = &b[n..];
                continue;
            }
            let n = (8 - self.have).min(b.len());
            self.hdr[self.have..self.have + n].copy_from_slice(&b[..n]);
            self.have += n;
            b = &b[n..];
            if self.have == 8 {
                self.have = 0;
                let h = self.hdr;
                self.records += 1;
                self.skip = u16::from_be_bytes([h[4], h[5]]) as usize + h[6] as usize;
                match (h[1], u16::from_be_bytes([h[2], h[3]])) {
                    (GET_VALUES, 0) => self.get_values += 1,
                    (t, 0) => self.mgmt.push(t),
                    (BEGIN_REQUEST, id) => *self.begins.entry(id).or_default() += 1,
                    _ => {}
                }
            }
        }
    }
}

/// One request fpmd ended.
struct Done {
    id: u16,
    stdout: Vec<u8>,
    protocol_status: u8,
}

/// What fpmd sent on a connection.
#[derive(Default)]
struct Got {
    buf: Vec<u8>,
    ends: HashMap<u16, u32>,
    /// STDOUT and STDERR of requests not ended yet.
    open: HashMap<u16, (Vec<u8>, Vec<u8>)>,
    done: Vec<Done>,
    gv: u32,
    unknown: u32,
    records: u64,
    answers: u64,
    bytes: u64,
    /// fpmd closed (end of file).
    eof: bool,
    /// A write failed: had fpmd reset the connection, the write took the
    /// error and a later read sees an end of file, with the tail of what
    /// fpmd sent thrown away by the kernel.
    write_failed: bool,
    /// A read failed (reset).
    reset: bool,
}

const KEEP_OUTPUT: usize = 4 << 20;

impl Got {
    fn closed(&self) -> bool {
        self.eof || self.reset
    }

    /// Takes bytes fpmd sent; an error says how they are not well-formed
    /// FastCGI for what was sent, or carry someone else's marker.
    fn take(&mut self, data: &[u8], sent: &Sent, own: u64) -> Result<(), String> {
        self.bytes += data.len() as u64;
        self.buf.extend_from_slice(data);
        let mut at = 0;
        let mut res = Ok(());
        while self.buf.len() - at >= 8 {
            let b = &self.buf[at..];
            let len = u16::from_be_bytes([b[4], b[5]]) as usize;
            let pad = b[6] as usize;
            if b.len() < 8 + len + pad {
                break;
            }
            let (version, ty, id) = (b[0], b[1], u16::from_be_bytes([b[2], b[3]]));
            let content = b[8..8 + len].to_vec();
            at += 8 + len + pad;
            self.records += 1;
            res = self.record(version, ty, id, content, sent, own);
            if res.is_err() {
                break;
            }
        }
        self.buf.drain(..at);
        res
    }

    fn record(
        &mut self,
        version: u8,
        ty: u8,
        id: u16,
        content: Vec<u8>,
        sent: &Sent,
        own: u64,
    ) -> Result<(), String> {
        if version != VERSION {
            return Err(format!(
                "fpmd sent a record of version {version} (type {ty})"
            ));
        }
        match ty {
            STDOUT | STDERR | END_REQUEST => {
                let begun = sent.begins.get(&id).copied().unwrap_or(0);
                let ended = self.ends.get(&id).copied().unwrap_or(0);
                if id == 0 || ended >= begun {
                    return Err(format!(
                        "fpmd sent {} for request id {id}, of which {begun} BEGIN_REQUEST were sent and {ended} END_REQUEST received",
                        type_name(ty)
                    ));
                }
                let out = self.open.entry(id).or_default();
                match ty {
                    STDOUT if out.0.len() < KEEP_OUTPUT => out.0.extend_from_slice(&content),
                    STDERR if out.1.len() < KEEP_OUTPUT => out.1.extend_from_slice(&content),
                    END_REQUEST => {
                        if content.len() != 8 {
                            return Err(format!(
                                "END_REQUEST of request id {id} with {} bytes of body",
                                content.len()
                            ));
                        }
                        if content[4] > 3 {
                            return Err(format!(
                                "END_REQUEST of request id {id} with protocol status {}",
                                content[4]
                            ));
                        }
                        let (stdout, stderr) = self.open.remove(&id).unwrap_or_default();
                        check_markers(&stdout, own, "STDOUT")?;
                        check_markers(&stderr, own, "STDERR")?;
                        *self.ends.entry(id).or_default() += 1;
                        self.answers += 1;
                        self.done.push(Done {
                            id,
                            stdout,
                            protocol_status: content[4],
                        });
                    }
                    _ => {}
                }
            }
            GET_VALUES_RESULT => {
                if id != 0 || self.gv >= sent.get_values {
                    return Err(format!(
                        "GET_VALUES_RESULT number {} (request id {id}) for {} GET_VALUES sent",
                        self.gv + 1,
                        sent.get_values
                    ));
                }
                let pairs = strict_pairs(&content).ok_or_else(|| {
                    format!(
                        "GET_VALUES_RESULT is not name-value pairs: {}",
                        hex(&content)
                    )
                })?;
                for (n, v) in pairs {
                    let ok = match &n[..] {
                        b"FCGI_MPXS_CONNS" => v == b"0",
                        b"FCGI_MAX_CONNS" | b"FCGI_MAX_REQS" => {
                            !v.is_empty() && v.iter().all(u8::is_ascii_digit)
                        }
                        _ => false,
                    };
                    if !ok {
                        return Err(format!(
                            "GET_VALUES_RESULT says {}={}",
                            short(&n),
                            short(&v)
                        ));
                    }
                }
                self.gv += 1;
                self.answers += 1;
            }
            UNKNOWN_TYPE => {
                if id != 0
                    || content.len() != 8
                    || self.unknown as usize >= sent.mgmt.len()
                    || !sent.mgmt.contains(&content[0])
                {
                    return Err(format!(
                        "UNKNOWN_TYPE (request id {id}, body {}) for the types {:?} sent with request id 0",
                        hex(&content),
                        sent.mgmt
                    ));
                }
                self.unknown += 1;
                self.answers += 1;
            }
            _ => {
                return Err(format!(
                    "fpmd sent a record of type {ty} ({})",
                    type_name(ty)
                ))
            }
        }
        Ok(())
    }

    /// At the end of the connection: the output of unended requests, and
    /// what was left of a record when fpmd closed.
    fn finish(&mut self, own: u64) -> Result<(), String> {
        for (stdout, stderr) in self.open.values() {
            check_markers(stdout, own, "STDOUT")?;
            check_markers(stderr, own, "STDERR")?;
        }
        if self.eof && !self.write_failed && !self.buf.is_empty() {
            return Err(format!(
                "fpmd closed the connection in the middle of a record ({} bytes: {})",
                self.buf.len(),
                hex(&self.buf[..self.buf.len().min(64)])
            ));
        }
        Ok(())
    }
}

fn check_markers(out: &[u8], own: u64, what: &str) -> Result<(), String> {
    let foreign = foreign_markers(out, own);
    if foreign.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{what} carries another connection's marker {foreign:?}: {}",
        short(out)
    ))
}

fn type_name(ty: u8) -> &'static str {
    match ty {
        BEGIN_REQUEST => "BEGIN_REQUEST",
        ABORT_REQUEST => "ABORT_REQUEST",
        END_REQUEST => "END_REQUEST",
        PARAMS => "PARAMS",
        STDIN => "STDIN",
        STDOUT => "STDOUT",
        STDERR => "STDERR",
        DATA => "DATA",
        GET_VALUES => "GET_VALUES",
        GET_VALUES_RESULT => "GET_VALUES_RESULT",
        UNKNOWN_TYPE => "UNKNOWN_TYPE",
        _ => "an unknown type",
    }
}

/// Name-value pairs that fill `b` exactly, or None.
fn strict_pairs(mut b: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    fn len(b: &mut &[u8]) -> Option<usize> {
        let first = *b.first()?;
        if first < 128 {
            *b = &b[1..];
            return Some(first as usize);
        }
        let l = b.get(..4)?;
        let n = u32::from_be_bytes([l[0] & 0x7f, l[1], l[2], l[3]]) as usize;
        *b = &b[4..];
        Some(n)
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = len(&mut b)?;
        let v = len(&mut b)?;
        let name = b.get(..n)?.to_vec();
        let value = b.get(n..n + v)?.to_vec();
        b = &b[n + v..];
        out.push((name, value));
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Requests and their mutations
// ---------------------------------------------------------------------------

/// A record as built, before it becomes bytes: anything may be wrong in it.
#[derive(Clone, Debug)]
struct Rec {
    version: u8,
    ty: u8,
    id: u16,
    content: Vec<u8>,
    pad: Vec<u8>,
    /// Content length written in the header, when it lies.
    len: Option<u16>,
}

impl Rec {
    fn new(ty: u8, id: u16, content: Vec<u8>, pad: Vec<u8>) -> Rec {
        assert!(content.len() <= 65535 && pad.len() <= 255);
        Rec {
            version: VERSION,
            ty,
            id,
            content,
            pad,
            len: None,
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        let len = self.len.unwrap_or(self.content.len() as u16);
        let [i1, i0] = self.id.to_be_bytes();
        let [l1, l0] = len.to_be_bytes();
        out.extend_from_slice(&[
            self.version,
            self.ty,
            i1,
            i0,
            l1,
            l0,
            self.pad.len() as u8,
            0,
        ]);
        out.extend_from_slice(&self.content);
        out.extend_from_slice(&self.pad);
    }
}

fn encode_recs(recs: &[Rec]) -> Vec<u8> {
    let mut v = Vec::new();
    for r in recs {
        r.encode(&mut v);
    }
    v
}

/// Padding to a multiple of 8 with zeros, or (legal too) 0 to 255 bytes of anything.
fn padding(rng: &mut Rng, content_len: usize) -> Vec<u8> {
    if rng.chance(70) {
        vec![0; (8 - content_len % 8) % 8]
    } else {
        let n = rng.below(256);
        rng.bytes(n)
    }
}

fn begin_rec(rng: &mut Rng, id: u16, flags: u8) -> Rec {
    let [r1, r0] = RESPONDER.to_be_bytes();
    let c = vec![r1, r0, flags, 0, 0, 0, 0, 0];
    let pad = padding(rng, 8);
    Rec::new(BEGIN_REQUEST, id, c, pad)
}

/// A stream cut anywhere into records (any padding), plus its empty end record.
fn stream_recs(rng: &mut Rng, ty: u8, id: u16, data: &[u8]) -> Vec<Rec> {
    let style = rng.below(3);
    let mut v = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let max = (data.len() - at).min(65535);
        let n = match style {
            0 => max,
            1 => rng.range(1, max.min(4096)),
            _ => rng.range(1, max),
        };
        let pad = padding(rng, n);
        v.push(Rec::new(ty, id, data[at..at + n].to_vec(), pad));
        at += n;
    }
    let pad = padding(rng, 0);
    v.push(Rec::new(ty, id, Vec::new(), pad));
    v
}

fn nv_len(v: &mut Vec<u8>, n: usize, long: bool) {
    if n < 128 && !long {
        v.push(n as u8);
    } else {
        v.extend_from_slice(&((n as u32) | 0x8000_0000).to_be_bytes());
    }
}

/// Name-value pairs; with `long_lengths`, some short lengths take the
/// (legal) 4-byte form.
fn encode_pairs(rng: &mut Rng, params: &[(Vec<u8>, Vec<u8>)], long_lengths: bool) -> Vec<u8> {
    let mut v = Vec::new();
    for (k, val) in params {
        nv_len(&mut v, k.len(), long_lengths && rng.chance(30));
        nv_len(&mut v, val.len(), long_lengths && rng.chance(30));
        v.extend_from_slice(k);
        v.extend_from_slice(val);
    }
    v
}

#[derive(Clone, Debug)]
enum Expect {
    Hello(String),
    Body(usize, String),
    Sleep,
    Vars(String),
    /// big.php?mb=N.
    Big(usize),
}

impl Expect {
    /// Checks the STDOUT of a legal request.
    fn check(&self, stdout: &[u8]) -> Result<(), String> {
        let (status, _, body) = cgi_response(stdout);
        let text = String::from_utf8_lossy(&body);
        let ok = status == 200
            && match self {
                Expect::Hello(m) => text == format!("hello {m}\nQUERY_STRING=name={m}\n"),
                Expect::Body(n, md5) => text == format!("{n} {md5}"),
                Expect::Sleep => text.ends_with(" done"),
                Expect::Big(mb) => {
                    body.len() == mb << 20
                        && body.chunks(1024).enumerate().all(|(i, line)| {
                            let c = b'a' + (i % 26) as u8;
                            line[..1023].iter().all(|x| *x == c) && line[1023] == b'\n'
                        })
                }
                Expect::Vars(m) => {
                    text.contains(&format!("\nPATH_INFO=/p/{m}\n"))
                        && text.contains(&format!("\nQUERY_STRING=name={m}\n"))
                }
            };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "expected {self:?}, got status {status}: {:?}",
                short(&body)
            ))
        }
    }
}

/// What the fuzzer needs to know of the stack.
struct Ctx {
    docroot: PathBuf,
    target: Target,
    listener: usize,
    deadline: Instant,
    /// `fuzz-<listener>.log` in the test dir: one line per connection (when
    /// it was opened, who, what it does), to match with fpmd's log.
    plans: Mutex<std::fs::File>,
}

/// CGI parameters as bytes (a mutated one need not be text).
type Params = Vec<(Vec<u8>, Vec<u8>)>;

fn owned(p: Vec<(String, String)>) -> Params {
    p.into_iter()
        .map(|(k, v)| (k.into_bytes(), v.into_bytes()))
        .collect()
}

fn set_param(p: &mut Params, k: &str, v: impl Into<Vec<u8>>) {
    let v = v.into();
    match p.iter_mut().find(|(n, _)| n == k.as_bytes()) {
        Some(e) => e.1 = v,
        None => p.push((k.as_bytes().to_vec(), v)),
    }
}

/// The CGI parameters and body of one valid request, and what it must answer.
fn valid_request(
    rng: &mut Rng,
    docroot: &Path,
    marker: &str,
    legal: bool,
) -> (Params, Vec<u8>, Expect) {
    let q = format!("name={marker}");
    match rng.below(100) {
        0..=44 => {
            let p = fcgi::params_for(docroot, "hello.php", &q, "GET", 0);
            (owned(p), Vec::new(), Expect::Hello(marker.into()))
        }
        45..=74 => {
            let n = match rng.below(100) {
                0..=79 => rng.below(20_000),
                80..=96 => rng.range(20_000, 100_000),
                _ => rng.range(260_000, 600_000),
            };
            let body = rng.bytes(n);
            let p = fcgi::params_for(docroot, "body.php", &q, "POST", n);
            let md5 = md5_hex(&body);
            (owned(p), body, Expect::Body(n, md5))
        }
        75..=79 => {
            let mb = rng.range(1, if legal { 2 } else { 8 });
            let p = fcgi::params_for(docroot, "big.php", &format!("mb={mb}&{q}"), "GET", 0);
            (owned(p), Vec::new(), Expect::Big(mb))
        }
        80..=87 => {
            // A rare one runs past request_terminate_timeout.
            let ms = if !legal && rng.chance(2) {
                7000
            } else {
                rng.below(150)
            };
            let p = fcgi::params_for(docroot, "sleep.php", &format!("ms={ms}&{q}"), "GET", 0);
            (owned(p), Vec::new(), Expect::Sleep)
        }
        _ => {
            let mut p = owned(fcgi::params_for(docroot, "server_vars.php", &q, "GET", 0));
            set_param(&mut p, "PATH_INFO", format!("/p/{marker}"));
            set_param(
                &mut p,
                "REQUEST_URI",
                format!("/server_vars.php/p/{marker}?{q}"),
            );
            (p, Vec::new(), Expect::Vars(marker.into()))
        }
    }
}

/// A whole request small enough to hide in the padding of one record.
fn forged_request(docroot: &Path, marker: &str) -> Vec<u8> {
    let p = vec![
        (
            "SCRIPT_FILENAME".to_string(),
            docroot.join("hello.php").display().to_string(),
        ),
        ("REQUEST_METHOD".into(), "GET".into()),
        ("QUERY_STRING".into(), format!("name={marker}")),
    ];
    let mut v = begin_request(1, KEEP_CONN);
    v.extend(record(PARAMS, 1, &encode_params(&p)));
    v.extend(record(PARAMS, 1, &[]));
    v.extend(record(STDIN, 1, &[]));
    v
}

/// Lies about the body and other bad CGI parameters; may return bytes to
/// append to the encoded pairs (a broken pair).
fn mutate_params(
    rng: &mut Rng,
    p: &mut Params,
    docroot: &Path,
    body_len: usize,
    only_content_length: bool,
    notes: &mut Vec<String>,
) -> Vec<u8> {
    let mut tail = Vec::new();
    let n = if only_content_length {
        1
    } else {
        rng.range(1, 2)
    };
    for _ in 0..n {
        let op = if only_content_length {
            0
        } else {
            rng.below(10)
        };
        match op {
            0..=2 => {
                // Too big, too small, negative, garbage.
                let lie: Vec<u8> = match rng.below(4) {
                    0 => match rng.below(3) {
                        0 => (body_len + 1).to_string().into(),
                        1 => (body_len + 1 + rng.below(1 << 20)).to_string().into(),
                        _ => b"99999999999999999999999999".to_vec(),
                    },
                    1 => match rng.below(3) {
                        0 => body_len
                            .saturating_sub(1 + rng.below(100))
                            .to_string()
                            .into(),
                        1 => b"0".to_vec(),
                        _ => format!("+{}", body_len / 2).into(),
                    },
                    2 => rng
                        .pick(&["-1", "-100000", "-0", " -5", "-9223372036854775808"])
                        .into(),
                    _ => match rng.below(8) {
                        0 => b"abc".to_vec(),
                        1 => Vec::new(),
                        2 => format!(" {body_len}").into(),
                        3 => format!("{body_len} ").into(),
                        4 => b"0x10".to_vec(),
                        5 => b"1e3".to_vec(),
                        6 => b"18446744073709551616".to_vec(),
                        _ => {
                            let n = rng.range(1, 12);
                            rng.bytes(n)
                        }
                    },
                };
                notes.push(format!("CONTENT_LENGTH={:?}", short(&lie)));
                if rng.chance(20) {
                    p.push((b"CONTENT_LENGTH".to_vec(), lie));
                } else {
                    set_param(p, "CONTENT_LENGTH", lie);
                }
            }
            3 if !p.is_empty() => {
                let i = rng.below(p.len());
                notes.push(format!("without {}", short(&p[i].0)));
                p.remove(i);
            }
            4 if !p.is_empty() => {
                let i = rng.below(p.len());
                let n = rng.below(300);
                notes.push(format!("garbage {}", short(&p[i].0)));
                p[i].1 = rng.bytes(n);
            }
            5 => {
                let n = rng.range(65_000, 70_000);
                notes.push(format!("one value of {n} bytes"));
                p.push((b"HTTP_X_FUZZ_LONG".to_vec(), vec![b'L'; n]));
            }
            6 if rng.chance(30) => {
                let total = rng.pick(&[70_000, 140_000, 400_000, 1_100_000, 1_300_000]);
                notes.push(format!("huge PARAMS ({total} bytes)"));
                let mut n = 0;
                let mut size = 0;
                while size < total {
                    let k = format!("HTTP_X_FUZZ_{n}").into_bytes();
                    size += k.len() + 1000 + 5;
                    p.push((k, vec![b'v'; 1000]));
                    n += 1;
                }
            }
            7 => {
                notes.push("odd names".into());
                p.push((Vec::new(), b"empty name".to_vec()));
                p.push((b"A=B".to_vec(), b"c".to_vec()));
                p.push((b"NUL\0NAME".to_vec(), b"v\0v".to_vec()));
            }
            8 => {
                let script = match rng.below(7) {
                    0 => docroot.join("hello.php/extra/path").display().to_string(),
                    1 => format!("{}/../docroot/hello.php", docroot.display()),
                    2 => docroot.join("missing.php").display().to_string(),
                    3 => "hello.php".into(),
                    4 => String::new(),
                    5 => docroot.display().to_string(),
                    _ => format!("{}/hello.php\0.txt", docroot.display()),
                };
                notes.push(format!("SCRIPT_FILENAME={script:?}"));
                set_param(p, "SCRIPT_FILENAME", script);
            }
            _ => {
                // A pair whose lengths run past the end of the stream.
                notes.push("broken pair".into());
                let n = rng.below(200);
                tail.extend_from_slice(&[0x80, 0, rng.below(256) as u8, 1, 5]);
                tail.extend(rng.bytes(n));
            }
        }
    }
    tail
}

/// Changes to the records of a request.
fn mutate_records(
    rng: &mut Rng,
    recs: &mut Vec<Rec>,
    id: u16,
    hidden: &[u8],
    notes: &mut Vec<String>,
) {
    for _ in 0..rng.range(1, 3) {
        if recs.is_empty() {
            recs.push(Rec::new(STDIN, id, Vec::new(), Vec::new()));
        }
        let i = rng.below(recs.len());
        let at = rng.below(recs.len() + 1);
        match rng.below(20) {
            0 => {
                let t = if rng.chance(70) {
                    rng.below(13) as u8
                } else {
                    rng.next() as u8
                };
                notes.push(format!("record {i}: type {} -> {t}", recs[i].ty));
                recs[i].ty = t;
            }
            1 => {
                let any = rng.next() as u16;
                let new = rng.pick(&[0, id.wrapping_add(1), any, 65535]);
                notes.push(format!("record {i}: id {} -> {new}", recs[i].id));
                recs[i].id = new;
            }
            2 => {
                let l = recs[i].content.len();
                let any = rng.below(65536);
                let new = rng.pick(&[l + 1, l.saturating_sub(1), 0, 65535, l + 8, any]) as u16;
                notes.push(format!("record {i}: content length {l} -> {new}"));
                recs[i].len = Some(new);
            }
            3 => {
                let n = rng.below(256);
                notes.push(format!("record {i}: {n} bytes of padding"));
                recs[i].pad = rng.bytes(n);
            }
            4 => {
                // Padding that hides whole records: the ones after it, or a forged request.
                let mut hide = Vec::new();
                let mut k = i + 1;
                while k < recs.len() {
                    let mut e = Vec::new();
                    recs[k].encode(&mut e);
                    if hide.len() + e.len() > 255 {
                        break;
                    }
                    hide.extend(e);
                    k += 1;
                }
                if k > i + 1 && rng.chance(50) {
                    notes.push(format!(
                        "records {}..{k} hidden in the padding of {i}",
                        i + 1
                    ));
                    recs.drain(i + 1..k);
                    recs[i].pad = hide;
                } else if hidden.len() <= 255 {
                    notes.push(format!(
                        "a forged request hidden in the padding of record {i}"
                    ));
                    recs[i].pad = hidden.to_vec();
                }
            }
            5 if recs[i].content.len() >= 2 => {
                let cut = rng.range(1, recs[i].content.len() - 1);
                notes.push(format!("record {i} split at {cut}"));
                let tail = recs[i].content.split_off(cut);
                let mut r = recs[i].clone();
                r.content = tail;
                r.len = None;
                recs[i].len = None;
                recs.insert(i + 1, r);
            }
            6 if i + 1 < recs.len()
                && recs[i].content.len() + recs[i + 1].content.len() <= 65535 =>
            {
                notes.push(format!("records {i} and {} merged", i + 1));
                let next = recs.remove(i + 1);
                recs[i].content.extend(next.content);
                recs[i].len = None;
            }
            7 => {
                notes.push(format!("record {i} ({}) deleted", type_name(recs[i].ty)));
                recs.remove(i);
            }
            8 => {
                notes.push(format!("record {i} ({}) sent twice", type_name(recs[i].ty)));
                let r = recs[i].clone();
                recs.insert(i + 1, r);
            }
            9 => {
                let new = if rng.chance(50) {
                    id
                } else {
                    rng.next() as u16
                };
                notes.push(format!("second BEGIN_REQUEST (id {new}) at {at}"));
                let flags = rng.below(2) as u8;
                let b = begin_rec(rng, new, flags);
                recs.insert(at, b);
            }
            10 => {
                let to = if rng.chance(80) {
                    id
                } else {
                    rng.next() as u16
                };
                notes.push(format!("ABORT_REQUEST (id {to}) at {at}"));
                recs.insert(at, Rec::new(ABORT_REQUEST, to, Vec::new(), Vec::new()));
            }
            11 => {
                let huge = rng.chance(30);
                notes.push(format!(
                    "{} GET_VALUES at {at}",
                    if huge { "huge" } else { "small" }
                ));
                let c = get_values_body(rng, huge);
                let to = if rng.chance(85) { 0 } else { id };
                recs.insert(at, Rec::new(GET_VALUES, to, c, Vec::new()));
            }
            12 => {
                let t = rng.range(12, 255) as u8;
                let to = if rng.chance(60) { 0 } else { id };
                notes.push(format!("unknown type {t} (id {to}) at {at}"));
                let n = rng.below(64);
                let c = rng.bytes(n);
                recs.insert(at, Rec::new(t, to, c, Vec::new()));
            }
            13 => {
                let any = rng.next() as u8;
                let v = rng.pick(&[0, 2, 255, any]);
                notes.push(format!("record {i}: version {v}"));
                recs[i].version = v;
            }
            14 => {
                notes.push(format!("records cut after {i}"));
                recs.truncate(i);
            }
            15 if i + 1 < recs.len() => {
                notes.push(format!("records {i} and {} swapped", i + 1));
                recs.swap(i, i + 1);
            }
            16 => {
                notes.push(format!("DATA record at {at}"));
                let n = rng.below(100);
                let c = rng.bytes(n);
                recs.insert(at, Rec::new(DATA, id, c, Vec::new()));
            }
            17 => {
                notes.push(format!("STDIN record at {at}"));
                let n = rng.range(1, 100);
                let c = rng.bytes(n);
                recs.insert(at, Rec::new(STDIN, id, c, Vec::new()));
            }
            18 => {
                notes.push(format!("record {i} moved to the end"));
                let r = recs.remove(i);
                recs.push(r);
            }
            _ => {
                if let Some(b) = recs.iter_mut().find(|r| r.ty == BEGIN_REQUEST) {
                    match rng.below(3) {
                        0 => {
                            let any = rng.next() as u16;
                            let role = rng.pick(&[0u16, 2, 3, any]);
                            notes.push(format!("role {role}"));
                            if b.content.len() >= 2 {
                                b.content[..2].copy_from_slice(&role.to_be_bytes());
                            }
                        }
                        1 => {
                            let n = rng.pick(&[0, 4, 7, 9, 16]);
                            notes.push(format!("BEGIN_REQUEST body of {n} bytes"));
                            b.content.resize(n, 0);
                        }
                        _ => {
                            let f = rng.next() as u8;
                            notes.push(format!("flags {f:#x}"));
                            if b.content.len() > 2 {
                                b.content[2] = f;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Flips, inserts, deletes, cuts, repeats bytes (half of the time in the first 64).
fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>, notes: &mut Vec<String>) {
    for _ in 0..rng.range(1, 3) {
        if b.is_empty() {
            return;
        }
        let pos = if rng.chance(25) {
            rng.below(b.len().min(16))
        } else {
            rng.below(b.len())
        };
        match rng.below(6) {
            0 => {
                let x = rng.range(1, 255) as u8;
                notes.push(format!("byte {pos} ^= {x:#x}"));
                b[pos] ^= x;
            }
            1 => {
                let n = rng.range(1, 16);
                notes.push(format!("{n} bytes inserted at {pos}"));
                let ins = rng.bytes(n);
                b.splice(pos..pos, ins);
            }
            2 => {
                let n = rng.range(1, 16).min(b.len() - pos);
                notes.push(format!("{n} bytes deleted at {pos}"));
                b.drain(pos..pos + n);
            }
            3 => {
                notes.push(format!("cut at byte {pos}"));
                b.truncate(pos);
            }
            4 => {
                let n = rng.range(1, 64).min(b.len() - pos);
                let to = rng.below(b.len());
                notes.push(format!("bytes {pos}..{} repeated at {to}", pos + n));
                let dup = b[pos..pos + n].to_vec();
                b.splice(to..to, dup);
            }
            _ => {
                let v = rng.pick(&[0u8, 1, 8, 0x7f, 0x80, 0xff]);
                notes.push(format!("byte {pos} = {v:#x}"));
                b[pos] = v;
            }
        }
    }
}

/// A GET_VALUES body: the three names (and one fpmd does not know), or
/// one record's worth of names whose answer would exceed one record.
fn get_values_body(rng: &mut Rng, huge: bool) -> Vec<u8> {
    let mut q = Vec::new();
    if huge {
        while q.len() + 17 <= 65535 {
            q.extend(name_value(b"FCGI_MPXS_CONNS", b""));
        }
    } else {
        for n in [
            "FCGI_MPXS_CONNS",
            "FCGI_MAX_CONNS",
            "FCGI_MAX_REQS",
            "FCGI_NO_SUCH",
        ] {
            if rng.chance(75) {
                q.extend(name_value(n.as_bytes(), b""));
            }
        }
    }
    q
}

// ---------------------------------------------------------------------------
// Plans: what one connection does
// ---------------------------------------------------------------------------

#[derive(Clone)]
enum Pacing {
    Whole,
    /// Writes of these sizes, one after the other.
    Chunks(Vec<usize>),
    /// The first `first` bytes one by one, `gap` apart; the rest at once.
    Bytes {
        first: usize,
        gap: Duration,
    },
    /// `chunk` bytes every `every`, for at most `most`; the rest at once.
    Slow {
        chunk: usize,
        every: Duration,
        most: Duration,
    },
}

impl std::fmt::Debug for Pacing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pacing::Whole => write!(f, "at once"),
            Pacing::Chunks(v) => write!(
                f,
                "in {} writes of up to {} bytes",
                v.len() + 1,
                v.iter().max().unwrap_or(&0)
            ),
            Pacing::Bytes { first, gap } => write!(f, "{first} bytes one by one {gap:?} apart"),
            Pacing::Slow { chunk, every, most } => {
                write!(f, "{chunk} bytes every {every:?} for {most:?}")
            }
        }
    }
}

fn pacing(rng: &mut Rng, len: usize) -> Pacing {
    match rng.below(100) {
        0..=54 => Pacing::Whole,
        55..=79 => {
            let max = rng.range(1, 3000);
            let mut v = Vec::new();
            let mut left = len;
            while left > 0 && v.len() < 2000 {
                let n = rng.range(1, max).min(left);
                v.push(n);
                left -= n;
            }
            Pacing::Chunks(v)
        }
        80..=94 => Pacing::Bytes {
            first: len.min(rng.range(50, 800)),
            gap: Duration::from_micros(rng.range(20, 500) as u64),
        },
        _ => Pacing::Slow {
            chunk: rng.range(1, 64),
            every: rng.millis(20, 200),
            most: rng.millis(200, 1000),
        },
    }
}

#[derive(Clone, Copy, Debug)]
enum Ending {
    /// close(2), whatever is unread.
    Close,
    /// A reset (TCP: SO_LINGER 0).
    Reset,
    /// shutdown(SHUT_WR), then read until fpmd closes (or 2 s).
    HalfClose,
    /// Kept open this long (among the thread's held connections), then closed.
    Hold(Duration),
    /// The same, then reset.
    HoldReset(Duration),
}

fn ending(rng: &mut Rng) -> Ending {
    match rng.below(100) {
        0..=34 => Ending::Close,
        35..=54 => Ending::Reset,
        55..=74 => Ending::HalfClose,
        75..=89 => Ending::Hold(rng.millis(300, 6000)),
        _ => Ending::HoldReset(rng.millis(300, 6000)),
    }
}

enum Step {
    Send(Vec<u8>, Pacing),
    /// Read answers until every request sent has ended, fpmd closes, or this long.
    Await(Duration),
    /// Nothing for this long (the request runs meanwhile).
    Pause(Duration),
    /// Like Await, reading at most `chunk` bytes every `gap`.
    AwaitSlow {
        timeout: Duration,
        chunk: usize,
        gap: Duration,
    },
}

struct Plan {
    /// The connection's marker (in the query string of its requests).
    marker: String,
    what: String,
    steps: Vec<Step>,
    /// Only legal FastCGI: these requests (id, answer) must be answered right.
    legal: Option<Vec<(u16, Expect)>>,
    /// Legal GET_VALUES records, each owed a GET_VALUES_RESULT.
    get_values: u32,
    /// Sent from the held set, `chunk` bytes every `every` (slowloris).
    drip: Option<(usize, Duration)>,
    /// Held without reading what fpmd sends.
    unread: bool,
    ending: Ending,
}

impl Plan {
    fn bytes(&self) -> usize {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Send(b, _) => b.len(),
                _ => 0,
            })
            .sum()
    }
}

/// A slowloris pace for `len` bytes: a few bytes every 30 to 300 ms, all
/// of them within 8 s (fpmd allows 30 s for a head).
fn drip_pace(rng: &mut Rng, len: usize) -> (usize, Duration) {
    let every = rng.millis(30, 300);
    let writes = (8000 / every.as_millis() as usize).max(1);
    (rng.range(1, 40).max(len.div_ceil(writes)), every)
}

fn await_short(rng: &mut Rng) -> Duration {
    Duration::from_millis(rng.pick(&[20, 100, 300, 1000]))
}

/// Legal FastCGI only, sent oddly: its answers must be right.
fn legal_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let n = if rng.chance(30) { rng.range(2, 4) } else { 1 };
    let mut steps = Vec::new();
    let mut expects = Vec::new();
    let mut get_values = 0;
    let mut what = vec![format!("legal, {n} requests")];
    if rng.chance(20) {
        let c = get_values_body(rng, false);
        let pad = padding(rng, c.len());
        let b = encode_recs(&[Rec::new(GET_VALUES, 0, c, pad)]);
        steps.push(Step::Send(b, Pacing::Whole));
        get_values = 1;
        what.push("GET_VALUES first".into());
    }
    for k in 0..n {
        let id = if rng.chance(50) {
            1
        } else {
            rng.range(1, 65535) as u16
        };
        let keep = k + 1 < n || rng.chance(50);
        let (params, body, expect) = valid_request(rng, &ctx.docroot, marker, true);
        let long = rng.chance(10);
        let pairs = encode_pairs(rng, &params, long);
        let mut recs = vec![begin_rec(rng, id, if keep { KEEP_CONN } else { 0 })];
        recs.extend(stream_recs(rng, PARAMS, id, &pairs));
        recs.extend(stream_recs(rng, STDIN, id, &body));
        let bytes = encode_recs(&recs);
        let p = pacing(rng, bytes.len());
        what.push(format!(
            "id {id} {expect:?}{}, {} records, {p:?}",
            if long { " (4-byte lengths)" } else { "" },
            recs.len()
        ));
        steps.push(Step::Send(bytes, p));
        if keep && rng.chance(10) {
            // Management records may come at any time, a request in flight
            // too (without FCGI_KEEP_CONN fpmd closes after END_REQUEST
            // and owes nothing more).
            let c = get_values_body(rng, false);
            steps.push(Step::Send(record(GET_VALUES, 0, &c), Pacing::Whole));
            get_values += 1;
            what.push("GET_VALUES in flight".into());
        }
        if matches!(expect, Expect::Big(_)) && rng.chance(50) {
            let (chunk, gap) = (rng.range(16 << 10, 64 << 10), rng.millis(1, 10));
            what.push(format!("read {chunk} bytes every {gap:?}"));
            steps.push(Step::AwaitSlow {
                timeout: LEGAL_WAIT,
                chunk,
                gap,
            });
        } else {
            steps.push(Step::Await(LEGAL_WAIT));
        }
        expects.push((id, expect));
    }
    let mut plan = Plan {
        marker: String::new(),
        what: String::new(),
        steps,
        legal: Some(expects),
        get_values,
        drip: None,
        unread: false,
        ending: ending(rng),
    };
    if n == 1 && plan.bytes() < 6000 && rng.chance(12) {
        plan.drip = Some(drip_pace(rng, plan.bytes()));
    }
    what.push(format!("drip {:?}, then {:?}", plan.drip, plan.ending));
    plan.what = what.join("; ");
    plan
}

/// Well-formed FastCGI whose CONTENT_LENGTH lies (too big, too small,
/// negative, garbage): the request reaches PHP.
fn lies_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let mut notes = Vec::new();
    let id = if rng.chance(60) {
        1
    } else {
        rng.range(1, 65535) as u16
    };
    let flags = if rng.chance(70) { KEEP_CONN } else { 0 };
    let (mut params, body, expect) = if rng.chance(70) {
        // Mostly a POST to body.php, which reads what the lie announces.
        let n = rng.below(20_000);
        let body = rng.bytes(n);
        let p = fcgi::params_for(
            &ctx.docroot,
            "body.php",
            &format!("name={marker}"),
            "POST",
            n,
        );
        let md5 = md5_hex(&body);
        (owned(p), body, Expect::Body(n, md5))
    } else {
        valid_request(rng, &ctx.docroot, marker, false)
    };
    let tail = mutate_params(rng, &mut params, &ctx.docroot, body.len(), true, &mut notes);
    let mut pairs = encode_pairs(rng, &params, false);
    pairs.extend(tail);
    let mut recs = vec![begin_rec(rng, id, flags)];
    recs.extend(stream_recs(rng, PARAMS, id, &pairs));
    recs.extend(stream_recs(rng, STDIN, id, &body));
    if rng.chance(20) {
        notes.push("no empty STDIN record".into());
        recs.pop();
    }
    let bytes = encode_recs(&recs);
    let p = pacing(rng, bytes.len());
    let t = await_short(rng);
    let e = ending(rng);
    Plan {
        marker: String::new(),
        what: format!(
            "lies: id {id} flags {flags:#x} {expect:?}, {}, {p:?}, then {e:?}",
            notes.join(", ")
        ),
        steps: vec![Step::Send(bytes, p), Step::Await(t)],
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: e,
    }
}

/// Mutated versions of valid requests.
fn mutated_plan(rng: &mut Rng, ctx: &Ctx, marker: &str, owner: u64) -> Plan {
    let n = if rng.chance(25) { rng.range(2, 3) } else { 1 };
    let mut steps = Vec::new();
    let mut what = vec![format!("mutated, {n} requests")];
    for _ in 0..n {
        let mut notes = Vec::new();
        let any = rng.next();
        let id = rng.pick(&[1, 1, 1, 2, any as u16]);
        let flags = rng.pick(&[0, KEEP_CONN, KEEP_CONN, (any >> 16) as u8]);
        let (mut params, body, expect) = valid_request(rng, &ctx.docroot, marker, false);
        notes.push(format!("id {id} flags {flags:#x} {expect:?}"));
        let mut tail = Vec::new();
        if rng.chance(50) {
            tail = mutate_params(
                rng,
                &mut params,
                &ctx.docroot,
                body.len(),
                false,
                &mut notes,
            );
        }
        let long = rng.chance(10);
        let mut pairs = encode_pairs(rng, &params, long);
        pairs.extend(tail);
        let mut recs = vec![begin_rec(rng, id, flags)];
        recs.extend(stream_recs(rng, PARAMS, id, &pairs));
        recs.extend(stream_recs(rng, STDIN, id, &body));
        if rng.chance(15) {
            notes.push("no empty STDIN record".into());
            recs.pop();
        }
        if rng.chance(75) {
            let hidden = forged_request(&ctx.docroot, &new_marker(rng, owner));
            mutate_records(rng, &mut recs, id, &hidden, &mut notes);
        }
        let mut bytes = encode_recs(&recs);
        if rng.chance(35) {
            mutate_bytes(rng, &mut bytes, &mut notes);
        }
        let p = pacing(rng, bytes.len());
        notes.push(format!("{p:?}"));
        steps.push(Step::Send(bytes, p));
        if rng.chance(70) {
            steps.push(Step::Await(await_short(rng)));
        }
        what.push(notes.join(", "));
    }
    let mut plan = Plan {
        marker: String::new(),
        what: String::new(),
        steps,
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: ending(rng),
    };
    if plan.bytes() < 8000 && rng.chance(10) {
        plan.drip = Some(drip_pace(rng, plan.bytes()));
    }
    what.push(format!("drip {:?}, then {:?}", plan.drip, plan.ending));
    plan.what = what.join("; ");
    plan
}

/// The first record boundary of the records `b` at or after `at`.
fn record_boundary(b: &[u8], at: usize) -> usize {
    let mut i = 0;
    while i < at && i + 8 <= b.len() {
        i += 8 + u16::from_be_bytes([b[i + 4], b[i + 5]]) as usize + b[i + 6] as usize;
    }
    i.min(b.len())
}

/// A valid request, and while it runs (or its body streams to the child)
/// something else: an ABORT_REQUEST, management records, a second
/// BEGIN_REQUEST, records of the finished request, noise, or nothing but
/// the end of the connection.
fn inflight_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let id = if rng.chance(60) {
        1
    } else {
        rng.range(1, 65535) as u16
    };
    let flags = if rng.chance(70) { KEEP_CONN } else { 0 };
    let q = format!("name={marker}");
    let (params, body, script) = match rng.below(4) {
        0 => {
            let ms = rng.below(300);
            let p = fcgi::params_for(&ctx.docroot, "sleep.php", &format!("ms={ms}&{q}"), "GET", 0);
            (p, Vec::new(), format!("sleep.php?ms={ms}"))
        }
        1 => {
            let p = fcgi::params_for(&ctx.docroot, "hello.php", &q, "GET", 0);
            (p, Vec::new(), "hello.php".into())
        }
        _ => {
            let n = rng.range(1, 600_000);
            let p = fcgi::params_for(&ctx.docroot, "body.php", &q, "POST", n);
            (p, rng.bytes(n), format!("body.php with {n} bytes"))
        }
    };
    let mut head = encode_recs(&[begin_rec(rng, id, flags)]);
    head.extend(encode_recs(&stream_recs(
        rng,
        PARAMS,
        id,
        &encode_params(&params),
    )));
    let stdin = encode_recs(&stream_recs(rng, STDIN, id, &body));
    // The tail goes after the whole request, or in the middle of its body
    // (mostly between two records, else inside one).
    let cut = if body.len() > 300_000 && rng.chance(50) {
        let mut at = rng.range(270_000, stdin.len() - 1);
        if rng.chance(80) {
            at = record_boundary(&stdin, at);
        }
        at
    } else {
        stdin.len()
    };
    let (tail_what, tail): (&str, Vec<u8>) = match rng.below(10) {
        0 => ("ABORT_REQUEST", record(ABORT_REQUEST, id, &[])),
        1 => (
            "small GET_VALUES",
            record(GET_VALUES, 0, &get_values_body(rng, false)),
        ),
        2 => (
            "huge GET_VALUES",
            record(GET_VALUES, 0, &get_values_body(rng, true)),
        ),
        3 => {
            let other = if rng.chance(50) {
                id
            } else {
                id.wrapping_add(1)
            };
            let p = fcgi::params_for(&ctx.docroot, "hello.php", &q, "GET", 0);
            ("a second request", request(other, KEEP_CONN, &p, b""))
        }
        4 => {
            let t = rng.range(12, 255) as u8;
            ("unknown type", record(t, 0, &[0; 8]))
        }
        5 => {
            let n = rng.range(1, 500);
            ("noise", rng.bytes(n))
        }
        6 => {
            let n = rng.range(0, 100);
            ("more STDIN", record(STDIN, id, &rng.bytes(n)))
        }
        7 => ("PARAMS", record(PARAMS, id, &name_value(b"X", b"y"))),
        _ => ("nothing", Vec::new()),
    };
    let pause = match rng.below(3) {
        0 => Duration::ZERO,
        1 => rng.millis(1, 50),
        _ => rng.millis(50, 400),
    };
    let mut first = head;
    first.extend_from_slice(&stdin[..cut]);
    let mut steps = vec![Step::Send(first, Pacing::Whole), Step::Pause(pause)];
    steps.push(Step::Send(tail, Pacing::Whole));
    if cut < stdin.len() && rng.chance(50) {
        steps.push(Step::Send(stdin[cut..].to_vec(), Pacing::Whole));
    }
    if rng.chance(80) {
        steps.push(Step::Await(await_short(rng)));
    }
    let e = ending(rng);
    Plan {
        marker: String::new(),
        what: format!(
            "in flight: id {id} flags {flags:#x} {script}, {tail_what} after {pause:?}{}, then {e:?}",
            if cut < stdin.len() {
                format!(" and {cut} bytes of STDIN")
            } else {
                String::new()
            }
        ),
        steps,
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: e,
    }
}

/// A slow reader: a big response, read a little or not at all, the
/// connection kept open unread for a while, then closed or reset.
fn slow_reader_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let mb = rng.range(1, 8);
    let id = if rng.chance(50) {
        1
    } else {
        rng.range(1, 65535) as u16
    };
    let flags = if rng.chance(70) { KEEP_CONN } else { 0 };
    let p = fcgi::params_for(
        &ctx.docroot,
        "big.php",
        &format!("mb={mb}&name={marker}"),
        "GET",
        0,
    );
    let mut steps = vec![Step::Send(request(id, flags, &p, b""), Pacing::Whole)];
    let read = rng.pick(&[0, 1, 8192, 65536, 300_000]);
    if read > 0 {
        steps.push(Step::AwaitSlow {
            timeout: Duration::from_millis(300),
            chunk: read.min(65536),
            gap: Duration::ZERO,
        });
    }
    let hold = rng.millis(200, 3000);
    let ending = if rng.chance(50) {
        Ending::Hold(hold)
    } else {
        Ending::HoldReset(hold)
    };
    Plan {
        marker: String::new(),
        what: format!("slow reader: id {id} flags {flags:#x} big.php?mb={mb}, {read} bytes read, then {ending:?} unread"),
        steps,
        legal: None,
        get_values: 0,
        drip: None,
        unread: true,
        ending,
    }
}

/// Management records: GET_VALUES small and huge, floods of them, unknown types.
fn management_plan(rng: &mut Rng) -> Plan {
    let (what, bytes) = match rng.below(4) {
        0 => {
            let c = get_values_body(rng, false);
            ("small GET_VALUES", record(GET_VALUES, 0, &c))
        }
        1 => {
            let c = get_values_body(rng, true);
            ("huge GET_VALUES", record(GET_VALUES, 0, &c))
        }
        2 => {
            let mut b = Vec::new();
            let c = get_values_body(rng, false);
            for _ in 0..rng.range(100, 3000) {
                b.extend(record(GET_VALUES, 0, &c));
            }
            ("a flood of GET_VALUES", b)
        }
        _ => {
            let mut b = Vec::new();
            for _ in 0..rng.range(1, 50) {
                let any = rng.next() as u8;
                let t = rng.pick(&[0u8, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, any]);
                let n = rng.below(40);
                b.extend(record(t, 0, &rng.bytes(n)));
            }
            ("records of id 0 of any type", b)
        }
    };
    let p = pacing(rng, bytes.len());
    let t = await_short(rng);
    let e = ending(rng);
    Plan {
        marker: String::new(),
        what: format!("management: {what}, {p:?}, then {e:?}"),
        steps: vec![Step::Send(bytes, p), Step::Await(t)],
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: e,
    }
}

/// Random bytes, some after a valid BEGIN_REQUEST.
fn noise_plan(rng: &mut Rng) -> Plan {
    let mut b = if rng.chance(50) {
        begin_request(1, KEEP_CONN)
    } else {
        Vec::new()
    };
    let n = rng.range(1, 8000);
    b.extend(rng.bytes(n));
    let p = pacing(rng, b.len());
    let t = await_short(rng);
    let e = ending(rng);
    Plan {
        marker: String::new(),
        what: format!("noise ({} bytes), {p:?}, then {e:?}", b.len()),
        steps: vec![Step::Send(b, p), Step::Await(t)],
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: e,
    }
}

/// A connection kept open with nothing or the start of a request.
fn idle_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let (params, _, _) = valid_request(rng, &ctx.docroot, marker, false);
    let mut whole = begin_request(1, KEEP_CONN);
    whole.extend(record(PARAMS, 1, &encode_pairs(rng, &params, false)));
    let cut = match rng.below(4) {
        0 => 0,
        1 => rng.range(1, 7),
        2 => 16,
        _ => rng.range(17, whole.len()),
    };
    whole.truncate(cut);
    let hold = rng.millis(500, 8000);
    Plan {
        marker: String::new(),
        what: format!("idle after {cut} bytes, held {hold:?}"),
        steps: vec![Step::Send(whole, Pacing::Whole)],
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: Ending::Hold(hold),
    }
}

// ---------------------------------------------------------------------------
// Running plans
// ---------------------------------------------------------------------------

/// Counters of one listener's fuzzer.
#[derive(Default)]
struct FuzzStats {
    conns: AtomicU64,
    legal_conns: AtomicU64,
    bursts: AtomicU64,
    drips: AtomicU64,
    held_peak: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    answer_records: AtomicU64,
    answers: AtomicU64,
    closes: AtomicU64,
    /// When each connection was closed (by its marker), and who it was.
    closed: Mutex<HashMap<String, (SystemTime, String)>>,
    legal_ok: AtomicU64,
    legal_cut: AtomicU64,
    connect_errors: AtomicU64,
    write_timeouts: AtomicU64,
    violations: Mutex<Vec<String>>,
}

struct Conn {
    sock: Sock,
    sent: Sent,
    got: Got,
    owner: u64,
    marker: String,
    what: String,
    legal: Option<Vec<(u16, Expect)>>,
    get_values: u32,
    /// The end of the run cut what this connection was to send or read.
    cut: bool,
    /// A write failed: fpmd closed or reset the connection.
    refused: bool,
    /// A legal request was not answered within LEGAL_WAIT.
    timed_out: bool,
    bad: Option<String>,
    listener: usize,
}

impl Conn {
    fn open(ctx: &Ctx, plan: &Plan, owner: u64, stats: &FuzzStats) -> Option<Conn> {
        let sock = match Sock::connect(&ctx.target) {
            Ok(s) => s,
            Err(e) => {
                if stats.connect_errors.fetch_add(1, Relaxed) < 3 {
                    eprintln!("{}: connect: {e}", owner_name(owner));
                }
                return None;
            }
        };
        sock.set_write_timeout(if plan.legal.is_some() {
            LEGAL_WAIT
        } else {
            FUZZ_WRITE_WAIT
        });
        stats.conns.fetch_add(1, Relaxed);
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        let _ = writeln!(
            ctx.plans.lock().unwrap(),
            "{}.{:06} {} {}",
            at.as_secs(),
            at.subsec_micros(),
            owner_name(owner),
            plan.what
        );
        if plan.legal.is_some() {
            stats.legal_conns.fetch_add(1, Relaxed);
        }
        Some(Conn {
            sock,
            sent: Sent::default(),
            got: Got::default(),
            owner,
            marker: plan.marker.clone(),
            what: plan.what.clone(),
            legal: plan.legal.clone(),
            get_values: plan.get_values,
            cut: false,
            refused: false,
            timed_out: false,
            bad: None,
            listener: ctx.listener,
        })
    }

    fn violation(&mut self, msg: String) {
        if self.bad.is_none() {
            self.bad = Some(msg);
        }
    }

    /// One write; false once fpmd refuses more (or a write timed out).
    fn write_part(&mut self, b: &[u8], stats: &FuzzStats) -> Option<usize> {
        if self.refused {
            return None;
        }
        loop {
            match self.sock.write(b) {
                Ok(0) => {
                    self.refused = true;
                    return None;
                }
                Ok(n) => {
                    self.sent.feed(&b[..n]);
                    return Some(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    stats.write_timeouts.fetch_add(1, Relaxed);
                    self.refused = true;
                    if self.legal.is_some() {
                        self.violation(format!(
                            "fpmd read nothing of a legal request for {LEGAL_WAIT:?}"
                        ));
                    }
                    return None;
                }
                Err(_) => {
                    self.refused = true;
                    self.got.write_failed = true;
                    return None;
                }
            }
        }
    }

    fn write_all(&mut self, mut b: &[u8], stats: &FuzzStats) -> bool {
        while !b.is_empty() {
            match self.write_part(b, stats) {
                Some(n) => b = &b[n..],
                None => return false,
            }
        }
        true
    }

    fn send(&mut self, b: &[u8], p: &Pacing, deadline: Instant, stats: &FuzzStats) -> bool {
        let past = |c: &mut Conn| {
            if Instant::now() > deadline {
                c.cut = true;
                return true;
            }
            false
        };
        match p {
            Pacing::Whole => self.write_all(b, stats),
            Pacing::Chunks(sizes) => {
                let mut at = 0;
                for &n in sizes {
                    let end = (at + n).min(b.len());
                    if !self.write_all(&b[at..end], stats) {
                        return false;
                    }
                    at = end;
                }
                self.write_all(&b[at..], stats)
            }
            Pacing::Bytes { first, gap } => {
                for i in 0..(*first).min(b.len()) {
                    if past(self) || !self.write_all(&b[i..i + 1], stats) {
                        return false;
                    }
                    std::thread::sleep(*gap);
                }
                self.write_all(&b[(*first).min(b.len())..], stats)
            }
            Pacing::Slow { chunk, every, most } => {
                let t0 = Instant::now();
                let mut at = 0;
                while at < b.len() && t0.elapsed() < *most {
                    let end = (at + chunk).min(b.len());
                    if past(self) || !self.write_all(&b[at..end], stats) {
                        return false;
                    }
                    at = end;
                    std::thread::sleep(*every);
                }
                self.write_all(&b[at..], stats)
            }
        }
    }

    fn feed_got(&mut self, data: &[u8]) {
        if let Err(e) = self.got.take(data, &self.sent, self.owner) {
            self.violation(e);
        }
    }

    /// One read of at most `timeout`; false once fpmd closed.
    fn read_once(&mut self, timeout: Duration, max: usize) -> bool {
        self.sock.set_read_timeout(timeout);
        let mut buf = [0u8; 65536];
        let max = max.clamp(1, buf.len());
        loop {
            match self.sock.read(&mut buf[..max]) {
                Ok(0) => {
                    self.got.eof = true;
                    return false;
                }
                Ok(n) => {
                    self.feed_got(&buf[..n]);
                    return true;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return true
                }
                Err(_) => {
                    self.got.reset = true;
                    return false;
                }
            }
        }
    }

    /// Reads what a non-blocking socket has.
    fn drain(&mut self) {
        let mut buf = [0u8; 65536];
        while !self.got.closed() {
            match self.sock.read(&mut buf) {
                Ok(0) => self.got.eof = true,
                Ok(n) => self.feed_got(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => self.got.reset = true,
            }
        }
    }

    fn answered(&self) -> bool {
        let begun: u32 = self.sent.begins.values().sum();
        let ended: u32 = self.got.ends.values().sum();
        ended >= begun
            && self.got.gv >= self.sent.get_values
            && self.got.unknown as usize >= self.sent.mgmt.len()
    }

    /// Reads until everything sent is answered, fpmd closes, or `timeout`
    /// (legal requests: also past `until`, the end of the run; others: not).
    fn await_answers(&mut self, timeout: Duration, until: Instant) {
        self.await_paced(timeout, until, 65536, Duration::ZERO)
    }

    /// [`Conn::await_answers`] reading at most `chunk` bytes every `gap` (a slow reader).
    fn await_paced(&mut self, timeout: Duration, until: Instant, chunk: usize, gap: Duration) {
        let legal = self.legal.is_some();
        let t0 = Instant::now();
        let mut limit = t0 + timeout;
        if !legal {
            limit = limit.min(until.max(t0));
        }
        while !self.got.closed() && !self.answered() {
            let now = Instant::now();
            if now >= limit {
                if legal {
                    self.timed_out = true;
                }
                return;
            }
            self.read_once(limit - now, chunk);
            if !gap.is_zero() {
                std::thread::sleep(gap);
            }
        }
    }

    /// Closes as `how` says (a hold counts as a close here) and reports.
    fn end(mut self, how: Ending, deadline: Instant, stats: &FuzzStats) {
        match how {
            Ending::Close | Ending::Hold(_) => {}
            Ending::Reset | Ending::HoldReset(_) => {
                let c = self.settle(stats);
                c.sock.reset();
                return;
            }
            Ending::HalfClose => {
                self.sock.set_nonblocking(false);
                self.sock.shutdown_write();
                let limit = (Instant::now() + Duration::from_secs(2))
                    .min(deadline + Duration::from_secs(1));
                while !self.got.closed() {
                    let now = Instant::now();
                    if now >= limit {
                        break;
                    }
                    self.read_once(limit - now, 65536);
                }
            }
        }
        drop(self.settle(stats));
    }

    /// The checks at the end of a connection, and its counts.
    fn settle(mut self, stats: &FuzzStats) -> Conn {
        stats.closed.lock().unwrap().insert(
            self.marker.clone(),
            (
                SystemTime::now(),
                format!("{} [{}]", owner_name(self.owner), self.what),
            ),
        );
        if let Err(e) = self.got.finish(self.owner) {
            self.violation(e);
        }
        if let Some(expects) = self.legal.clone() {
            for (k, (id, exp)) in expects.iter().enumerate() {
                match self.got.done.get(k) {
                    Some(d) => {
                        let res = if d.id != *id {
                            Err(format!(
                                "END_REQUEST of request id {} for request id {id}",
                                d.id
                            ))
                        } else if d.protocol_status != 0 {
                            Err(format!("protocol status {}", d.protocol_status))
                        } else {
                            exp.check(&d.stdout)
                        };
                        match res {
                            Ok(()) => {
                                stats.legal_ok.fetch_add(1, Relaxed);
                            }
                            Err(e) => self.violation(format!("legal request {k}: {e}")),
                        }
                    }
                    None if self.cut => {
                        stats.legal_cut.fetch_add(1, Relaxed);
                    }
                    None => {
                        let why = if self.timed_out {
                            format!("no answer within {LEGAL_WAIT:?}")
                        } else if self.got.eof {
                            "fpmd closed the connection".into()
                        } else if self.got.reset || self.refused {
                            "fpmd reset the connection".into()
                        } else {
                            "no answer".into()
                        };
                        self.violation(format!(
                            "legal request {k} (id {id}, {exp:?}) unanswered: {why}; {} requests answered before",
                            self.got.done.len()
                        ));
                        break;
                    }
                }
            }
            if self.got.gv < self.get_values && !self.cut && self.bad.is_none() {
                self.violation("a legal GET_VALUES was not answered".into());
            }
        }
        stats.records.fetch_add(self.sent.records, Relaxed);
        stats.bytes.fetch_add(self.sent.bytes, Relaxed);
        stats.answer_records.fetch_add(self.got.records, Relaxed);
        stats.answers.fetch_add(self.got.answers, Relaxed);
        if self.got.closed() {
            stats.closes.fetch_add(1, Relaxed);
        }
        if let Some(bad) = self.bad.take() {
            let log = &self.sent.log;
            let msg = format!(
                "{} {} [{}]: {bad}\n  sent {} bytes ({} records), the first {}: {}",
                LISTENERS[self.listener],
                owner_name(self.owner),
                self.what,
                self.sent.bytes,
                self.sent.records,
                log.len().min(512),
                hex(&log[..log.len().min(512)])
            );
            eprintln!("VIOLATION: {msg}");
            stats.violations.lock().unwrap().push(msg);
        }
        self
    }
}

/// A connection kept open between the thread's others.
struct Held {
    conn: Conn,
    drip: Vec<u8>,
    pos: usize,
    chunk: usize,
    every: Duration,
    next: Instant,
    until: Instant,
    ending: Ending,
    half_closed: bool,
    /// What fpmd sends is left unread.
    unread: bool,
}

impl Held {
    fn new(conn: Conn, drip: Vec<u8>, chunk: usize, every: Duration, plan: &Plan) -> Held {
        let ending = plan.ending;
        conn.sock.set_nonblocking(true);
        let now = Instant::now();
        let steps = drip.len().div_ceil(chunk.max(1)) as u32;
        let hold = match ending {
            Ending::Hold(d) | Ending::HoldReset(d) => d,
            _ => Duration::from_millis(200),
        };
        Held {
            conn,
            drip,
            pos: 0,
            chunk: chunk.max(1),
            every,
            next: now,
            until: now + every * steps + hold,
            ending,
            half_closed: false,
            unread: plan.unread,
        }
    }

    /// Drips, reads; true when it is time to end it.
    fn service(&mut self, now: Instant) -> bool {
        if self.pos < self.drip.len() && now >= self.next {
            let end = (self.pos + self.chunk).min(self.drip.len());
            let part = self.drip[self.pos..end].to_vec();
            match self.conn.sock.write(&part) {
                Ok(n) => {
                    self.conn.sent.feed(&part[..n]);
                    self.pos += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => {
                    self.conn.refused = true;
                    self.conn.got.write_failed = true;
                    self.pos = self.drip.len();
                }
            }
            self.next = now + self.every;
        }
        if !self.unread {
            self.conn.drain();
        }
        now >= self.until
    }

    /// Ends it: a half-close first gets one more second to see fpmd close.
    /// Returns the connection back when it is to be held a little longer.
    fn finish(mut self, deadline: Instant, stats: &FuzzStats, at_end: bool) -> Option<Held> {
        let dripped = self.pos >= self.drip.len();
        if !dripped {
            self.conn.cut = true;
        }
        if self.conn.legal.is_some() && dripped && !self.conn.refused {
            // The whole legal request was sent: its answers must come.
            self.conn.sock.set_nonblocking(false);
            self.conn.await_answers(LEGAL_WAIT, deadline);
        }
        match self.ending {
            Ending::HalfClose if !self.half_closed && !at_end => {
                self.conn.sock.shutdown_write();
                self.half_closed = true;
                self.conn.sock.set_nonblocking(true);
                self.until = Instant::now() + Duration::from_secs(1);
                Some(self)
            }
            Ending::Reset | Ending::HoldReset(_) => {
                self.conn.end(Ending::Reset, deadline, stats);
                None
            }
            _ => {
                self.conn.end(Ending::Close, deadline, stats);
                None
            }
        }
    }
}

/// Opens the connection and sends the plan's first steps, up to its first
/// Await or Pause (which stay in the plan for [`complete`]).
fn start(ctx: &Ctx, plan: &mut Plan, owner: u64, stats: &FuzzStats) -> Option<Conn> {
    let mut conn = Conn::open(ctx, plan, owner, stats)?;
    while let Some(Step::Send(..)) = plan.steps.first() {
        let Step::Send(b, p) = plan.steps.remove(0) else {
            unreachable!()
        };
        conn.send(&b, &p, ctx.deadline, stats);
    }
    Some(conn)
}

/// Runs the rest of the plan; a held connection goes to `held`.
/// Fuzzed connections stop reading at `until` at the latest.
fn complete(
    ctx: &Ctx,
    mut conn: Conn,
    mut plan: Plan,
    until: Instant,
    held: &mut Vec<Held>,
    stats: &FuzzStats,
) {
    for step in std::mem::take(&mut plan.steps) {
        if conn.cut {
            // The run ended in the middle of a send: nothing more is owed.
            break;
        }
        match step {
            Step::Send(b, p) => {
                conn.send(&b, &p, ctx.deadline, stats);
            }
            Step::Await(t) => conn.await_answers(t, until.min(ctx.deadline)),
            Step::AwaitSlow {
                timeout,
                chunk,
                gap,
            } => conn.await_paced(timeout, until.min(ctx.deadline), chunk, gap),
            Step::Pause(d) => {
                std::thread::sleep(d.min(ctx.deadline.saturating_duration_since(Instant::now())))
            }
        }
    }
    match plan.ending {
        Ending::Hold(_) | Ending::HoldReset(_) if Instant::now() < ctx.deadline => {
            if plan.unread {
                // One slow reader per thread at a time: each holds a child
                // (up to request_terminate_timeout), the good loops need the others.
                while let Some(i) = held.iter().position(|h| h.unread) {
                    let _ = held.swap_remove(i).finish(ctx.deadline, stats, true);
                }
            }
            held.push(Held::new(conn, Vec::new(), 1, Duration::ZERO, &plan));
        }
        e => conn.end(e, ctx.deadline, stats),
    }
}

/// Runs one plan; slowloris drips and holds go to `held`.
fn run_plan(ctx: &Ctx, mut plan: Plan, owner: u64, held: &mut Vec<Held>, stats: &FuzzStats) {
    if let Some((chunk, every)) = plan.drip {
        let Some(conn) = Conn::open(ctx, &plan, owner, stats) else {
            return;
        };
        let mut bytes = Vec::new();
        for s in &plan.steps {
            if let Step::Send(b, _) = s {
                bytes.extend_from_slice(b);
            }
        }
        stats.drips.fetch_add(1, Relaxed);
        held.push(Held::new(conn, bytes, chunk, every, &plan));
        return;
    }
    if let Some(conn) = start(ctx, &mut plan, owner, stats) {
        complete(ctx, conn, plan, ctx.deadline, held, stats);
    }
}

fn service_held(held: &mut Vec<Held>, deadline: Instant, stats: &FuzzStats) {
    let now = Instant::now();
    let mut i = 0;
    while i < held.len() {
        if held[i].service(now) {
            let h = held.swap_remove(i);
            if let Some(again) = h.finish(deadline, stats, false) {
                held.push(again);
            }
        } else {
            i += 1;
        }
    }
}

fn fuzz_thread(ctx: &Ctx, thread: usize, seed: u64, stats: &FuzzStats) {
    let mut rng = Rng::new(seed ^ ((ctx.listener as u64) << 40) ^ ((thread as u64) << 32));
    let mut held: Vec<Held> = Vec::new();
    let mut n = 0u64;
    let mut next_owner = |rng: &mut Rng| {
        n += 1;
        let o = owner(ctx.listener, thread, n);
        (o, new_marker(rng, o))
    };
    while Instant::now() < ctx.deadline {
        service_held(&mut held, ctx.deadline, stats);
        while held.len() > HELD_MAX {
            let _ = held.remove(0).finish(ctx.deadline, stats, true);
        }
        stats.held_peak.fetch_max(held.len() as u64, Relaxed);
        if rng.chance(6) {
            // A burst: connections opened and sent at once, then read in turn.
            stats.bursts.fetch_add(1, Relaxed);
            let mut started = Vec::new();
            for _ in 0..rng.range(4, 16) {
                let (o, marker) = next_owner(&mut rng);
                let mut plan = if rng.chance(35) {
                    legal_plan(&mut rng, ctx, &marker)
                } else {
                    mutated_plan(&mut rng, ctx, &marker, o)
                };
                plan.drip = None;
                plan.what = format!("{marker} burst: {}", plan.what);
                plan.marker = marker;
                if let Some(c) = start(ctx, &mut plan, o, stats) {
                    started.push((c, plan));
                }
            }
            // Their answers are awaited together, for a second at most.
            let until = Instant::now() + Duration::from_secs(1);
            for (c, plan) in started {
                complete(ctx, c, plan, until, &mut held, stats);
            }
            continue;
        }
        let (o, marker) = next_owner(&mut rng);
        let mut plan = match rng.below(100) {
            0..=22 => legal_plan(&mut rng, ctx, &marker),
            23..=48 => mutated_plan(&mut rng, ctx, &marker, o),
            49..=56 => lies_plan(&mut rng, ctx, &marker),
            57..=70 => inflight_plan(&mut rng, ctx, &marker),
            71..=75 => slow_reader_plan(&mut rng, ctx, &marker),
            76..=83 => management_plan(&mut rng),
            84..=90 => noise_plan(&mut rng),
            _ => idle_plan(&mut rng, ctx, &marker),
        };
        plan.what = format!("{marker} {}", plan.what);
        plan.marker = marker;
        run_plan(ctx, plan, o, &mut held, stats);
    }
    for h in held {
        let _ = h.finish(ctx.deadline, stats, true);
    }
}

// ---------------------------------------------------------------------------
// Good requests through nginx
// ---------------------------------------------------------------------------

const GOOD_KINDS: [&str; 3] = ["GET hello.php", "POST body.php", "PATH_INFO"];

#[derive(Default)]
struct GoodStats {
    done: [AtomicU64; 3],
    /// Microseconds spent, per kind.
    micros: [AtomicU64; 3],
    failed: AtomicU64,
    failures: Mutex<Vec<String>>,
}

fn good_loop(
    listener: usize,
    thread: usize,
    base: &str,
    docroot: &Path,
    deadline: Instant,
    seed: u64,
    stats: &GoodStats,
) {
    let mut rng = Rng::new(seed ^ 0x600d ^ ((listener as u64) << 40) ^ ((thread as u64) << 32));
    let a = agent();
    let mut n = 0u64;
    let mut kind = thread % 3;
    while Instant::now() < deadline {
        n += 1;
        let own = owner(listener, 0x80 + thread, n);
        let m = new_marker(&mut rng, own);
        let started = Instant::now();
        let (what, res) = match kind {
            0 => {
                let x = rng.below(1_000_000);
                let url = format!("{base}/hello.php?name={m}&x={x}");
                let want = format!("hello {m}\nQUERY_STRING=name={m}&x={x}\n");
                (url.clone(), try_get_with(&a, &url).map(|r| (r, vec![want])))
            }
            1 => {
                let len = if rng.chance(5) {
                    rng.range(100_000, 1 << 20)
                } else {
                    rng.below(64 << 10)
                };
                let body = rng.bytes(len);
                let url = format!("{base}/body.php?name={m}");
                let want = format!("{len} {}", md5_hex(&body));
                (
                    format!("{url} ({len} bytes)"),
                    try_post_with(&a, &url, &body).map(|r| (r, vec![want])),
                )
            }
            _ => {
                let url = format!("{base}/server_vars.php/p/{m}?name={m}");
                let lines = vec![
                    format!("SCRIPT_FILENAME={}/server_vars.php", docroot.display()),
                    "SCRIPT_NAME=/server_vars.php".to_string(),
                    format!("PATH_INFO=/p/{m}"),
                    format!("REQUEST_URI=/server_vars.php/p/{m}?name={m}"),
                    format!("QUERY_STRING=name={m}"),
                ];
                (url.clone(), try_get_with(&a, &url).map(|r| (r, lines)))
            }
        };
        let verdict = match res {
            Err(e) => Err(format!("transport error: {e}")),
            Ok((r, want)) => {
                let foreign = foreign_markers(&r.body, own);
                let text = r.text();
                if !foreign.is_empty() {
                    Err(format!(
                        "another client's marker {foreign:?}: {:?}",
                        short(&r.body)
                    ))
                } else if r.status != 200 {
                    Err(format!("status {}: {:?}", r.status, short(&r.body)))
                } else if kind < 2 && text != want[0] {
                    Err(format!("expected {:?}, got {:?}", want[0], short(&r.body)))
                } else if kind == 2 && !want.iter().all(|l| text.lines().any(|t| t == l)) {
                    Err(format!(
                        "expected the lines {want:?}, got {:?}",
                        short(&r.body)
                    ))
                } else {
                    Ok(())
                }
            }
        };
        stats.micros[kind].fetch_add(started.elapsed().as_micros() as u64, Relaxed);
        match verdict {
            Ok(()) => {
                stats.done[kind].fetch_add(1, Relaxed);
            }
            Err(e) => {
                stats.failed.fetch_add(1, Relaxed);
                let msg = format!("{}: {}: {e}", owner_name(own), what);
                eprintln!("GOOD REQUEST FAILED: {msg}");
                let mut f = stats.failures.lock().unwrap();
                if f.len() < 20 {
                    f.push(msg);
                }
            }
        }
        kind = (kind + 1) % 3;
    }
}

// ---------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------

fn env_seed() -> u64 {
    match std::env::var("FPMD_LIVE_FUZZ_SEED") {
        Ok(s) if !s.trim().is_empty() => {
            let s = s.trim();
            s.strip_prefix("0x")
                .map(|h| u64::from_str_radix(h, 16))
                .unwrap_or_else(|| s.parse())
                .unwrap_or_else(|e| panic!("FPMD_LIVE_FUZZ_SEED={s:?}: {e}"))
        }
        _ => {
            let t = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap();
            Rng::new(t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32)).next()
                % 1_000_000_000
        }
    }
}

fn env_secs() -> Duration {
    match std::env::var("FPMD_LIVE_FUZZ_SECS") {
        Ok(s) if !s.trim().is_empty() => {
            let secs: f64 = s
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("FPMD_LIVE_FUZZ_SECS={s:?}: {e}"));
            Duration::from_secs_f64(secs)
        }
        _ => Duration::from_secs(20),
    }
}

/// A raw legal GET of hello.php on `target`, before the run: the fuzzer's
/// own client works on this listener.
fn raw_hello_works(target: &Target, docroot: &Path, who: &str) {
    let mut s = Sock::connect(target).unwrap_or_else(|e| panic!("{who}: connect: {e}"));
    s.set_write_timeout(LONG);
    let p = fcgi::params_for(docroot, "hello.php", "name=first", "GET", 0);
    s.write_all(&request(1, 0, &p, b"")).unwrap();
    let mut all = Vec::new();
    s.set_read_timeout(LONG);
    let _ = s.read_to_end(&mut all);
    let mut sent = Sent::default();
    sent.feed(&request(1, 0, &p, b""));
    let mut got = Got::default();
    got.take(&all, &sent, 0)
        .unwrap_or_else(|e| panic!("{who}: {e}"));
    let d = got
        .done
        .first()
        .unwrap_or_else(|| panic!("{who}: no END_REQUEST: {}", short(&all)));
    let (status, _, body) = cgi_response(&d.stdout);
    assert!(
        status == 200 && body.starts_with(b"hello first\n"),
        "{who}: {status} {}",
        short(&body)
    );
}

/// A script that needs no more time once its client has gone (it reads
/// end of input, its output goes nowhere) still ran this long after the
/// client closed its connection: a child kept for nobody.
const HELD_AFTER_CLOSE: Duration = Duration::from_secs(3);

/// fpmd's request_terminate_timeout terminations of requests whose client
/// (a fuzz connection, known by the marker in the request's URI) had
/// closed its connection more than [`HELD_AFTER_CLOSE`] before: without
/// the timeout, the child would have stayed on it for good. sleep.php is
/// left out (it sleeps whatever its client does).
fn held_for_gone_clients(log: &str, fuzz: &[FuzzStats]) -> Vec<String> {
    let mut out = Vec::new();
    for line in log
        .lines()
        .filter(|l| l.contains("over request_terminate_timeout") && !l.contains("/sleep.php"))
    {
        let Some(at) = log_time(line) else {
            continue;
        };
        let mut rest = line;
        while let Some(i) = rest.find("FZMK") {
            let m = rest[i..].get(..20).unwrap_or("");
            rest = &rest[i + 4..];
            for f in fuzz {
                if let Some((closed, who)) = f.closed.lock().unwrap().get(m) {
                    if let Ok(after) = at.duration_since(*closed) {
                        if after > HELD_AFTER_CLOSE {
                            out.push(format!(
                                "{who}: a child still ran this connection's request {:.1} s after \
                                 the connection was closed, until request_terminate_timeout ended it \
                                 (without it the child would be lost): {line}",
                                after.as_secs_f64()
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

fn zombies(fpmd: &Fpmd) -> Vec<procs::ProcInfo> {
    fpmd.children().into_iter().filter(|p| !p.alive()).collect()
}

/// `n` barrier.php requests at once through `nginx`: the pool runs `n` at the same time.
fn n_concurrent(nginx: &Nginx, n: usize, group: &str) {
    let url = nginx.url(&format!("/barrier.php?group={group}&n={n}&name="));
    let out = crate::harness::http::concurrent(n, 1, move |a, t, _| {
        try_get_with(a, &format!("{url}{t}"))
    });
    crate::harness::http::assert_all_200(&out);
    for o in &out {
        assert_eq!(
            o.text(),
            format!("met {}", o.thread),
            "{group}: the pool did not run {n} requests at once"
        );
    }
}

/// The log's lines by kind (digits and quoted text folded), most frequent first.
fn log_kinds(log: &str) -> Vec<(usize, String)> {
    let mut kinds: HashMap<String, usize> = HashMap::new();
    for l in log.lines().filter(|l| !l.trim().is_empty()) {
        let mut k = String::new();
        let mut quoted = false;
        let mut last_digit = false;
        for c in l.chars() {
            if c == '"' {
                quoted = !quoted;
                if quoted {
                    k.push_str("\"…\"");
                }
                continue;
            }
            if quoted {
                continue;
            }
            if c.is_ascii_digit() {
                if !last_digit {
                    k.push('N');
                }
                last_digit = true;
                continue;
            }
            last_digit = false;
            k.push(c);
        }
        let k: String = k.chars().take(160).collect();
        *kinds.entry(k).or_default() += 1;
    }
    let mut v: Vec<(usize, String)> = kinds.into_iter().map(|(k, n)| (n, k)).collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    v
}

#[test]
fn live_fuzzer_on_unix_and_tcp_listeners() {
    let seed = env_seed();
    let run = env_secs();
    eprintln!(
        "live fuzz: seed {seed} (replay with FPMD_LIVE_FUZZ_SEED={seed}), {run:?} on each listener, spawn {}",
        std::env::var("FPMD_TEST_SPAWN").unwrap_or_else(|_| "default".into())
    );
    let dir = TestDir::new();
    let mut cfg = FpmdConfig::new();
    for name in LISTENERS {
        let mut p = Pool::new(name).max_children(CHILDREN as u32).lines(&[
            r#"request_terminate_timeout = "5s""#,
            &format!("env.POOL = {name:?}"),
        ]);
        if name == "tcp" {
            p = p.tcp(format!("127.0.0.1:{}", free_port()));
        }
        cfg = cfg.pool(p);
    }
    let mut fpmd = Fpmd::start(&dir, cfg);
    let nginx: Vec<Nginx> = (0..LISTENERS.len())
        .map(|i| {
            Nginx::start(
                &dir,
                NginxOpts::default()
                    .keepalive()
                    .path_info()
                    .upstream(fpmd.upstream(i))
                    .name(&format!("nginx-{}", LISTENERS[i])),
            )
        })
        .collect();
    fpmd.wait_workers(2 * CHILDREN, LONG);
    let docroot = dir.docroot();
    let targets: Vec<Target> = (0..LISTENERS.len()).map(|i| fpmd.addr(i).into()).collect();
    for (i, t) in targets.iter().enumerate() {
        raw_hello_works(t, &docroot, LISTENERS[i]);
    }

    let t0 = Instant::now();
    let deadline = t0 + run;
    let fuzz: Vec<FuzzStats> = LISTENERS.iter().map(|_| FuzzStats::default()).collect();
    let good: Vec<GoodStats> = LISTENERS.iter().map(|_| GoodStats::default()).collect();
    let ctxs: Vec<Ctx> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| Ctx {
            docroot: docroot.clone(),
            target: t.clone(),
            listener: i,
            deadline,
            plans: Mutex::new(
                std::fs::File::create(dir.join(format!("fuzz-{}.log", LISTENERS[i]))).unwrap(),
            ),
        })
        .collect();
    std::thread::scope(|sc| {
        for l in 0..LISTENERS.len() {
            let base = nginx[l].url("");
            for t in 0..GOOD_THREADS {
                let (base, docroot, good) = (base.clone(), &docroot, &good[l]);
                sc.spawn(move || good_loop(l, t, &base, docroot, deadline, seed, good));
            }
            for t in 0..FUZZ_THREADS {
                let (ctx, fuzz) = (&ctxs[l], &fuzz[l]);
                sc.spawn(move || fuzz_thread(ctx, t, seed, fuzz));
            }
        }
    });
    let wall = t0.elapsed();

    // The figures.
    let log = fpmd.log();
    eprintln!("---- live fuzz, seed {seed}: {wall:?} ----");
    for (l, name) in LISTENERS.iter().enumerate() {
        let f = &fuzz[l];
        let g = |a: &AtomicU64| a.load(Relaxed);
        eprintln!(
            "{name}: {} fuzz connections ({} legal, {} bursts, {} slowloris drips, up to {} held open by a thread), \
             {} records / {} bytes sent; {} answers ({} records) received; fpmd closed {} connections; \
             legal requests answered right: {} ({} cut by the end of the run); connect errors {}, writes timed out {}",
            g(&f.conns), g(&f.legal_conns), g(&f.bursts), g(&f.drips), g(&f.held_peak),
            g(&f.records), g(&f.bytes), g(&f.answers), g(&f.answer_records), g(&f.closes),
            g(&f.legal_ok), g(&f.legal_cut), g(&f.connect_errors), g(&f.write_timeouts),
        );
        let gs = &good[l];
        let per_kind: Vec<String> = (0..3)
            .map(|k| {
                let n = g(&gs.done[k]);
                format!(
                    "{} {n} (mean {:.1} ms)",
                    GOOD_KINDS[k],
                    g(&gs.micros[k]) as f64 / 1000.0 / n.max(1) as f64
                )
            })
            .collect();
        eprintln!(
            "{name}: good requests through nginx: {}; failures {}",
            per_kind.join(", "),
            g(&gs.failed)
        );
    }
    eprintln!("fpmd's log: {} lines; by kind:", log.lines().count());
    for (n, k) in log_kinds(&log).into_iter().take(25) {
        eprintln!("  {n:6}  {k}");
    }

    // fpmd lived through it, and said nothing of a panic.
    fpmd.assert_running();
    let panics: Vec<&str> = log.lines().filter(|l| l.contains("panicked")).collect();
    assert!(panics.is_empty(), "seed {seed}: fpmd panicked: {panics:#?}");

    // Every child is accounted for: each pool runs 4 requests at once, 8
    // live workers, no zombie.
    for (l, name) in LISTENERS.iter().enumerate() {
        n_concurrent(&nginx[l], CHILDREN, &format!("after-{name}"));
    }
    let whole = wait_until(LONG, || {
        fpmd.workers().len() == 2 * CHILDREN
            && LISTENERS
                .iter()
                .all(|p| fpmd.workers_with_env("POOL", p).len() == CHILDREN)
            && zombies(&fpmd).is_empty()
    });
    assert!(
        whole,
        "seed {seed}: after the run: {} workers ({}), zombies: {}",
        fpmd.workers().len(),
        LISTENERS
            .iter()
            .map(|p| format!("{p}: {}", fpmd.workers_with_env("POOL", p).len()))
            .collect::<Vec<_>>()
            .join(", "),
        procs::describe(&zombies(&fpmd))
    );
    fpmd.assert_running();
    let rss = procs::vm_rss(fpmd.pid()).expect("fpmd's VmRSS");
    eprintln!(
        "after the run: {} workers, no zombie; fpmd RSS {:.1} MiB",
        fpmd.workers().len(),
        rss as f64 / 1048576.0
    );

    // The good loops, the fuzzed connections' answers, and children kept
    // on requests of clients that had left.
    let good_failures: Vec<String> = good
        .iter()
        .flat_map(|g| g.failures.lock().unwrap().clone())
        .collect();
    let failed: u64 = good.iter().map(|g| g.failed.load(Relaxed)).sum();
    assert!(
        failed == 0,
        "seed {seed}: {failed} good requests through nginx failed:\n{}",
        good_failures.join("\n")
    );
    let mut violations: Vec<String> = fuzz
        .iter()
        .flat_map(|f| f.violations.lock().unwrap().clone())
        .collect();
    let held = held_for_gone_clients(&fpmd.log(), &fuzz);
    for h in &held {
        eprintln!("VIOLATION: {h}");
    }
    violations.extend(held);
    assert!(
        violations.is_empty(),
        "seed {seed} (replay with FPMD_LIVE_FUZZ_SEED={seed}): {} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    for (l, f) in fuzz.iter().enumerate() {
        assert!(
            f.legal_ok.load(Relaxed) > 0,
            "{}: no legal fuzz request was answered at all",
            LISTENERS[l]
        );
    }
    assert!(
        rss < RSS_BAR,
        "seed {seed}: fpmd's RSS is {:.1} MiB after the run (bar: {} MiB)",
        rss as f64 / 1048576.0,
        RSS_BAR >> 20
    );
    eprintln!("test wall time {:?} (fuzzing {wall:?})", t0.elapsed());
}
