//! The FastCGI path: one task per web-server connection reads each request,
//! borrows an idle child of the pool, forwards the request over the child's
//! persistent keep-conn connection and the response back, record by record,
//! without re-encoding bodies.
//!
//! Owns: the web server's connections and the request/response exchange.
//! Must not touch: processes (it asks [`Pool`] for a child and gives it back;
//! the supervisor spawns, retires and kills).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::fastcgi::{self, BeginRequest, EndRequest, ProtocolStatus, RecordType, HEADER_LEN};
use crate::supervisor::{Acquired, ChildConn, Pool, Worker};

/// Largest PARAMS stream accepted for one request, in bytes. nginx sends a
/// few KiB; a client that sends more is broken or hostile.
pub const MAX_PARAMS: usize = 1024 * 1024;
/// A request is dispatched once its PARAMS are complete and either its
/// STDIN has ended or this many bytes of it are buffered; the rest streams.
const DISPATCH_BUFFER: usize = 256 * 1024;
/// Time allowed between a BEGIN_REQUEST and the end of its PARAMS.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes a client may send while its request is in flight (beyond STDIN)
/// before the connection is judged broken (with `FCGI_MPXS_CONNS` = 0 a
/// web server sends nothing then).
const MAX_IN_FLIGHT_EXTRA: usize = 64 * 1024;
/// Attempts, on top of one per child, to hand a request to a child whose
/// connection turns out to be dead before the request was written.
const DISPATCH_ATTEMPTS: usize = 2;

/// Why a web-server connection was closed by fpmd.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid FastCGI record: {0}")]
    Protocol(#[from] fastcgi::ProtocolError),
    #[error("unknown record type {kind} for request id {id}")]
    UnknownType { kind: u8, id: u16 },
    #[error("unexpected {kind} record for request id {id} (state: {state})")]
    Unexpected {
        kind: String,
        id: u16,
        state: &'static str,
    },
    #[error("second BEGIN_REQUEST (request id {new}) while request id {busy} is in flight; FCGI_MPXS_CONNS is 0")]
    SecondBegin { new: u16, busy: u16 },
    #[error("PARAMS of request id {id} exceed {MAX_PARAMS} bytes")]
    ParamsTooLarge { id: u16 },
    #[error("request id {id}: PARAMS not complete after {} s", HEAD_TIMEOUT.as_secs())]
    HeadTimeout { id: u16 },
    #[error("connection closed in the middle of request id {id} ({state})")]
    ClosedMidRequest { id: u16, state: &'static str },
    #[error("connection closed in the middle of a record ({0} bytes buffered)")]
    ClosedMidRecord(usize),
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// A request whose head (BEGIN_REQUEST and PARAMS) has arrived.
struct Request {
    id: u16,
    keep_conn: bool,
    /// STDIN's empty record was already received (and is in `head`).
    stdin_done: bool,
    /// BEGIN_REQUEST (with `FCGI_KEEP_CONN` set), PARAMS and STDIN records
    /// as received, ready to be written to the child.
    head: Vec<u8>,
    /// Content of the PARAMS stream (for logs).
    params: Vec<u8>,
}

impl Request {
    fn param(&self, name: &str) -> String {
        fastcgi::find_param(&self.params, name.as_bytes())
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    }
}

/// Serves one web-server connection until it closes, fpmd stops, or it
/// breaks the protocol. Errors are logged here with the pool and the peer;
/// nothing escapes to other connections.
pub async fn serve_connection<R, W>(
    pool: Arc<Pool>,
    mut reader: R,
    mut writer: W,
    peer: String,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut conn = ClientConn {
        buf: BytesMut::with_capacity(4 * 1024),
        replies: Vec::new(),
        spare: (Vec::new(), Vec::new()),
    };
    let name = pool.config.name.clone();
    loop {
        let mut req = match conn
            .read_request(&name, &mut reader, &mut writer, &mut shutdown)
            .await
        {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(ClientError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                ) =>
            {
                // The web server gave up on the connection (its client left).
                info!(pool = %name, peer = %peer, "web server reset the connection: {e}");
                return;
            }
            Err(e) => {
                warn!(pool = %name, peer = %peer, "closing FastCGI connection: {e}");
                return;
            }
        };
        let result = conn
            .dispatch(&pool, &mut reader, &mut writer, &mut req)
            .await;
        // The request's buffers serve the next request on this connection.
        conn.spare = (
            std::mem::take(&mut req.head),
            std::mem::take(&mut req.params),
        );
        match result {
            Ok(true) => {}
            // Dropping both halves closes the connection (one close(2), no
            // separate shutdown(2)).
            Ok(false) => return,
            Err(e) => {
                warn!(pool = %name, peer = %peer, "closing FastCGI connection: {e}");
                return;
            }
        }
    }
}

struct ClientConn {
    /// Bytes read from the web server and not yet consumed.
    buf: BytesMut,
    /// Management replies (GET_VALUES_RESULT, UNKNOWN_TYPE) owed to the web
    /// server, written at the next chance.
    replies: Vec<u8>,
    /// Buffers of the previous request (head, params), reused.
    spare: (Vec<u8>, Vec<u8>),
}

enum HeadState {
    Idle,
    Params,
    Stdin,
}

impl HeadState {
    fn name(&self) -> &'static str {
        match self {
            HeadState::Idle => "waiting for BEGIN_REQUEST",
            HeadState::Params => "reading PARAMS",
            HeadState::Stdin => "reading STDIN",
        }
    }
}

impl ClientConn {
    /// Reads records until a request is ready to dispatch. `Ok(None)`: the
    /// connection closed (or fpmd is stopping) between requests.
    async fn read_request<R, W>(
        &mut self,
        pool: &str,
        reader: &mut R,
        writer: &mut W,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Option<Request>, ClientError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut state = HeadState::Idle;
        let (mut head, mut params) = std::mem::take(&mut self.spare);
        head.clear();
        params.clear();
        let mut req = Request {
            id: 0,
            keep_conn: false,
            stdin_done: false,
            head,
            params,
        };
        let mut deadline = None;
        let mut rejected: Option<u16> = None;
        loop {
            while let Some(rec) = fastcgi::decode_record(&self.buf)? {
                let len = rec.header.record_len();
                let id = rec.header.request_id;
                let kind = rec.header.record_type();
                if id == fastcgi::NULL_REQUEST_ID {
                    if kind == Some(RecordType::BeginRequest) {
                        return Err(ClientError::Unexpected {
                            kind: "BEGIN_REQUEST".into(),
                            id,
                            state: "request id 0 is reserved",
                        });
                    }
                    management(&mut self.replies, rec);
                    self.buf.advance(len);
                    continue;
                }
                if rejected == Some(id)
                    && matches!(
                        kind,
                        Some(RecordType::Params | RecordType::Stdin | RecordType::Data)
                    )
                {
                    // The rest of a request refused for its role.
                    if kind == Some(RecordType::Stdin) && rec.content.is_empty() {
                        rejected = None;
                    }
                    self.buf.advance(len);
                    continue;
                }
                match (&state, kind) {
                    (HeadState::Idle, Some(RecordType::BeginRequest)) => {
                        let begin = BeginRequest::decode(rec.content)?;
                        if begin.role != fastcgi::ROLE_RESPONDER {
                            // FCGI spec 5.5: reject the role, keep the connection.
                            let end = EndRequest {
                                app_status: 0,
                                protocol_status: ProtocolStatus::UnknownRole as u8,
                            };
                            fastcgi::encode_end_request(&mut self.replies, id, end);
                            info!(pool = %pool, "rejecting request id {id}: role {} is not RESPONDER (FCGI_UNKNOWN_ROLE)", begin.role);
                            rejected = Some(id);
                            self.buf.advance(len);
                            continue;
                        }
                        req.id = id;
                        req.keep_conn = begin.keep_conn();
                        let child_begin = BeginRequest {
                            role: begin.role,
                            flags: begin.flags | fastcgi::KEEP_CONN,
                        };
                        fastcgi::encode_record(
                            &mut req.head,
                            RecordType::BeginRequest,
                            id,
                            &child_begin.encode(),
                        );
                        state = HeadState::Params;
                        deadline = Some(tokio::time::Instant::now() + HEAD_TIMEOUT);
                    }
                    (HeadState::Params, Some(RecordType::Params)) if id == req.id => {
                        req.head.extend_from_slice(&self.buf[..len]);
                        if rec.content.is_empty() {
                            state = HeadState::Stdin;
                            deadline = None;
                        } else {
                            req.params.extend_from_slice(rec.content);
                            if req.params.len() > MAX_PARAMS {
                                return Err(ClientError::ParamsTooLarge { id });
                            }
                        }
                    }
                    (HeadState::Stdin, Some(RecordType::Stdin)) if id == req.id => {
                        req.head.extend_from_slice(&self.buf[..len]);
                        if rec.content.is_empty() {
                            req.stdin_done = true;
                        }
                    }
                    (HeadState::Params | HeadState::Stdin, Some(RecordType::BeginRequest)) => {
                        return Err(ClientError::SecondBegin {
                            new: id,
                            busy: req.id,
                        });
                    }
                    (HeadState::Params | HeadState::Stdin, Some(RecordType::AbortRequest))
                        if id == req.id =>
                    {
                        // Not dispatched yet: nothing ran, just end it.
                        debug!("request id {id} aborted by the web server before dispatch");
                        let end = EndRequest {
                            app_status: 0,
                            protocol_status: ProtocolStatus::RequestComplete as u8,
                        };
                        fastcgi::encode_end_request(&mut self.replies, id, end);
                        self.buf.advance(len);
                        self.flush_replies(writer).await?;
                        if !req.keep_conn {
                            return Ok(None);
                        }
                        state = HeadState::Idle;
                        req.id = 0;
                        req.keep_conn = false;
                        req.stdin_done = false;
                        req.head.clear();
                        req.params.clear();
                        continue;
                    }
                    (_, None) => {
                        return Err(ClientError::UnknownType {
                            kind: rec.header.kind,
                            id,
                        })
                    }
                    (s, Some(k)) => {
                        return Err(ClientError::Unexpected {
                            kind: k.to_string(),
                            id,
                            state: s.name(),
                        })
                    }
                }
                self.buf.advance(len);
                if req.stdin_done
                    || (matches!(state, HeadState::Stdin) && req.head.len() >= DISPATCH_BUFFER)
                {
                    self.flush_replies(writer).await?;
                    return Ok(Some(req));
                }
            }
            self.flush_replies(writer).await?;
            let idle = matches!(state, HeadState::Idle) && self.buf.is_empty();
            tokio::select! {
                n = reader.read_buf(&mut self.buf) => {
                    if n? == 0 {
                        return match state {
                            HeadState::Idle if self.buf.is_empty() => Ok(None),
                            HeadState::Idle => Err(ClientError::ClosedMidRecord(self.buf.len())),
                            s => Err(ClientError::ClosedMidRequest { id: req.id, state: s.name() }),
                        };
                    }
                }
                _ = shutdown.changed(), if idle => return Ok(None),
                _ = sleep_until_opt(deadline), if deadline.is_some() => return Err(ClientError::HeadTimeout { id: req.id }),
            }
            if idle && *shutdown.borrow() {
                // fpmd is stopping: requests that were not begun are not served.
                if self.buf.is_empty() {
                    return Ok(None);
                }
            }
        }
    }

    async fn flush_replies<W: AsyncWrite + Unpin>(&mut self, writer: &mut W) -> io::Result<()> {
        if !self.replies.is_empty() {
            writer.write_all(&self.replies).await?;
            self.replies.clear();
        }
        Ok(())
    }

    /// Gets a child for `req` and runs the exchange. `Ok(true)`: the
    /// connection may carry another request.
    async fn dispatch<R, W>(
        &mut self,
        pool: &Pool,
        reader: &mut R,
        writer: &mut W,
        req: &mut Request,
    ) -> Result<bool, ClientError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let attempts = DISPATCH_ATTEMPTS + pool.config.pm.max_children as usize;
        for _ in 0..attempts {
            let queue_deadline = pool
                .config
                .request_queue_timeout
                .map(|d| tokio::time::Instant::now() + d);
            let acquired = tokio::select! {
                // An idle child is taken without touching the timers.
                biased;
                a = pool.acquire() => a,
                _ = sleep_until_opt(queue_deadline), if queue_deadline.is_some() => {
                    warn!(pool = %pool.config.name, uri = %req.param("REQUEST_URI"),
                        "request waited {:.1} s for a child (request_queue_timeout): answering 503",
                        pool.config.request_queue_timeout.unwrap_or_default().as_secs_f64());
                    self.refuse(writer, req, "503 Service Unavailable", "every PHP process is busy; retry later").await?;
                    self.skip_rest_of_stdin(req);
                    return Ok(req.keep_conn && req.stdin_done);
                }
                gone = watch_eof(reader, &mut self.buf) => {
                    // Never dispatch a request whose web server already left.
                    if gone? {
                        info!(pool = %pool.config.name, uri = %req.param("REQUEST_URI"),
                            "request id {}: the web server closed the connection while the request waited for a child; not dispatched", req.id);
                    }
                    return Ok(false);
                }
            };
            let mut worker = match acquired {
                Acquired::Worker(w) => w,
                Acquired::QueueFull => {
                    warn!(pool = %pool.config.name, uri = %req.param("REQUEST_URI"),
                        "request queue full (listen.backlog = {}): answering 503", pool.config.listen.backlog);
                    self.refuse(
                        writer,
                        req,
                        "503 Service Unavailable",
                        "the server is overloaded; retry later",
                    )
                    .await?;
                    self.skip_rest_of_stdin(req);
                    return Ok(req.keep_conn && req.stdin_done);
                }
                Acquired::Closed => {
                    self.refuse(
                        writer,
                        req,
                        "503 Service Unavailable",
                        "the server is stopping",
                    )
                    .await?;
                    return Ok(false);
                }
            };
            let conn = match worker.connect().await {
                Ok(c) => c,
                Err(e) => {
                    debug!(pool = %pool.config.name, pid = worker.log_pid(), "cannot connect to child: {e}; trying another");
                    pool.discard(worker);
                    continue;
                }
            };
            // A child that died while idle has closed its end: the write
            // fails at once (EPIPE) and nothing ran, so another child may
            // take the request.
            if let Err(e) = conn.writer.write_all(&req.head).await {
                info!(pool = %pool.config.name, pid = worker.log_pid(),
                    "child closed its idle connection ({e}: it exited or was killed); giving the request to another child");
                pool.discard(worker);
                continue;
            }
            let started = Instant::now();
            let outcome = self.exchange(pool, &mut worker, reader, writer, req).await;
            let pid = worker.log_pid();
            let name = &pool.config.name;
            let terminated = matches!(outcome.child, ChildEnd::Terminated);
            let keep = match outcome.child {
                ChildEnd::Ended => {
                    if outcome.stdin_complete {
                        pool.release(worker);
                    } else {
                        warn!(pool = %name, pid, uri = %req.param("REQUEST_URI"),
                            "child answered before it had read the whole request body; not reusing its connection");
                        pool.discard(worker);
                    }
                    true
                }
                ChildEnd::Died => {
                    warn!(pool = %name, pid, script = %req.param("SCRIPT_FILENAME"), uri = %req.param("REQUEST_URI"),
                        "child closed its connection {:.3} s into the request (it exited or was killed)", started.elapsed().as_secs_f64());
                    pool.died_mid_request(&worker);
                    pool.discard(worker);
                    false
                }
                ChildEnd::Garbage(why) => {
                    warn!(pool = %name, pid, uri = %req.param("REQUEST_URI"), "child sent an invalid response: {why}");
                    pool.discard(worker);
                    false
                }
                ChildEnd::Terminated => {
                    worker.learn_pid();
                    warn!(pool = %name, pid = worker.log_pid(), script = %req.param("SCRIPT_FILENAME"), uri = %req.param("REQUEST_URI"),
                        "request ran {:.3} s, over request_terminate_timeout: terminating the child", started.elapsed().as_secs_f64());
                    pool.terminate(worker);
                    false
                }
            };
            if !keep && !outcome.sent_any && !outcome.client_gone {
                // Nothing reached the web server yet: give it a real answer.
                if terminated {
                    self.refuse(
                        writer,
                        req,
                        "504 Gateway Timeout",
                        "the script ran longer than request_terminate_timeout",
                    )
                    .await?;
                    return Ok(req.keep_conn
                        && outcome.stdin_complete
                        && outcome.client_error.is_none());
                }
                self.refuse(
                    writer,
                    req,
                    "502 Bad Gateway",
                    "the PHP process serving this request died",
                )
                .await?;
                return Ok(req.keep_conn
                    && outcome.stdin_complete
                    && outcome.client_error.is_none());
            }
            if let Some(e) = outcome.client_error {
                warn!(pool = %name, pid, "closing FastCGI connection after request id {}: {e}", req.id);
                return Ok(false);
            }
            if outcome.client_gone {
                info!(pool = %name, pid, uri = %req.param("REQUEST_URI"), "web server closed the connection before the response was complete");
                return Ok(false);
            }
            self.flush_replies(writer).await?;
            return Ok(keep && req.keep_conn && outcome.stdin_complete);
        }
        warn!(pool = %pool.config.name, "request id {}: no child could take it after {attempts} tries: answering 503", req.id);
        self.refuse(
            writer,
            req,
            "503 Service Unavailable",
            "no PHP process could take the request",
        )
        .await?;
        Ok(false)
    }

    /// After a refusal before dispatch, STDIN records still in the buffer
    /// belong to the refused request: drop them.
    fn skip_rest_of_stdin(&mut self, req: &mut Request) {
        while !req.stdin_done {
            match fastcgi::decode_record(&self.buf) {
                Ok(Some(rec))
                    if rec.header.request_id == req.id
                        && rec.header.record_type() == Some(RecordType::Stdin) =>
                {
                    req.stdin_done = rec.content.is_empty();
                    let len = rec.header.record_len();
                    self.buf.advance(len);
                }
                _ => return,
            }
        }
    }

    /// Answers `req` from fpmd itself with a short CGI response.
    async fn refuse<W: AsyncWrite + Unpin>(
        &mut self,
        writer: &mut W,
        req: &Request,
        status: &str,
        text: &str,
    ) -> io::Result<()> {
        let body = format!("Status: {status}\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n\r\n{status}: {text}\n");
        let mut out = std::mem::take(&mut self.replies);
        fastcgi::encode_stream(&mut out, RecordType::Stdout, req.id, body.as_bytes());
        fastcgi::encode_record(&mut out, RecordType::Stdout, req.id, &[]);
        fastcgi::encode_end_request(
            &mut out,
            req.id,
            EndRequest {
                app_status: 0,
                protocol_status: 0,
            },
        );
        let r = writer.write_all(&out).await;
        out.clear();
        self.replies = out;
        r
    }

    /// Pumps the rest of STDIN from the web server to the child and the
    /// response from the child to the web server, concurrently (a script may
    /// write before it reads its input), until the child's END_REQUEST.
    async fn exchange<R, W>(
        &mut self,
        pool: &Pool,
        worker: &mut Worker,
        reader: &mut R,
        writer: &mut W,
        req: &Request,
    ) -> Outcome
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        // Prefork: which child took this connection is learned while the
        // request runs, so that logs and kills name the right pid.
        let probe = worker.pid_probe();
        let known_pid = worker.log_pid();
        let mut learned = None;
        let ChildConn {
            reader: child_r,
            writer: child_w,
            buf: child_buf,
        } = worker.conn.as_mut().expect("connected");
        let id = req.id;
        let buf = &mut self.buf;
        let replies = &mut self.replies;
        // Whether the child has received the whole STDIN stream (set by the
        // upstream pump, read after the response).
        let stdin_sent = AtomicBool::new(req.stdin_done);
        let stdin_sent = &stdin_sent;
        // Whether any response bytes reached the web server (read after a
        // terminate timeout abandons the downstream pump).
        let sent = AtomicBool::new(false);
        let sent = &sent;
        let up = async move {
            let mut stdin_done = req.stdin_done;
            let mut extra = 0usize;
            let end = 'pump: loop {
                loop {
                    let rec = match fastcgi::decode_record(buf) {
                        Ok(Some(rec)) => rec,
                        Ok(None) => break,
                        Err(e) => break 'pump UpEnd::Client(e.into()),
                    };
                    let len = rec.header.record_len();
                    let rid = rec.header.request_id;
                    match rec.header.record_type() {
                        _ if rid == fastcgi::NULL_REQUEST_ID => management(replies, rec),
                        Some(RecordType::Stdin) if rid == id && !stdin_done => {
                            stdin_done = rec.content.is_empty();
                            if child_w.write_all(&buf[..len]).await.is_err() {
                                break 'pump UpEnd::ChildGone;
                            }
                            stdin_sent.store(stdin_done, Ordering::Relaxed);
                        }
                        Some(RecordType::AbortRequest) if rid == id => {
                            // php-cgi cannot be interrupted; the response still ends with END_REQUEST.
                            debug!("web server sent ABORT_REQUEST for request id {id}; the script runs to its end");
                        }
                        Some(RecordType::BeginRequest) => {
                            break 'pump UpEnd::Client(ClientError::SecondBegin {
                                new: rid,
                                busy: id,
                            })
                        }
                        None => {
                            break 'pump UpEnd::Client(ClientError::UnknownType {
                                kind: rec.header.kind,
                                id: rid,
                            })
                        }
                        Some(k) => {
                            let state = if stdin_done {
                                "request in flight"
                            } else {
                                "reading STDIN"
                            };
                            break 'pump UpEnd::Client(ClientError::Unexpected {
                                kind: k.to_string(),
                                id: rid,
                                state,
                            });
                        }
                    }
                    buf.advance(len);
                    if stdin_done {
                        extra += len;
                    }
                }
                if extra > MAX_IN_FLIGHT_EXTRA {
                    let e = ClientError::Unexpected {
                        kind: "more than 64 KiB of records".into(),
                        id,
                        state: "request in flight",
                    };
                    break 'pump UpEnd::Client(e);
                }
                match reader.read_buf(buf).await {
                    Ok(0) | Err(_) => break 'pump UpEnd::ClientGone,
                    Ok(_) => {}
                }
            };
            if !stdin_done && !matches!(end, UpEnd::ChildGone) {
                // The child still waits for the end of STDIN: give it one, so
                // that it finishes (with a short body) and stays usable.
                let mut term = Vec::with_capacity(HEADER_LEN);
                fastcgi::encode_record(&mut term, RecordType::Stdin, id, &[]);
                stdin_sent.store(child_w.write_all(&term).await.is_ok(), Ordering::Relaxed);
            }
            end
        };
        let down = async move {
            let mut client_gone = false;
            let end = loop {
                // Forward every complete record in the buffer, in one write.
                let mut end = 0;
                let mut ended = false;
                let mut bad = None;
                while !ended {
                    match fastcgi::decode_record(&child_buf[end..]) {
                        Ok(Some(rec)) => {
                            if rec.header.request_id != id {
                                bad = Some(format!(
                                    "record for request id {} instead of {id}",
                                    rec.header.request_id
                                ));
                                break;
                            }
                            match rec.header.record_type() {
                                Some(RecordType::Stdout) | Some(RecordType::Stderr) => {}
                                Some(RecordType::EndRequest) => ended = true,
                                _ => {
                                    bad =
                                        Some(format!("unexpected record type {}", rec.header.kind));
                                    break;
                                }
                            }
                            end += rec.header.record_len();
                        }
                        Ok(None) => break,
                        Err(e) => {
                            bad = Some(e.to_string());
                            break;
                        }
                    }
                }
                if end > 0 {
                    if !client_gone {
                        if writer.write_all(&child_buf[..end]).await.is_err() {
                            client_gone = true;
                        } else {
                            sent.store(true, Ordering::Relaxed);
                        }
                    }
                    child_buf.advance(end);
                }
                if let Some(why) = bad {
                    break ChildEnd::Garbage(why);
                }
                if ended {
                    if !child_buf.is_empty() {
                        break ChildEnd::Garbage(format!(
                            "{} bytes after END_REQUEST",
                            child_buf.len()
                        ));
                    }
                    break ChildEnd::Ended;
                }
                if child_buf.capacity() - child_buf.len() < HEADER_LEN {
                    child_buf.reserve(fastcgi::MAX_RECORD_LEN);
                }
                match child_r.read_buf(child_buf).await {
                    Ok(0) | Err(_) => break ChildEnd::Died,
                    Ok(_) => {}
                }
            };
            (end, client_gone)
        };
        let (child, client_gone, up_end) = {
            tokio::pin!(up);
            tokio::pin!(down);
            let mut up_end: Option<UpEnd> = None;
            let mut probe_delay = Duration::from_millis(1);
            let probe_timer = tokio::time::sleep(probe_delay);
            tokio::pin!(probe_timer);
            // request_slowlog_timeout and request_terminate_timeout.
            let now = tokio::time::Instant::now();
            let slow_at = pool.config.request_slowlog_timeout.map(|d| now + d);
            let slow_timer = sleep_until_opt(slow_at);
            tokio::pin!(slow_timer);
            let mut slow_logged = false;
            let term_at = pool.config.request_terminate_timeout.map(|d| now + d);
            let term_timer = sleep_until_opt(term_at);
            tokio::pin!(term_timer);
            let (child, client_gone) = loop {
                tokio::select! {
                    r = &mut up, if up_end.is_none() => up_end = Some(r),
                    d = &mut down => break d,
                    _ = &mut term_timer, if term_at.is_some() => {
                        break (ChildEnd::Terminated, false);
                    }
                    _ = &mut slow_timer, if slow_at.is_some() && !slow_logged => {
                        slow_logged = true;
                        if learned.is_none() {
                            if let Some((fd, parent)) = probe {
                                learned = crate::peer::child_on_connection(fd, parent);
                            }
                        }
                        write_slowlog(pool, learned.unwrap_or(known_pid), req, now.elapsed());
                    }
                    _ = &mut probe_timer, if probe.is_some() && learned.is_none() => {
                        let (fd, parent) = probe.expect("guarded");
                        learned = crate::peer::child_on_connection(fd, parent);
                        probe_delay = (probe_delay * 2).min(Duration::from_millis(200));
                        probe_timer.as_mut().reset(tokio::time::Instant::now() + probe_delay);
                    }
                }
            };
            (child, client_gone, up_end)
        };
        if let Some(pid) = learned {
            worker.set_pid(pid);
        }
        // The response is complete. While the upstream pump still runs with
        // STDIN unfinished, the child answered before reading all of it: the
        // connection may hold half a record, so it is not reused.
        let stdin_complete = stdin_sent.load(Ordering::Relaxed);
        let (client_error, gone) = match up_end {
            None | Some(UpEnd::ChildGone) => (None, false),
            Some(UpEnd::ClientGone) => (None, true),
            Some(UpEnd::Client(e)) => (Some(e), false),
        };
        let sent_any = sent.load(Ordering::Relaxed);
        Outcome {
            child,
            sent_any,
            client_gone: client_gone || gone,
            stdin_complete,
            client_error,
        }
    }
}

enum UpEnd {
    /// The web server closed the connection.
    ClientGone,
    /// The web server broke the protocol.
    Client(ClientError),
    /// Writing to the child failed.
    ChildGone,
}

enum ChildEnd {
    Ended,
    Died,
    Garbage(String),
    /// `request_terminate_timeout` passed; the exchange was abandoned.
    Terminated,
}

struct Outcome {
    child: ChildEnd,
    sent_any: bool,
    client_gone: bool,
    /// The child received the whole STDIN stream: its connection is in a
    /// clean state after END_REQUEST.
    stdin_complete: bool,
    client_error: Option<ClientError>,
}

/// Answers a management record (request id 0) into `replies`: GET_VALUES
/// (FCGI spec 4.1) with `FCGI_MPXS_CONNS` = 0; any other type with
/// UNKNOWN_TYPE (FCGI spec 4.2).
fn management(replies: &mut Vec<u8>, rec: fastcgi::Record<'_>) {
    match rec.header.record_type() {
        Some(RecordType::GetValues) => {
            let body = fastcgi::get_values_result(rec.content, |name| match name {
                b"FCGI_MPXS_CONNS" => Some("0".into()),
                b"FCGI_MAX_CONNS" | b"FCGI_MAX_REQS" => Some("1024".into()),
                _ => None,
            });
            fastcgi::encode_record(replies, RecordType::GetValuesResult, 0, &body);
        }
        _ => {
            let mut body = [0u8; 8];
            body[0] = rec.header.kind;
            fastcgi::encode_record(replies, RecordType::UnknownType, 0, &body);
        }
    }
}

/// Writes one slowlog entry (php-fpm's `slowlog`, without the backtrace:
/// php-cgi cannot be traced without ptrace, and fpmd does not need it to
/// know the script, the URI and the time). Appends to the pool's `slowlog`
/// file, or logs to fpmd's log when none is set.
fn write_slowlog(pool: &Pool, pid: i32, req: &Request, elapsed: Duration) {
    use std::io::Write;
    let name = &pool.config.name;
    let script = req.param("SCRIPT_FILENAME");
    let uri = req.param("REQUEST_URI");
    let method = req.param("REQUEST_METHOD");
    warn!(pool = %name, pid, script = %script, uri = %uri, "slow request: running for {:.3} s (request_slowlog_timeout)", elapsed.as_secs_f64());
    let Some(path) = &pool.config.slowlog else {
        return;
    };
    let entry = format!(
        "\n[{}] [pool {name}] pid {pid}\nscript_filename = {script}\nrequest_uri = {uri}\nrequest_method = {method}\nelapsed = {:.3} s\n",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        elapsed.as_secs_f64()
    );
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(entry.as_bytes()));
    if let Err(e) = written {
        warn!(pool = %name, "cannot write slowlog {}: {e}", path.display());
    }
}

/// Resolves when the web server closes the connection (`Ok(true)`), or has
/// sent more than the request's buffered share while it waits in the queue
/// (`Ok(false)`). Bytes read are kept in `buf`.
async fn watch_eof<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut BytesMut) -> io::Result<bool> {
    loop {
        if buf.len() > DISPATCH_BUFFER + fastcgi::MAX_RECORD_LEN {
            // Stop reading; the queue wait goes on.
            std::future::pending::<()>().await;
        }
        if reader.read_buf(buf).await? == 0 {
            return Ok(true);
        }
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
