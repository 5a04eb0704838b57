//! The process manager of one pool: which children exist, which are idle,
//! and who waits for one.
//!
//! Owns: the pool's children (spawn through [`crate::spawn`], retire, kill,
//! respawn with back-off after crashes) and the dispatch state (the idle
//! stack and the bounded queue of waiting requests). One task per pool, the
//! supervisor, owns every child process; the proxy only borrows an idle
//! [`Worker`] and gives it back. Must not touch: FastCGI records or the web
//! server's connections.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, error, info, warn};

use crate::config::{PmMode, PoolConfig, Spawn};
use crate::reap::{Exit, ExitKind};
use crate::spawn::{ChildSpec, Spawned, Spawner};

/// Back-off after a child that died within [`QUICK_DEATH`] of its start:
/// first delay, doubled per further quick death, capped at [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const QUICK_DEATH: Duration = Duration::from_secs(1);
/// Grace between SIGTERM and SIGKILL for a child stopped by
/// `request_terminate_timeout` (php-cgi finishes its script on SIGTERM; a
/// script may even catch it).
pub const TERMINATE_GRACE: Duration = Duration::from_secs(1);
/// How long a stopping pool waits for SIGTERMed children before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Read buffer of a child connection, in bytes: one whole record fits.
const CHILD_BUF: usize = 64 * 1024 + 512;

/// The persistent keep-conn connection to one child.
pub struct ChildConn {
    pub reader: OwnedReadHalf,
    pub writer: OwnedWriteHalf,
    /// Bytes read from the child and not yet forwarded.
    pub buf: BytesMut,
}

/// One php-cgi child as the proxy sees it: borrowed from the idle
/// stack for exactly one request, then given back with [`Pool::release`]
/// or [`Pool::discard`].
///
/// Under `pm.spawn = "exec"` a worker is one exec'd php-cgi. Under
/// `"prefork"` it is one of the N connection slots of a php-cgi parent
/// that pre-forked N children: each idle child accepts exactly one
/// connection and then serves only it, so a connected slot *is* a child;
/// its pid is learned from the connection (see [`crate::peer`]).
pub struct Worker {
    /// The child behind this worker, when known (exec: always; prefork:
    /// from the first exchange of each connection on).
    pub pid: Option<i32>,
    /// The process fpmd spawned: the child itself (exec) or the php-cgi
    /// parent of the generation (prefork).
    generation: i32,
    prefork: bool,
    /// The private listening socket (of the child, or of the parent).
    pub endpoint: PathBuf,
    /// Connected lazily, when the first request is ready: php-cgi drops a
    /// new connection that brings no request within 5 s (design.md).
    pub conn: Option<ChildConn>,
    /// Requests this child has answered (for `pm.max_requests`).
    pub served: u32,
    alive: Arc<AtomicBool>,
    /// When it last became idle (for the process manager's scale-down).
    idle_since: Instant,
    /// Closed after the first request of its php-cgi (see `crate::output`).
    startup: crate::output::StartupWindow,
}

impl Worker {
    /// Connects to the child if not yet connected.
    /// Errors: the child's socket is gone (the child died).
    pub async fn connect(&mut self) -> std::io::Result<&mut ChildConn> {
        if self.conn.is_none() {
            let stream = tokio::net::UnixStream::connect(&self.endpoint).await?;
            let (reader, writer) = stream.into_split();
            self.conn = Some(ChildConn {
                reader,
                writer,
                buf: BytesMut::with_capacity(CHILD_BUF),
            });
        }
        Ok(self.conn.as_mut().unwrap())
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Prefork: finds which child of the parent holds this connection.
    pub fn learn_pid(&mut self) {
        if self.pid.is_none() && self.prefork {
            if let Some(conn) = &self.conn {
                use std::os::fd::AsRawFd;
                self.pid = crate::peer::child_on_connection(
                    conn.writer.as_ref().as_raw_fd(),
                    self.generation,
                );
            }
        }
    }

    /// Prefork: forgets the connection and its child; the slot connects
    /// again (to whichever child is in accept()) when next used.
    fn reset_slot(&mut self) {
        self.conn = None;
        self.pid = None;
        self.served = 0;
    }

    /// Prefork, pid not yet known: the connection's fd and the parent's pid
    /// to look the child up with [`crate::peer::child_on_connection`].
    pub fn pid_probe(&self) -> Option<(std::os::fd::RawFd, i32)> {
        use std::os::fd::AsRawFd;
        if !self.prefork || self.pid.is_some() {
            return None;
        }
        self.conn
            .as_ref()
            .map(|c| (c.writer.as_ref().as_raw_fd(), self.generation))
    }

    /// Records the pid learned by a probe.
    pub fn set_pid(&mut self, pid: i32) {
        self.pid = Some(pid);
    }

    /// For logs: the child's pid, or the parent's while it is unknown.
    pub fn log_pid(&self) -> i32 {
        self.pid.unwrap_or(self.generation)
    }
}

/// What [`Pool::acquire`] hands out.
pub enum Acquired<'p> {
    Lease(Lease<'p>),
    /// The queue of waiting requests is full (`listen.backlog`).
    QueueFull,
    /// The pool is stopping.
    Closed,
}

/// What becomes of a child after an exchange: the verdict of
/// [`crate::proxy::verdict`], carried out by [`Lease::give_back`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// A clean exchange: the child and its connection serve the next
    /// request (or the child is retired at `pm.max_requests` /
    /// `pm.max_memory`).
    Keep,
    /// The child ended its request but its connection cannot be trusted
    /// (it was half-closed, or the body was not fully read): the connection
    /// is closed, php-cgi goes back to `accept()`, and the next request
    /// connects anew. The request counts as served.
    Reconnect,
    /// The child closed its connection without ending the request: it died
    /// or is in an unknown state. It is killed if still there (the
    /// supervisor or the php-cgi parent starts a replacement); under
    /// prefork this counts as a crash for `emergency_restart_threshold`.
    Lost,
    /// The child broke the protocol: SIGKILL.
    Kill,
    /// Nothing of the request reached the child: connecting failed, or its
    /// connection was found closed at the first write (it died while
    /// idle). It is dropped (killed if still there) without counting as a
    /// crash, and the request goes to another child.
    Unreachable,
    /// `request_terminate_timeout`: SIGTERM, then SIGKILL after
    /// [`TERMINATE_GRACE`].
    Terminate,
}

/// A child borrowed for one request. Given back with [`Lease::give_back`];
/// dropped without that (a panic, a cancelled task) it is treated as
/// [`Fate::Kill`], so a borrowed child is never lost to the pool.
pub struct Lease<'p> {
    pool: &'p Pool,
    worker: Option<Worker>,
}

impl Lease<'_> {
    /// The borrowed child.
    pub fn worker(&mut self) -> &mut Worker {
        // Only `give_back` and `drop` take the worker out, and both consume
        // the lease.
        self.worker
            .as_mut()
            .expect("a lease holds its worker until given back")
    }

    /// Ends the lease as the verdict says.
    pub fn give_back(mut self, fate: Fate) {
        if let Some(w) = self.worker.take() {
            self.pool.settle(w, fate);
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            warn!(pool = %self.pool.config.name, pid = w.log_pid(), "a child was given back without a verdict (the connection task ended early): killing it");
            self.pool.settle(w, Fate::Kill);
        }
    }
}

struct DispatchState {
    /// Idle children, most recently used last (LIFO: light traffic stays on
    /// few children, the others stay cold).
    idle: Vec<Worker>,
    /// Requests waiting for a child, oldest first.
    waiters: VecDeque<oneshot::Sender<Worker>>,
    closed: bool,
}

/// Messages to the supervisor task.
enum Event {
    Exited(Exit),
    /// Stop this child: it answered its last request (max_requests) or
    /// is over pm.max_memory; with the signal to send.
    /// (generation, child pid, its connection: closed only after the
    /// signal, so that a pre-forked child never goes back to accept() and
    /// takes a new connection on its way out).
    Retire(i32, i32, Signal, Option<ChildConn>),
    /// The connection to this child broke or carried garbage: kill it.
    Broken(i32, i32, Option<ChildConn>),
    /// `request_terminate_timeout`: SIGTERM now, SIGKILL after
    /// [`TERMINATE_GRACE`] if it is still there.
    Terminate(i32, i32, Option<ChildConn>),
    /// The grace period of a [`Event::Terminate`] is over.
    KillIfAlive(i32, i32),
    /// A request found no idle child (dynamic, ondemand): spawn now.
    Demand,
    /// A pre-forked child died in the middle of a request (its parent reaps
    /// it, so this is how fpmd learns of it): counts for
    /// `emergency_restart_threshold` (when the process events cannot tell
    /// how it ended).
    Crashed,
    /// A pre-forked child started or ended (from [`crate::proc_events`]).
    Forked(crate::proc_events::ForkedEvent),
}

/// A pool: shared by its listener's connection tasks and its supervisor.
pub struct Pool {
    pub config: Arc<PoolConfig>,
    dispatch: Mutex<DispatchState>,
    events: mpsc::UnboundedSender<Event>,
}

impl Pool {
    /// Takes the most recently used idle child, or waits in the pool's
    /// bounded queue for one. Cancel-safe: a dropped waiter gives nothing up.
    pub async fn acquire(&self) -> Acquired<'_> {
        let rx = {
            let mut d = self.dispatch.lock().unwrap();
            if d.closed {
                return Acquired::Closed;
            }
            while let Some(w) = d.idle.pop() {
                if w.is_alive() {
                    w.startup.close();
                    return Acquired::Lease(Lease {
                        pool: self,
                        worker: Some(w),
                    });
                }
            }
            d.waiters.retain(|s| !s.is_closed());
            if d.waiters.len() >= self.config.listen.backlog as usize {
                return Acquired::QueueFull;
            }
            let (tx, rx) = oneshot::channel();
            d.waiters.push_back(tx);
            if self.config.pm.mode != PmMode::Static {
                // Scale up now, not at the next tick.
                let _ = self.events.send(Event::Demand);
            }
            Waiting {
                pool: self,
                rx: Some(rx),
            }
        };
        let mut waiting = rx;
        let result = match waiting.rx.as_mut().expect("set").await {
            Ok(w) => {
                w.startup.close();
                Acquired::Lease(Lease {
                    pool: self,
                    worker: Some(w),
                })
            }
            Err(_) => Acquired::Closed,
        };
        waiting.rx = None;
        result
    }

    /// Carries out a verdict on a child given back by a [`Lease`].
    fn settle(&self, mut w: Worker, fate: Fate) {
        match fate {
            Fate::Keep => self.release(w),
            Fate::Reconnect => {
                w.learn_pid();
                drop(w.conn.take());
                self.release(w);
            }
            Fate::Lost => {
                self.died_mid_request(&w);
                // Nothing to signal: the child is dead (the reaper, or for
                // a pre-forked child the process events, tell how, at
                // warning level) or back in accept(). The slot connects
                // anew; a dead child's slot is skipped or fails to connect.
                drop(w.conn.take());
                if w.prefork {
                    w.reset_slot();
                }
                self.offer(w);
            }
            Fate::Kill | Fate::Unreachable => self.discard(w),
            Fate::Terminate => self.terminate(w),
        }
    }

    /// Gives a child back after a complete exchange (its END_REQUEST was
    /// read): to the oldest waiter, else onto the idle stack; or retires it
    /// when it reached `pm.max_requests`.
    fn release(&self, mut w: Worker) {
        w.served += 1;
        w.learn_pid();
        let max = self.config.pm.max_requests;
        let over_memory = match (self.config.pm.max_memory, w.pid) {
            (Some(limit), Some(pid)) => match resident_bytes(pid) {
                Some(rss) if rss > limit => {
                    info!(pool = %self.config.name, pid, "child uses {:.1} MiB (RSS) after a request, over pm.max_memory = {:.1} MiB: retiring it",
                        rss as f64 / 1048576.0, limit as f64 / 1048576.0);
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if over_memory || (max > 0 && w.served >= max) {
            if !over_memory {
                debug!(pool = %self.config.name, pid = w.log_pid(), "child served {} requests (pm.max_requests): retiring it", w.served);
            }
            match w.pid {
                Some(pid) => {
                    // Over the memory limit: SIGKILL (the child is idle, its
                    // request is complete), so it does not grow further on
                    // its way out; otherwise a graceful SIGTERM.
                    let sig = if over_memory {
                        Signal::SIGKILL
                    } else {
                        Signal::SIGTERM
                    };
                    let _ = self
                        .events
                        .send(Event::Retire(w.generation, pid, sig, w.conn.take()));
                }
                None => {
                    warn!(pool = %self.config.name, "cannot tell which child served the last {} requests: not retiring it", w.served)
                }
            }
            if w.prefork {
                w.reset_slot();
                self.offer(w);
            }
            return;
        }
        if w.prefork && w.conn.is_none() {
            // Its connection was closed: the next one lands on whichever
            // child of the parent is in accept().
            w.reset_slot();
        }
        self.offer(w);
    }

    /// Ends the request a child is running (`request_terminate_timeout`):
    /// the child is SIGTERMed, then SIGKILLed after [`TERMINATE_GRACE`];
    /// its connection is never reused.
    fn terminate(&self, mut w: Worker) {
        w.learn_pid();
        match w.pid {
            Some(pid) => {
                let _ = self
                    .events
                    .send(Event::Terminate(w.generation, pid, w.conn.take()));
            }
            None => {
                warn!(pool = %self.config.name, "cannot tell which child runs the request to terminate; closing its connection only")
            }
        }
        if w.prefork {
            w.reset_slot();
            self.offer(w);
        }
    }

    /// A child died in the middle of a request. Under prefork this is the
    /// only sign fpmd gets of a crash (the php-cgi parent reaps it); under
    /// exec the reaper's exit status is counted instead.
    fn died_mid_request(&self, w: &Worker) {
        // With the process events, the exit status itself is counted.
        if w.prefork && !crate::proc_events::available() {
            let _ = self.events.send(Event::Crashed);
        }
    }

    /// Drops a child whose connection can no longer be trusted; the
    /// supervisor kills it (exec: and starts a replacement; prefork: the
    /// php-cgi parent forks one, and the slot reconnects).
    fn discard(&self, mut w: Worker) {
        if !w.is_alive() {
            return;
        }
        if let Some(pid) = w.pid {
            let _ = self
                .events
                .send(Event::Broken(w.generation, pid, w.conn.take()));
        }
        if w.prefork {
            w.reset_slot();
            self.offer(w);
        }
    }

    fn offer(&self, mut w: Worker) {
        if !w.is_alive() {
            return;
        }
        let mut d = self.dispatch.lock().unwrap();
        if d.closed {
            return;
        }
        while let Some(tx) = d.waiters.pop_front() {
            match tx.send(w) {
                Ok(()) => return,
                Err(back) => w = back,
            }
        }
        w.idle_since = Instant::now();
        d.idle.push(w);
    }

    /// Returns workers taken with [`Pool::take_idle`] to the bottom of the
    /// idle stack (least recently used end), keeping their idle time.
    fn put_back_idle(&self, w: Worker) {
        if !w.is_alive() {
            return;
        }
        let mut d = self.dispatch.lock().unwrap();
        if d.closed {
            return;
        }
        if let Some(tx) = d.waiters.pop_front() {
            if let Err(w) = tx.send(w) {
                d.idle.insert(0, w);
            }
            return;
        }
        d.idle.insert(0, w);
    }

    /// Idle children now, and requests waiting for one.
    fn idle_and_waiting(&self) -> (usize, usize) {
        let mut d = self.dispatch.lock().unwrap();
        d.waiters.retain(|s| !s.is_closed());
        (d.idle.len(), d.waiters.len())
    }

    /// Idle workers for which `pick` holds.
    fn count_idle(&self, pick: impl Fn(&Worker) -> bool) -> usize {
        self.dispatch
            .lock()
            .unwrap()
            .idle
            .iter()
            .filter(|w| pick(w))
            .count()
    }

    /// Takes up to `limit` idle workers for which `pick` holds, least
    /// recently used first.
    fn take_idle(&self, limit: usize, pick: impl Fn(&Worker) -> bool) -> Vec<Worker> {
        let mut d = self.dispatch.lock().unwrap();
        let mut taken = Vec::new();
        let mut i = 0;
        while i < d.idle.len() && taken.len() < limit {
            if pick(&d.idle[i]) {
                taken.push(d.idle.remove(i));
            } else {
                i += 1;
            }
        }
        taken
    }

    /// Prefork ondemand: takes every slot of `generation` when all `slots`
    /// are idle and have been since before `before`; otherwise nothing.
    fn take_idle_generation(
        &self,
        generation: i32,
        slots: usize,
        before: Instant,
    ) -> Option<Vec<Worker>> {
        let mut d = self.dispatch.lock().unwrap();
        let mine = d.idle.iter().filter(|w| w.generation == generation).count();
        if mine < slots
            || d.idle
                .iter()
                .any(|w| w.generation == generation && w.idle_since > before)
        {
            return None;
        }
        let (taken, kept) = std::mem::take(&mut d.idle)
            .into_iter()
            .partition(|w| w.generation == generation);
        d.idle = kept;
        Some(taken)
    }

    /// Drops the idle workers of a generation that is gone.
    fn forget_idle(&self, generation: i32) {
        let mut d = self.dispatch.lock().unwrap();
        d.idle.retain(|w| w.generation != generation);
    }

    /// Closes dispatch: waiters get [`Acquired::Closed`], idle children are
    /// handed back for stopping.
    fn close(&self) {
        let mut d = self.dispatch.lock().unwrap();
        d.closed = true;
        d.waiters.clear();
        d.idle.clear();
    }
}

/// A request's place in the queue. Dropped while a child is on its way to
/// it (the web server left, in the same instant a child was handed over),
/// it gives the child back instead of losing it.
struct Waiting<'a> {
    pool: &'a Pool,
    rx: Option<oneshot::Receiver<Worker>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if let Ok(w) = rx.try_recv() {
                self.pool.offer(w);
            }
        }
    }
}

/// How the supervisor stops a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// No request is in flight any more: SIGTERM every child (idle php-cgi
    /// exits at once), SIGKILL after a grace period.
    Graceful,
    /// SIGKILL every child at once (in-flight requests are cut, as with
    /// php-fpm's fast stop).
    Fast,
}

struct ChildState {
    started: Instant,
    alive: Arc<AtomicBool>,
    endpoint: PathBuf,
    /// fpmd asked it to go (retire, stop, broken connection).
    expected_exit: bool,
    /// A pre-fork parent (its process group holds its children).
    prefork: bool,
}

/// Handle used by the daemon to stop a pool and learn when it is gone.
pub struct PoolHandle {
    pub pool: Arc<Pool>,
    stop: watch::Sender<Option<StopMode>>,
    done: Option<tokio::task::JoinHandle<()>>,
    started: Option<oneshot::Receiver<()>>,
}

impl PoolHandle {
    /// Returns once the supervisor's first fill is done: the pool's first
    /// children are spawned (none under ondemand), or their spawn failed and
    /// is retried with back-off.
    pub async fn started(&mut self) {
        if let Some(rx) = self.started.take() {
            let _ = rx.await;
        }
    }

    /// Stops the pool's children and waits until every one is reaped.
    pub async fn stop(mut self, mode: StopMode) {
        let _ = self.stop.send(Some(mode));
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

/// Starts a pool's supervisor: spawns `pm.max_children` children (static)
/// and keeps that many alive. `runtime_dir` is fpmd's private 0700
/// directory for the children's sockets.
/// `emergency_restart` is the global (threshold, interval), applied to this
/// pool alone.
pub fn start_pool(
    config: Arc<PoolConfig>,
    spawner: Spawner,
    runtime_dir: &Path,
    emergency_restart: Option<(u32, Duration)>,
) -> PoolHandle {
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let pool = Arc::new(Pool {
        config: config.clone(),
        dispatch: Mutex::new(DispatchState {
            idle: Vec::new(),
            waiters: VecDeque::new(),
            closed: false,
        }),
        events: events_tx.clone(),
    });
    let (stop_tx, stop_rx) = watch::channel(None);
    let sup = Supervisor {
        pool: pool.clone(),
        spawner,
        runtime_dir: runtime_dir.to_path_buf(),
        children: HashMap::new(),
        exits_tx: exits_sender(events_tx.clone()),
        forked: HashMap::new(),
        forked_tx: forked_sender(events_tx),
        serial: 0,
        quick_deaths: 0,
        respawn_at: None,
        stopping: None,
        emergency_restart,
        crashes: VecDeque::new(),
    };
    let (started_tx, started_rx) = oneshot::channel();
    let done = tokio::spawn(sup.run(events_rx, stop_rx, started_tx));
    PoolHandle {
        pool,
        stop: stop_tx,
        done: Some(done),
        started: Some(started_rx),
    }
}

/// The reaper sends bare [`Exit`]s; wrap them into supervisor events.
fn forked_sender(
    events: mpsc::UnboundedSender<Event>,
) -> mpsc::UnboundedSender<crate::proc_events::ForkedEvent> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            if events.send(Event::Forked(ev)).is_err() {
                return;
            }
        }
    });
    tx
}

fn exits_sender(events: mpsc::UnboundedSender<Event>) -> mpsc::UnboundedSender<Exit> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Exit>();
    tokio::spawn(async move {
        while let Some(exit) = rx.recv().await {
            if events.send(Event::Exited(exit)).is_err() {
                return;
            }
        }
    });
    tx
}

struct Supervisor {
    pool: Arc<Pool>,
    spawner: Spawner,
    runtime_dir: PathBuf,
    children: HashMap<i32, ChildState>,
    exits_tx: mpsc::UnboundedSender<Exit>,
    /// Counter for unique socket names.
    serial: u64,
    /// Children that died within [`QUICK_DEATH`] of start, in a row.
    quick_deaths: u32,
    /// When the back-off allows the next spawn.
    respawn_at: Option<tokio::time::Instant>,
    stopping: Option<(StopMode, tokio::time::Instant)>,
    emergency_restart: Option<(u32, Duration)>,
    /// Recent unexpected deaths (for `emergency_restart_threshold`).
    crashes: VecDeque<Instant>,
    /// Pre-forked children seen starting (from the process events): when,
    /// and whether fpmd asked them to go.
    forked: HashMap<i32, Forked>,
    /// Where the process events of this pool's php-cgi parents go.
    forked_tx: mpsc::UnboundedSender<crate::proc_events::ForkedEvent>,
}

/// A child forked by a php-cgi parent.
struct Forked {
    started: Instant,
    expected_exit: bool,
}

impl Supervisor {
    fn name(&self) -> &str {
        &self.pool.config.name
    }

    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
        mut stop: watch::Receiver<Option<StopMode>>,
        started: oneshot::Sender<()>,
    ) {
        let pm = self.pool.config.pm.clone();
        info!(pool = %self.name(), "starting (pm.mode = {}, pm.max_children = {}, pm.spawn = {})",
            pm.mode.as_str(), pm.max_children, pm.spawn.as_str());
        self.fill().await;
        let _ = started.send(());
        // The process manager's scale-down pass (dynamic, ondemand); scale-up
        // is driven by queued requests (Event::Demand), not by this tick.
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ticking = pm.mode != PmMode::Static;
        loop {
            if let Some((_, deadline)) = self.stopping {
                if self.children.is_empty() {
                    info!(pool = %self.name(), "all children are gone");
                    return;
                }
                tokio::select! {
                    Some(ev) = events.recv() => self.handle(ev).await,
                    _ = tokio::time::sleep_until(deadline) => {
                        for pid in self.children.keys() {
                            warn!(pool = %self.name(), pid, "child still alive after the stop grace period: SIGKILL");
                            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
                        }
                        self.stopping = Some((StopMode::Fast, tokio::time::Instant::now() + Duration::from_secs(3600)));
                    }
                }
                continue;
            }
            let respawn_at = self.respawn_at;
            tokio::select! {
                Some(ev) = events.recv() => self.handle(ev).await,
                _ = stop.changed() => {
                    let mode = stop.borrow().unwrap_or(StopMode::Fast);
                    self.begin_stop(mode);
                }
                _ = sleep_until_opt(respawn_at), if respawn_at.is_some() => {
                    self.respawn_at = None;
                    self.fill().await;
                }
                _ = tick.tick(), if ticking => self.scale_down().await,
            }
        }
    }

    /// Retires idle children the process manager no longer wants: under
    /// ondemand those idle longer than `pm.process_idle_timeout`, under
    /// dynamic the least recently used one while more than
    /// `pm.max_spare_servers` are idle (one per tick, as php-fpm). Under
    /// prefork a retired child is replaced by a fresh fork of the parent
    /// (its memory comes back; the process count stays), and an ondemand
    /// pool whose children are all idle past the timeout stops its parent.
    async fn scale_down(&mut self) {
        let prefork = self.pool.config.pm.spawn == Spawn::Prefork;
        let now = Instant::now();
        match self.pool.config.pm.mode {
            PmMode::Static => {}
            PmMode::Ondemand {
                process_idle_timeout,
                ..
            } => {
                let before = now.checked_sub(process_idle_timeout).unwrap_or(now);
                if prefork {
                    let slots = self.pool.config.pm.max_children as usize;
                    let active: Vec<i32> = self
                        .children
                        .iter()
                        .filter(|(_, c)| !c.expected_exit)
                        .map(|(p, _)| *p)
                        .collect();
                    for generation in active {
                        if let Some(workers) =
                            self.pool.take_idle_generation(generation, slots, before)
                        {
                            info!(pool = %self.name(), pid = generation, "every child idle for {:.1} s (pm.process_idle_timeout): stopping the php-cgi parent",
                                process_idle_timeout.as_secs_f64());
                            drop(workers);
                            self.stop_child(generation, generation, Signal::SIGTERM);
                        }
                    }
                }
                let idle = self.pool.take_idle(usize::MAX, |w| {
                    w.idle_since <= before && (!w.prefork || w.conn.is_some())
                });
                for w in idle {
                    info!(pool = %self.name(), pid = w.log_pid(), "child idle for {:.1} s (pm.process_idle_timeout): retiring it", process_idle_timeout.as_secs_f64());
                    self.retire_idle(w);
                }
            }
            PmMode::Dynamic {
                max_spare_servers, ..
            } => {
                let max = max_spare_servers as usize;
                // Under prefork only children that served requests count:
                // a cold fork costs next to nothing and is not retired.
                let warm = |w: &Worker| !w.prefork || w.conn.is_some();
                let idle = self.pool.count_idle(warm);
                if idle > max {
                    for w in self.pool.take_idle(1, warm) {
                        info!(pool = %self.name(), pid = w.log_pid(), "{idle} idle children, over pm.max_spare_servers = {max}: retiring the least recently used");
                        self.retire_idle(w);
                    }
                }
                self.fill().await;
            }
        }
    }

    /// Counts an unexpected child death; past `emergency_restart_threshold`
    /// within `emergency_restart_interval`, restarts every child of this
    /// pool (php-fpm restarts its whole master; other pools go on here).
    fn note_crash(&mut self) {
        let Some((threshold, interval)) = self.emergency_restart else {
            return;
        };
        let now = Instant::now();
        self.crashes.push_back(now);
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > interval)
        {
            self.crashes.pop_front();
        }
        if self.crashes.len() < threshold as usize {
            return;
        }
        error!(pool = %self.name(), "{} children died within {:.0} s (emergency_restart_threshold = {threshold}): restarting the pool's children",
            self.crashes.len(), interval.as_secs_f64());
        self.crashes.clear();
        for (pid, c) in self.children.iter_mut() {
            c.expected_exit = true;
            // No new request goes to a child on its way out; requests wait
            // for the replacements.
            self.pool.forget_idle(*pid);
            let _ = kill(Pid::from_raw(*pid), Signal::SIGTERM);
        }
    }

    /// Retires an idle worker taken out of the idle stack: SIGTERM (the
    /// child is idle and exits at once), then its connection is closed.
    fn retire_idle(&mut self, mut w: Worker) {
        if w.prefork {
            if w.conn.is_some() {
                w.learn_pid();
                if let Some(pid) = w.pid {
                    self.stop_child(w.generation, pid, Signal::SIGTERM);
                }
            }
            w.reset_slot();
            self.pool.put_back_idle(w);
        } else {
            self.stop_child(w.generation, w.generation, Signal::SIGTERM);
            drop(w);
        }
    }

    fn begin_stop(&mut self, mode: StopMode) {
        self.pool.close();
        let grace = match mode {
            StopMode::Graceful => STOP_GRACE,
            StopMode::Fast => Duration::from_secs(1),
        };
        self.stopping = Some((mode, tokio::time::Instant::now() + grace));
        for (pid, c) in self.children.iter_mut() {
            c.expected_exit = true;
            match mode {
                // Every child is idle by now: php-cgi exits at once on
                // SIGTERM (a pre-fork parent passes it to its group).
                StopMode::Graceful => {
                    let _ = kill(Pid::from_raw(*pid), Signal::SIGTERM);
                }
                // php-cgi only finishes its script on SIGTERM (an
                // interrupted sleep() even returns early and the script
                // runs on): a fast stop kills, as php-fpm's does.
                StopMode::Fast => {
                    let target = if c.prefork { -*pid } else { *pid };
                    let _ = kill(Pid::from_raw(target), Signal::SIGKILL);
                }
            }
        }
    }

    async fn handle(&mut self, ev: Event) {
        match ev {
            Event::Exited(exit) => self.on_exit(exit).await,
            Event::Retire(generation, pid, sig, conn) => {
                self.stop_child(generation, pid, sig);
                drop(conn);
            }
            Event::Terminate(generation, pid, conn) => {
                self.stop_child(generation, pid, Signal::SIGTERM);
                drop(conn);
                let events = self.pool.events.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(TERMINATE_GRACE).await;
                    let _ = events.send(Event::KillIfAlive(generation, pid));
                });
            }
            Event::KillIfAlive(generation, pid) => {
                let alive = if generation == pid {
                    self.children.contains_key(&pid)
                } else {
                    parent_of(pid) == Some(generation)
                };
                if alive {
                    warn!(pool = %self.name(), pid, "child still running {:.1} s after SIGTERM: SIGKILL", TERMINATE_GRACE.as_secs_f64());
                    self.stop_child(generation, pid, Signal::SIGKILL);
                }
            }
            Event::Demand => self.fill().await,
            Event::Crashed => self.note_crash(),
            Event::Forked(ev) => self.on_forked(ev),
            Event::Broken(generation, pid, conn) => {
                debug!(pool = %self.name(), pid, "killing child: its connection broke or carried invalid records");
                self.stop_child(generation, pid, Signal::SIGKILL);
                drop(conn);
            }
        }
    }

    /// Signals one child. Exec: the child is the generation. Prefork: a
    /// child of the generation's parent, which forks its replacement.
    fn stop_child(&mut self, generation: i32, pid: i32, sig: Signal) {
        if let Some(c) = self.children.get_mut(&generation) {
            if generation == pid {
                c.expected_exit = true;
            } else if parent_of(pid) != Some(generation) {
                // Already gone, and the pid may have been reused: a root
                // daemon must not signal a stranger.
                return;
            } else {
                self.forked
                    .entry(pid)
                    .or_insert(Forked {
                        started: c.started,
                        expected_exit: false,
                    })
                    .expected_exit = true;
            }
            let _ = kill(Pid::from_raw(pid), sig);
        }
    }

    /// A child of one of this pool's php-cgi parents started or ended: its
    /// exit is logged as php-fpm logs a child's (warning unless fpmd asked
    /// it to go), and a crash counts for `emergency_restart_threshold`.
    fn on_forked(&mut self, ev: crate::proc_events::ForkedEvent) {
        use crate::proc_events::ForkedEvent;
        match ev {
            ForkedEvent::Started { pid, .. } => {
                self.forked.insert(
                    pid,
                    Forked {
                        started: Instant::now(),
                        expected_exit: false,
                    },
                );
            }
            ForkedEvent::Exited { pid, parent, kind } => {
                let parent_started = self.children.get(&parent).map(|c| c.started);
                let (started, expected) = match self.forked.remove(&pid) {
                    Some(f) => (f.started, f.expected_exit),
                    None => (parent_started.unwrap_or_else(Instant::now), false),
                };
                // The parent ending takes its children with it.
                let expected = expected || parent_started.is_none() || self.stopping.is_some();
                let exit = Exit { pid, kind };
                let name = &self.pool.config.name;
                let lived = started.elapsed();
                match (expected, kind) {
                    (true, _) => debug!(pool = %name, pid, "{}", exit.describe(lived)),
                    (false, ExitKind::Code(0)) => {
                        info!(pool = %name, pid, "{}", exit.describe(lived))
                    }
                    (false, _) => warn!(pool = %name, pid, "{}", exit.describe(lived)),
                }
                if matches!(
                    kind,
                    ExitKind::Signal {
                        signal: libc::SIGSEGV | libc::SIGBUS,
                        ..
                    }
                ) && self.stopping.is_none()
                {
                    self.note_crash();
                }
            }
        }
    }

    async fn on_exit(&mut self, exit: Exit) {
        let Some(child) = self.children.remove(&exit.pid) else {
            return;
        };
        child.alive.store(false, Ordering::Release);
        self.pool.forget_idle(exit.pid);
        if child.prefork {
            crate::proc_events::unwatch(exit.pid);
            // Children the parent left behind (it only signals them on
            // SIGTERM) must not serve anything any more.
            let _ = kill(Pid::from_raw(-exit.pid), Signal::SIGKILL);
        }
        let _ = std::fs::remove_file(&child.endpoint);
        let lived = child.started.elapsed();
        let name = self.pool.config.name.clone();
        if child.expected_exit {
            debug!(pool = %name, pid = exit.pid, "{}", exit.describe(lived));
        } else {
            match exit.kind {
                ExitKind::Code(0) => {
                    info!(pool = %name, pid = exit.pid, "{}", exit.describe(lived))
                }
                _ => warn!(pool = %name, pid = exit.pid, "{}", exit.describe(lived)),
            }
        }
        if self.stopping.is_some() {
            return;
        }
        // fpmd never sends these, so they count even when fpmd had already
        // asked the child to go (its broken connection is often seen first).
        if matches!(
            exit.kind,
            ExitKind::Signal {
                signal: libc::SIGSEGV | libc::SIGBUS,
                ..
            }
        ) {
            self.note_crash();
        }
        if !child.expected_exit && lived < QUICK_DEATH {
            if self.respawn_at.is_some() {
                // Another child of the same round of spawns: the back-off
                // step is already counted and announced.
                debug!(pool = %name, pid = exit.pid, "child died {:.3} s after start", lived.as_secs_f64());
                return;
            }
            self.quick_deaths += 1;
            let delay = BACKOFF_FIRST
                .saturating_mul(1 << (self.quick_deaths - 1).min(16))
                .min(BACKOFF_MAX);
            warn!(pool = %name, pid = exit.pid, "child died {:.3} s after start ({} in a row): next spawn in {:.1} s",
                lived.as_secs_f64(), self.quick_deaths, delay.as_secs_f64());
            self.respawn_at = Some(tokio::time::Instant::now() + delay);
            return;
        }
        if lived >= QUICK_DEATH {
            self.quick_deaths = 0;
        }
        self.fill().await;
    }

    /// Spawns children until the pool has `pm.max_children` (exec: that
    /// many processes; prefork: one parent that keeps that many forked).
    async fn fill(&mut self) {
        if self.stopping.is_some() || self.respawn_at.is_some() {
            return;
        }
        let pm = &self.pool.config.pm;
        let max = pm.max_children as usize;
        let active = self.children.values().filter(|c| !c.expected_exit).count();
        let (idle, waiting) = self.pool.idle_and_waiting();
        let spawns = match (pm.spawn, pm.mode) {
            (Spawn::Exec, PmMode::Static) => max.saturating_sub(self.children.len()),
            (
                Spawn::Exec,
                PmMode::Dynamic {
                    start_servers,
                    min_spare_servers,
                    max_spawn_rate,
                    ..
                },
            ) => {
                let min_idle = min_spare_servers as usize;
                // At start: start_servers; then enough for the waiting
                // requests plus the idle children min_spare_servers asks for.
                let want = if self.serial == 0 {
                    start_servers as usize
                } else {
                    waiting + min_idle.saturating_sub(idle)
                };
                want.min(max.saturating_sub(self.children.len()))
                    .min(max_spawn_rate as usize)
            }
            (Spawn::Exec, PmMode::Ondemand { max_spawn_rate, .. }) => waiting
                .min(max.saturating_sub(self.children.len()))
                .min(max_spawn_rate as usize),
            // One parent keeps all children forked; ondemand starts it only
            // for a request.
            (Spawn::Prefork, PmMode::Ondemand { .. }) => usize::from(active == 0 && waiting > 0),
            (Spawn::Prefork, _) => usize::from(active == 0),
        };
        for _ in 0..spawns {
            if self.stopping.is_some() {
                return;
            }
            if let Err(e) = self.spawn_one().await {
                self.quick_deaths += 1;
                let delay = BACKOFF_FIRST
                    .saturating_mul(1 << (self.quick_deaths - 1).min(16))
                    .min(BACKOFF_MAX);
                error!(pool = %self.name(), "cannot start php-cgi: {e}; next try in {:.1} s", delay.as_secs_f64());
                self.respawn_at = Some(tokio::time::Instant::now() + delay);
                return;
            }
        }
    }

    async fn spawn_one(&mut self) -> std::io::Result<()> {
        self.serial += 1;
        let endpoint = self
            .runtime_dir
            .join(format!("{}.{}.sock", self.pool.config.name, self.serial));
        let spec = child_spec(&self.pool.config, endpoint.clone());
        let Spawned { pid, output } = self.spawner.spawn(spec, self.exits_tx.clone()).await?;
        let prefork = self.pool.config.pm.spawn == Spawn::Prefork;
        let slots = if prefork {
            self.pool.config.pm.max_children
        } else {
            1
        };
        if prefork {
            debug!(pool = %self.name(), pid, "php-cgi parent started, pre-forking {slots} children");
        } else {
            debug!(pool = %self.name(), pid, "child started");
        }
        let startup = crate::output::StartupWindow::new();
        crate::output::forward(&self.pool.config, pid, output, startup.clone());
        if prefork {
            crate::proc_events::watch(pid, self.forked_tx.clone());
        }
        let alive = Arc::new(AtomicBool::new(true));
        self.children.insert(
            pid,
            ChildState {
                started: Instant::now(),
                alive: alive.clone(),
                endpoint: endpoint.clone(),
                expected_exit: false,
                prefork,
            },
        );
        for _ in 0..slots {
            self.pool.offer(Worker {
                pid: (!prefork).then_some(pid),
                generation: pid,
                prefork,
                endpoint: endpoint.clone(),
                conn: None,
                served: 0,
                alive: alive.clone(),
                idle_since: Instant::now(),
                startup: startup.clone(),
            });
        }
        Ok(())
    }
}

/// Resident memory of `pid` in bytes (`/proc/PID/statm`, RSS pages).
fn resident_bytes(pid: i32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as u64;
    Some(pages * page)
}

/// The parent pid of `pid`, from `/proc/PID/stat`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid …": comm may contain spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(1)?.parse().ok()
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Builds the argv and environment of a child of `config`.
///
/// The environment follows php-fpm's `clear_env` and `env[…]`; on top of it
/// `PHP_FCGI_CHILDREN` (0 for exec: php-cgi must not fork a hidden
/// sub-pool; `pm.max_children` for prefork, whose children fpmd tracks one
/// by one) and `PHP_FCGI_MAX_REQUESTS=0` (php-cgi must not retire itself:
/// fpmd applies `pm.max_requests`) are always set, whatever fpmd's own
/// environment says.
pub fn child_spec(config: &PoolConfig, endpoint: PathBuf) -> ChildSpec {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    if !config.clear_env {
        env.extend(std::env::vars_os());
    }
    for (k, v) in &config.env {
        env.push((k.into(), v.into()));
    }
    env.retain(|(k, _)| {
        k != "PHP_FCGI_CHILDREN" && k != "PHP_FCGI_MAX_REQUESTS" && k != "FCGI_WEB_SERVER_ADDRS"
    });
    let (children, death_signal) = match config.pm.spawn {
        Spawn::Exec => (0, libc::SIGKILL),
        Spawn::Prefork => (config.pm.max_children, libc::SIGTERM),
    };
    env.push(("PHP_FCGI_CHILDREN".into(), children.to_string().into()));
    env.push(("PHP_FCGI_MAX_REQUESTS".into(), "0".into()));
    ChildSpec {
        program: config.php_cgi.clone(),
        args: config.ini_args(),
        env,
        cwd: config.chdir.clone(),
        uid: config.user.uid,
        gid: config.user.gid,
        groups: config.user.groups.clone(),
        endpoint,
        backlog: children as i32 + 8,
        death_signal,
        catch_workers_output: config.catch_workers_output,
    }
}
