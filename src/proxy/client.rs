//! The web server's side of one connection: its reader, writer and
//! buffers, and the reading of one request up to the moment it can be
//! handed to a child.
//!
//! Every record is validated here (type, request id, lengths, pairs whole)
//! and taken apart with the [`Deframer`]; what the child will get is built
//! by [`Request`]. Requests that cannot run are answered here (php-fpm's
//! 404 for a missing script, 400 for a body shorter than its
//! `CONTENT_LENGTH`, 431 for oversized PARAMS), and management records
//! (request id 0) are answered by fpmd. Must not touch: children.

use std::io;
use std::pin::Pin;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::local::Local;
use super::request::{Edit, Request};
use super::{script, Charge, Ctx};
use crate::fastcgi::{
    self, BeginRequest, Deframer, EndRequest, Piece, ProtocolStatus, RecordType, NULL_REQUEST_ID,
};
use crate::log::field;

/// Largest PARAMS stream stored for one request, in bytes. nginx sends a
/// few KiB (its own header limit is 32 KiB); a single pair over 64 KiB
/// cannot reach php-cgi anyway.
pub const MAX_PARAMS: usize = 128 * 1024;
/// PARAMS past [`MAX_PARAMS`] are read and dropped (the request is
/// answered 431) up to this many bytes; beyond, the connection is closed.
pub const MAX_PARAMS_DROPPED: usize = 1024 * 1024;
/// A request goes to a child once its PARAMS are complete and either the
/// child has all of its STDIN or this many body bytes are buffered; the
/// rest streams. A slow upload then holds no child while it starts.
pub const DISPATCH_BUFFER: usize = 256 * 1024;
/// Time allowed between a BEGIN_REQUEST and the end of its PARAMS.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// A new connection that brings no BEGIN_REQUEST within this is closed
/// (web servers send their request as soon as they connect).
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A kept connection idle this long between requests, or a body that
/// stalls this long before dispatch, is closed: longer than nginx's
/// (60 s) and Apache's upstream keep-alive, which close first.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// At a graceful stop, how long an idle connection stays open for a
/// request the web server may send on it: a kept (`FCGI_KEEP_CONN`)
/// connection nginx may take from its cache at any moment, or a new
/// connection whose first request is still on its way. A request that
/// arrives is served, and the wait starts again after it. Closing a kept
/// connection at the stop, or right after a response (when nginx is most
/// likely to reuse it: its cache is last in, first out), loses the request
/// nginx sends on it meanwhile (nginx retries a GET on another server, a
/// POST fails with 502); one idle this long is one nginx is not using.
pub const DRAIN_LINGER: Duration = Duration::from_secs(1);
/// At a graceful stop, how long connections may carry requests at all:
/// after this, each is closed as soon as it is idle (the web server may
/// never stop using a kept connection that keeps answering).
pub const DRAIN_MAX: Duration = Duration::from_secs(5);
/// Management replies owed to the web server, in bytes, before fpmd judges
/// it broken (a web server that floods GET_VALUES and never reads).
const MAX_REPLIES: usize = 64 * 1024;

/// Why fpmd closed a web server's connection.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid FastCGI record: {0}")]
    Protocol(#[from] fastcgi::ProtocolError),
    #[error("unknown record type {kind} for request id {id}")]
    UnknownType { kind: u8, id: u16 },
    #[error(
        "more than 64 KiB of records while request id {id} was in flight (after its STDIN ended)"
    )]
    TooMuchInFlight { id: u16 },
    #[error("unexpected {kind} record for request id {id} (state: {state})")]
    Unexpected {
        kind: String,
        id: u16,
        state: &'static str,
    },
    #[error("second BEGIN_REQUEST (request id {new}) while request id {busy} is in flight; FCGI_MPXS_CONNS is 0")]
    SecondBegin { new: u16, busy: u16 },
    #[error("PARAMS of request id {id} exceed {MAX_PARAMS_DROPPED} bytes")]
    ParamsTooLarge { id: u16 },
    #[error("request id {id}: PARAMS not complete after {} s", HEAD_TIMEOUT.as_secs())]
    HeadTimeout { id: u16 },
    #[error("request id {id}: no byte of its body for {} s", IDLE_TIMEOUT.as_secs())]
    BodyTimeout { id: u16 },
    #[error("request id {id}: the buffer budget for unfinished requests is used up ({0} MiB in all)", super::BUDGET >> 20)]
    Budget { id: u16 },
    #[error("more than {MAX_REPLIES} bytes of management replies unread")]
    TooManyReplies,
    #[error("connection closed in the middle of request id {id} ({state})")]
    ClosedMidRequest { id: u16, state: &'static str },
    /// The web server closed its connection in the middle of a body, before
    /// a child took the request (its client aborted an upload): the script
    /// does not run. `got` of `owed` bytes; `uri` its `REQUEST_URI`.
    #[error("the web server closed the connection after {got} of {owed} bytes of request id {id}'s body; the script does not run uri={uri}")]
    ClosedMidBody {
        id: u16,
        got: u64,
        owed: super::request::Owed,
        uri: String,
    },
    #[error("connection closed in the middle of a record ({0} bytes buffered)")]
    ClosedMidRecord(usize),
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// What [`ClientConn::read_request`] found.
#[derive(Debug)]
pub enum Next {
    /// A request ready for a child.
    Request(Request),
    /// A request fpmd answered itself while reading it (`answer`), returned
    /// only to a pool that writes an access log (its line); the caller
    /// recycles it, and closes the connection unless it is `keep_conn`
    /// (after the rest of the request, as [`super::drain_and_close`]).
    /// Without an access log, `read_request` closes such a connection
    /// itself the same way and says `Closed`.
    Answered(Request, Local),
    /// The connection closed (or fpmd is stopping, or it was idle too
    /// long) between requests.
    Closed,
}

/// One web server connection.
pub struct ClientConn<R, W> {
    pub reader: R,
    pub writer: W,
    /// Bytes read from the web server and not yet consumed.
    pub buf: BytesMut,
    pub deframer: Deframer,
    pub st: Session,
    /// The read timeout's timer, kept for the connection's life: it is
    /// moved earlier when a deadline comes closer, and when it fires before
    /// the current deadline (which only ever moved later) it is set again,
    /// so that an ordinary request touches the timer wheel not at all.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// What a connection keeps between records, apart from its socket and
/// read buffer (so that a piece borrowed from the buffer can be handled
/// with the rest mutable).
pub struct Session {
    /// Management replies (GET_VALUES_RESULT, UNKNOWN_TYPE, END_REQUEST of a
    /// rejected request) owed to the web server, written at the next safe
    /// point (never in the middle of a child's response).
    pub replies: Vec<u8>,
    /// A request answered before its STDIN ended: its remaining PARAMS,
    /// STDIN and DATA records are dropped until its empty STDIN record.
    pub skip: Option<u16>,
    /// Requests begun on this connection.
    pub requests: u64,
    /// Since when a graceful stop is seen.
    drain: Option<tokio::time::Instant>,
    /// This connection's share of the buffer budget.
    pub charge: Charge,
    spare_head: Vec<u8>,
    spare_params: Vec<u8>,
}

impl Session {
    /// An idle connection during a graceful stop, idle since `now` (the
    /// same instant for the whole wait): until
    /// when to wait for a request ([`DRAIN_LINGER`] from now), or `None`
    /// to close it now ([`DRAIN_MAX`] after the stop was first seen).
    fn drain_step(&mut self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let since = *self.drain.get_or_insert(now);
        (now < since + DRAIN_MAX).then_some(now + DRAIN_LINGER)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Params,
    Stdin,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Idle => "waiting for BEGIN_REQUEST",
            State::Params => "reading PARAMS",
            State::Stdin => "reading STDIN",
        }
    }
}

/// What one piece did to the request being read.
enum Step {
    Continue,
    /// The request is ready for a child.
    Ready,
    /// The same, but the piece stays in the buffer: the child takes it as
    /// the body streams (the budget allows no more buffering).
    ReadyLeave,
    /// The request was answered by fpmd (the answer is in `replies`):
    /// with this, or by a bare END_REQUEST (`None`: it was aborted).
    Answered(Option<Local>),
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> ClientConn<R, W> {
    pub fn new(reader: R, writer: W, charge: Charge) -> Self {
        ClientConn {
            reader,
            writer,
            buf: BytesMut::with_capacity(4 * 1024),
            deframer: Deframer::new(),
            st: Session {
                replies: Vec::new(),
                skip: None,
                requests: 0,
                drain: None,
                charge,
                spare_head: Vec::new(),
                spare_params: Vec::new(),
            },
            timer: None,
        }
    }

    /// Takes back a finished request's buffer for the next one, and its
    /// share of the budget.
    pub fn recycle(&mut self, req: Request) {
        let mut head = req.into_buffer();
        if head.capacity() > 64 * 1024 {
            head = Vec::new();
        }
        self.st.spare_head = head;
        self.st.charge.release();
    }

    /// Writes owed management replies.
    pub async fn flush_replies(&mut self) -> io::Result<()> {
        if !self.st.replies.is_empty() {
            self.writer.write_all(&self.st.replies).await?;
            self.st.replies.clear();
        }
        Ok(())
    }

    /// Writes one answer of fpmd's own to request `id`.
    pub async fn answer(&mut self, id: u16, local: Local) -> io::Result<()> {
        local.encode(&mut self.st.replies, id);
        self.flush_replies().await
    }

    /// Writes a page of fpmd's own (status, ping) to request `id`; see
    /// [`super::local::encode_response`].
    pub async fn answer_page(
        &mut self,
        id: u16,
        headers: &[&str],
        body: &[u8],
        head_only: bool,
    ) -> io::Result<()> {
        super::local::encode_response(&mut self.st.replies, id, "200 OK", headers, body, head_only);
        self.flush_replies().await
    }

    /// Reads records until a request is ready for a child, answering what
    /// fpmd answers itself on the way.
    pub async fn read_request(
        &mut self,
        ctx: &Ctx<'_>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Next, ClientError> {
        let mut raw = std::mem::take(&mut self.st.spare_params);
        raw.clear();
        let mut rd = Reading {
            state: State::Idle,
            req: None,
            raw,
            dropped: 0,
            head_deadline: None,
        };
        // Since when the connection waits idle during a stop.
        let mut idle_since = None;
        loop {
            if let Some(next) = self.take_buffered(ctx, &mut rd).await? {
                return Ok(next);
            }
            self.flush_replies().await?;
            let idle =
                rd.state == State::Idle && self.buf.is_empty() && self.deframer.at_boundary();
            let mut drain_until = None;
            if !idle {
                idle_since = None;
            } else if *shutdown.borrow() {
                let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
                match self.st.drain_step(since) {
                    None => return Ok(Next::Closed),
                    Some(until) => drain_until = Some(until),
                }
            }
            if let Some(next) = self.wait(ctx, shutdown, &rd, idle, drain_until).await? {
                return Ok(next);
            }
        }
    }

    /// Takes every piece whole in the buffer into the request being read;
    /// `Some` when the request is ready, or answered by fpmd, or the
    /// connection is to close.
    async fn take_buffered(
        &mut self,
        ctx: &Ctx<'_>,
        rd: &mut Reading,
    ) -> Result<Option<Next>, ClientError> {
        loop {
            let before = self.deframer;
            let (piece, used) = self.deframer.next(&self.buf)?;
            let Some(piece) = piece else {
                self.buf.advance(used);
                return Ok(None);
            };
            let step = self.st.handle(ctx, piece, rd)?;
            if matches!(step, Step::ReadyLeave) {
                // The exchange reads this piece again.
                self.deframer = before;
            } else {
                self.buf.advance(used);
            }
            match step {
                Step::Continue => {}
                Step::Ready | Step::ReadyLeave => {
                    self.flush_replies().await?;
                    let mut raw = std::mem::take(&mut rd.raw);
                    raw.clear();
                    if raw.capacity() > 16 * 1024 {
                        raw = Vec::new();
                    }
                    self.st.spare_params = raw;
                    let req = rd.req.take().expect("a ready request exists");
                    return Ok(Some(Next::Request(req)));
                }
                Step::Answered(answer) => {
                    self.flush_replies().await?;
                    if let Some(next) = self.answered(ctx, rd, answer).await {
                        return Ok(Some(next));
                    }
                }
            }
            if rd.state == State::Params && rd.head_deadline.is_none() {
                rd.head_deadline = Some(tokio::time::Instant::now() + HEAD_TIMEOUT);
            }
        }
    }

    /// After fpmd answered the request being read (`answer`, or `None`
    /// for a bare END_REQUEST): returns it for its access log line (with
    /// `ctx.access_log`), or recycles it and, unless it is `keep_conn`,
    /// closes the connection (after the rest of the request, as
    /// [`super::drain_and_close`]). `None`: read the next request.
    async fn answered(
        &mut self,
        ctx: &Ctx<'_>,
        rd: &mut Reading,
        answer: Option<Local>,
    ) -> Option<Next> {
        let r = rd.req.take().expect("an answered request exists");
        let keep = r.keep_conn;
        if !r.client_stdin_done {
            self.st.skip = Some(r.id);
        }
        if let Some(answer) = answer.filter(|_| ctx.access_log) {
            rd.raw.clear();
            self.st.spare_params = std::mem::take(&mut rd.raw);
            return Some(Next::Answered(r, answer));
        }
        let unread = !r.client_stdin_done;
        self.recycle(r);
        rd.raw.clear();
        rd.dropped = 0;
        rd.head_deadline = None;
        rd.state = State::Idle;
        if !keep {
            if unread {
                super::drain_and_close(self).await;
            }
            return Some(Next::Closed);
        }
        None
    }

    /// Waits for more bytes from the web server, until the deadline of
    /// the request's state (or, when `idle` during a stop, `drain_until`)
    /// or, `idle`, a stop. `Some`: the connection closed or timed out;
    /// `None`: read the buffer again.
    async fn wait(
        &mut self,
        ctx: &Ctx<'_>,
        shutdown: &mut watch::Receiver<bool>,
        rd: &Reading,
        idle: bool,
        drain_until: Option<tokio::time::Instant>,
    ) -> Result<Option<Next>, ClientError> {
        let deadline = match rd.state {
            State::Idle if drain_until.is_some() => drain_until.unwrap(),
            State::Idle if self.st.requests == 0 => {
                tokio::time::Instant::now() + FIRST_REQUEST_TIMEOUT
            }
            State::Idle | State::Stdin => tokio::time::Instant::now() + IDLE_TIMEOUT,
            State::Params => rd
                .head_deadline
                .unwrap_or_else(|| tokio::time::Instant::now() + HEAD_TIMEOUT),
        };
        if self.buf.capacity() - self.buf.len() < 1024 {
            self.buf.reserve(4 * 1024);
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if deadline < timer.deadline() {
            timer.as_mut().reset(deadline);
        }
        tokio::select! {
            n = self.reader.read_buf(&mut self.buf) => {
                if n? == 0 {
                    let id = rd.req.as_ref().map_or(0, |r| r.id);
                    return match rd.state {
                        State::Idle if self.buf.is_empty() && self.deframer.at_boundary() => Ok(Some(Next::Closed)),
                        State::Idle => Err(ClientError::ClosedMidRecord(self.buf.len())),
                        State::Stdin => {
                            let r = rd.req.as_ref().expect("a request in its body");
                            Err(ClientError::ClosedMidBody {
                                id,
                                got: r.body,
                                owed: r.owed,
                                uri: field(r.param(b"REQUEST_URI").unwrap_or_default()).to_string(),
                            })
                        }
                        s => Err(ClientError::ClosedMidRequest { id, state: s.name() }),
                    };
                }
                Ok(None)
            }
            // The stop is handled at the top of the loop.
            r = shutdown.changed(), if idle && drain_until.is_none() => Ok(r.is_err().then_some(Next::Closed)),
            _ = timer.as_mut() => {
                if tokio::time::Instant::now() < deadline {
                    // Set for an earlier deadline since moved on.
                    timer.as_mut().reset(deadline);
                    return Ok(None);
                }
                let id = rd.req.as_ref().map_or(0, |r| r.id);
                match rd.state {
                    State::Idle if drain_until.is_some() => {
                        debug!(pool = %ctx.pool, peer = %ctx.peer, "stopping: closing a connection that brought no request for {} ms", DRAIN_LINGER.as_millis());
                        Ok(Some(Next::Closed))
                    }
                    State::Idle => {
                        debug!(pool = %ctx.pool, peer = %ctx.peer, "closing a connection idle for {} s", if self.st.requests == 0 { FIRST_REQUEST_TIMEOUT.as_secs() } else { IDLE_TIMEOUT.as_secs() });
                        Ok(Some(Next::Closed))
                    }
                    State::Params => Err(ClientError::HeadTimeout { id }),
                    State::Stdin => Err(ClientError::BodyTimeout { id }),
                }
            }
        }
    }
}

/// The request being read, between the pieces of its records.
struct Reading {
    state: State,
    req: Option<Request>,
    /// Its PARAMS stream as received (at most [`MAX_PARAMS`]).
    raw: Vec<u8>,
    /// PARAMS bytes dropped past MAX_PARAMS (the request gets a 431).
    dropped: usize,
    /// When its PARAMS must be complete ([`HEAD_TIMEOUT`] after they
    /// began).
    head_deadline: Option<tokio::time::Instant>,
}

impl Session {
    /// Takes one piece for the request being read (`rd`): a management
    /// record is answered, the rest of an answered request dropped, and
    /// the others go to the step for the request's state. Errors: the
    /// piece breaks the protocol, or a limit.
    fn handle(
        &mut self,
        ctx: &Ctx<'_>,
        piece: Piece<'_>,
        rd: &mut Reading,
    ) -> Result<Step, ClientError> {
        let (id, kind) = match piece {
            Piece::Record(r) => (r.header.request_id, r.header.record_type()),
            Piece::Data {
                kind, request_id, ..
            }
            | Piece::End { kind, request_id } => (request_id, Some(kind)),
        };
        if let Some(step) = self.aside(id, kind, piece) {
            return step;
        }
        let busy = rd.req.as_ref().map(|r| r.id);
        match (rd.state, piece) {
            (State::Idle, Piece::Record(r)) if kind == Some(RecordType::BeginRequest) => {
                self.begin(ctx, id, r.content, rd)
            }
            (
                State::Params,
                Piece::Data {
                    kind: RecordType::Params,
                    data,
                    ..
                },
            ) if busy == Some(id) => self.params(id, data, rd),
            (
                State::Params,
                Piece::End {
                    kind: RecordType::Params,
                    ..
                },
            ) if busy == Some(id) => self.params_end(ctx, id, rd),
            (
                State::Stdin,
                Piece::Data {
                    kind: RecordType::Stdin,
                    data,
                    ..
                },
            ) if busy == Some(id) => Ok(self.stdin(data, rd)),
            (
                State::Stdin,
                Piece::End {
                    kind: RecordType::Stdin,
                    ..
                },
            ) if busy == Some(id) => Ok(self.stdin_end(rd)),
            (State::Params | State::Stdin, Piece::Record(_))
                if kind == Some(RecordType::AbortRequest) && busy == Some(id) =>
            {
                // Not handed to a child yet: nothing ran, just end it.
                debug!(pool = %ctx.pool, peer = %ctx.peer, "request id {id} aborted by the web server before dispatch");
                fastcgi::encode_end_request(&mut self.replies, id, EndRequest::COMPLETE);
                Ok(Step::Answered(None))
            }
            (State::Params | State::Stdin, Piece::Record(_))
                if kind == Some(RecordType::BeginRequest) =>
            {
                Err(ClientError::SecondBegin {
                    new: id,
                    busy: busy.unwrap_or(0),
                })
            }
            (_, Piece::Record(r)) if kind.is_none() => Err(ClientError::UnknownType {
                kind: r.header.kind,
                id,
            }),
            (s, _) => Err(ClientError::Unexpected {
                kind: fastcgi::type_name(kind.map_or(0, |k| k as u8)),
                id,
                state: s.name(),
            }),
        }
    }

    /// A piece outside the request being read: a management record,
    /// answered (FCGI spec 4), or the rest of a request fpmd already
    /// answered, dropped up to its empty STDIN record. `None`: neither.
    fn aside(
        &mut self,
        id: u16,
        kind: Option<RecordType>,
        piece: Piece<'_>,
    ) -> Option<Result<Step, ClientError>> {
        // Management records (FCGI spec 4).
        if id == NULL_REQUEST_ID {
            return Some(match piece {
                Piece::Record(r) if kind != Some(RecordType::BeginRequest) => {
                    management(&mut self.replies, r).map(|()| Step::Continue)
                }
                _ => Err(ClientError::Unexpected {
                    kind: fastcgi::type_name(kind.map_or(0, |k| k as u8)),
                    id,
                    state: "request id 0 is reserved",
                }),
            });
        }
        // The rest of a request already answered.
        if self.skip == Some(id)
            && matches!(
                kind,
                Some(
                    RecordType::Params
                        | RecordType::Stdin
                        | RecordType::Data
                        | RecordType::AbortRequest
                )
            )
        {
            if matches!(
                piece,
                Piece::End {
                    kind: RecordType::Stdin,
                    ..
                }
            ) {
                self.skip = None;
            }
            return Some(Ok(Step::Continue));
        }
        None
    }

    /// BEGIN_REQUEST `id` (its record's `content`) on an idle connection:
    /// a RESPONDER request starts; another role is rejected (FCGI spec
    /// 5.5), the connection kept.
    fn begin(
        &mut self,
        ctx: &Ctx<'_>,
        id: u16,
        content: &[u8],
        rd: &mut Reading,
    ) -> Result<Step, ClientError> {
        let begin = BeginRequest::decode(content)?;
        self.skip = None;
        if begin.role != fastcgi::ROLE_RESPONDER {
            // FCGI spec 5.5: reject the role, keep the connection.
            info!(pool = %ctx.pool, peer = %ctx.peer, "rejecting request id {id}: role {} is not RESPONDER (FCGI_UNKNOWN_ROLE)", begin.role);
            let end = EndRequest {
                app_status: 0,
                protocol_status: ProtocolStatus::UnknownRole as u8,
            };
            fastcgi::encode_end_request(&mut self.replies, id, end);
            self.skip = Some(id);
            return Ok(Step::Continue);
        }
        self.requests += 1;
        let mut r = Request::begin(id, begin.keep_conn(), std::mem::take(&mut self.spare_head));
        if ctx.access_log {
            r.began = Some(std::time::Instant::now());
        }
        rd.req = Some(r);
        rd.state = State::Params;
        Ok(Step::Continue)
    }

    /// A PARAMS record's `data`: kept up to [`MAX_PARAMS`] within the
    /// buffer budget, dropped past it up to [`MAX_PARAMS_DROPPED`].
    /// Errors: beyond that, or the budget is used up.
    fn params(&mut self, id: u16, data: &[u8], rd: &mut Reading) -> Result<Step, ClientError> {
        if rd.dropped > 0 || rd.raw.len() + data.len() > MAX_PARAMS {
            rd.dropped += data.len();
            if rd.dropped > MAX_PARAMS_DROPPED {
                return Err(ClientError::ParamsTooLarge { id });
            }
            return Ok(Step::Continue);
        }
        let head = rd.req.as_ref().map_or(0, |r| r.head.len());
        if !self.charge.cover(rd.raw.len() + data.len() + head) {
            return Err(ClientError::Budget { id });
        }
        rd.raw.extend_from_slice(data);
        Ok(Step::Continue)
    }

    /// The PARAMS are complete: answered 431 if some were dropped; else
    /// the child's PARAMS are built and, unless it is fpmd's status page or
    /// ping, the script is looked for as php-fpm would (`script::plan`),
    /// which may answer the request itself. Errors: the PARAMS are not
    /// valid name-value pairs.
    fn params_end(
        &mut self,
        ctx: &Ctx<'_>,
        id: u16,
        rd: &mut Reading,
    ) -> Result<Step, ClientError> {
        let r = rd.req.as_mut().expect("busy");
        let raw = &rd.raw;
        if rd.dropped > 0 {
            warn!(pool = %ctx.pool, peer = %ctx.peer, "request id {id}: {} bytes of PARAMS, over the limit of {MAX_PARAMS}: answering 431", raw.len() + rd.dropped);
            r.client_stdin_done = false;
            Local::HeadTooLarge.encode(&mut self.replies, id);
            return Ok(Step::Answered(Some(Local::HeadTooLarge)));
        }
        // One pass for the common case: the PARAMS are copied while
        // the variables that find the script are read; the rare
        // request that php-fpm would rewrite is copied again.
        let mut seen = script::Seen::new();
        // fpmd's SAPI token replaces any pair of its name the web server
        // sent (a client cannot forge the lines of `sapi.php`); its last
        // byte says what to report.
        r.sapi_token = if ctx.script.sapi {
            crate::proxy::sapi::new_token()
        } else {
            None
        };
        let token_edit: Vec<Edit> = r
            .sapi_token
            .iter()
            .map(|t| Edit {
                name: crate::process::sapi::TOKEN_PARAM.to_vec(),
                value: Some([&t[..], &[ctx.report.byte()]].concat()),
            })
            .collect();
        let mut lost = r.set_params(raw, &token_edit, |n, v| seen.note(n, v))?;
        if super::local_page(&ctx.script.local, r).is_some() {
            // The status page or ping: fpmd answers, no script runs.
            rd.state = State::Stdin;
            return Ok(if r.child_stdin_ended {
                Step::Ready
            } else {
                Step::Continue
            });
        }
        script::log_ini_params(ctx.pool, &seen);
        let plan = script::plan(&seen, ctx.script);
        r.script_found = plan.script_found;
        if !plan.edits.is_empty() {
            let mut edits = plan.edits;
            edits.extend(token_edit);
            lost = r.set_params(raw, &edits, |_, _| {})?;
        }
        for (name, len) in lost {
            warn!(pool = %ctx.pool, peer = %ctx.peer, "request id {id}: dropped the CGI variable {} ({len} bytes): no FastCGI record can carry it to php-cgi", field(&name));
        }
        if plan.dropped_redirect_url {
            debug!(pool = %ctx.pool, peer = %ctx.peer, "request id {id}: REDIRECT_URL not passed on: php-cgi would drop PATH_INFO for it, php-fpm keeps both");
        }
        if let Some(answer) = plan.answer {
            return Ok(self.refuse(ctx, id, r, answer, plan.denied));
        }
        rd.state = State::Stdin;
        Ok(if r.child_stdin_ended {
            Step::Ready
        } else {
            Step::Continue
        })
    }

    /// Answers request `r` with fpmd's `answer` instead of running its
    /// script (php-fpm's 404 for a script it cannot find, 403 for one it
    /// refuses, `denied` saying why), and logs it as php-fpm does.
    fn refuse(
        &mut self,
        ctx: &Ctx<'_>,
        id: u16,
        r: &Request,
        answer: Local,
        denied: Option<(script::Denied, &[u8])>,
    ) -> Step {
        let (script, uri) = (
            field(r.param(b"SCRIPT_FILENAME").unwrap_or_default()),
            field(r.param(b"REQUEST_URI").unwrap_or_default()),
        );
        match (answer, denied) {
            // php-fpm logs this at debug level too (fpm_main.c).
            (Local::ScriptUnknown, _) => {
                debug!(pool = %ctx.pool, peer = %ctx.peer, script = %script, uri = %uri, "Primary script unknown")
            }
            (_, Some((why, path))) => {
                let uri = r.param(b"REQUEST_URI").unwrap_or_default();
                script::log_denied(ctx.pool, ctx.peer, uri, why, path);
                script::encode_denied(&mut self.replies, id, why, path);
                return Step::Answered(Some(answer));
            }
            _ => {
                warn!(pool = %ctx.pool, peer = %ctx.peer, script = %script, uri = %uri, "refusing the request: {}", answer.status())
            }
        }
        answer.encode(&mut self.replies, id);
        Step::Answered(Some(answer))
    }

    /// A STDIN record's `data` before dispatch: buffered while the budget
    /// allows; the request is ready once the child would have all of its
    /// body or [`DISPATCH_BUFFER`] bytes are buffered.
    fn stdin(&mut self, data: &[u8], rd: &mut Reading) -> Step {
        let r = rd.req.as_mut().expect("busy");
        if !r.child_stdin_ended && !self.charge.cover(r.head.len() + data.len()) {
            // No room to buffer more: the child takes the rest as
            // it streams (this piece stays in the buffer for it).
            return Step::ReadyLeave;
        }
        r.buffer_body(data);
        if r.child_stdin_ended || r.buffered_body() >= DISPATCH_BUFFER {
            Step::Ready
        } else {
            Step::Continue
        }
    }

    /// The web server's STDIN ended before dispatch: the request is
    /// ready. A body shorter than its `CONTENT_LENGTH` runs with what came
    /// and its child's input half-closed (see the exchange's
    /// `Upstream::pump`), as when it ends short after dispatch and as
    /// php-fpm runs it (php-src's log-suppress-output-request-body).
    fn stdin_end(&mut self, rd: &mut Reading) -> Step {
        rd.req.as_mut().expect("busy").end_client_stdin();
        Step::Ready
    }
}

/// Answers a management record (request id 0) into `replies`: GET_VALUES
/// (FCGI spec 4.1) with `FCGI_MPXS_CONNS` = 0; any other type with
/// UNKNOWN_TYPE (FCGI spec 4.2). Errors: too many replies unread.
pub fn management(replies: &mut Vec<u8>, rec: fastcgi::Record<'_>) -> Result<(), ClientError> {
    if replies.len() > MAX_REPLIES {
        return Err(ClientError::TooManyReplies);
    }
    match rec.header.record_type() {
        Some(RecordType::GetValues) => {
            let body = fastcgi::get_values_result(rec.content, |name| match name {
                b"FCGI_MPXS_CONNS" => Some("0".into()),
                b"FCGI_MAX_CONNS" | b"FCGI_MAX_REQS" => Some(super::max_connections().to_string()),
                _ => None,
            });
            // get_values_result never exceeds one record.
            fastcgi::encode_record(replies, RecordType::GetValuesResult, 0, &body)?;
        }
        _ => {
            let mut body = [0u8; 8];
            body[0] = rec.header.kind;
            fastcgi::encode_record(replies, RecordType::UnknownType, 0, &body)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(requests: u64) -> Session {
        Session {
            replies: Vec::new(),
            skip: None,
            requests,
            drain: None,
            charge: Charge::new(),
            spare_head: Vec::new(),
            spare_params: Vec::new(),
        }
    }

    /// At a graceful stop an idle connection waits DRAIN_LINGER for a
    /// request, again after each request, until DRAIN_MAX after the stop.
    #[test]
    fn drain_steps() {
        let t0 = tokio::time::Instant::now();
        let mut s = session(3);
        assert_eq!(s.drain_step(t0), Some(t0 + DRAIN_LINGER));
        let later = t0 + Duration::from_millis(300);
        assert_eq!(s.drain_step(later), Some(later + DRAIN_LINGER));
        assert_eq!(s.drain_step(t0 + DRAIN_MAX), None);
    }
}
