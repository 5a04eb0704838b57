//! One exchange with a child, after its head was written: the rest of the
//! body from the web server to the child and the response back, pumped
//! concurrently (a script may answer before it reads its input), under the
//! request's timers, until the child's END_REQUEST or a fault. What
//! happened comes out as an [`Outcome`] for [`super::verdict`].
//!
//! Body bytes go to the child as canonical STDIN records written from the
//! web server's read buffer (`writev` of a fresh header and the content
//! slice: one copy, no re-encoding), at most `CONTENT_LENGTH` of them, then
//! the empty STDIN record. When the web server stops short of that (it went
//! away, ended its stream early, aborted, or broke the protocol), fpmd
//! half-closes the child's connection: php-cgi reads end of input, as
//! php-fpm's child does when the web server closes, finishes its script and
//! ends the request; the verdict then closes the connection.
//!
//! Must not touch: the pool (the caller gives the lease back).

use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bytes::Buf;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::client::{management, ClientConn, ClientError};
use super::php_message::PhpMessages;
use super::request::{Owed, Request};
use super::verdict::{BodyEnd, ChildEnd, ClientEnd, Outcome, Sent};
use crate::fastcgi::cgi::{self, Head};
use crate::fastcgi::{self, scan_response, Header, Piece, RecordType, NULL_REQUEST_ID};
use crate::pool::ChildConn;

/// Bytes a web server may send once its STDIN has ended and its request is
/// in flight (management records only; with `FCGI_MPXS_CONNS` = 0 a web
/// server sends nothing then) before its connection is judged broken.
const MAX_IN_FLIGHT_EXTRA: usize = 64 * 1024;

/// How long a request past `request_terminate_timeout` may still end on
/// its own before it is terminated (one turn of the event loop, see the
/// terminate timer in [`run`]).
const TERMINATE_RECHECK: Duration = Duration::from_millis(20);

const SENT_NOTHING: u8 = 0;
const SENT_PARTIAL: u8 = 1;
const SENT_WHOLE: u8 = 2;

/// What the exchange reports besides the [`Outcome`], for the log.
pub struct Report {
    pub outcome: Outcome,
    /// How the web server broke the protocol, if it did.
    pub client_error: Option<ClientError>,
    /// How the child broke the protocol, if it did.
    pub child_error: Option<String>,
    /// When the exchange started (for the elapsed times in log lines).
    pub started: Instant,
    /// Prefork: the pid of the child that took the connection, if learned.
    pub learned: Option<i32>,
    /// With [`Timers::php_messages`]: the messages PHP logged on STDERR
    /// (at most [`super::php_message::MESSAGES_KEPT`]), and how many more.
    pub php_messages: (Vec<Vec<u8>>, usize),
    /// The script called `fastcgi_finish_request()`, which php-cgi does
    /// not have (its fatal error was on STDERR).
    pub finish_request_missing: bool,
    /// php-cgi answered that it could not open the primary script
    /// ([`crate::fastcgi::cgi::NO_INPUT_FILE`]); fpmd told the web server
    /// why on STDERR, as php-fpm does.
    pub no_input_file: bool,
}

/// Why the pump from the web server to the child stopped.
enum UpEnd {
    /// The web server closed its connection after the child had its body.
    Gone,
    /// The web server closed in the middle of the body: half-closed.
    Cut,
    /// The web server ended its STDIN (or aborted) short of
    /// `CONTENT_LENGTH`: half-closed.
    Short,
    /// The web server broke the protocol (half-closed if the body was not
    /// complete).
    Broke(ClientError),
    /// Writing to the child failed: it closed its connection.
    ChildGone,
}

/// Writes every byte of `bufs` with `writev`.
pub async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    bufs: &mut [IoSlice<'_>],
) -> io::Result<()> {
    let mut bufs = bufs;
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let n = w.write_vectored(bufs).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// What the exchange tells its caller while the request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// Prefork: the child that took the connection is this pid.
    Learned(i32),
    /// `request_slowlog_timeout` passed (once per request).
    Slow { pid: Option<i32>, elapsed: Duration },
}

/// The request's timers, from its pool's configuration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timers {
    /// `request_slowlog_timeout`.
    pub slowlog: Option<Duration>,
    /// `request_terminate_timeout`.
    pub terminate: Option<Duration>,
    /// `catch_workers_output`: keep PHP's STDERR messages for fpmd's log,
    /// as php-fpm's child also writes them to its stderr.
    pub php_messages: bool,
}

/// Runs the exchange for `req`, whose head was written on `conn`.
/// `probe` (prefork) is the connection's fd and the php-cgi parent's pid,
/// to learn which child took the connection; `death` is the slot's
/// [`crate::pool::slots::Death`] and its epoch when leased: once the child
/// died, fpmd shuts down its own reading side of the connection, so what
/// the child wrote before it died is still read, then the end comes even
/// when a process the script left behind holds the child's side open;
/// `head` (for the access log) collects the head of the child's response
/// as it is forwarded; `on` hears of the child's pid (and of the slowlog
/// timeout passing) while the request runs.
#[allow(clippy::too_many_arguments)]
pub async fn run<R, W>(
    conn: &mut ChildConn,
    probe: Option<(std::os::fd::RawFd, i32)>,
    death: Option<(&crate::pool::slots::Death, u64)>,
    timers: Timers,
    client: &mut ClientConn<R, W>,
    req: &mut Request,
    mut head: Option<&mut Head>,
    mut on: impl FnMut(Notice),
) -> Report
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let started = Instant::now();
    let mut learned = None;
    let id = req.id;
    let until_end = req.owed == Owed::UntilEnd;
    let keep_conn = req.keep_conn;
    crate::pool::lend_buffer(&mut conn.buf);
    let ChildConn {
        reader: child_r,
        writer: child_w,
        buf: child_buf,
    } = conn;
    let child_fd = {
        use std::os::fd::AsRawFd;
        child_r.as_ref().as_raw_fd()
    };
    let ClientConn {
        reader,
        writer,
        buf,
        deframer,
        st,
        ..
    } = client;
    // Written by the response pump, read after it (which may have been
    // dropped by a timer). Atomics only because a task must be Send.
    let sent = AtomicU8::new(SENT_NOTHING);
    let client_gone = AtomicBool::new(false);

    let up = async {
        let mut extra = 0usize;
        if until_end && req.child_stdin_ended {
            // A negative CONTENT_LENGTH: php-cgi reads past the empty STDIN
            // record and would wait for more; end its input (as php-fpm's
            // child sees the web server close).
            let _ = child_w.shutdown().await;
        }
        loop {
            loop {
                let (piece, used) = match deframer.next(buf) {
                    Ok(x) => x,
                    Err(e) => return half_close(child_w, req, UpEnd::Broke(e.into())).await,
                };
                let Some(piece) = piece else {
                    buf.advance(used);
                    break;
                };
                if req.client_stdin_done {
                    extra += used;
                }
                match piece {
                    Piece::Data {
                        kind: RecordType::Stdin,
                        request_id,
                        data,
                    } if request_id == id && !req.client_stdin_done => {
                        let take = req.remaining().min(data.len() as u64) as usize;
                        req.excess += (data.len() - take) as u64;
                        if take > 0 {
                            let hdr = Header::new(RecordType::Stdin, id, take as u16).encode();
                            let end = req.stdin_end_record();
                            let ended = req.sent_body(take as u64);
                            let mut io = [
                                IoSlice::new(&hdr),
                                IoSlice::new(&data[..take]),
                                IoSlice::new(if ended { &end } else { &[] }),
                            ];
                            if write_all_vectored(child_w, &mut io).await.is_err() {
                                buf.advance(used);
                                return UpEnd::ChildGone;
                            }
                        }
                    }
                    Piece::End {
                        kind: RecordType::Stdin,
                        request_id,
                    } if request_id == id && !req.client_stdin_done => {
                        req.client_stdin_done = true;
                        if !req.child_stdin_ended {
                            buf.advance(used);
                            if req.owed != Owed::UntilEnd {
                                return half_close(child_w, req, UpEnd::Short).await;
                            }
                            req.child_stdin_ended = true;
                            if child_w.write_all(&req.stdin_end_record()).await.is_err() {
                                return UpEnd::ChildGone;
                            }
                            // php-cgi reads past it (see above): end its
                            // input.
                            let _ = child_w.shutdown().await;
                            continue;
                        }
                    }
                    Piece::Record(r)
                        if r.header.request_id == NULL_REQUEST_ID
                            && r.header.kind != RecordType::BeginRequest as u8 =>
                    {
                        if let Err(e) = management(&mut st.replies, r) {
                            buf.advance(used);
                            return half_close(child_w, req, UpEnd::Broke(e)).await;
                        }
                    }
                    Piece::Record(r)
                        if r.header.kind == RecordType::AbortRequest as u8
                            && r.header.request_id == id =>
                    {
                        // php-cgi cannot be interrupted: the response still
                        // ends with END_REQUEST. Mid-body, the child reads
                        // end of input (php-fpm's child sees the same).
                        buf.advance(used);
                        if !req.child_stdin_ended {
                            return half_close(child_w, req, UpEnd::Short).await;
                        }
                        continue;
                    }
                    other => {
                        let e = match other {
                            Piece::Record(r) if r.header.kind == RecordType::BeginRequest as u8 => {
                                ClientError::SecondBegin {
                                    new: r.header.request_id,
                                    busy: id,
                                }
                            }
                            Piece::Record(r) if r.header.record_type().is_none() => {
                                ClientError::UnknownType {
                                    kind: r.header.kind,
                                    id: r.header.request_id,
                                }
                            }
                            Piece::Record(r) => unexpected(r.header.kind, r.header.request_id, req),
                            Piece::Data {
                                kind, request_id, ..
                            }
                            | Piece::End { kind, request_id } => {
                                unexpected(kind as u8, request_id, req)
                            }
                        };
                        buf.advance(used);
                        return half_close(child_w, req, UpEnd::Broke(e)).await;
                    }
                }
                buf.advance(used);
            }
            if extra > MAX_IN_FLIGHT_EXTRA {
                let e = ClientError::TooMuchInFlight { id };
                return half_close(child_w, req, UpEnd::Broke(e)).await;
            }
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(16 * 1024);
            }
            match reader.read_buf(buf).await {
                Ok(0) | Err(_) => {
                    if req.child_stdin_ended {
                        return UpEnd::Gone;
                    }
                    return half_close(child_w, req, UpEnd::Cut).await;
                }
                Ok(_) => {}
            }
        }
    };

    let mut messages = PhpMessages::default();
    messages.collect = timers.php_messages;
    let mut reframed = Vec::new();
    // php-cgi's "No input file specified.": its END_REQUEST, held back
    // until fpmd has told the web server why (see `tell_no_input_file`).
    let mut held_end: Option<Vec<u8>> = None;
    let down = async {
        loop {
            let scan = scan_response(child_buf, id);
            if scan.forwardable > 0 {
                if let Some(h) = head.as_deref_mut().filter(|h| !h.done()) {
                    h.feed_records(&child_buf[..scan.forwardable], id);
                }
                let span = if scan.ended.is_some()
                    && cgi::is_no_input_file(&child_buf[..scan.forwardable], id)
                {
                    let end = last_record_at(&child_buf[..scan.forwardable]);
                    held_end = Some(child_buf[end..scan.forwardable].to_vec());
                    &child_buf[..end]
                } else if scan.stderr || messages.holding() {
                    reframed.clear();
                    messages.rewrite(&child_buf[..scan.forwardable], id, &mut reframed);
                    &reframed[..]
                } else {
                    &child_buf[..scan.forwardable]
                };
                if !client_gone.load(Ordering::Relaxed) {
                    if writer.write_all(span).await.is_err() {
                        client_gone.store(true, Ordering::Relaxed);
                    } else {
                        sent.store(
                            if scan.ended.is_some() && held_end.is_none() {
                                SENT_WHOLE
                            } else {
                                SENT_PARTIAL
                            },
                            Ordering::Relaxed,
                        );
                    }
                }
                child_buf.advance(scan.forwardable);
            }
            if let Some(why) = scan.bad {
                return (ChildEnd::Garbage, Some(why));
            }
            if scan.ended.is_some() {
                return (ChildEnd::Ended, None);
            }
            if child_buf.capacity() - child_buf.len() < fastcgi::HEADER_LEN {
                child_buf.reserve(fastcgi::MAX_RECORD_LEN);
            }
            match child_r.read_buf(child_buf).await {
                Ok(0) | Err(_) => return (ChildEnd::Eof, None),
                Ok(_) => {}
            }
        }
    };

    let (child, child_error, up_end) = {
        tokio::pin!(up);
        tokio::pin!(down);
        let mut up_end: Option<UpEnd> = None;
        let mut probe_delay = Duration::from_millis(1);
        let probe_timer = tokio::time::sleep(probe_delay);
        tokio::pin!(probe_timer);
        let now = tokio::time::Instant::now();
        let slow_at = timers.slowlog.map(|d| now + d);
        let slow_timer = super::sleep_until_opt(slow_at);
        tokio::pin!(slow_timer);
        let mut slow_logged = false;
        let term_at = timers.terminate.map(|d| now + d);
        let term_timer = super::sleep_until_opt(term_at);
        tokio::pin!(term_timer);
        let died = async {
            match death {
                Some((d, epoch)) => d.after(epoch).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(died);
        let mut shut = false;
        let (child, why) = loop {
            tokio::select! {
                // The child's answer first: after fpmd was stopped (SIGSTOP)
                // a response that arrived meanwhile wins over the timers.
                biased;
                d = &mut down => break d,
                u = &mut up, if up_end.is_none() => up_end = Some(u),
                _ = &mut died, if !shut => {
                    // The child is gone: read what it wrote, then the end.
                    shut = true;
                    // `child_fd` is the connection `child_r` reads, open for
                    // the whole exchange.
                    let _ = nix::sys::socket::shutdown(child_fd, nix::sys::socket::Shutdown::Read);
                }
                _ = &mut term_timer, if term_at.is_some() => {
                    // After fpmd was stopped (SIGSTOP) the timer can fire
                    // before the runtime has seen the answer that arrived
                    // meanwhile: let it poll for I/O once more first.
                    match tokio::time::timeout(TERMINATE_RECHECK, &mut down).await {
                        Ok(d) => break d,
                        Err(_) => break (ChildEnd::TimedOut, None),
                    }
                }
                _ = &mut slow_timer, if slow_at.is_some() && !slow_logged => {
                    slow_logged = true;
                    if learned.is_none() {
                        if let Some((fd, parent)) = probe {
                            learned = crate::sys::peer::child_on_connection(fd, parent);
                            if let Some(pid) = learned {
                                on(Notice::Learned(pid));
                            }
                        }
                    }
                    on(Notice::Slow { pid: learned, elapsed: started.elapsed() });
                }
                _ = &mut probe_timer, if probe.is_some() && learned.is_none() => {
                    if let Some((fd, parent)) = probe {
                        learned = crate::sys::peer::child_on_connection(fd, parent);
                        if let Some(pid) = learned {
                            on(Notice::Learned(pid));
                        }
                    }
                    probe_delay = (probe_delay * 2).min(Duration::from_millis(200));
                    probe_timer.as_mut().reset(tokio::time::Instant::now() + probe_delay);
                }
            }
        };
        (child, why, up_end)
    };
    let no_input_file = held_end.is_some();
    if let Some(end) = held_end {
        let script = req.param(b"SCRIPT_FILENAME").unwrap_or_default();
        let out = tell_no_input_file(id, script, req.script_found, &end);
        if !client_gone.load(Ordering::Relaxed) {
            if writer.write_all(&out).await.is_err() {
                client_gone.store(true, Ordering::Relaxed);
            } else {
                sent.store(SENT_WHOLE, Ordering::Relaxed);
            }
        }
    }
    let php_messages = (messages.take_done(), messages.dropped);
    let short = matches!(up_end, Some(UpEnd::Short | UpEnd::Broke(_)));
    let cut = matches!(up_end, Some(UpEnd::Cut));
    let mut client_error = None;
    let client = match up_end {
        Some(UpEnd::Gone | UpEnd::Cut) => ClientEnd::Gone,
        Some(UpEnd::Broke(e)) => {
            client_error = Some(e);
            ClientEnd::Broke
        }
        _ if client_gone.load(Ordering::Relaxed) => ClientEnd::Gone,
        _ => ClientEnd::Open,
    };
    let body = if req.child_stdin_ended {
        if req.excess > 0 {
            BodyEnd::Excess
        } else {
            BodyEnd::Complete
        }
    } else {
        match (cut, short) {
            (true, _) => BodyEnd::Cut,
            (_, true) => BodyEnd::Short,
            _ => BodyEnd::Unread,
        }
    };
    crate::pool::return_buffer(child_buf);
    let outcome = Outcome {
        client,
        body,
        until_end,
        child,
        sent: match sent.load(Ordering::Relaxed) {
            SENT_NOTHING => Sent::Nothing,
            SENT_PARTIAL => Sent::Partial,
            _ => Sent::Whole,
        },
        keep_conn,
    };
    Report {
        outcome,
        client_error,
        child_error,
        started,
        learned,
        php_messages,
        finish_request_missing: messages.finish_request_missing,
        no_input_file,
    }
}

/// Where the last record of `span` (whole records) starts.
fn last_record_at(span: &[u8]) -> usize {
    let mut at = 0;
    while let Ok(Some(rec)) = fastcgi::decode_record(&span[at..]) {
        let len = rec.header.record_len();
        if at + len >= span.len() {
            break;
        }
        at += len;
    }
    at
}

/// What fpmd sends after php-cgi's [`cgi::NO_INPUT_FILE`] answer: php-fpm's
/// log line on STDERR, `Unable to open primary script: PATH (ERROR)`
/// (`fpm_main.c`; nginx writes it to its error log), then the child's
/// END_REQUEST record `end`. The error is "Permission denied" when fpmd
/// found the script (`found`): it exists, and php-cgi, as the pool's user,
/// could not open it; else "No such file or directory".
fn tell_no_input_file(id: u16, script: &[u8], found: bool, end: &[u8]) -> Vec<u8> {
    let why = if found {
        "Permission denied"
    } else {
        "No such file or directory"
    };
    let mut line = b"Unable to open primary script: ".to_vec();
    line.extend_from_slice(script);
    line.extend_from_slice(format!(" ({why})").as_bytes());
    let mut out = Vec::with_capacity(line.len() + 32);
    fastcgi::encode_stream(&mut out, RecordType::Stderr, id, &line);
    fastcgi::encode_empty(&mut out, RecordType::Stderr, id);
    out.extend_from_slice(end);
    out
}

fn unexpected(kind: u8, request_id: u16, req: &Request) -> ClientError {
    let state = if req.client_stdin_done {
        "request in flight"
    } else {
        "reading STDIN"
    };
    ClientError::Unexpected {
        kind: fastcgi::type_name(kind),
        id: request_id,
        state,
    }
}

/// Ends the child's input by closing fpmd's writing side of the
/// connection (`shutdown(SHUT_WR)`), unless the child already has its whole
/// body: php-cgi then reads end of input and finishes its request.
async fn half_close<W: AsyncWrite + Unpin>(child_w: &mut W, req: &Request, end: UpEnd) -> UpEnd {
    if !req.child_stdin_ended {
        let _ = child_w.shutdown().await;
    }
    end
}

#[cfg(test)]
mod tests {
    //! The exchange against a fake child on a real unix socket pair, with
    //! the web server played through an in-memory pipe.
    use super::*;
    use crate::fastcgi::{encode_end_request, encode_pair, encode_record, Deframer, EndRequest};
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
        };
        let (_tx, mut rx) = tokio::sync::watch::channel(false);
        let Next::Request(mut req) = client.read_request(&ctx, &mut rx).await.unwrap() else {
            panic!("no request")
        };
        conn.writer.write_all(&req.head).await.unwrap();
        run(
            conn,
            None,
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
    async fn exchange(
        client_bytes: Vec<u8>,
        close: bool,
        child_answer: Vec<u8>,
    ) -> (Verdict, Outcome, Seen, Vec<u8>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (r, w) = ours.into_split();
        let mut conn = ChildConn {
            reader: r,
            writer: w,
            buf: bytes::BytesMut::with_capacity(70_000),
        };
        let (fpmd_side, mut web) = tokio::io::duplex(1 << 20);
        let (cr, cw): (ReadHalf<DuplexStream>, WriteHalf<DuplexStream>) =
            tokio::io::split(fpmd_side);
        let mut client = ClientConn::new(cr, cw, Charge::new());
        let id = u16::from_be_bytes([client_bytes[2], client_bytes[3]]);
        let feeder = tokio::spawn(async move {
            web.write_all(&client_bytes).await.unwrap();
            if close {
                drop(web);
                return Vec::new();
            }
            let mut out = Vec::new();
            let _ =
                tokio::time::timeout(Duration::from_millis(300), web.read_to_end(&mut out)).await;
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

    #[tokio::test]
    async fn short_body_half_closes() {
        let body = vec![b'x'; DISPATCH_BUFFER_FOR_TESTS + 1];
        let mut c = head(1, Some("1000000"));
        c.extend(stdin(1, &body));
        c.extend(rec(5, 1, &[], &[]));
        let (v, o, seen, _) = exchange(c, false, answer(1)).await;
        assert!(seen.eof);
        assert_eq!(o.body, BodyEnd::Short);
        assert_eq!(v.child, Fate::Reconnect);
        assert!(v.keep_client);
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
        let (ours, mut theirs) = UnixStream::pair().unwrap();
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
}
