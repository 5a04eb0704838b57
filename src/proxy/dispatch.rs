//! One request to a child: a lease from the pool (or fpmd's own 503 when
//! none comes), the head written, the exchange run under the request's
//! timers, the verdict carried out, and one log line for whatever in it
//! was not ordinary.

use std::io;
use std::sync::atomic::Ordering;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use crate::log::field;
use crate::pool::{Acquired, Fate, Pool};

use super::client::ClientConn;
use super::local::Local;
use super::request::Request;
use super::verdict::{BodyEnd, ChildEnd, ClientEnd, Reply, Sent};

use super::*;

/// Attempts, on top of one per child, to hand a request to a child whose
/// connection turns out to be dead before anything of the request reached
/// it.
pub(super) const DISPATCH_ATTEMPTS: usize = 2;

/// Gets a child for `req` and runs the exchange. Returns what becomes of
/// the connection; `config` is the pool's current generation's settings
/// (those the request is queued under); `head` (access log) collects the
/// child's response head; `answered` says who answered. Errors: writing
/// to the web server failed.
pub(super) async fn dispatch<R, W>(
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
                lease.give_back(Fate::Unreachable).await;
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
                lease.give_back(Fate::Unreachable).await;
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
            lease.give_back(Fate::Unreachable).await;
            continue;
        };
        let slot = w.slot;
        let on = |notice| match notice {
            // The slot table names the child (status page, graceful_timeout).
            exchange::Notice::Learned(pid) => pool.note_pid(slot, pid),
            exchange::Notice::Slow { pid, elapsed } => {
                pool.stats.slow_requests.fetch_add(1, Ordering::Relaxed);
                if let Some(info) = &slow {
                    crate::observe::slowlog::write(&limits, pid.unwrap_or(known), info, elapsed);
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
        lease.give_back(fate).await;
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
pub(super) async fn answer<R, W>(
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
pub(super) fn log_report(
    pool: &Pool,
    ctx: &Ctx<'_>,
    pid: i32,
    req: &Request,
    r: &exchange::Report,
) {
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
pub(super) async fn write_counted<W: AsyncWrite + Unpin>(
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
pub(super) async fn watch_eof<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
) -> io::Result<bool> {
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
