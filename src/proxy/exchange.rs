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
use super::request::{Owed, Request};
use super::verdict::{BodyEnd, ChildEnd, ClientEnd, Outcome, Sent};
use crate::fastcgi::{self, scan_response, Header, Piece, RecordType, NULL_REQUEST_ID};
use crate::supervisor::{ChildConn, Pool, Worker};

/// Bytes a web server may send once its STDIN has ended and its request is
/// in flight (management records only; with `FCGI_MPXS_CONNS` = 0 a web
/// server sends nothing then) before its connection is judged broken.
const MAX_IN_FLIGHT_EXTRA: usize = 64 * 1024;

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

/// Request fields a slowlog entry names, taken before the exchange
/// borrows the request (only when a slowlog timeout is set).
pub struct SlowInfo {
    pub script: String,
    pub uri: String,
    pub method: String,
}

impl SlowInfo {
    pub fn of(req: &Request) -> SlowInfo {
        let get = |n: &[u8]| super::field(req.param(n).unwrap_or_default()).to_string();
        SlowInfo {
            script: get(b"SCRIPT_FILENAME"),
            uri: get(b"REQUEST_URI"),
            method: get(b"REQUEST_METHOD"),
        }
    }
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

/// Runs the exchange for `req`, whose head was written to the child of
/// `worker`. `slow` is set when the pool has a `request_slowlog_timeout`.
pub async fn run<R, W>(
    pool: &Pool,
    worker: &mut Worker,
    client: &mut ClientConn<R, W>,
    req: &mut Request,
    slow: Option<SlowInfo>,
) -> Report
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let started = Instant::now();
    // Prefork: which child took this connection is learned while the
    // request runs, so that logs and kills name the right pid.
    let probe = worker.pid_probe();
    let known_pid = worker.log_pid();
    let mut learned = None;
    let id = req.id;
    let until_end = req.owed == Owed::UntilEnd;
    let keep_conn = req.keep_conn;
    let Some(ChildConn {
        reader: child_r,
        writer: child_w,
        buf: child_buf,
    }) = worker.conn.as_mut()
    else {
        // The caller connects before it writes the head; without a
        // connection there is no exchange to run.
        let outcome = Outcome {
            client: ClientEnd::Open,
            body: BodyEnd::Unread,
            until_end,
            child: ChildEnd::Eof,
            sent: Sent::Nothing,
            keep_conn,
        };
        return Report {
            outcome,
            client_error: None,
            child_error: None,
            started,
        };
    };
    let ClientConn {
        reader,
        writer,
        buf,
        deframer,
        st,
    } = client;
    // Written by the response pump, read after it (which may have been
    // dropped by a timer). Atomics only because a task must be Send.
    let sent = AtomicU8::new(SENT_NOTHING);
    let client_gone = AtomicBool::new(false);

    let up = async {
        let mut extra = 0usize;
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
                let e = ClientError::Unexpected {
                    kind: "more than 64 KiB of records".into(),
                    id,
                    state: "request in flight",
                };
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

    let down = async {
        loop {
            let scan = scan_response(child_buf, id);
            if scan.forwardable > 0 {
                if !client_gone.load(Ordering::Relaxed) {
                    if writer
                        .write_all(&child_buf[..scan.forwardable])
                        .await
                        .is_err()
                    {
                        client_gone.store(true, Ordering::Relaxed);
                    } else {
                        sent.store(
                            if scan.ended.is_some() {
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
        let slow_at = pool.config.request_slowlog_timeout.map(|d| now + d);
        let slow_timer = super::sleep_until_opt(slow_at);
        tokio::pin!(slow_timer);
        let mut slow_logged = false;
        let term_at = pool.config.request_terminate_timeout.map(|d| now + d);
        let term_timer = super::sleep_until_opt(term_at);
        tokio::pin!(term_timer);
        let (child, why) = loop {
            tokio::select! {
                // The child's answer first: after fpmd was stopped (SIGSTOP)
                // a response that arrived meanwhile wins over the timers.
                biased;
                d = &mut down => break d,
                u = &mut up, if up_end.is_none() => up_end = Some(u),
                _ = &mut term_timer, if term_at.is_some() => break (ChildEnd::TimedOut, None),
                _ = &mut slow_timer, if slow_at.is_some() && !slow_logged => {
                    slow_logged = true;
                    if learned.is_none() {
                        if let Some((fd, parent)) = probe {
                            learned = crate::peer::child_on_connection(fd, parent);
                        }
                    }
                    if let Some(info) = &slow {
                        super::write_slowlog(pool, learned.unwrap_or(known_pid), info, started.elapsed());
                    }
                }
                _ = &mut probe_timer, if probe.is_some() && learned.is_none() => {
                    if let Some((fd, parent)) = probe {
                        learned = crate::peer::child_on_connection(fd, parent);
                    }
                    probe_delay = (probe_delay * 2).min(Duration::from_millis(200));
                    probe_timer.as_mut().reset(tokio::time::Instant::now() + probe_delay);
                }
            }
        };
        (child, why, up_end)
    };
    if let Some(pid) = learned {
        worker.set_pid(pid);
    }
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
    }
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
