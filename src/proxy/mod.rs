//! The FastCGI path: one task per web-server connection reads each
//! request, answers it itself when it can, otherwise borrows an idle child
//! of the pool, runs the exchange over the child's persistent keep-conn
//! connection, and gives the child back as the verdict says.
//!
//! ```text
//! serve_connection: read_request (client.rs) ─▶ local answer? (local.rs)
//!                   └▶ lease ─▶ write head ─▶ exchange (exchange/) ─▶ verdict (verdict.rs) ─▶ give back
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

mod access;
mod budget;
pub mod client;
mod dispatch;
pub mod exchange;
pub mod local;
pub mod php_message;
pub mod request;
pub mod request_info;
pub mod sapi;
pub mod script;
pub mod verdict;

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::config::PoolConfig;
use crate::pool::Pool;
use access::*;
pub use budget::*;
use client::{ClientConn, ClientError, Next};
use dispatch::*;
use local::Local;
use request::Request;

/// Bytes of a queued request's connection read ahead while it waits for a
/// child (to see the web server leave); beyond, reading pauses.
const QUEUED_READ_AHEAD: usize = 64 * 1024;

/// What the connection's code needs to know of its pool and peer.
pub struct Ctx<'a> {
    pub pool: &'a str,
    pub peer: &'a str,
    pub script: &'a script::Options,
    /// The pool writes an access log: note when each request arrives, and
    /// return the requests fpmd answers while reading them
    /// ([`client::Next::Answered`]).
    pub access_log: bool,
    /// What the request's `sapi.php` is to report: its figures when the
    /// access log shows them or the per-child rows were read once.
    pub report: crate::process::sapi::Report,
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

/// One connection's requests, in turn: each read ([`ClientConn::read_request`]),
/// answered ([`answer`]), logged, and the connection kept or closed as
/// the answer says ([`keep_open`]).
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
    let mut settings = Settings::of(pool.config());
    loop {
        settings.follow(pool);
        let Settings {
            config,
            script,
            access,
        } = &mut settings;
        let ctx = Ctx {
            pool: pool.name(),
            peer,
            script,
            access_log: access.is_some(),
            report: crate::process::sapi::Report {
                figures: script.usage_shown || pool.rows_read(),
                code: script.code_shown,
            },
        };
        let mut req = match client.read_request(&ctx, &mut shutdown).await {
            Ok(Next::Request(req)) => req,
            Ok(Next::Answered(req, answer)) => {
                if answered_while_reading(&ctx, config, access, &mut client, req, answer).await {
                    continue;
                }
                return;
            }
            Ok(Next::Closed) => return,
            Err(e) => return log_read_error(&ctx, e),
        };
        pool.stats.accepted.fetch_add(1, Ordering::Relaxed);
        let (result, answered) = answer(
            pool,
            config,
            &ctx,
            &mut client,
            &mut req,
            access,
            status_only,
        )
        .await;
        if let Some(a) = access {
            a.write(ctx.pool, config, &req, answered);
        }
        let drain = !req.client_stdin_done;
        client.recycle(req);
        if !keep_open(&ctx, &mut client, result, drain).await {
            return;
        }
    }
}

/// The settings of the pool's generation a connection serves under, kept
/// from one of its requests to the next.
struct Settings {
    config: Arc<PoolConfig>,
    script: script::Options,
    access: Option<AccessLog>,
}

impl Settings {
    fn of(config: Arc<PoolConfig>) -> Self {
        Settings {
            script: script::Options::of(&config),
            access: AccessLog::of(&config, None),
            config,
        }
    }

    /// The current generation's settings (a reload may change them
    /// between two requests of one connection).
    fn follow(&mut self, pool: &Pool) {
        let now = pool.config();
        if !Arc::ptr_eq(&now, &self.config) {
            self.script = script::Options::of(&now);
            self.access = AccessLog::of(&now, self.access.take());
            self.config = now;
        }
    }
}

/// After fpmd answered a request while reading it ([`Next::Answered`],
/// with an access log): its log line, then the connection kept, or closed
/// (after the rest of the request, as [`drain_and_close`]). Returns
/// whether the connection carries the next request.
async fn answered_while_reading<R, W>(
    ctx: &Ctx<'_>,
    config: &PoolConfig,
    access: &mut Option<AccessLog>,
    client: &mut ClientConn<R, W>,
    req: Request,
    answer: Local,
) -> bool
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if let Some(a) = access {
        a.write(ctx.pool, config, &req, Answered::Fpmd(answer.code()));
    }
    let (keep, unread) = (req.keep_conn, !req.client_stdin_done);
    client.recycle(req);
    if !keep {
        if unread {
            drain_and_close(client).await;
        }
        return false;
    }
    true
}

/// Logs why reading a request failed (the connection is then closed).
fn log_read_error(ctx: &Ctx<'_>, e: ClientError) {
    match e {
        ClientError::Io(e)
            if matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
            ) =>
        {
            // The web server gave up on the connection (its client left).
            info!(pool = %ctx.pool, peer = %ctx.peer, "web server reset the connection: {e}");
        }
        // Its client aborted an upload: the web server's ordinary way out.
        e @ ClientError::ClosedMidBody { .. } => info!(pool = %ctx.pool, peer = %ctx.peer, "{e}"),
        e => {
            warn!(pool = %ctx.pool, peer = %ctx.peer, "closing FastCGI connection: {e}");
        }
    }
}

/// Answers `req`: fpmd's status page or ping, fpmd's 404 on the status
/// listener (`status_only`), else a child through [`dispatch()`]. Returns
/// what becomes of the connection (errors: writing to the web server
/// failed) and who answered, for the access log (`access`, whose buffer
/// collects the child's response head).
async fn answer<R, W>(
    pool: &Pool,
    config: &PoolConfig,
    ctx: &Ctx<'_>,
    client: &mut ClientConn<R, W>,
    req: &mut Request,
    access: &mut Option<AccessLog>,
    status_only: bool,
) -> (io::Result<Then>, Answered)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut answered = Answered::Nobody;
    let result = match local_page(&ctx.script.local, req) {
        Some(page) => {
            answered = Answered::Fpmd(200);
            answer_local_page(pool, &ctx.script.local, client, req, page)
                .await
                .map(|()| after_answer(client, req))
        }
        // The status listener runs no script: php-fpm's answer for
        // a script it cannot find.
        None if status_only => {
            answered = Answered::Fpmd(404);
            client
                .answer(req.id, Local::ScriptUnknown)
                .await
                .map(|()| after_answer(client, req))
        }
        None => {
            let head = access.as_mut().map(|a| {
                a.head.clear();
                &mut a.head
            });
            dispatch(pool, config, ctx, client, req, head, &mut answered).await
        }
    };
    (result, answered)
}

/// Carries out `result` on the connection once its request is done
/// (`drain`: the web server had not sent all of it). Returns whether the
/// connection carries the next request.
async fn keep_open<R, W>(
    ctx: &Ctx<'_>,
    client: &mut ClientConn<R, W>,
    result: io::Result<Then>,
    drain: bool,
) -> bool
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    match result {
        Ok(Then::Keep) => true,
        // Dropping both halves closes the connection.
        Ok(Then::Close) => false,
        Ok(Then::Drain) if drain => {
            drain_and_close(client).await;
            false
        }
        Ok(Then::Drain) => false,
        Err(e) => {
            info!(pool = %ctx.pool, peer = %ctx.peer, "cannot answer the web server: {e}");
            false
        }
    }
}

/// A page fpmd answers itself, without a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalPage {
    Status,
    Ping,
}

/// Whether `req` is for the status page or ping of the pool.
pub(crate) fn local_page(
    local: &crate::config::LocalEndpoints,
    req: &Request,
) -> Option<LocalPage> {
    if local.status_path.is_none() && local.ping_path.is_none() {
        return None;
    }
    let path = req.script_path();
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
            let sample = pool.status(full);
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
