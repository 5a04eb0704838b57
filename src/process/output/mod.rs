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
//! ([`StartupWindow::close`]).
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
//! # Limits
//!
//! A line is at most [`MAX_LINE`] bytes of the child's text (php-fpm's
//! `log_limit` default); a longer one is split into several log lines, each
//! but the last marked ` (continued)` when decorated (raw lines are split
//! unmarked, as php-fpm's). Each writer pid has a token bucket of
//! [`CHILD_RATE`] (lines and bytes per second, with bursts); lines beyond it
//! are dropped, and one summary line per second per writer says how many
//! lines and bytes were dropped. Text is escaped ([`crate::log::escape`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UnixStream;
use tokio::sync::Notify;
use tracing::warn;

use crate::config::{PoolConfig, Spawn};
use crate::log::{escape, escape_controls, RAW_TARGET};

/// Longest line of a child's text in one log line, in bytes (php-fpm's
/// default `log_limit`, 1024). Longer lines are split.
pub const MAX_LINE: usize = 1024;

/// The rate limit of each writer (pid), whatever `catch_workers_output`
/// says: 1000 lines/s and 128 KiB/s sustained, bursts of 2000 lines and
/// 256 KiB. A child that logs a few lines per request stays far below it;
/// a script that floods stderr adds at most the burst plus 128 KiB (and
/// 1000 lines' prefixes) per second to fpmd's log, however fast it writes.
pub const CHILD_RATE: Rate = Rate {
    lines_per_sec: 1000,
    bytes_per_sec: 128 * 1024,
    burst_lines: 2000,
    burst_bytes: 256 * 1024,
};

/// How often a writer's dropped lines are summed up in one log line, and
/// how long an unfinished line (no newline yet) waits before it is logged
/// as it is.
const SUMMARY_EVERY: Duration = Duration::from_secs(1);

/// Bytes read per `recvmsg` (one buffer, shared by every child's task on
/// the runtime's thread).
const READ_BUF: usize = 64 * 1024;

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
// The fds
// ---------------------------------------------------------------------------

/// The child's ends: what `spawn` makes its fd 1 and fd 2 (blocking, as a
/// pipe would be; not close-on-exec once dup'ed there).
#[derive(Debug)]
pub struct ChildStdio {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// fpmd's ends (non-blocking, close-on-exec), for [`forward`]. `stdout` is
/// `None` when it is not caught (the child's fd 1 is `/dev/null`).
#[derive(Debug)]
pub struct Readers {
    stdout: Option<OwnedFd>,
    stderr: OwnedFd,
}

/// Creates a child's fd 1 and fd 2 and fpmd's ends of them: with `catch`
/// (`catch_workers_output`), one `SO_PASSCRED` unix socket per stream;
/// without, `/dev/null` for stdout and a socket for stderr (for start-up
/// output, see the module documentation). Errors: socketpair, setsockopt,
/// fcntl or opening `/dev/null` failed (out of fds).
pub fn open(catch: bool) -> io::Result<(ChildStdio, Readers)> {
    let (err_r, err_w) = socket()?;
    let (out_r, out_w) = if catch {
        let (r, w) = socket()?;
        (Some(r), w)
    } else {
        (
            None,
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")?
                .into(),
        )
    };
    Ok((
        ChildStdio {
            stdout: out_w,
            stderr: err_w,
        },
        Readers {
            stdout: out_r,
            stderr: err_r,
        },
    ))
}

/// A unix stream socketpair: fpmd's end (non-blocking, `SO_PASSCRED`,
/// shut for writing), the child's end (blocking).
fn socket() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType};
    let (r, w) = socket::socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )?;
    socket::setsockopt(&r, socket::sockopt::PassCred, &true)?;
    nix::fcntl::fcntl(
        w.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )?;
    let _ = socket::shutdown(r.as_raw_fd(), socket::Shutdown::Write);
    Ok((r, w))
}

/// Reads what children wrote on one socket: the byte count and the pid of
/// the process that wrote them (from `SCM_CREDENTIALS`; the kernel never
/// merges two writers' bytes into one read). `Ok((0, _))`: every writer
/// has closed it. Errors: `WouldBlock` when nothing is there.
fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<i32>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(libc::ucred);
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_DONTWAIT)?;
    let pid = msg.cmsgs()?.find_map(|c| match c {
        ControlMessageOwned::ScmCredentials(cred) => Some(cred.pid()),
        _ => None,
    });
    Ok((msg.bytes, pid))
}

/// Bytes waiting in a socket's receive queue (`FIONREAD`); 0 on error.
fn queued(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into `n`.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    if r < 0 {
        0
    } else {
        n.max(0) as usize
    }
}

// ---------------------------------------------------------------------------
// Start-up window
// ---------------------------------------------------------------------------

/// Open while a php-cgi has not yet been given a request; the pool closes
/// it when it hands the php-cgi its first request (under
/// `pm.spawn = "exec"` it ends what is logged of its stderr with
/// `catch_workers_output = false`). Closing takes note of how many bytes
/// of stderr are queued at that instant: those were written while the
/// php-cgi started and are logged, anything after is the scripts'. Cheap
/// to clone; closing twice is a no-op that costs one atomic load.
#[derive(Debug, Clone, Default)]
pub struct StartupWindow(Arc<WindowState>);

#[derive(Debug, Default)]
struct WindowState {
    closed: AtomicBool,
    notify: Notify,
    /// fpmd's reading end of the child's stderr, while the reader has it
    /// open (-1 before and after).
    stderr: std::sync::atomic::AtomicI32,
    /// Bytes queued on it when the window closed.
    queued_at_close: std::sync::atomic::AtomicUsize,
}

impl StartupWindow {
    pub fn new() -> StartupWindow {
        let w = StartupWindow::default();
        w.0.stderr.store(-1, Ordering::Relaxed);
        w
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

    /// Whether [`StartupWindow::close`] was called.
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
// Rate limit
// ---------------------------------------------------------------------------

/// A token bucket's figures: sustained lines and bytes per second, and the
/// burst (the bucket's size, and what a writer that was quiet may write at
/// once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub lines_per_sec: u32,
    pub bytes_per_sec: u32,
    pub burst_lines: u32,
    pub burst_bytes: u32,
}

/// Lines and bytes dropped by a [`TokenBucket`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    pub lines: u64,
    pub bytes: u64,
}

/// One writer's rate limit: a line of `len` bytes takes one line token and
/// `len` byte tokens; both refill continuously at the [`Rate`] up to the
/// burst. Pure: time comes in as `now` (never read from the clock), and a
/// `now` earlier than one seen before counts as no time passing.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: Rate,
    lines: f64,
    bytes: f64,
    at: Instant,
    dropped: Dropped,
    /// When the first of the drops not yet reported happened.
    dropped_since: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate: Rate, now: Instant) -> TokenBucket {
        TokenBucket {
            rate,
            lines: rate.burst_lines as f64,
            bytes: rate.burst_bytes as f64,
            at: now,
            dropped: Dropped::default(),
            dropped_since: None,
        }
    }

    fn refill(&mut self, now: Instant) {
        if now <= self.at {
            return;
        }
        let dt = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        self.lines =
            (self.lines + dt * self.rate.lines_per_sec as f64).min(self.rate.burst_lines as f64);
        self.bytes =
            (self.bytes + dt * self.rate.bytes_per_sec as f64).min(self.rate.burst_bytes as f64);
    }

    /// Takes the tokens of one line of `len` bytes if they are there
    /// (`true`: log it); otherwise counts it as dropped (`false`).
    pub fn admit(&mut self, now: Instant, len: usize) -> bool {
        self.refill(now);
        if self.lines >= 1.0 && self.bytes >= len as f64 {
            self.lines -= 1.0;
            self.bytes -= len as f64;
            true
        } else {
            self.drop_bulk(now, 1, len as u64);
            false
        }
    }

    /// No line could be admitted at `now` (less than one line token or one
    /// byte token left): the caller may drop a whole read without
    /// splitting it.
    pub fn exhausted(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.lines < 1.0 || self.bytes < 1.0
    }

    /// The bucket is full again at `now` (the writer has been quiet long
    /// enough to be forgotten).
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.lines >= self.rate.burst_lines as f64 && self.bytes >= self.rate.burst_bytes as f64
    }

    /// Counts `lines` lines and `bytes` bytes as dropped without looking at
    /// the tokens.
    pub fn drop_bulk(&mut self, now: Instant, lines: u64, bytes: u64) {
        if lines == 0 && bytes == 0 {
            return;
        }
        self.dropped.lines += lines;
        self.dropped.bytes += bytes;
        self.dropped_since.get_or_insert(now);
    }

    /// What was dropped since the last call, and since when; `None` when
    /// nothing was.
    pub fn take_dropped(&mut self) -> Option<(Dropped, Instant)> {
        let since = self.dropped_since.take()?;
        Some((std::mem::take(&mut self.dropped), since))
    }
}

// ---------------------------------------------------------------------------
// Lines
// ---------------------------------------------------------------------------

/// One writer's stream cut into log lines: bytes in, lines of at most
/// [`MAX_LINE`] bytes out (without the `\n`, and without a `\r` before
/// it; empty lines are skipped), each admitted by the writer's
/// [`TokenBucket`]. Pure apart from the `emit` callback, which gets the
/// line and whether it is a piece of a longer line that continues.
#[derive(Debug, Default)]
pub struct Lines {
    /// The unfinished line (shorter than MAX_LINE, or exactly that long).
    partial: Vec<u8>,
    /// When `partial` got its first byte.
    since: Option<Instant>,
    /// The rest of the current line is dropped (its start was).
    skipping: bool,
}

impl Lines {
    /// Cuts `data` into lines; complete ones go to `emit` if the bucket
    /// admits them, the unfinished tail is kept for the next call. Once the
    /// bucket is empty, the rest of `data` is counted as dropped without
    /// being split (cheap for a flood), and so is the rest of a line whose
    /// start was dropped.
    pub fn feed(
        &mut self,
        mut data: &[u8],
        now: Instant,
        bucket: &mut TokenBucket,
        emit: &mut dyn FnMut(&[u8], bool),
    ) {
        while !data.is_empty() {
            if self.skipping {
                match memchr::memchr(b'\n', data) {
                    None => return bucket.drop_bulk(now, 0, data.len() as u64),
                    Some(i) => {
                        bucket.drop_bulk(now, 0, i as u64 + 1);
                        data = &data[i + 1..];
                        self.skipping = false;
                        continue;
                    }
                }
            }
            if bucket.exhausted(now) {
                let ends = memchr::memchr_iter(b'\n', data).count() as u64;
                let tail = !data.ends_with(b"\n");
                bucket.drop_bulk(
                    now,
                    ends + u64::from(tail),
                    (self.partial.len() + data.len()) as u64,
                );
                self.partial.clear();
                self.since = None;
                self.skipping = tail;
                return;
            }
            match memchr::memchr(b'\n', data) {
                Some(i) => {
                    self.push(&data[..i], true, now, bucket, emit);
                    data = &data[i + 1..];
                }
                None => {
                    self.push(data, false, now, bucket, emit);
                    return;
                }
            }
        }
    }

    /// Adds `bytes` to the current line; `end`: a newline followed them.
    fn push(
        &mut self,
        mut bytes: &[u8],
        end: bool,
        now: Instant,
        bucket: &mut TokenBucket,
        emit: &mut dyn FnMut(&[u8], bool),
    ) {
        // Whole MAX_LINE pieces while more than one piece is there.
        while self.partial.len() + bytes.len() > MAX_LINE {
            if self.partial.is_empty() {
                let cut = char_cut(bytes, MAX_LINE);
                Self::line(&bytes[..cut], true, now, bucket, emit);
                bytes = &bytes[cut..];
            } else {
                // One byte past the limit, so that char_cut sees what
                // follows it (there are that many: the loop's condition).
                let take = MAX_LINE + 1 - self.partial.len();
                self.partial.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                let cut = char_cut(&self.partial, MAX_LINE);
                Self::line(&self.partial[..cut], true, now, bucket, emit);
                self.partial.drain(..cut);
            }
        }
        if end {
            if self.partial.is_empty() {
                Self::line(bytes, false, now, bucket, emit);
            } else {
                self.partial.extend_from_slice(bytes);
                Self::line(&self.partial, false, now, bucket, emit);
                self.partial.clear();
            }
            self.since = None;
        } else {
            self.partial.extend_from_slice(bytes);
            if self.partial.is_empty() {
                self.since = None;
            } else {
                self.since.get_or_insert(now);
            }
        }
    }

    fn line(
        mut text: &[u8],
        continued: bool,
        now: Instant,
        bucket: &mut TokenBucket,
        emit: &mut dyn FnMut(&[u8], bool),
    ) {
        if !continued {
            text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.is_empty() {
                return;
            }
        }
        if bucket.admit(now, text.len()) {
            emit(text, continued);
        }
    }

    /// Logs the unfinished line as it is when it has waited `after` or
    /// longer (`Duration::ZERO`: now, e.g. at the end of the stream).
    pub fn flush(
        &mut self,
        now: Instant,
        after: Duration,
        bucket: &mut TokenBucket,
        emit: &mut dyn FnMut(&[u8], bool),
    ) {
        let stale = self
            .since
            .is_some_and(|t| now.saturating_duration_since(t) >= after);
        if stale {
            Self::line(&self.partial, false, now, bucket, emit);
            self.partial.clear();
            self.since = None;
        }
        if after.is_zero() {
            self.skipping = false;
        }
    }

    /// Nothing unfinished is kept.
    pub fn is_empty(&self) -> bool {
        self.partial.is_empty() && !self.skipping
    }
}

/// Where to cut `bytes` (longer than `max`) at most `max` bytes in: before
/// a UTF-8 continuation byte if one is at `max` (up to 3 bytes back), so a
/// character is not split across two log lines.
fn char_cut(bytes: &[u8], max: usize) -> usize {
    let mut cut = max;
    while cut > max.saturating_sub(3) && bytes.get(cut).is_some_and(|b| b & 0xc0 == 0x80) {
        cut -= 1;
    }
    if cut == 0 || bytes.get(cut).is_some_and(|b| b & 0xc0 == 0x80) {
        max
    } else {
        cut
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
pub fn forward(config: &PoolConfig, spawned: i32, readers: Readers, window: StartupWindow) {
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

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

impl Output {
    async fn run(mut self, mut socks: [Option<UnixStream>; 2], window: StartupWindow) {
        let watch_window = !self.policy.catch && !self.policy.prefork;
        if let Some(sock) = &socks[1] {
            window.0.stderr.store(sock.as_raw_fd(), Ordering::Release);
        }
        while socks.iter().any(Option::is_some) {
            let tick = self.next_tick;
            let wake = tokio::select! {
                r = readable(&socks[0]) => Wake::Readable(0, r),
                r = readable(&socks[1]) => Wake::Readable(1, r),
                () = window.closed(), if watch_window && self.window_open => Wake::WindowClosed,
                () = sleep_until_opt(tick), if tick.is_some() => Wake::Tick,
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
                            if i == 1 {
                                window.0.stderr.store(-1, Ordering::Release);
                            }
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
                        let mut left = window.0.queued_at_close.load(Ordering::Acquire);
                        while left > 0 {
                            let (turn, n) = self.read_turn(sock, Stream::Stderr, left);
                            left = left.saturating_sub(n);
                            if n == 0 || !matches!(turn, Turn::More) {
                                break;
                            }
                        }
                    }
                    self.window_open = false;
                    self.flush_stream(Stream::Stderr, Instant::now());
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

    /// Up to [`READS_PER_TURN`] reads, none started once `limit` bytes
    /// were read, each logged or dropped by [`Output::feed`]; how it ended
    /// and the bytes read.
    fn read_turn(&mut self, sock: &UnixStream, stream: Stream, limit: usize) -> (Turn, usize) {
        let mut read = 0;
        for _ in 0..READS_PER_TURN {
            if read >= limit {
                return (Turn::More, read);
            }
            let got = BUF.with(|buf| {
                let mut buf = buf.borrow_mut();
                match sock.try_io(tokio::io::Interest::READABLE, || {
                    recv(sock.as_raw_fd(), &mut buf)
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
        let w = self.writers.entry(pid).or_insert_with(|| Writer {
            bucket: TokenBucket::new(CHILD_RATE, now),
            lines: Default::default(),
        });
        w.lines[stream.index()].feed(data, now, &mut w.bucket, &mut |text, continued| {
            emit(policy, pid, stream, text, continued)
        });
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

/// One log line of a child's text (php-fpm's `fpm_stdio_child_said`).
fn emit(policy: &Policy, pid: i32, stream: Stream, text: &[u8], continued: bool) {
    let decorate = !policy.catch || policy.decorate;
    said(&policy.pool, decorate, pid, stream, text, continued);
}

/// Logs one line of text that `pool`'s child `pid` wrote on `stream`, as
/// php-fpm's master logs it (`fpm_stdio_child_said`): `[pool www] child
/// 1234 said into stderr: "text"`, with ` (continued)` after a line cut in
/// pieces; with `decorate` off (`decorate_workers_output = false`) the
/// text alone. Control characters are escaped.
pub fn said(pool: &str, decorate: bool, pid: i32, stream: Stream, text: &[u8], continued: bool) {
    if !decorate {
        warn!(target: RAW_TARGET, "{}", escape_controls(text));
    } else {
        let more = if continued { " (continued)" } else { "" };
        warn!(
            "[pool {pool}] child {pid} said into {}: \"{}\"{more}",
            stream.as_str(),
            escape(text)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rate = Rate {
        lines_per_sec: 10,
        bytes_per_sec: 100,
        burst_lines: 20,
        burst_bytes: 200,
    };

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn bucket_admits_the_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(RATE, t0);
        let admitted = (0..30).filter(|_| b.admit(t0, 1)).count();
        assert_eq!(admitted, 20, "the burst of lines");
        assert_eq!(
            b.take_dropped(),
            Some((
                Dropped {
                    lines: 10,
                    bytes: 10
                },
                t0
            ))
        );
        assert_eq!(b.take_dropped(), None, "reported once");
        // 10 lines/s: one line per 100 ms.
        assert!(!b.admit(ms(t0, 50), 1));
        assert!(b.admit(ms(t0, 110), 1));
        assert!(!b.admit(ms(t0, 110), 1));
        // A clock that goes back gives nothing.
        assert!(!b.admit(ms(t0, 10), 1));
        // Bytes: 200 burst, 100/s.
        let mut b = TokenBucket::new(RATE, t0);
        assert!(b.admit(t0, 150));
        assert!(!b.admit(t0, 100), "only 50 bytes left");
        assert!(b.admit(t0, 50));
        assert!(b.exhausted(t0));
        assert!(!b.exhausted(ms(t0, 10)), "10 ms later: 1 byte and 18 lines");
    }

    #[test]
    fn bucket_refills_up_to_the_burst_only() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(RATE, t0);
        for _ in 0..20 {
            assert!(b.admit(t0, 10));
        }
        assert!(b.exhausted(t0));
        assert!(!b.is_full(ms(t0, 1000)));
        assert!(
            b.is_full(ms(t0, 2000)),
            "20 lines at 10/s, 200 bytes at 100/s"
        );
        let later = ms(t0, 60_000);
        assert_eq!(
            (0..100).filter(|_| b.admit(later, 1)).count(),
            20,
            "a quiet minute refills the burst, no more"
        );
    }

    /// Feeds `chunks` at `now` into fresh Lines; returns (line, continued) pairs.
    fn split(chunks: &[&[u8]], rate: Rate) -> (Vec<(String, bool)>, TokenBucket, Lines) {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(rate, t0);
        let mut l = Lines::default();
        let mut out = Vec::new();
        for c in chunks {
            l.feed(c, t0, &mut b, &mut |t, cont| {
                out.push((String::from_utf8_lossy(t).into_owned(), cont))
            });
        }
        (out, b, l)
    }

    const WIDE: Rate = Rate {
        lines_per_sec: 1_000_000,
        bytes_per_sec: 1 << 30,
        burst_lines: 1_000_000,
        burst_bytes: 1 << 30,
    };

    #[test]
    fn lines_across_reads_crlf_and_empty_lines() {
        let (out, _, l) = split(&[b"one\ntw", b"o\r\n\n\r\nthr", b"ee"], WIDE);
        assert_eq!(
            out,
            [("one".to_string(), false), ("two".to_string(), false)]
        );
        assert!(!l.is_empty(), "\"three\" waits for its newline");
        let t = Instant::now();
        let mut l = l;
        let mut b = TokenBucket::new(WIDE, t);
        let mut got = Vec::new();
        l.flush(t, Duration::from_secs(1), &mut b, &mut |x, _| {
            got.push(x.to_vec())
        });
        assert!(got.is_empty(), "not stale yet");
        l.flush(
            t + Duration::from_secs(2),
            Duration::from_secs(1),
            &mut b,
            &mut |x, _| got.push(x.to_vec()),
        );
        assert_eq!(got, [b"three".to_vec()]);
        assert!(l.is_empty());
    }

    #[test]
    fn long_lines_are_split_into_max_line_pieces() {
        let long = vec![b'a'; 2 * MAX_LINE + 10];
        let mut data = long.clone();
        data.extend_from_slice(b"\nnext\n");
        // In one read, and in reads of 100 bytes.
        let pieces: Vec<&[u8]> = data.chunks(100).collect();
        for chunks in [vec![&data[..]], pieces] {
            let (out, _, l) = split(&chunks, WIDE);
            let lens: Vec<(usize, bool)> = out.iter().map(|(s, c)| (s.len(), *c)).collect();
            assert_eq!(
                lens,
                [(MAX_LINE, true), (MAX_LINE, true), (10, false), (4, false)]
            );
            assert!(l.is_empty());
        }
        // An unfinished line of exactly MAX_LINE waits; one byte more cuts it.
        let (out, _, _) = split(&[&long[..MAX_LINE]], WIDE);
        assert!(out.is_empty());
        let (out, _, _) = split(&[&long[..MAX_LINE], b"b"], WIDE);
        assert_eq!(out.len(), 1);
        assert!(out[0].1);
    }

    #[test]
    fn a_character_is_not_cut_in_two() {
        let mut data = vec![b'a'; MAX_LINE - 1];
        data.extend_from_slice("é".as_bytes()); // 2 bytes across the limit
        data.extend_from_slice(b"z\n");
        // In one read, and with the line's start already kept from an
        // earlier read.
        for chunks in [
            vec![&data[..]],
            vec![&data[..10], &data[10..]],
            data.chunks(100).collect(),
        ] {
            let (out, _, _) = split(&chunks, WIDE);
            assert_eq!(out.len(), 2, "{out:?}");
            assert_eq!(out[0].0.len(), MAX_LINE - 1);
            assert_eq!(out[1].0, "éz");
        }
        assert_eq!(char_cut(&[0x80; 10], 4), 4, "garbage: cut at the limit");
    }

    #[test]
    fn a_flood_is_dropped_in_bulk_with_counts() {
        let mut data = Vec::new();
        for i in 0..100 {
            data.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        data.extend_from_slice(b"cut in the mid");
        let (out, mut b, l) = split(&[&data, b"dle of a line\nafter\n"], RATE);
        assert_eq!(out.len(), 20, "the burst");
        assert_eq!(out[19].0, "line 19");
        let (d, _) = b.take_dropped().unwrap();
        // 80 lines, the cut one, and "after" (no tokens yet either).
        assert_eq!(d.lines, 82);
        let total = data.len() + b"dle of a line\nafter\n".len();
        let logged: usize = out.iter().map(|(s, _)| s.len() + 1).sum();
        assert_eq!(d.bytes as usize, total - logged);
        assert!(l.is_empty());
    }

    #[test]
    fn the_rest_of_a_dropped_line_is_dropped_after_a_refill() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            Rate {
                lines_per_sec: 1,
                bytes_per_sec: 1000,
                burst_lines: 1,
                burst_bytes: 1000,
            },
            t0,
        );
        let mut l = Lines::default();
        let mut out: Vec<Vec<u8>> = Vec::new();
        l.feed(b"first\nsecond sta", t0, &mut b, &mut |t, _| {
            out.push(t.to_vec())
        });
        l.feed(b"rt\nthird\n", ms(t0, 1500), &mut b, &mut |t, _| {
            out.push(t.to_vec())
        });
        assert_eq!(
            out,
            [b"first".to_vec(), b"third".to_vec()],
            "no tail of 'second' logged as a line of its own"
        );
    }

    proptest::proptest! {
        /// Any bytes, cut into reads anywhere: the same lines as in one
        /// read, none longer than MAX_LINE, none with a newline, no panic.
        #[test]
        fn lines_do_not_depend_on_read_boundaries(
            data in proptest::collection::vec(proptest::prop_oneof![proptest::num::u8::ANY, proptest::strategy::Just(b'\n')], 0..3000),
            cuts in proptest::collection::vec(0usize..3000, 0..8),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts {
                chunks.push(&data[at..c]);
                at = c;
            }
            chunks.push(&data[at..]);
            let whole = split(&[&data], WIDE);
            let pieces = split(&chunks, WIDE);
            proptest::prop_assert_eq!(&whole.0, &pieces.0);
            for (line, _) in &whole.0 {
                proptest::prop_assert!(!line.contains('\n'));
            }
            let t = Instant::now();
            let mut b = TokenBucket::new(WIDE, t);
            let mut l = Lines::default();
            l.feed(&data, t, &mut b, &mut |text, _| assert!(text.len() <= MAX_LINE && !text.contains(&b'\n')));
        }
    }

    #[test]
    fn window_close_is_idempotent() {
        let w = StartupWindow::new();
        assert!(!w.is_closed());
        let w2 = w.clone();
        w2.close();
        w2.close();
        assert!(w.is_closed());
    }

    #[tokio::test]
    async fn window_close_wakes_a_waiter_even_if_it_came_first() {
        let w = StartupWindow::new();
        w.close();
        tokio::time::timeout(Duration::from_secs(1), w.closed())
            .await
            .unwrap();
    }
}
