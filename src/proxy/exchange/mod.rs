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

mod downstream;
#[cfg(test)]
mod tests;
mod upstream;

use std::future::Future;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::client::{ClientConn, ClientError};
use super::php_message::PhpMessages;
use super::request::{Owed, Request};
use super::verdict::{BodyEnd, ChildEnd, ClientEnd, Outcome, Sent};
use crate::fastcgi::cgi::Head;
use crate::pool::slots::Death;
use crate::pool::ChildConn;
use downstream::{tell_no_input_file, Downstream, ToClient};
use upstream::{UpEnd, Upstream};

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
    /// The script called `fastcgi_finish_request()`: the web server got
    /// its whole answer then (see [`crate::proxy::sapi`]).
    pub finished: bool,
    /// The request's peak memory and CPU times, as its `sapi.php`
    /// reported them (the lease turns them into a
    /// [`crate::proxy::sapi::Usage`]).
    pub end: Option<crate::proxy::sapi::End>,
    /// The pool's admin values a `.user.ini` changed for this request and
    /// PHP could not set back, as its `sapi.php` said
    /// ([`crate::proxy::sapi::Event::AdminChanged`]).
    pub admin_changed: Vec<String>,
    /// The response code the script set after its head went out, as its
    /// `sapi.php` said ([`crate::proxy::sapi::Event::Status`]).
    pub status: Option<u16>,
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
    /// `request_slowlog_timeout` passed (once per request).
    Slow { elapsed: Duration },
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
    /// `request_terminate_timeout_track_finished`.
    pub track_finished: bool,
}

/// Runs the exchange for `req`, whose head was written on `conn`.
/// `death` is the slot's
/// [`crate::pool::slots::Death`] and its epoch when leased: once the child
/// died, fpmd shuts down its own reading side of the connection, so what
/// the child wrote before it died is still read, then the end comes even
/// when a process the script left behind holds the child's side open;
/// `head` (for the access log) collects the head of the child's response
/// as it is forwarded; `on` hears of the slowlog timeout passing while the
/// request runs.
///
/// In three steps: the two pumps (`Upstream::pump`, web server to
/// child; `Downstream::pump`, child to web server) run concurrently
/// under the timers (`ExchangeCtx::relay`), then `ExchangeCtx::finish`
/// sends what was held back and judges how each side ended.
#[allow(clippy::too_many_arguments)]
pub async fn run<R, W>(
    conn: &mut ChildConn,
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
        death,
        child_fd: child_r.as_raw_fd(),
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
    messages.sapi = req.sapi_token.map(crate::proxy::sapi::Lines::new);
    let finish_flag = AtomicBool::new(false);
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
        finished: None,
        finish_flag: &finish_flag,
        keep_conn: req.keep_conn,
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
    let relayed = ctx
        .relay(up.pump(), down.pump(), &finish_flag, &mut on)
        .await;
    ctx.finish(down, req, relayed).await
}

/// What the steps of one exchange share, fixed when it starts.
struct ExchangeCtx<'d> {
    /// The request's id, on both connections.
    id: u16,
    started: Instant,
    timers: Timers,
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
}

impl ExchangeCtx<'_> {
    /// Polls both pumps under the request's timers until the child's
    /// answer ends (`down`), it times out (`request_terminate_timeout`), or
    /// it breaks the protocol. On the way: the web server's pump may end
    /// first (its end is kept); the child's death shuts down fpmd's reading
    /// side; the slowlog timeout tells `on`.
    async fn relay<U, D>(
        &self,
        up: U,
        down: D,
        finished: &AtomicBool,
        on: &mut impl FnMut(Notice),
    ) -> Relayed
    where
        U: Future<Output = UpEnd>,
        D: Future<Output = (ChildEnd, Option<String>)>,
    {
        tokio::pin!(up);
        tokio::pin!(down);
        let mut up_end: Option<UpEnd> = None;
        let now = tokio::time::Instant::now();
        let slow_at = self.timers.slowlog.map(|d| now + d);
        let slow_timer = crate::sys::timer::sleep_until_opt(slow_at);
        tokio::pin!(slow_timer);
        let mut slow_logged = false;
        let mut term_at = self.timers.terminate.map(|d| now + d);
        let term_timer = crate::sys::timer::sleep_until_opt(term_at);
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
                    if finished.load(Ordering::Relaxed) && !self.timers.track_finished {
                        // php-fpm checks a finished request only with
                        // request_terminate_timeout_track_finished.
                        term_at = None;
                        continue;
                    }
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
                    on(Notice::Slow { elapsed: self.started.elapsed() });
                }
            }
        };
        Relayed {
            child,
            child_error,
            up_end,
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
        let finished = down.finished.is_some();
        let (mut client, body, client_error) = ends(relayed.up_end, down.out.gone, req);
        if finished {
            // After fastcgi_finish_request() the web server may go: its
            // answer is whole, and the script goes on (php-fpm).
            client = ClientEnd::Open;
        }
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
            php_messages,
            finish_request_missing: down.messages.finish_request_missing,
            no_input_file,
            finished,
            end: down.messages.end,
            admin_changed: std::mem::take(&mut down.messages.admin_changed),
            status: down.messages.status,
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
