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
use crate::pool::{Acquired, Fate, Lease, Pool};

use super::client::ClientConn;
use super::local::Local;
use super::request::Request;
use super::verdict::{BodyEnd, ChildEnd, ClientEnd, Reply, Sent};

use super::*;
use crate::sys::timer::sleep_until_opt;

/// Attempts, on top of one per child, to hand a request to a child whose
/// connection turns out to be dead before anything of the request reached
/// it.
pub(super) const DISPATCH_ATTEMPTS: usize = 2;

/// Gets a child for `req` and runs the exchange. Returns what becomes of
/// the connection; `config` is the pool's current generation's settings
/// (those the request is queued under); `head` (access log) collects the
/// child's response head; `answered` says who answered. Errors: writing
/// to the web server failed.
///
/// In steps, tried again with another child while none took the request
/// ([`DISPATCH_ATTEMPTS`] more than `pm.max_children`): a lease
/// ([`Dispatch::acquire`], or fpmd's own answer), the head written to
/// the child ([`Dispatch::hand_over`]), the exchange ([`Dispatch::exchange`])
/// and what it reported logged ([`Dispatch::log_exchange`]), the verdict
/// carried out ([`Dispatch::carry_out`]); else a 503 ([`Dispatch::give_up`]).
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
    let mut d = Dispatch {
        pool,
        config,
        ctx,
        attempts: DISPATCH_ATTEMPTS + config.pm.max_children as usize,
        queue_deadline: config
            .request_queue_timeout
            .map(|d| tokio::time::Instant::now() + d),
        arrived: std::time::Instant::now(),
        waited: false,
    };
    for _ in 0..d.attempts {
        let lease = match d.acquire(client, req, answered).await? {
            Ok(lease) => lease,
            Err(then) => return Ok(then),
        };
        let Some(lease) = d.hand_over(lease, req).await else {
            continue;
        };
        let Some((lease, ran)) = d.exchange(lease, client, req, head.as_deref_mut()).await else {
            continue;
        };
        d.log_exchange(req, &ran);
        return d.carry_out(lease, ran.report, client, req, answered).await;
    }
    d.give_up(client, req, answered).await
}

/// What the steps of one dispatch share, fixed when it starts (but
/// `waited`).
struct Dispatch<'a, 'c> {
    pool: &'a Pool,
    /// The current generation's settings, those the request is queued
    /// under.
    config: &'a crate::config::PoolConfig,
    ctx: &'a Ctx<'c>,
    /// How many children may be tried.
    attempts: usize,
    /// `request_queue_timeout` from the request's arrival.
    queue_deadline: Option<tokio::time::Instant>,
    arrived: std::time::Instant,
    /// The request's wait in the queue was observed (once per request).
    waited: bool,
}

/// What one exchange left for the steps after it.
struct Ran {
    report: exchange::Report,
    /// The limits of the child's generation.
    limits: Arc<crate::config::PoolConfig>,
    /// For logs: the child's pid.
    known: i32,
}

/// The request's `REQUEST_URI`, escaped for a log line.
fn uri(req: &Request) -> String {
    field(req.param(b"REQUEST_URI").unwrap_or_default()).to_string()
}

impl<'a> Dispatch<'a, '_> {
    /// Takes a child from the pool, or waits in its queue for one. `Err`:
    /// what becomes of the connection when none comes (fpmd answered, or
    /// the web server left).
    async fn acquire<R, W>(
        &mut self,
        client: &mut ClientConn<R, W>,
        req: &Request,
        answered: &mut Answered,
    ) -> io::Result<Result<Lease<'a>, Then>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let (pool, ctx, config) = (self.pool, self.ctx, self.config);
        let acquired = tokio::select! {
            // An idle child is taken without touching the timers.
            biased;
            a = pool.acquire() => a,
            _ = sleep_until_opt(self.queue_deadline), if self.queue_deadline.is_some() => {
                pool.stats.queue_wait.observe(self.arrived.elapsed());
                warn!(pool = %ctx.pool, uri = %uri(req), "request waited {:.1} s for a child (request_queue_timeout): answering 503",
                    config.request_queue_timeout.unwrap_or_default().as_secs_f64());
                answer(client, req, Local::Unavailable("every PHP process is busy; retry later"), answered).await?;
                return Ok(Err(after_answer(client, req)));
            }
            gone = watch_eof(&mut client.reader, &mut client.buf) => {
                // Never dispatch a request whose web server already left.
                if gone? {
                    info!(pool = %ctx.pool, uri = %uri(req),
                        "request id {}: the web server closed the connection while the request waited for a child; not dispatched", req.id);
                }
                return Ok(Err(Then::Close));
            }
        };
        if !self.waited {
            // Once per request, whatever the acquisition gave.
            pool.stats.queue_wait.observe(self.arrived.elapsed());
            self.waited = true;
        }
        self.lease_or_answer(acquired, client, req, answered).await
    }

    /// The lease `acquired` holds, or fpmd's own answer when it holds none.
    async fn lease_or_answer<R, W>(
        &self,
        acquired: Acquired<'a>,
        client: &mut ClientConn<R, W>,
        req: &Request,
        answered: &mut Answered,
    ) -> io::Result<Result<Lease<'a>, Then>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let ctx = self.ctx;
        let local = match acquired {
            Acquired::Lease(l) => return Ok(Ok(l)),
            Acquired::QueueFull => {
                warn!(pool = %ctx.pool, uri = %uri(req), "request queue full (listen.backlog = {}): answering 503", self.config.listen.backlog);
                Local::Unavailable("the server is overloaded; retry later")
            }
            Acquired::Closed => {
                answer(client, req, Local::Stopping, answered).await?;
                return Ok(Err(Then::Close));
            }
            Acquired::Unstartable(why) => {
                // The supervisor logged why once, at error level.
                debug!(pool = %ctx.pool, uri = %uri(req), "php-cgi cannot start ({why}): answering 503");
                Local::Unavailable("no PHP process could start; retry later")
            }
        };
        answer(client, req, local, answered).await?;
        Ok(Err(after_answer(client, req)))
    }

    /// Connects to the leased child and writes the request's head. `None`:
    /// nothing of the request reached the child, which was given back, and
    /// another child may take the request.
    async fn hand_over(&self, mut lease: Lease<'a>, req: &Request) -> Option<Lease<'a>> {
        let ctx = self.ctx;
        let w = lease.worker();
        let conn = match w.connect().await {
            Ok(c) => c,
            Err(e) => {
                debug!(pool = %ctx.pool, pid = w.log_pid(), "cannot connect to child: {e}; trying another");
                lease.give_back(Fate::Unreachable).await;
                return None;
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
                return None;
            }
            Err((n, e)) => {
                debug!(pool = %ctx.pool, pid = w.log_pid(), "child took {n} bytes of the request, then: {e}")
            }
        }
        Some(lease)
    }

    /// Runs the exchange on the leased child, whose head was written, under
    /// the timers of its generation; gives the lease back with what ran.
    /// `None`: the child had no connection (it was given back, and another
    /// child may take the request).
    async fn exchange<R, W>(
        &self,
        mut lease: Lease<'a>,
        client: &mut ClientConn<R, W>,
        req: &mut Request,
        head: Option<&mut crate::fastcgi::cgi::Head>,
    ) -> Option<(Lease<'a>, Ran)>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let pool = self.pool;
        // The limits of the child's generation.
        let limits = lease.config().clone();
        let slow = limits.request_slowlog_timeout.map(|_| req.info());
        lease.set_request(|info| req.fill_info(info));
        let timers = exchange::Timers {
            slowlog: limits.request_slowlog_timeout,
            terminate: limits.request_terminate_timeout,
            php_messages: limits.catch_workers_output,
            track_finished: limits.track_finished,
        };
        let (w, death) = lease.worker_and_death();
        let known = w.log_pid();
        let Some(conn) = w.conn.as_mut() else {
            // connect() above left a connection; nothing takes it away.
            lease.give_back(Fate::Unreachable).await;
            return None;
        };
        let on = |notice| match notice {
            exchange::Notice::Slow { elapsed } => {
                pool.stats.slow_requests.fetch_add(1, Ordering::Relaxed);
                if let Some(info) = &slow {
                    crate::observe::slowlog::write(&limits, known, info, elapsed);
                }
            }
        };
        let started = std::time::Instant::now();
        let report = exchange::run(conn, death, timers, client, req, head, on).await;
        pool.stats.service.observe(started.elapsed());
        Some((
            lease,
            Ran {
                report,
                limits,
                known,
            },
        ))
    }

    /// Logs what the exchange reported of the script: PHP's messages, a
    /// missing `fastcgi_finish_request()`, admin values a `.user.ini`
    /// changed for good, a primary script php-cgi could not open.
    fn log_exchange(&self, req: &Request, ran: &Ran) {
        let (ctx, report) = (self.ctx, &ran.report);
        let pid = ran.known;
        let (messages, dropped) = &report.php_messages;
        if !messages.is_empty() || *dropped > 0 {
            php_message::log_php_messages(&ran.limits, pid, messages, *dropped);
        }
        if report.finish_request_missing {
            php_message::log_finish_request_missing(
                ctx.pool,
                req.param(b"SCRIPT_FILENAME").unwrap_or_default(),
            );
        }
        if !report.admin_changed.is_empty() {
            super::sapi::log_admin_changed(&ran.limits, pid, &report.admin_changed);
        }
        if report.no_input_file {
            let script = field(req.param(b"SCRIPT_FILENAME").unwrap_or_default()).to_string();
            if req.script_found {
                warn!(pool = %ctx.pool, pid, script = %script, uri = %uri(req),
                    php_fpm = %format_args!("Unable to open primary script: {script} (Permission denied)"),
                    "php-cgi cannot open the primary script, which exists: the pool's user ({}) may not read it or search a directory above it; answered 404",
                    self.config.user.user_name);
            } else {
                debug!(pool = %ctx.pool, pid, script = %script, uri = %uri(req), "Unable to open primary script: {script} (No such file or directory)");
            }
        }
    }

    /// Carries out the verdict on the exchange's `report`: the child given
    /// back to its fate, fpmd's 502 or 504 when the child gave no answer,
    /// and what becomes of the connection.
    async fn carry_out<R, W>(
        &self,
        mut lease: Lease<'a>,
        report: exchange::Report,
        client: &mut ClientConn<R, W>,
        req: &mut Request,
        answered: &mut Answered,
    ) -> io::Result<Then>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let v = verdict::verdict(&report.outcome);
        let fate = match v.child {
            Fate::Keep => lease.keep_unless_forked(req.param(b"REQUEST_URI").unwrap_or_default()),
            f => f,
        };
        let pid = lease.worker().log_pid();
        log_report(self.pool, self.ctx, pid, req, &report);
        req.usage = lease.note_end(report.end);
        req.script_status = report.status;
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
        Ok(match report.outcome.client {
            verdict::ClientEnd::Open => Then::Drain,
            _ => Then::Close,
        })
    }

    /// No child took the request in [`Dispatch::attempts`] tries: a 503.
    async fn give_up<R, W>(
        &self,
        client: &mut ClientConn<R, W>,
        req: &Request,
        answered: &mut Answered,
    ) -> io::Result<Then>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        warn!(pool = %self.ctx.pool, "request id {}: no child could take it after {} tries: answering 503", req.id, self.attempts);
        let none = Local::Unavailable("no PHP process could take the request");
        answer(client, req, none, answered).await?;
        Ok(after_answer(client, req))
    }
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
