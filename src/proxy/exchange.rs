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

use std::future::Future;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::client::{management, ClientConn, ClientError};
use super::php_message::PhpMessages;
use super::request::{Owed, Request};
use super::verdict::{BodyEnd, ChildEnd, ClientEnd, Outcome, Sent};
use crate::fastcgi::cgi::{self, Head};
use crate::fastcgi::{
    self, scan_response, Deframer, Header, Piece, RecordType, Scan, NULL_REQUEST_ID,
};
use crate::pool::slots::Death;
use crate::pool::ChildConn;

/// Bytes a web server may send once its STDIN has ended and its request is
/// in flight (management records only; with `FCGI_MPXS_CONNS` = 0 a web
/// server sends nothing then) before its connection is judged broken.
const MAX_IN_FLIGHT_EXTRA: usize = 64 * 1024;

/// How long a request past `request_terminate_timeout` may still end on
/// its own before it is terminated (one turn of the event loop, see the
/// terminate timer in [`ExchangeCtx::relay`]).
const TERMINATE_RECHECK: Duration = Duration::from_millis(20);

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
///
/// In three steps: the two pumps ([`Upstream::pump`], web server to
/// child; [`Downstream::pump`], child to web server) run concurrently
/// under the timers ([`ExchangeCtx::relay`]), then [`ExchangeCtx::finish`]
/// sends what was held back and judges how each side ended.
#[allow(clippy::too_many_arguments)]
pub async fn run<R, W>(
    conn: &mut ChildConn,
    probe: Option<(RawFd, i32)>,
    death: Option<(&Death, u64)>,
    timers: Timers,
    client: &mut ClientConn<R, W>,
    req: &mut Request,
    head: Option<&mut Head>,
    mut on: impl FnMut(Notice),
) -> Report
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let started = Instant::now();
    crate::pool::lend_buffer(&mut conn.buf);
    let ChildConn {
        reader: child_r,
        writer: child_w,
        buf: child_buf,
    } = conn;
    let ctx = ExchangeCtx {
        id: req.id,
        started,
        timers,
        probe,
        death,
        child_fd: child_r.as_ref().as_raw_fd(),
        until_end: req.owed == Owed::UntilEnd,
        keep_conn: req.keep_conn,
    };
    let ClientConn {
        reader,
        writer,
        buf,
        deframer,
        st,
        ..
    } = client;
    let mut messages = PhpMessages::default();
    messages.collect = timers.php_messages;
    let mut down = Downstream {
        id: ctx.id,
        child_r,
        child_buf,
        head,
        messages,
        reframed: Vec::new(),
        held_end: None,
        out: ToClient {
            writer,
            sent: Sent::Nothing,
            gone: false,
        },
    };
    let up = Upstream {
        id: ctx.id,
        reader,
        buf,
        deframer,
        replies: &mut st.replies,
        child_w,
        req: &mut *req,
        extra: 0,
    };
    let relayed = ctx.relay(up.pump(), down.pump(), &mut on).await;
    ctx.finish(down, req, relayed).await
}

/// What the steps of one exchange share, fixed when it starts.
struct ExchangeCtx<'d> {
    /// The request's id, on both connections.
    id: u16,
    started: Instant,
    timers: Timers,
    /// Prefork: the child connection's fd and the php-cgi parent's pid.
    probe: Option<(RawFd, i32)>,
    /// The slot's [`Death`] and its epoch when leased.
    death: Option<(&'d Death, u64)>,
    /// The connection the child's reader reads, open for the whole
    /// exchange.
    child_fd: RawFd,
    /// The body is owed until the web server's STDIN ends (no usable
    /// `CONTENT_LENGTH`).
    until_end: bool,
    keep_conn: bool,
}

/// How the relay ended, for [`ExchangeCtx::finish`].
struct Relayed {
    child: ChildEnd,
    /// How the child broke the protocol, if it did.
    child_error: Option<String>,
    /// Why the web server's pump stopped, if it did.
    up_end: Option<UpEnd>,
    /// Prefork: the pid of the child that took the connection, if learned.
    learned: Option<i32>,
}

impl ExchangeCtx<'_> {
    /// Polls both pumps under the request's timers until the child's
    /// answer ends (`down`), it times out (`request_terminate_timeout`), or
    /// it breaks the protocol. On the way: the web server's pump may end
    /// first (its end is kept); the child's death shuts down fpmd's reading
    /// side; the slowlog timeout and (prefork) the pid probe, backing off
    /// from 1 to 200 ms, tell `on`.
    async fn relay<U, D>(&self, up: U, down: D, on: &mut impl FnMut(Notice)) -> Relayed
    where
        U: Future<Output = UpEnd>,
        D: Future<Output = (ChildEnd, Option<String>)>,
    {
        tokio::pin!(up);
        tokio::pin!(down);
        let mut up_end: Option<UpEnd> = None;
        let mut learned = None;
        let mut probe_delay = Duration::from_millis(1);
        let probe_timer = tokio::time::sleep(probe_delay);
        tokio::pin!(probe_timer);
        let now = tokio::time::Instant::now();
        let slow_at = self.timers.slowlog.map(|d| now + d);
        let slow_timer = super::sleep_until_opt(slow_at);
        tokio::pin!(slow_timer);
        let mut slow_logged = false;
        let term_at = self.timers.terminate.map(|d| now + d);
        let term_timer = super::sleep_until_opt(term_at);
        tokio::pin!(term_timer);
        let died = async {
            match self.death {
                Some((d, epoch)) => d.after(epoch).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(died);
        let mut shut = false;
        let (child, child_error) = loop {
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
                    let _ = nix::sys::socket::shutdown(self.child_fd, nix::sys::socket::Shutdown::Read);
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
                        learn_pid(self.probe, &mut learned, on);
                    }
                    on(Notice::Slow { pid: learned, elapsed: self.started.elapsed() });
                }
                _ = &mut probe_timer, if self.probe.is_some() && learned.is_none() => {
                    learn_pid(self.probe, &mut learned, on);
                    probe_delay = (probe_delay * 2).min(Duration::from_millis(200));
                    probe_timer.as_mut().reset(tokio::time::Instant::now() + probe_delay);
                }
            }
        };
        Relayed {
            child,
            child_error,
            up_end,
            learned,
        }
    }

    /// After the relay: tells the web server why php-cgi found no script
    /// (the END_REQUEST held back), gives the child connection's buffer
    /// back, and reports how each side ended.
    async fn finish<W: AsyncWrite + Unpin>(
        &self,
        mut down: Downstream<'_, W>,
        req: &Request,
        relayed: Relayed,
    ) -> Report {
        let no_input_file = down.held_end.is_some();
        if let Some(end) = down.held_end.take() {
            let script = req.param(b"SCRIPT_FILENAME").unwrap_or_default();
            let out = tell_no_input_file(self.id, script, req.script_found, &end);
            down.out.send(&out, true).await;
        }
        let php_messages = (down.messages.take_done(), down.messages.dropped);
        let (client, body, client_error) = ends(relayed.up_end, down.out.gone, req);
        crate::pool::return_buffer(down.child_buf);
        let outcome = Outcome {
            client,
            body,
            until_end: self.until_end,
            child: relayed.child,
            sent: down.out.sent,
            keep_conn: self.keep_conn,
        };
        Report {
            outcome,
            client_error,
            child_error: relayed.child_error,
            started: self.started,
            learned: relayed.learned,
            php_messages,
            finish_request_missing: down.messages.finish_request_missing,
            no_input_file,
        }
    }
}

/// Prefork: learns which child took the connection (`sock_diag`, see
/// [`crate::sys::peer::child_on_connection`]) into `learned`, and tells
/// `on` when it did.
fn learn_pid(probe: Option<(RawFd, i32)>, learned: &mut Option<i32>, on: &mut impl FnMut(Notice)) {
    if let Some((fd, parent)) = probe {
        *learned = crate::sys::peer::child_on_connection(fd, parent);
        if let Some(pid) = *learned {
            on(Notice::Learned(pid));
        }
    }
}

/// How the web server's side and the body ended, from why its pump
/// stopped (`up_end`), whether writing to it failed (`client_gone`), and
/// what of the body the child got; with how the web server broke the
/// protocol, if it did.
fn ends(
    up_end: Option<UpEnd>,
    client_gone: bool,
    req: &Request,
) -> (ClientEnd, BodyEnd, Option<ClientError>) {
    let short = matches!(up_end, Some(UpEnd::Short | UpEnd::Broke(_)));
    let cut = matches!(up_end, Some(UpEnd::Cut));
    let mut client_error = None;
    let client = match up_end {
        Some(UpEnd::Gone | UpEnd::Cut) => ClientEnd::Gone,
        Some(UpEnd::Broke(e)) => {
            client_error = Some(e);
            ClientEnd::Broke
        }
        _ if client_gone => ClientEnd::Gone,
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
    (client, body, client_error)
}

/// The web server's half of the exchange: its records after the head,
/// checked, and the body forwarded to the child as STDIN records.
struct Upstream<'a, R> {
    id: u16,
    reader: &'a mut R,
    /// Bytes read from the web server and not yet consumed.
    buf: &'a mut BytesMut,
    deframer: &'a mut Deframer,
    /// Management replies owed to the web server.
    replies: &'a mut Vec<u8>,
    child_w: &'a mut OwnedWriteHalf,
    req: &'a mut Request,
    /// Bytes of records since the web server's STDIN ended (at most
    /// [`MAX_IN_FLIGHT_EXTRA`]).
    extra: usize,
}

impl<R: AsyncRead + Unpin> Upstream<'_, R> {
    /// Reads the web server's records until its side ends: the body to the
    /// child, management records answered, anything else a fault.
    async fn pump(mut self) -> UpEnd {
        if self.req.owed == Owed::UntilEnd && self.req.child_stdin_ended {
            // A negative CONTENT_LENGTH: php-cgi reads past the empty STDIN
            // record and would wait for more; end its input (as php-fpm's
            // child sees the web server close).
            let _ = self.child_w.shutdown().await;
        }
        loop {
            if let Some(end) = self.take_buffered().await {
                return end;
            }
            if self.extra > MAX_IN_FLIGHT_EXTRA {
                let e = ClientError::TooMuchInFlight { id: self.id };
                return self.half_close(UpEnd::Broke(e)).await;
            }
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(16 * 1024);
            }
            match self.reader.read_buf(self.buf).await {
                Ok(0) | Err(_) => {
                    if self.req.child_stdin_ended {
                        return UpEnd::Gone;
                    }
                    return self.half_close(UpEnd::Cut).await;
                }
                Ok(_) => {}
            }
        }
    }

    /// Takes every piece whole in the buffer; `Some` when the pump ends.
    async fn take_buffered(&mut self) -> Option<UpEnd> {
        let id = self.id;
        loop {
            let (piece, used) = match self.deframer.next(self.buf) {
                Ok(x) => x,
                Err(e) => return Some(self.half_close(UpEnd::Broke(e.into())).await),
            };
            let Some(piece) = piece else {
                self.buf.advance(used);
                return None;
            };
            if self.req.client_stdin_done {
                self.extra += used;
            }
            match piece {
                Piece::Data {
                    kind: RecordType::Stdin,
                    request_id,
                    data,
                } if request_id == id && !self.req.client_stdin_done => {
                    if forward_stdin(self.child_w, self.req, id, data)
                        .await
                        .is_err()
                    {
                        self.buf.advance(used);
                        return Some(UpEnd::ChildGone);
                    }
                }
                Piece::End {
                    kind: RecordType::Stdin,
                    request_id,
                } if request_id == id && !self.req.client_stdin_done => {
                    self.req.client_stdin_done = true;
                    if !self.req.child_stdin_ended {
                        self.buf.advance(used);
                        if self.req.owed != Owed::UntilEnd {
                            return Some(self.half_close(UpEnd::Short).await);
                        }
                        self.req.child_stdin_ended = true;
                        let end = self.req.stdin_end_record();
                        if self.child_w.write_all(&end).await.is_err() {
                            return Some(UpEnd::ChildGone);
                        }
                        // php-cgi reads past it (see above): end its
                        // input.
                        let _ = self.child_w.shutdown().await;
                        continue;
                    }
                }
                Piece::Record(r)
                    if r.header.request_id == NULL_REQUEST_ID
                        && r.header.kind != RecordType::BeginRequest as u8 =>
                {
                    if let Err(e) = management(self.replies, r) {
                        self.buf.advance(used);
                        return Some(self.half_close(UpEnd::Broke(e)).await);
                    }
                }
                Piece::Record(r)
                    if r.header.kind == RecordType::AbortRequest as u8
                        && r.header.request_id == id =>
                {
                    // php-cgi cannot be interrupted: the response still
                    // ends with END_REQUEST. Mid-body, the child reads
                    // end of input (php-fpm's child sees the same).
                    self.buf.advance(used);
                    if !self.req.child_stdin_ended {
                        return Some(self.half_close(UpEnd::Short).await);
                    }
                    continue;
                }
                other => {
                    let e = refusal(other, self.req);
                    self.buf.advance(used);
                    return Some(self.half_close(UpEnd::Broke(e)).await);
                }
            }
            self.buf.advance(used);
        }
    }

    /// Ends the child's input by closing fpmd's writing side of the
    /// connection (`shutdown(SHUT_WR)`), unless the child already has its
    /// whole body: php-cgi then reads end of input and finishes its
    /// request.
    async fn half_close(&mut self, end: UpEnd) -> UpEnd {
        if !self.req.child_stdin_ended {
            let _ = self.child_w.shutdown().await;
        }
        end
    }
}

/// Forwards a STDIN record's `data` to the child, as far as the body is
/// owed (the rest counts as excess), with the empty STDIN record when that
/// ends it: one `writev` of a fresh header, the content and the end.
/// Errors: the write failed (the child closed its connection).
async fn forward_stdin(
    child_w: &mut OwnedWriteHalf,
    req: &mut Request,
    id: u16,
    data: &[u8],
) -> io::Result<()> {
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
        write_all_vectored(child_w, &mut io).await?;
    }
    Ok(())
}

/// Why a piece the exchange does not take breaks the protocol.
fn refusal(piece: Piece<'_>, req: &Request) -> ClientError {
    match piece {
        Piece::Record(r) if r.header.kind == RecordType::BeginRequest as u8 => {
            ClientError::SecondBegin {
                new: r.header.request_id,
                busy: req.id,
            }
        }
        Piece::Record(r) if r.header.record_type().is_none() => ClientError::UnknownType {
            kind: r.header.kind,
            id: r.header.request_id,
        },
        Piece::Record(r) => unexpected(r.header.kind, r.header.request_id, req),
        Piece::Data {
            kind, request_id, ..
        }
        | Piece::End { kind, request_id } => unexpected(kind as u8, request_id, req),
    }
}

/// The child's half of the exchange: its records scanned and forwarded to
/// the web server, PHP's messages reframed.
struct Downstream<'a, W> {
    id: u16,
    child_r: &'a mut OwnedReadHalf,
    /// Bytes read from the child and not yet forwarded.
    child_buf: &'a mut BytesMut,
    /// The access log's copy of the response head, while it is incomplete.
    head: Option<&'a mut Head>,
    messages: PhpMessages,
    /// A span with PHP messages, reframed (reused from span to span).
    reframed: Vec<u8>,
    /// php-cgi's "No input file specified.": its END_REQUEST, held back
    /// until fpmd has told the web server why (see `tell_no_input_file`).
    held_end: Option<Vec<u8>>,
    out: ToClient<'a, W>,
}

impl<W: AsyncWrite + Unpin> Downstream<'_, W> {
    /// Forwards the child's records as they come, until its END_REQUEST,
    /// end of file or garbage (with why).
    async fn pump(&mut self) -> (ChildEnd, Option<String>) {
        loop {
            let scan = scan_response(self.child_buf, self.id);
            if scan.forwardable > 0 {
                self.forward(&scan).await;
            }
            if let Some(why) = scan.bad {
                return (ChildEnd::Garbage, Some(why));
            }
            if scan.ended.is_some() {
                return (ChildEnd::Ended, None);
            }
            if self.child_buf.capacity() - self.child_buf.len() < fastcgi::HEADER_LEN {
                self.child_buf.reserve(fastcgi::MAX_RECORD_LEN);
            }
            match self.child_r.read_buf(self.child_buf).await {
                Ok(0) | Err(_) => return (ChildEnd::Eof, None),
                Ok(_) => {}
            }
        }
    }

    /// Forwards the whole records `scan` found at the front of the buffer:
    /// as they are, reframed when PHP logged messages, or without php-cgi's
    /// END_REQUEST when it answered "No input file specified." (held back).
    async fn forward(&mut self, scan: &Scan) {
        let id = self.id;
        let span = &self.child_buf[..scan.forwardable];
        if let Some(h) = self.head.as_deref_mut().filter(|h| !h.done()) {
            h.feed_records(span, id);
        }
        let span = if scan.ended.is_some() && cgi::is_no_input_file(span, id) {
            let end = last_record_at(span);
            self.held_end = Some(span[end..].to_vec());
            &span[..end]
        } else if scan.stderr || self.messages.holding() {
            self.reframed.clear();
            self.messages.rewrite(span, id, &mut self.reframed);
            &self.reframed[..]
        } else {
            span
        };
        let whole = scan.ended.is_some() && self.held_end.is_none();
        self.out.send(span, whole).await;
        self.child_buf.advance(scan.forwardable);
    }
}

/// The web server's writer during the exchange, and what reached it.
struct ToClient<'a, W> {
    writer: &'a mut W,
    sent: Sent,
    /// A write failed: the web server is gone, nothing more is written.
    gone: bool,
}

impl<W: AsyncWrite + Unpin> ToClient<'_, W> {
    /// Writes `bytes` unless the web server is gone; `whole`: they end the
    /// response (its END_REQUEST included).
    async fn send(&mut self, bytes: &[u8], whole: bool) {
        if self.gone {
            return;
        }
        if self.writer.write_all(bytes).await.is_err() {
            self.gone = true;
        } else {
            self.sent = if whole { Sent::Whole } else { Sent::Partial };
        }
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
