//! The FastCGI path: one task per web-server connection reads each
//! request, answers it itself when it can, otherwise borrows an idle child
//! of the pool, runs the exchange over the child's persistent keep-conn
//! connection, and gives the child back as the verdict says.
//!
//! ```text
//! serve_connection: read_request (client.rs) ─▶ local answer? (local.rs)
//!                   └▶ lease ─▶ write head ─▶ exchange (exchange.rs) ─▶ verdict (verdict.rs) ─▶ give back
//! ```
//!
//! A child's connection is shared by every client in turn, so fpmd speaks
//! to children only in canonical FastCGI (request.rs) and reuses a
//! connection only after a clean exchange (verdict.rs). A request goes to a
//! second child only when it provably never reached the first: the connect
//! failed, or the first write was refused with nothing accepted.
//!
//! Owns: the web server's connections and the request/response exchange.
//! Must not touch: processes (it asks [`Pool`] for a lease and gives it
//! back; the supervisor spawns, retires and kills).

pub mod client;
pub mod exchange;
pub mod local;
pub mod php_message;
pub mod request;
pub mod request_info;
pub mod script;
pub mod verdict;

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::log::field;
use crate::pool::{Acquired, Fate, Pool};
use client::{ClientConn, ClientError, Next};
use local::Local;
use request::Request;
use verdict::{BodyEnd, ChildEnd, ClientEnd, Reply, Sent};

/// Attempts, on top of one per child, to hand a request to a child whose
/// connection turns out to be dead before anything of the request reached
/// it.
const DISPATCH_ATTEMPTS: usize = 2;
/// Bytes of a queued request's connection read ahead while it waits for a
/// child (to see the web server leave); beyond, reading pauses.
const QUEUED_READ_AHEAD: usize = 64 * 1024;

/// Bytes all connections together may hold for requests not yet handed to
/// a child (PARAMS being read, bodies buffered before dispatch), beyond
/// [`FREE_PER_REQUEST`] each. A request that would go over it: its
/// connection is closed (while reading PARAMS) or it is dispatched with
/// what it has (while buffering its body).
pub const BUDGET: usize = 32 << 20;
/// Bytes a request may hold without drawing on [`BUDGET`]: an ordinary
/// request from nginx never does.
pub const FREE_PER_REQUEST: usize = 16 * 1024;
static BUDGET_USED: AtomicUsize = AtomicUsize::new(0);
/// When the budget was last reported exhausted (seconds since start), so
/// the log says it once a second at most.
static BUDGET_WARNED: AtomicUsize = AtomicUsize::new(usize::MAX);

/// One connection's share of [`BUDGET`], given back when its request is
/// done (or the connection task ends, however it ends).
#[derive(Debug, Default)]
pub struct Charge {
    charged: usize,
}

impl Charge {
    pub fn new() -> Charge {
        Charge { charged: 0 }
    }

    /// Makes sure `stored` bytes held by the current request are covered.
    /// False when the budget cannot cover them (nothing changes then).
    pub fn cover(&mut self, stored: usize) -> bool {
        let want = stored.saturating_sub(FREE_PER_REQUEST);
        if want <= self.charged {
            return true;
        }
        let more = want - self.charged;
        if BUDGET_USED.fetch_add(more, Ordering::Relaxed) + more > BUDGET {
            BUDGET_USED.fetch_sub(more, Ordering::Relaxed);
            let now = crate::log::uptime_secs();
            if BUDGET_WARNED.swap(now, Ordering::Relaxed) != now {
                warn!("the buffer budget for unfinished requests ({} MiB) is used up: requests over {} KiB are refused or dispatched early",
                    BUDGET >> 20, FREE_PER_REQUEST >> 10);
            }
            return false;
        }
        self.charged = want;
        true
    }

    /// Gives this connection's share back.
    pub fn release(&mut self) {
        BUDGET_USED.fetch_sub(std::mem::take(&mut self.charged), Ordering::Relaxed);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.release();
    }
}

/// Connections all listeners together may hold (set by the daemon from
/// `RLIMIT_NOFILE`); also what `FCGI_MAX_CONNS` answers.
static MAX_CONNECTIONS: AtomicUsize = AtomicUsize::new(1024);

/// See [`MAX_CONNECTIONS`].
pub fn max_connections() -> usize {
    MAX_CONNECTIONS.load(Ordering::Relaxed)
}

/// Sets [`max_connections`].
pub fn set_max_connections(n: usize) {
    MAX_CONNECTIONS.store(n, Ordering::Relaxed);
}

/// What the connection's code needs to know of its pool and peer.
pub struct Ctx<'a> {
    pub pool: &'a str,
    pub peer: &'a str,
    pub script: &'a script::Options,
    /// The pool writes an access log: note when each request arrives, and
    /// return the requests fpmd answers while reading them
    /// ([`client::Next::Answered`]).
    pub access_log: bool,
}

/// Who answered a request, for its access log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answered {
    /// Nobody: the web server left before an answer (not logged).
    Nobody,
    /// fpmd itself, with this HTTP status.
    Fpmd(u16),
    /// A child (`pid`); `reply`: the status fpmd answered instead of it
    /// (502, 504) when it gave no answer.
    Child { pid: i32, reply: Option<u16> },
}

/// A connection's access log: the pool's file and the buffers every line
/// reuses.
struct AccessLog {
    file: Arc<crate::observe::reopen::LogFile>,
    line: String,
    /// The child's response head (`%s`, `%{…}o`).
    head: crate::fastcgi::cgi::Head,
}

impl AccessLog {
    /// The access log of `config`, if it has one (the daemon opened the
    /// file); the buffers of `old` are kept.
    fn of(config: &crate::config::PoolConfig, old: Option<AccessLog>) -> Option<AccessLog> {
        let file = crate::observe::reopen::get(config.access_log.as_deref()?)?;
        let (line, head) = match old {
            Some(a) => (a.line, a.head),
            None => (String::new(), Default::default()),
        };
        Some(AccessLog { file, line, head })
    }

    /// Writes the line of `req`, answered as `answered` (nothing when
    /// nobody answered it, or when the pool's `access.suppress_path`
    /// leaves it out), in the pool's `access.format`.
    fn write(
        &mut self,
        pool: &str,
        config: &crate::config::PoolConfig,
        req: &Request,
        answered: Answered,
    ) {
        let format = &config.access_format;
        let Some(began) = req.began else { return };
        let (pid, status, head) = match answered {
            Answered::Nobody => return,
            Answered::Fpmd(code) => (std::process::id() as i32, code, None),
            Answered::Child { pid, reply } => (
                pid,
                reply.unwrap_or_else(|| self.head.status().unwrap_or(200)),
                Some(&self.head),
            ),
        };
        if suppressed(&config.access_suppress_paths, req, status) {
            return;
        }
        let duration = began.elapsed();
        let now = std::time::SystemTime::now();
        let entry = crate::observe::access_log::Entry {
            pool,
            params: req,
            request_uri: script_path(req),
            content_length: req.content_length(),
            pid,
            status,
            head,
            start: now.checked_sub(duration).unwrap_or(now),
            duration,
        };
        if format.write(&entry, &mut self.line) && !self.file.append(self.line.as_bytes()) {
            if let Some(n) = self.file.dropped_report() {
                warn!(pool = %pool, "access log {}: writing does not keep up; {n} lines dropped",
                    self.file.path().display());
            }
        }
    }
}

/// php-fpm's `fpm_access_log_suppress` (`sapi/fpm/fpm/fpm_log.c`): a
/// `GET` or `HEAD` without a query string or a body, answered 2xx, whose
/// request URI (`%r`) is exactly one of `paths`.
fn suppressed(paths: &[String], req: &Request, status: u16) -> bool {
    !paths.is_empty()
        && req.param(b"QUERY_STRING").is_none_or(|q| q.is_empty())
        && matches!(req.param(b"REQUEST_METHOD"), Some(b"GET" | b"HEAD"))
        && (200..=299).contains(&status)
        && req.content_length() == 0
        && paths.iter().any(|p| p.as_bytes() == script_path(req))
}

/// Serves one web-server connection until it closes, fpmd stops, or it
/// breaks the protocol. Errors are logged here with the pool and the peer;
/// nothing escapes to other connections, a panic included (it is logged,
/// and every child the task had borrowed is given back by its lease).
pub async fn serve_connection<R, W>(
    pool: Arc<Pool>,
    reader: R,
    writer: W,
    peer: String,
    status_only: bool,
    shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let served = AssertUnwindSafe(serve(&pool, reader, writer, &peer, status_only, shutdown))
        .catch_unwind()
        .await;
    if let Err(panic) = served {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        error!(pool = %pool.name(), peer = %peer, "connection task panicked ({what}); its connection is closed, other requests go on");
    }
}

async fn serve<R, W>(
    pool: &Pool,
    reader: R,
    writer: W,
    peer: &str,
    status_only: bool,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut client = ClientConn::new(reader, writer, Charge::new());
    let mut config = pool.config();
    let mut script = script::Options::of(&config);
    let mut access = AccessLog::of(&config, None);
    loop {
        // The current generation's settings (a reload may change them
        // between two requests of one connection).
        let now = pool.config();
        if !Arc::ptr_eq(&now, &config) {
            script = script::Options::of(&now);
            access = AccessLog::of(&now, access);
            config = now;
        }
        let ctx = Ctx {
            pool: pool.name(),
            peer,
            script: &script,
            access_log: access.is_some(),
        };
        let mut req = match client.read_request(&ctx, &mut shutdown).await {
            Ok(Next::Request(req)) => req,
            Ok(Next::Answered(req, answer)) => {
                if let Some(a) = &mut access {
                    a.write(ctx.pool, &config, &req, Answered::Fpmd(answer.code()));
                }
                let (keep, unread) = (req.keep_conn, !req.client_stdin_done);
                client.recycle(req);
                if !keep {
                    if unread {
                        drain_and_close(&mut client).await;
                    }
                    return;
                }
                continue;
            }
            Ok(Next::Closed) => return,
            Err(ClientError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                ) =>
            {
                // The web server gave up on the connection (its client left).
                info!(pool = %ctx.pool, peer = %peer, "web server reset the connection: {e}");
                return;
            }
            Err(e) => {
                warn!(pool = %ctx.pool, peer = %peer, "closing FastCGI connection: {e}");
                return;
            }
        };
        pool.stats.accepted.fetch_add(1, Ordering::Relaxed);
        let mut answered = Answered::Nobody;
        let result = match local_page(&ctx.script.local, &req) {
            Some(page) => {
                answered = Answered::Fpmd(200);
                answer_local_page(pool, &ctx.script.local, &mut client, &req, page)
                    .await
                    .map(|()| after_answer(&mut client, &req))
            }
            // The status listener runs no script: php-fpm's answer for
            // a script it cannot find.
            None if status_only => {
                answered = Answered::Fpmd(404);
                client
                    .answer(req.id, Local::ScriptUnknown)
                    .await
                    .map(|()| after_answer(&mut client, &req))
            }
            None => {
                let head = access.as_mut().map(|a| {
                    a.head.clear();
                    &mut a.head
                });
                dispatch(
                    pool,
                    &config,
                    &ctx,
                    &mut client,
                    &mut req,
                    head,
                    &mut answered,
                )
                .await
            }
        };
        if let Some(a) = &mut access {
            a.write(ctx.pool, &config, &req, answered);
        }
        let drain = !req.client_stdin_done;
        client.recycle(req);
        match result {
            Ok(Then::Keep) => {}
            // Dropping both halves closes the connection.
            Ok(Then::Close) => return,
            Ok(Then::Drain) if drain => {
                drain_and_close(&mut client).await;
                return;
            }
            Ok(Then::Drain) => return,
            Err(e) => {
                info!(pool = %ctx.pool, peer = %peer, "cannot answer the web server: {e}");
                return;
            }
        }
    }
}

/// A page fpmd answers itself, without a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalPage {
    Status,
    Ping,
}

/// The request's script path as php-fpm matches it against
/// `pm.status_path` and `ping.path`: `SCRIPT_NAME`, else the path of
/// `REQUEST_URI`.
fn script_path(req: &Request) -> &[u8] {
    match req.param(b"SCRIPT_NAME") {
        Some(s) if !s.is_empty() => s,
        _ => {
            let uri = req.param(b"REQUEST_URI").unwrap_or_default();
            uri.split(|b| *b == b'?').next().unwrap_or_default()
        }
    }
}

/// Whether `req` is for the status page or ping of the pool.
pub(crate) fn local_page(
    local: &crate::config::LocalEndpoints,
    req: &Request,
) -> Option<LocalPage> {
    if local.status_path.is_none() && local.ping_path.is_none() {
        return None;
    }
    let path = script_path(req);
    if local.ping_path.as_deref().map(str::as_bytes) == Some(path) {
        Some(LocalPage::Ping)
    } else if local.status_path.as_deref().map(str::as_bytes) == Some(path) {
        Some(LocalPage::Status)
    } else {
        None
    }
}

/// php-fpm's headers on its status and ping pages (besides the type).
const NO_CACHE: [&str; 2] = [
    "Expires: Thu, 01 Jan 1970 00:00:00 GMT",
    "Cache-Control: no-cache, no-store, must-revalidate, max-age=0",
];

/// Answers the status page or ping from the pool's own records, as php-fpm
/// does (`fpm_status_handle_request`), but without taking a child: both
/// answer while every child is busy. A HEAD request gets the headers only.
async fn answer_local_page<R, W>(
    pool: &Pool,
    local: &crate::config::LocalEndpoints,
    client: &mut ClientConn<R, W>,
    req: &Request,
    page: LocalPage,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    use crate::observe::status;
    let head_only = req.param(b"REQUEST_METHOD") == Some(b"HEAD");
    let rendered;
    let (content_type, body) = match page {
        LocalPage::Ping => ("text/plain;charset=UTF-8", local.ping_response.as_bytes()),
        LocalPage::Status => {
            let (format, full) =
                status::parse_query(req.param(b"QUERY_STRING").unwrap_or_default());
            let full = full || format == status::Format::Live;
            let mut sample = pool.status(full);
            if full {
                sample.name_unknown_children();
            }
            rendered = status::render(&sample, format, full, std::time::SystemTime::now());
            (status::content_type(format), rendered.as_bytes())
        }
    };
    let ct = format!("Content-Type: {content_type}");
    // php-fpm's pages come from PHP, with its X-Powered-By (expose_php).
    let powered = pool.powered_by().await;
    let mut headers = Vec::with_capacity(4);
    if let Some(p) = &powered {
        headers.push(p.as_str());
    }
    headers.extend([ct.as_str(), NO_CACHE[0], NO_CACHE[1]]);
    client.answer_page(req.id, &headers, body, head_only).await
}

/// What becomes of the web server's connection after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// It carries the next request (the rest of this one's body, if any,
    /// is dropped as it comes).
    Keep,
    /// Closed now (the web server left, or broke the protocol).
    Close,
    /// Closed once the web server has sent the rest of its request, so
    /// that it can read the whole answer (see [`drain_and_close`]).
    Drain,
}

/// After fpmd answered `req` itself.
fn after_answer<R, W>(client: &mut ClientConn<R, W>, req: &Request) -> Then {
    if !req.keep_conn {
        return Then::Drain;
    }
    if !req.client_stdin_done {
        client.st.skip = Some(req.id);
    }
    Then::Keep
}

/// How long a web server may go on sending a request that was answered
/// before it was read whole, before its connection is closed anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Closes a connection whose request was answered before the web server
/// had sent all of it, as php-fpm does (`fcgi_close` in php-src
/// `main/fastcgi.c`): stop writing, then read and drop what comes until
/// the web server closes. Closing at once would make the web server fail
/// in the middle of sending (Apache: "AH01075 … Broken pipe (sending
/// stdin)") and lose the answer it had been given.
async fn drain_and_close<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    client: &mut ClientConn<R, W>,
) {
    let _ = client.writer.shutdown().await;
    let mut scratch = [0u8; 8192];
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while matches!(client.reader.read(&mut scratch).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Gets a child for `req` and runs the exchange. Returns what becomes of
/// the connection; `config` is the pool's current generation's settings
/// (those the request is queued under); `head` (access log) collects the
/// child's response head; `answered` says who answered. Errors: writing
/// to the web server failed.
async fn dispatch<R, W>(
    pool: &Pool,
    config: &crate::config::PoolConfig,
    ctx: &Ctx<'_>,
    client: &mut ClientConn<R, W>,
    req: &mut Request,
    mut head: Option<&mut crate::fastcgi::cgi::Head>,
    answered: &mut Answered,
) -> io::Result<Then>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let uri = |req: &Request| field(req.param(b"REQUEST_URI").unwrap_or_default()).to_string();
    let attempts = DISPATCH_ATTEMPTS + config.pm.max_children as usize;
    let queue_deadline = config
        .request_queue_timeout
        .map(|d| tokio::time::Instant::now() + d);
    let arrived = std::time::Instant::now();
    let mut waited = false;
    for _ in 0..attempts {
        let acquired = tokio::select! {
            // An idle child is taken without touching the timers.
            biased;
            a = pool.acquire() => a,
            _ = sleep_until_opt(queue_deadline), if queue_deadline.is_some() => {
                pool.stats.queue_wait.observe(arrived.elapsed());
                warn!(pool = %ctx.pool, uri = %uri(req), "request waited {:.1} s for a child (request_queue_timeout): answering 503",
                    config.request_queue_timeout.unwrap_or_default().as_secs_f64());
                answer(client, req, Local::Unavailable("every PHP process is busy; retry later"), answered).await?;
                return Ok(after_answer(client, req));
            }
            gone = watch_eof(&mut client.reader, &mut client.buf) => {
                // Never dispatch a request whose web server already left.
                if gone? {
                    info!(pool = %ctx.pool, uri = %uri(req),
                        "request id {}: the web server closed the connection while the request waited for a child; not dispatched", req.id);
                }
                return Ok(Then::Close);
            }
        };
        if !waited {
            // Once per request, whatever the acquisition gave.
            pool.stats.queue_wait.observe(arrived.elapsed());
            waited = true;
        }
        let mut lease = match acquired {
            Acquired::Lease(l) => l,
            Acquired::QueueFull => {
                warn!(pool = %ctx.pool, uri = %uri(req), "request queue full (listen.backlog = {}): answering 503", config.listen.backlog);
                let busy = Local::Unavailable("the server is overloaded; retry later");
                answer(client, req, busy, answered).await?;
                return Ok(after_answer(client, req));
            }
            Acquired::Closed => {
                answer(client, req, Local::Stopping, answered).await?;
                return Ok(Then::Close);
            }
            Acquired::Unstartable(why) => {
                // The supervisor logged why once, at error level.
                debug!(pool = %ctx.pool, uri = %uri(req), "php-cgi cannot start ({why}): answering 503");
                let none = Local::Unavailable("no PHP process could start; retry later");
                answer(client, req, none, answered).await?;
                return Ok(after_answer(client, req));
            }
        };
        let w = lease.worker();
        let conn = match w.connect().await {
            Ok(c) => c,
            Err(e) => {
                debug!(pool = %ctx.pool, pid = w.log_pid(), "cannot connect to child: {e}; trying another");
                lease.give_back(Fate::Unreachable);
                continue;
            }
        };
        // A child that died while idle has closed its end: the first write
        // fails at once (EPIPE) with nothing accepted, nothing ran, and
        // another child may take the request. Once any byte was accepted,
        // the request's outcome is this child's.
        match write_counted(&mut conn.writer, &req.head).await {
            Ok(()) => {}
            Err((0, e)) => {
                info!(pool = %ctx.pool, pid = w.log_pid(),
                    "child closed its idle connection ({e}: it exited or was killed); giving the request to another child");
                lease.give_back(Fate::Unreachable);
                continue;
            }
            Err((n, e)) => {
                debug!(pool = %ctx.pool, pid = w.log_pid(), "child took {n} bytes of the request, then: {e}")
            }
        }
        // The limits of the child's generation.
        let limits = lease.config().clone();
        let slow = limits.request_slowlog_timeout.map(|_| req.info());
        lease.set_request(|info| req.fill_info(info));
        let timers = exchange::Timers {
            slowlog: limits.request_slowlog_timeout,
            terminate: limits.request_terminate_timeout,
            php_messages: limits.catch_workers_output,
        };
        let (w, death) = lease.worker_and_death();
        let probe = w.pid_probe();
        let known = w.log_pid();
        let Some(conn) = w.conn.as_mut() else {
            // connect() above left a connection; nothing takes it away.
            lease.give_back(Fate::Unreachable);
            continue;
        };
        let slot = w.slot;
        let on = |notice| match notice {
            // The slot table names the child (status page, graceful_timeout).
            exchange::Notice::Learned(pid) => pool.note_pid(slot, pid),
            exchange::Notice::Slow { pid, elapsed } => {
                pool.stats.slow_requests.fetch_add(1, Ordering::Relaxed);
                if let Some(info) = &slow {
                    write_slowlog(&limits, pid.unwrap_or(known), info, elapsed);
                }
            }
        };
        let started = std::time::Instant::now();
        let report = exchange::run(
            conn,
            probe,
            death,
            timers,
            client,
            req,
            head.as_deref_mut(),
            on,
        )
        .await;
        pool.stats.service.observe(started.elapsed());
        let (messages, dropped) = &report.php_messages;
        if !messages.is_empty() || *dropped > 0 {
            let pid = report.learned.unwrap_or(known);
            php_message::log_php_messages(&limits, pid, messages, *dropped);
        }
        if report.finish_request_missing {
            php_message::log_finish_request_missing(
                ctx.pool,
                req.param(b"SCRIPT_FILENAME").unwrap_or_default(),
            );
        }
        if report.no_input_file {
            let script = field(req.param(b"SCRIPT_FILENAME").unwrap_or_default()).to_string();
            let pid = report.learned.unwrap_or(known);
            if req.script_found {
                warn!(pool = %ctx.pool, pid, script = %script, uri = %uri(req),
                    php_fpm = %format_args!("Unable to open primary script: {script} (Permission denied)"),
                    "php-cgi cannot open the primary script, which exists: the pool's user ({}) may not read it or search a directory above it; answered 404",
                    config.user.user_name);
            } else {
                debug!(pool = %ctx.pool, pid, script = %script, uri = %uri(req), "Unable to open primary script: {script} (No such file or directory)");
            }
        }
        if let Some(pid) = report.learned {
            lease.worker().set_pid(pid);
        }
        let v = verdict::verdict(&report.outcome);
        if head.is_some() {
            // Prefork, a request too short for the probe: `%p` names the
            // child, not its parent (looked up once per connection).
            lease.worker().learn_pid();
        }
        let fate = match v.child {
            Fate::Keep => lease.keep_unless_forked(req.param(b"REQUEST_URI").unwrap_or_default()),
            f => f,
        };
        let pid = lease.worker().log_pid();
        log_report(pool, ctx, pid, req, &report);
        lease.give_back(fate);
        let reply = match v.reply {
            Reply::None => None,
            Reply::BadGateway => Some(Local::BadGateway),
            Reply::GatewayTimeout => Some(Local::GatewayTimeout),
        };
        *answered = Answered::Child {
            pid,
            reply: reply.map(Local::code),
        };
        if let Some(local) = reply {
            client.answer(req.id, local).await?;
        }
        if v.keep_client {
            client.flush_replies().await?;
            if !req.client_stdin_done {
                client.st.skip = Some(req.id);
            }
            return Ok(Then::Keep);
        }
        return Ok(match report.outcome.client {
            verdict::ClientEnd::Open => Then::Drain,
            _ => Then::Close,
        });
    }
    warn!(pool = %ctx.pool, "request id {}: no child could take it after {attempts} tries: answering 503", req.id);
    let none = Local::Unavailable("no PHP process could take the request");
    answer(client, req, none, answered).await?;
    Ok(after_answer(client, req))
}

/// Writes fpmd's own answer `local` to `req` and notes it in `answered`.
async fn answer<R, W>(
    client: &mut ClientConn<R, W>,
    req: &Request,
    local: Local,
    answered: &mut Answered,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    *answered = Answered::Fpmd(local.code());
    client.answer(req.id, local).await
}

/// One log line for whatever in the exchange was not ordinary.
fn log_report(pool: &Pool, ctx: &Ctx<'_>, pid: i32, req: &Request, r: &exchange::Report) {
    let o = &r.outcome;
    let elapsed = r.started.elapsed().as_secs_f64();
    let p = |n: &[u8]| field(req.param(n).unwrap_or_default()).to_string();
    match o.child {
        ChildEnd::Ended => {}
        ChildEnd::Eof => {
            warn!(pool = %ctx.pool, pid, script = %p(b"SCRIPT_FILENAME"), uri = %p(b"REQUEST_URI"),
            "child closed its connection {elapsed:.3} s into the request (it exited or was killed)")
        }
        ChildEnd::Garbage => warn!(pool = %ctx.pool, pid, uri = %p(b"REQUEST_URI"),
            "child sent an invalid response: {}", r.child_error.as_deref().unwrap_or("?")),
        ChildEnd::TimedOut => {
            let (script, uri) = (p(b"SCRIPT_FILENAME"), p(b"REQUEST_URI"));
            // php-fpm's fpm_request_check_timed_out.
            let php_fpm = format!(
                "child {pid}, script '{script}' (request: \"{} {uri}\") execution timed out ({elapsed:.6} sec), terminating",
                p(b"REQUEST_METHOD")
            );
            warn!(pool = %ctx.pool, pid, script = %script, uri = %uri, php_fpm = %php_fpm,
            "request ran {elapsed:.3} s, over request_terminate_timeout: terminating the child")
        }
    }
    let owed = req.owed;
    match o.body {
        BodyEnd::Complete => {}
        BodyEnd::Excess => {
            debug!(pool = %ctx.pool, pid, uri = %p(b"REQUEST_URI"), "dropped {} bytes of body past CONTENT_LENGTH = {owed}", req.excess)
        }
        BodyEnd::Short => info!(pool = %ctx.pool, pid, uri = %p(b"REQUEST_URI"),
            "the web server ended the body after {} of {owed} bytes (CONTENT_LENGTH): the script read end of input", req.body),
        BodyEnd::Cut => info!(pool = %ctx.pool, pid, uri = %p(b"REQUEST_URI"),
            "the web server closed the connection after {} of {owed} bytes of the body: the script read end of input", req.body),
        BodyEnd::Unread if o.child == ChildEnd::Ended => {
            debug!(pool = %ctx.pool, pid, uri = %p(b"REQUEST_URI"),
            "child answered before it had read the whole body ({} of {owed} bytes); not reusing its connection", req.body)
        }
        BodyEnd::Unread => {}
    }
    match (&r.client_error, o.client, o.sent) {
        (Some(e), _, _) => {
            warn!(pool = %ctx.pool, peer = %ctx.peer, pid, "closing FastCGI connection after request id {}: {e}", req.id)
        }
        (None, ClientEnd::Gone, Sent::Nothing | Sent::Partial) if o.body.clean() => {
            info!(pool = %ctx.pool, pid, uri = %p(b"REQUEST_URI"), "web server closed the connection before the response was complete")
        }
        _ => {}
    }
    let _ = pool;
}

/// Writes all of `bytes`; on failure, how many were written before it.
async fn write_counted<W: AsyncWrite + Unpin>(
    w: &mut W,
    bytes: &[u8],
) -> Result<(), (usize, io::Error)> {
    let mut done = 0;
    while done < bytes.len() {
        match w.write(&bytes[done..]).await {
            Ok(0) => return Err((done, io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((done, e)),
        }
    }
    Ok(())
}

/// Resolves when the web server closes the connection (`Ok(true)`) while
/// its request waits for a child. Bytes read are kept in `buf`; past
/// [`QUEUED_READ_AHEAD`] reading pauses and the wait goes on.
async fn watch_eof<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut BytesMut) -> io::Result<bool> {
    loop {
        if buf.len() >= QUEUED_READ_AHEAD {
            std::future::pending::<()>().await;
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4 * 1024);
        }
        if reader.read_buf(buf).await? == 0 {
            return Ok(true);
        }
    }
}

pub(crate) async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Writes one slowlog entry (php-fpm's `slowlog`, without the backtrace:
/// php-cgi cannot be traced without ptrace, and fpmd does not need it to
/// know the script, the URI and the time). Appends to the pool's `slowlog`
/// file, or logs to fpmd's log when none is set.
fn write_slowlog(
    config: &crate::config::PoolConfig,
    pid: i32,
    info: &crate::pool::RequestInfo,
    elapsed: Duration,
) {
    use std::io::Write;
    let name = &config.name;
    let crate::pool::RequestInfo {
        script,
        uri,
        method,
        ..
    } = info;
    // php-fpm's fpm_request_check_timed_out.
    let php_fpm = format!(
        "child {pid}, script '{script}' (request: \"{method} {uri}\") executing too slow ({:.6} sec), logging",
        elapsed.as_secs_f64()
    );
    warn!(pool = %name, pid, script = %script, uri = %uri, php_fpm = %php_fpm, "slow request: running for {:.3} s (request_slowlog_timeout)", elapsed.as_secs_f64());
    let Some(path) = &config.slowlog else {
        return;
    };
    // The entry's fields come from the client: escaped, so that a URI
    // cannot forge an entry.
    let (script, uri, method) = (
        crate::log::escape(script.as_bytes()),
        crate::log::escape(uri.as_bytes()),
        crate::log::escape(method.as_bytes()),
    );
    let entry = format!(
        "\n[{}] [pool {name}] pid {pid}\nscript_filename = {script}\nrequest_uri = {uri}\nrequest_method = {method}\nelapsed = {:.3} s\n",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        elapsed.as_secs_f64()
    );
    use std::os::unix::fs::OpenOptionsExt;
    // 0600 as php-fpm's slowlog (it names URIs with their query strings).
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(entry.as_bytes()));
    if let Err(e) = written {
        warn!(pool = %name, "cannot write slowlog {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_text() {
        assert_eq!(field(b"/index.php?a=1").to_string(), "/index.php?a=1");
        assert_eq!(field(b"caf\xc3\xa9 \xff").to_string(), "caf\u{e9} \u{fffd}");
    }

    #[test]
    fn charges_are_bounded_and_given_back() {
        let mut a = Charge::new();
        assert!(a.cover(FREE_PER_REQUEST), "a small request costs nothing");
        assert_eq!(a.charged, 0);
        assert!(a.cover(FREE_PER_REQUEST + 100));
        assert_eq!(a.charged, 100);
        let mut b = Charge::new();
        assert!(
            !b.cover(BUDGET + FREE_PER_REQUEST + 1),
            "over the whole budget"
        );
        assert_eq!(b.charged, 0);
        drop(a);
        assert!(b.cover(FREE_PER_REQUEST + 10));
        b.release();
        assert_eq!(b.charged, 0);
    }
}
