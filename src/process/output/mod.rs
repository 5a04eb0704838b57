//! What children write to their own stdout and stderr outside FastCGI:
//! php-fpm's `catch_workers_output` and `decorate_workers_output`
//! (`sapi/fpm/fpm/fpm_stdio.c`).
//!
//! Owns: the fds a child gets as its fd 1 and fd 2 ([`open`]), fpmd's
//! reading ends and the task that reads them ([`forward`]), line splitting
//! ([`Lines`]), the per-writer rate limit ([`TokenBucket`]) and the log
//! lines they become. Must not touch: processes (`spawn` forks, the
//! supervisor decides), FastCGI, dispatch state. The one thing it needs to
//! hear from the pool is that a php-cgi is given its first request
//! ([`OutputHandle::close`]).
//!
//! # What is logged
//!
//! - `catch_workers_output = true`: fd 1 and fd 2 are two unix sockets with
//!   `SO_PASSCRED`, so each read names the process that wrote it (even the
//!   pre-forked children of one php-cgi parent, which share the sockets).
//!   Every line is logged at WARNING, as php-fpm:
//!   `[pool www] child 1234 said into stderr: "text"`, or with
//!   `decorate_workers_output = false` the child's text alone (no time
//!   stamp or level either; php-fpm's raw mode).
//! - `catch_workers_output = false` (the default): fd 1 is `/dev/null`, as
//!   php-fpm's. fd 2 is a socket as above, and what arrives there is logged
//!   only if it is start-up output, so that a broken php.ini (a missing
//!   extension, a bad ini value) stays visible although fpmd, unlike
//!   php-fpm's master, never runs PHP's start-up itself:
//!   - `pm.spawn = "prefork"`: lines from the php-cgi parent, the process
//!     fpmd spawned. It runs no script: what it writes is about its start
//!     (or its children). Lines from its children are thrown away.
//!   - `pm.spawn = "exec"`: what the child wrote before it was given its
//!     first request (php-cgi's start-up is over before it accepts one):
//!     the bytes queued on its stderr at the moment the pool hands it out.
//!     After that, nothing.
//!
//!   Thrown-away output is read and dropped at once, without line
//!   splitting; a child's writes never fail or block for it.
//!
//! # Where a line ends
//!
//! As php-fpm's master (`fpm_stdio_child_said`): at a newline; at
//! php-fpm's flush marker `"\0fscf\0"` in the text (php-fpm's child writes
//! it after each request; a script may write it too); and, with
//! `catch_workers_output` on, at the end of each request
//! ([`OutputHandle::request_ended`]: what the child wrote before it ended
//! the request is read first). A line still unfinished after a second is
//! logged as it is.
//!
//! # Limits
//!
//! A log line of a child's text is at most `log_limit` bytes
//! ([`crate::log::limit`], default 1024) with its prefix and newline, as
//! php-fpm counts it; a longer line of the child's is continued on the
//! next log line, each piece decorated (in fpmd's format each but the last
//! marked ` (continued)`; in php-fpm's unmarked, as php-fpm writes them).
//! Raw lines are at most `log_limit` - 1 bytes of text. Each writer pid has a token bucket of
//! [`CHILD_RATE`] (lines and bytes per second, with bursts); lines beyond it
//! are dropped, and one summary line per second per writer says how many
//! lines and bytes were dropped. Text is escaped ([`crate::log::escape`]).

mod lines;
mod stdio;
#[cfg(test)]
mod tests;

use crate::config::{PoolConfig, Spawn};
use crate::log::{escape, escape_controls, RAW_TARGET};
pub use lines::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use stdio::*;
use tokio::net::UnixStream;
use tokio::sync::Notify;
use tracing::warn;

/// How often a writer's dropped lines are summed up in one log line, and
/// how long an unfinished line (no newline yet) waits before it is logged
/// as it is.
const SUMMARY_EVERY: Duration = Duration::from_secs(1);

/// Bytes read per `recvmsg` (one buffer, shared by every child's task on
/// the runtime's thread).
const READ_BUF: usize = 64 * 1024;

/// Request ends kept for the reader at most ([`OutputHandle::request_ended`]):
/// far more than one turn of the runtime can bring.
const ENDED_KEPT: usize = 4096;

/// Reads per wake-up before the task yields to the rest of fpmd (a child
/// that writes without pause must not starve the dispatcher).
const READS_PER_TURN: usize = 4;

/// One of a child's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// `"stdout"` / `"stderr"`, as in php-fpm's `said into stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    fn index(self) -> usize {
        match self {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        }
    }
}

// ---------------------------------------------------------------------------
// Start-up window
// ---------------------------------------------------------------------------

/// What the pool tells the task that reads a spawned php-cgi's output
/// ([`forward`]), for it and the children it forks:
///
/// - its start-up window, open while the php-cgi has not yet been given a
///   request; the pool closes it ([`OutputHandle::close`]) when it hands
///   the php-cgi its first request (under `pm.spawn = "exec"` it ends what
///   is logged of its stderr with `catch_workers_output = false`).
///   Closing takes note of how many bytes of stderr are queued at that
///   instant: those were written while the php-cgi started and are
///   logged, anything after is the scripts'. Closing twice is a no-op
///   that costs one atomic load.
/// - that a child ended a request ([`OutputHandle::request_ended`]), where
///   php-fpm's child writes its flush marker.
///
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct OutputHandle(Arc<WindowState>);

#[derive(Debug, Default)]
struct WindowState {
    closed: AtomicBool,
    notify: Notify,
    /// fpmd's reading end of the child's stderr, while the reader has it
    /// open (-1 before and after).
    stderr: std::sync::atomic::AtomicI32,
    /// Bytes queued on it when the window closed.
    queued_at_close: std::sync::atomic::AtomicUsize,
    /// fpmd's reading end of the child's stdout, as `stderr`.
    stdout: std::sync::atomic::AtomicI32,
    /// Requests ended and not yet seen by the reader: the child's pid and
    /// the bytes queued on stdout and stderr when it ended.
    ended: std::sync::Mutex<Vec<(i32, [usize; 2])>>,
    ended_notify: Notify,
}

impl OutputHandle {
    pub fn new() -> OutputHandle {
        let w = OutputHandle::default();
        w.0.stderr.store(-1, Ordering::Relaxed);
        w.0.stdout.store(-1, Ordering::Relaxed);
        w
    }

    /// The child `pid` ended a request (its FastCGI `END_REQUEST` was
    /// read): the reader is to read what is queued now on its stdout and
    /// stderr (written before the end) and then end the child's
    /// unfinished lines, as php-fpm's master ends them at the flush
    /// marker its child writes after each request (`fpm_main.c`,
    /// `fpm_stdio_flush_child`). Two `FIONREAD`s; the pool calls it only
    /// with `catch_workers_output` on.
    pub fn request_ended(&self, pid: i32) {
        // Same runtime thread as the reader: the fds stay what they are
        // between the loads and the ioctls (see `close`).
        let queued_on = |fd: &std::sync::atomic::AtomicI32| match fd.load(Ordering::Acquire) {
            fd if fd >= 0 => queued(fd),
            _ => 0,
        };
        let q = [queued_on(&self.0.stdout), queued_on(&self.0.stderr)];
        let mut ended = self.0.ended.lock().unwrap();
        // Bounded: a reader that has ended takes none.
        if ended.len() < ENDED_KEPT {
            ended.push((pid, q));
        }
        drop(ended);
        self.0.ended_notify.notify_one();
    }

    /// The php-cgi is given its first request: its start-up is over.
    pub fn close(&self) {
        if !self.0.closed.load(Ordering::Relaxed) && !self.0.closed.swap(true, Ordering::AcqRel) {
            // The reader and this run on the same runtime thread, so the fd
            // cannot be closed (and reused) between the load and the ioctl.
            let fd = self.0.stderr.load(Ordering::Acquire);
            if fd >= 0 {
                self.0.queued_at_close.store(queued(fd), Ordering::Release);
            }
            self.0.notify.notify_one();
        }
    }

    /// Whether [`OutputHandle::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Acquire)
    }

    async fn closed(&self) {
        if !self.is_closed() {
            self.0.notify.notified().await;
        }
    }
}

// ---------------------------------------------------------------------------
// The reading task
// ---------------------------------------------------------------------------

/// What one spawned php-cgi's output task logs, from its pool's settings.
struct Policy {
    pool: Arc<str>,
    catch: bool,
    decorate: bool,
    prefork: bool,
    /// The pid fpmd spawned (prefork: the php-cgi parent).
    spawned: i32,
}

/// One writer's state.
struct Writer {
    bucket: TokenBucket,
    lines: [Lines; 2],
}

struct Output {
    policy: Policy,
    writers: HashMap<i32, Writer>,
    /// exec, catch off: the child has not completed a request yet.
    window_open: bool,
    next_tick: Option<Instant>,
}

thread_local! {
    static BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_BUF]);
}

/// Starts the task that reads what the php-cgi fpmd spawned as `spawned`
/// (and its children, and whatever they start) writes to fd 1 and fd 2,
/// and logs it as `config` says (see the module documentation). The task
/// ends when every writer has closed them. `window` is closed by the
/// pool when it hands that php-cgi its first request.
pub fn forward(config: &PoolConfig, spawned: i32, readers: Readers, window: OutputHandle) {
    let policy = Policy {
        pool: config.name.as_str().into(),
        catch: config.catch_workers_output,
        decorate: config.decorate_workers_output,
        prefork: config.pm.spawn == Spawn::Prefork,
        spawned,
    };
    let register =
        |fd: OwnedFd| match UnixStream::from_std(std::os::unix::net::UnixStream::from(fd)) {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(pool = %policy.pool, pid = spawned, "cannot read the child's output: {e}");
                None
            }
        };
    let socks = [readers.stdout.and_then(register), register(readers.stderr)];
    let out = Output {
        policy,
        writers: HashMap::new(),
        window_open: true,
        next_tick: None,
    };
    tokio::spawn(out.run(socks, window));
}

enum Wake {
    Readable(usize, io::Result<()>),
    WindowClosed,
    RequestEnded,
    Tick,
}

/// What a burst of reads ended with.
enum Turn {
    /// Read [`READS_PER_TURN`] times; there may be more.
    More,
    /// Nothing more for now.
    Idle,
    /// Every writer closed it, or it failed.
    Closed,
}

async fn readable(sock: &Option<UnixStream>) -> io::Result<()> {
    match sock {
        Some(s) => s.readable().await,
        None => std::future::pending().await,
    }
}

impl Output {
    async fn run(mut self, mut socks: [Option<UnixStream>; 2], window: OutputHandle) {
        let watch_window = !self.policy.catch && !self.policy.prefork;
        if let Some(sock) = &socks[1] {
            window.0.stderr.store(sock.as_raw_fd(), Ordering::Release);
        }
        if let Some(sock) = &socks[0] {
            window.0.stdout.store(sock.as_raw_fd(), Ordering::Release);
        }
        while socks.iter().any(Option::is_some) {
            let tick = self.next_tick;
            let wake = tokio::select! {
                r = readable(&socks[0]) => Wake::Readable(0, r),
                r = readable(&socks[1]) => Wake::Readable(1, r),
                () = window.closed(), if watch_window && self.window_open => Wake::WindowClosed,
                () = window.0.ended_notify.notified() => Wake::RequestEnded,
                () = crate::sys::timer::sleep_until_opt(tick.map(tokio::time::Instant::from_std)), if tick.is_some() => Wake::Tick,
            };
            match wake {
                Wake::Readable(i, r) => {
                    let stream = if i == 0 {
                        Stream::Stdout
                    } else {
                        Stream::Stderr
                    };
                    let turn = match (r, &socks[i]) {
                        (Ok(()), Some(sock)) => self.read_turn(sock, stream, usize::MAX).0,
                        _ => Turn::Closed,
                    };
                    match turn {
                        Turn::Closed => {
                            let fd = if i == 1 {
                                &window.0.stderr
                            } else {
                                &window.0.stdout
                            };
                            fd.store(-1, Ordering::Release);
                            socks[i] = None;
                            self.flush_stream(stream, Instant::now());
                        }
                        Turn::More => tokio::task::yield_now().await,
                        Turn::Idle => {}
                    }
                }
                Wake::WindowClosed => {
                    // What was queued when the window closed was written
                    // before the first request: log it, then stop logging.
                    if let Some(sock) = &socks[1] {
                        let left = window.0.queued_at_close.load(Ordering::Acquire);
                        self.read_queued(sock, Stream::Stderr, left);
                    }
                    self.window_open = false;
                    self.flush_stream(Stream::Stderr, Instant::now());
                }
                Wake::RequestEnded => {
                    let ended = std::mem::take(&mut *window.0.ended.lock().unwrap());
                    // Started with catch off (a reload turned it on for the
                    // running children): nothing of theirs is logged.
                    let catch = self.policy.catch;
                    for (pid, queued) in ended.into_iter().filter(|_| catch) {
                        for (i, stream) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate()
                        {
                            if let Some(sock) = &socks[i] {
                                self.read_queued(sock, stream, queued[i]);
                            }
                        }
                        self.end_lines_of(pid, Instant::now());
                    }
                }
                Wake::Tick => self.tick(Instant::now()),
            }
            if self.next_tick.is_none() && !self.writers.is_empty() {
                self.next_tick = Some(Instant::now() + SUMMARY_EVERY);
            }
        }
        let now = Instant::now();
        self.flush_stream(Stream::Stdout, now);
        self.flush_stream(Stream::Stderr, now);
        self.tick(now);
    }

    /// Reads the `left` bytes that were queued on `sock` at some instant
    /// (fewer if fewer are there), and no more.
    fn read_queued(&mut self, sock: &UnixStream, stream: Stream, mut left: usize) {
        while left > 0 {
            let (turn, n) = self.read_turn(sock, stream, left);
            left = left.saturating_sub(n);
            if n == 0 || !matches!(turn, Turn::More) {
                break;
            }
        }
    }

    /// Up to [`READS_PER_TURN`] reads of at most `limit` bytes in all, each
    /// logged or dropped by [`Output::feed`]; how it ended and the bytes
    /// read.
    fn read_turn(&mut self, sock: &UnixStream, stream: Stream, limit: usize) -> (Turn, usize) {
        let mut read = 0;
        for _ in 0..READS_PER_TURN {
            if read >= limit {
                return (Turn::More, read);
            }
            let got = BUF.with(|buf| {
                let mut buf = buf.borrow_mut();
                let cap = (limit - read).min(buf.len());
                match sock.try_io(tokio::io::Interest::READABLE, || {
                    recv(sock.as_raw_fd(), &mut buf[..cap])
                }) {
                    Ok((0, _)) => Err(Turn::Closed),
                    Ok((n, pid)) => {
                        self.feed(
                            stream,
                            pid.unwrap_or(self.policy.spawned),
                            &buf[..n],
                            Instant::now(),
                        );
                        Ok(n)
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(Turn::Idle),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
                    Err(_) => Err(Turn::Closed),
                }
            });
            match got {
                Ok(n) => read += n,
                Err(turn) => return (turn, read),
            }
        }
        (Turn::More, read)
    }

    /// Whether what `pid` writes is logged (see the module documentation).
    fn wanted(&self, pid: i32) -> bool {
        self.policy.catch
            || if self.policy.prefork {
                pid == self.policy.spawned
            } else {
                self.window_open
            }
    }

    fn feed(&mut self, stream: Stream, pid: i32, data: &[u8], now: Instant) {
        if !self.wanted(pid) {
            return;
        }
        let policy = &self.policy;
        let max = line_budget(policy, pid, stream);
        let w = self.writers.entry(pid).or_insert_with(|| Writer {
            bucket: TokenBucket::new(CHILD_RATE, now),
            lines: Default::default(),
        });
        w.lines[stream.index()].feed(data, max, now, &mut w.bucket, &mut |text, continued| {
            emit(policy, pid, stream, text, continued)
        });
    }

    /// Logs the unfinished lines of `pid` (it ended a request).
    fn end_lines_of(&mut self, pid: i32, now: Instant) {
        let policy = &self.policy;
        if let Some(w) = self.writers.get_mut(&pid) {
            for stream in [Stream::Stdout, Stream::Stderr] {
                w.lines[stream.index()].flush(
                    now,
                    Duration::ZERO,
                    &mut w.bucket,
                    &mut |text, continued| emit(policy, pid, stream, text, continued),
                );
            }
        }
    }

    /// Logs the unfinished lines of `stream` (it ended).
    fn flush_stream(&mut self, stream: Stream, now: Instant) {
        let policy = &self.policy;
        for (pid, w) in self.writers.iter_mut() {
            let pid = *pid;
            w.lines[stream.index()].flush(
                now,
                Duration::ZERO,
                &mut w.bucket,
                &mut |text, continued| emit(policy, pid, stream, text, continued),
            );
        }
    }

    /// Once a second while any writer is known: summaries of dropped lines,
    /// unfinished lines that waited a second, and forgetting quiet writers.
    fn tick(&mut self, now: Instant) {
        let policy = &self.policy;
        self.writers.retain(|pid, w| {
            let pid = *pid;
            for stream in [Stream::Stdout, Stream::Stderr] {
                w.lines[stream.index()].flush(now, SUMMARY_EVERY, &mut w.bucket, &mut |text, continued| emit(policy, pid, stream, text, continued));
            }
            if let Some((d, since)) = w.bucket.take_dropped() {
                let r = CHILD_RATE;
                warn!(
                    "[pool {}] child {pid} wrote more than fpmd logs: {} lines ({} bytes) dropped in the last {:.1} s (per child: {} lines/s, {} KiB/s, bursts of {} lines, {} KiB)",
                    policy.pool,
                    d.lines,
                    d.bytes,
                    now.saturating_duration_since(since).as_secs_f64().max(0.1),
                    r.lines_per_sec,
                    r.bytes_per_sec / 1024,
                    r.burst_lines,
                    r.burst_bytes / 1024
                );
                return true;
            }
            !(w.lines.iter().all(Lines::is_empty) && w.bucket.is_full(now))
        });
        self.next_tick = (!self.writers.is_empty()).then(|| now + SUMMARY_EVERY);
    }
}

/// The most bytes of a child's text in one log line of `pid`'s `stream`:
/// `log_limit` less the newline and what [`said`] writes around the text
/// (php-fpm's `zlog_stream_buf_append`: the time stamp and level, `[pool
/// www] child 1234 said into stderr: `, the quotes; in fpmd's format room
/// for ` (continued)` too). At least 1.
fn line_budget(policy: &Policy, pid: i32, stream: Stream) -> usize {
    let limit = crate::log::limit();
    let around = if policy.catch && !policy.decorate {
        0
    } else {
        let continued = match crate::log::current_format() {
            crate::config::LogFormat::PhpFpm => 0,
            crate::config::LogFormat::Fpmd => CONTINUED.len(),
        };
        crate::log::prefix_len("WARNING")
            + "[pool ".len()
            + policy.pool.len()
            + "] child ".len()
            + decimal_len(pid)
            + " said into ".len()
            + stream.as_str().len()
            + ": \"\"".len()
            + continued
    };
    limit.saturating_sub(1 + around).max(1)
}

/// Digits of `n` in decimal, with its sign.
fn decimal_len(n: i32) -> usize {
    let sign = usize::from(n < 0);
    sign + n.unsigned_abs().checked_ilog10().unwrap_or(0) as usize + 1
}

/// What fpmd's format writes after a piece of a longer line.
const CONTINUED: &str = " (continued)";

/// One log line of a child's text (php-fpm's `fpm_stdio_child_said`).
fn emit(policy: &Policy, pid: i32, stream: Stream, text: &[u8], continued: bool) {
    let decorate = !policy.catch || policy.decorate;
    said(&policy.pool, decorate, pid, stream, text, continued);
}

/// Logs one line of text that `pool`'s child `pid` wrote on `stream`, as
/// php-fpm's master logs it (`fpm_stdio_child_said`): `[pool www] child
/// 1234 said into stderr: "text"`, in fpmd's format with ` (continued)`
/// after a line cut in pieces; with `decorate` off
/// (`decorate_workers_output = false`) the text alone. Control characters
/// are escaped, but in a raw line under `log_format = "php-fpm"` (php-fpm
/// writes those byte for byte; invalid UTF-8 becomes U+FFFD).
pub fn said(pool: &str, decorate: bool, pid: i32, stream: Stream, text: &[u8], continued: bool) {
    let php_fpm = crate::log::current_format() == crate::config::LogFormat::PhpFpm;
    if !decorate && php_fpm {
        warn!(target: RAW_TARGET, "{}", String::from_utf8_lossy(text));
    } else if !decorate {
        warn!(target: RAW_TARGET, "{}", escape_controls(text));
    } else {
        let more = if continued && !php_fpm { CONTINUED } else { "" };
        warn!(
            "[pool {pool}] child {pid} said into {}: \"{}\"{more}",
            stream.as_str(),
            escape(text)
        );
    }
}
