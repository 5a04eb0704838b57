//! One pool: its slot table, shared by the connections that lease its
//! children, and the supervisor task that owns the children.
//!
//! Owns: dispatch (the slot table, the idle stack and the bounded queue,
//! under one lock: [`slots`]), the leases the proxy holds, and the command
//! channel to the supervisor ([`supervisor`]), which spawns, retires and
//! kills. Must not touch: FastCGI records or the web server's connections.
//!
//! Generations: a reload that changes what children are started with
//! (ini values, environment, user, binary, …) makes the supervisor start a
//! new generation; the first of its slots to be ready makes it current, so
//! every request after that goes to it; the old generation's idle slots are
//! retired at once and its busy ones when their request is done. No busy
//! child is ever signalled for a reload (unless `graceful_timeout` runs
//! out).

pub mod policy;
mod probe;
pub mod slots;
pub mod stats;
mod status;
mod supervisor;
pub mod warm;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::config::{PmMode, PoolConfig};
use crate::sys::stream::{ReadHalf, WriteHalf};
use slots::Table;
pub use slots::{Child, GenId, RequestInfo, SlotId, SlotState};
pub use status::{PoolStatus, ProcessStatus};
pub use supervisor::start_pool;

/// Read buffer of a child connection while a request runs, in bytes: one
/// whole record fits.
const CHILD_BUF: usize = 64 * 1024 + 512;
/// Read buffers kept for the next requests once theirs have ended; beyond
/// that many requests at once, a request's buffer is freed as it ends.
const SPARE_BUFS: usize = 8;
static SPARE: Mutex<Vec<BytesMut>> = Mutex::new(Vec::new());

/// The persistent keep-conn connection to one child.
pub struct ChildConn {
    pub reader: ReadHalf,
    pub writer: WriteHalf,
    /// Bytes read from the child and not yet forwarded: a buffer of
    /// [`CHILD_BUF`] bytes while a request runs ([`lend_buffer`]), none
    /// between requests ([`return_buffer`]).
    pub buf: BytesMut,
}

/// Before a request on a child connection: gives `buf` a read buffer if it
/// has none, a spare one if any.
pub fn lend_buffer(buf: &mut BytesMut) {
    if buf.capacity() == 0 {
        *buf = SPARE
            .lock()
            .unwrap()
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(CHILD_BUF));
    }
}

/// After a request on a child connection: an empty `buf` goes back to the
/// spares (or is freed), so that a kept connection holds no buffer while
/// its child is idle. Kept, each held what the child's responses filled
/// of its 64 KiB, for as long as the child lived: with 200 pools each
/// served once, 1.6 MiB of the manager's 2.2 MiB growth; a pool whose
/// children send large pages, 64 KiB per child.
pub fn return_buffer(buf: &mut BytesMut) {
    if !buf.is_empty() || buf.capacity() == 0 {
        return;
    }
    let mut b = std::mem::take(buf);
    // Moves the start back over what was consumed (no allocation).
    b.reserve(CHILD_BUF);
    if b.capacity() > 2 * CHILD_BUF {
        return;
    }
    let mut spare = SPARE.lock().unwrap();
    if spare.len() < SPARE_BUFS {
        spare.push(b);
    }
}

/// What a php-cgi the supervisor spawned is: a child, which serves, or
/// (`pm.spawn = "prefork"`) a php-cgi parent, which forks children on
/// fpmd's order ([`crate::process::fork_server`]) and serves nothing
/// itself. A child, exec'd or forked, is one slot of the slot table: one
/// process with its own socket, its pid known from its start, and the slot
/// goes with it (the process manager starts a replacement).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A child: exec'd by fpmd, or forked on order by a php-cgi parent.
    Child,
    /// A php-cgi parent: its process group holds the children it forked.
    Parent,
}

impl Role {
    /// What to signal to end everything of the php-cgi `leader` fpmd
    /// knows: the child itself, or the parent's process group, its
    /// children with it.
    pub fn everything_of(self, leader: i32) -> Pid {
        match self {
            Role::Child => Pid::from_raw(leader),
            Role::Parent => Pid::from_raw(-leader),
        }
    }
}

/// What moves with a slot between the idle stack and a lease: its
/// connection, and a handle on the slot's record of its child. The slot's
/// generation and when it last became idle are the slot's alone
/// ([`slots::Slot`]); the child's pid and requests served are kept once,
/// in the [`Child`] the slot and its worker share.
///
/// A slot is one php-cgi child (exec'd, or forked on order by a php-cgi
/// parent under `pm.spawn = "prefork"`), in accept() on its own socket.
pub struct Worker {
    pub slot: SlotId,
    /// The slot's child: its pid and the requests it served.
    pub child: Arc<Child>,
    /// The child's private listening socket.
    endpoint: Arc<PathBuf>,
    /// Connected lazily, when the first request is ready: php-cgi drops a
    /// new connection that brings no request within 5 s (design.md).
    pub conn: Option<ChildConn>,
    /// The figures of its last request, for the slot's status row
    /// ([`Lease::note_usage`]).
    pub last_usage: Option<crate::process::sapi::Usage>,
    alive: Arc<AtomicBool>,
    /// To the task that reads the php-cgi's output: closed when the
    /// php-cgi is handed its first request, told when a request ends (see
    /// `crate::process::output`).
    startup: crate::process::output::OutputHandle,
}

impl Worker {
    /// Connects to the child if not yet connected.
    /// Errors: the child's socket is gone (the child died).
    pub async fn connect(&mut self) -> std::io::Result<&mut ChildConn> {
        if self.conn.is_none() {
            let stream = crate::sys::stream::Stream::connect_unix(self.endpoint.as_path()).await?;
            let (reader, writer) = stream.into_split();
            self.conn = Some(ChildConn {
                reader,
                writer,
                buf: BytesMut::new(),
            });
        }
        self.conn
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no connection"))
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// For logs: the child's pid.
    pub fn log_pid(&self) -> i32 {
        self.child.pid().as_raw()
    }
}

/// What [`Pool::acquire`] hands out.
pub enum Acquired<'p> {
    Lease(Lease<'p>),
    /// The queue of waiting requests is full (`listen.backlog`).
    QueueFull,
    /// The pool is stopping.
    Closed,
    /// The pool's php-cgi cannot start and it has no child (why: see
    /// [`slots::Table::unstartable`]).
    Unstartable(Arc<str>),
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
    /// The child closed its connection without ending the request: it is
    /// on its way out. Nothing is signalled; its slot goes, and its exit
    /// (reaped, or reported by its php-cgi parent) is logged.
    Lost,
    /// The child broke the protocol: SIGKILL.
    Kill,
    /// Nothing of the request reached the child: connecting failed, or its
    /// connection was found closed at the first write (it died while
    /// idle). It is dropped (killed if still there) without counting as a
    /// crash, and the request goes to another child.
    Unreachable,
    /// `request_terminate_timeout`: SIGKILL at once (php-cgi finishes its
    /// script on SIGTERM, so that the script would run on after the 504;
    /// php-fpm's child dies of its SIGTERM).
    Terminate,
}

/// A child borrowed for one request. Given back with [`Lease::give_back`];
/// dropped without that (a panic, a cancelled task) it is treated as
/// [`Fate::Kill`], so a borrowed child is never lost to the pool.
pub struct Lease<'p> {
    pool: &'p Pool,
    worker: Option<Worker>,
    /// The slot's [`slots::Death`] and its epoch when leased.
    death: Option<(Arc<slots::Death>, u64)>,
    /// The configuration of the worker's generation: the limits this
    /// request obeys.
    config: Arc<PoolConfig>,
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

    /// The configuration of the generation the child belongs to.
    pub fn config(&self) -> &Arc<PoolConfig> {
        &self.config
    }

    /// The borrowed child, with the slot's [`slots::Death`] and its epoch
    /// when leased: the exchange ends when the child dies, even if a
    /// process the script left behind keeps the connection open.
    pub fn worker_and_death(&mut self) -> (&mut Worker, Option<(&slots::Death, u64)>) {
        let w = self
            .worker
            .as_mut()
            .expect("a lease holds its worker until given back");
        (w, self.death.as_ref().map(|(d, e)| (&**d, *e)))
    }

    /// `security.pcntl`: the fate of a child whose request ended cleanly
    /// (`Fate::Keep`), unless a `pcntl_fork` copy of it is still there. A
    /// copy shares the child's connection and may go on in php-cgi's
    /// FastCGI loop on it, so its records must never reach another
    /// request: the child is replaced (`Fate::Kill`), its plain copies are
    /// SIGKILLed, and a copy that called `setsid()` (a daemon the script
    /// meant to start) is left to the pool's cgroup. `uri` is for the log.
    pub fn keep_unless_forked(&mut self, uri: &[u8]) -> Fate {
        if !self.config.pcntl {
            return Fate::Keep;
        }
        let pool = &self.pool.name;
        let w = self.worker();
        let copies = crate::sys::procfs::children(w.child.pid().as_raw()).unwrap_or_default();
        if copies.is_empty() {
            return Fate::Keep;
        }
        let (daemons, plain): (Vec<i32>, Vec<i32>) = copies
            .into_iter()
            .partition(|c| crate::sys::procfs::session_of(*c) == Some(*c));
        warn!(pool = %pool, pid = w.log_pid(), uri = %crate::log::escape_controls(uri),
            "child forked during the request (security.pcntl) and its copies are still there: they share the child's connection, so the child is replaced; copies killed: {plain:?}, left running after setsid(): {daemons:?}");
        for c in plain {
            // Not reaped by php-cgi, so the pid is not reused.
            let _ = crate::process::signal::send(pool, Pid::from_raw(c), Signal::SIGKILL);
        }
        Fate::Kill
    }

    /// Notes the peak memory and CPU the request reported (see
    /// [`crate::process::sapi`]), for the status page once the child is
    /// given back (no lock: the slot takes it under the lock it is given
    /// back under), and returns them.
    pub fn note_end(
        &mut self,
        end: Option<crate::process::sapi::End>,
    ) -> Option<crate::process::sapi::Usage> {
        let usage = end.map(|e| e.usage());
        self.worker().last_usage = usage;
        usage
    }

    /// Notes what request the child runs (status page, graceful_timeout):
    /// `fill` writes it into the slot, under the table's lock.
    pub fn set_request(&self, fill: impl FnOnce(&mut RequestInfo)) {
        if let Some(w) = &self.worker {
            self.pool.table.lock().unwrap().set_request(w.slot, fill);
        }
    }

    /// Ends the lease as the verdict says. Under `pm.max_memory`, a child
    /// that is to serve on (`Keep`, `Reconnect`) first has its resident
    /// memory read from `/proc/PID/statm` on a blocking thread, so that no
    /// runtime thread waits for `/proc`; otherwise nothing is awaited (the
    /// future is ready at once). Dropped while it awaits that read (the
    /// connection task ends), the lease is dropped: see [`Lease`].
    pub async fn give_back(mut self, fate: Fate) {
        let rss = match (self.config.pm.max_memory, fate) {
            (Some(_), Fate::Keep | Fate::Reconnect) => self.resident_bytes().await,
            _ => None,
        };
        if let Some(w) = self.worker.take() {
            if self.config.catch_workers_output {
                // Where php-fpm's child writes its flush marker.
                w.startup.request_ended(w.log_pid());
            }
            self.pool.settle(w, fate, &self.config, rss);
        }
    }

    /// The child's resident memory in bytes, read on a blocking thread;
    /// `None`: `/proc` could not tell.
    async fn resident_bytes(&mut self) -> Option<u64> {
        let pid = self.worker().child.pid().as_raw();
        tokio::task::spawn_blocking(move || crate::sys::procfs::resident_bytes(pid))
            .await
            .ok()
            .flatten()
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            warn!(pool = %self.pool.name, pid = w.log_pid(), "a child was given back without a verdict (the connection task ended early): killing it");
            self.pool.settle(w, Fate::Kill, &self.config, None);
        }
    }
}

/// Orders to a pool's supervisor.
pub enum Command {
    /// Apply a new configuration of this pool (a reload); answered once it
    /// is in force (a new generation: once its first child is ready).
    Reconfigure {
        config: Arc<PoolConfig>,
        done: oneshot::Sender<Result<Reconfigured, String>>,
    },
    /// Stop the pool: see [`StopMode`]. `grace` bounds how long busy
    /// children may take (then they are killed); `None`: as long as they
    /// need.
    Stop {
        mode: StopMode,
        grace: Option<Duration>,
    },
}

/// What a [`Command::Reconfigure`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconfigured {
    /// The children are started the same way: the new settings apply to
    /// the running children (pm numbers, timeouts, logs).
    Retuned,
    /// A new generation of children took over; the old one drains.
    Respawned { from: GenId, to: GenId },
}

/// How the supervisor stops a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// No new request; requests in flight finish; idle children get
    /// SIGTERM (php-cgi exits at once), busy ones when they are done.
    Graceful,
    /// SIGKILL every child at once (in-flight requests are cut, as with
    /// php-fpm's fast stop).
    Fast,
}

/// Messages from the pool (and the reaper, the php-cgi parents' fork
/// servers, timers) to its supervisor.
enum Event {
    Exited(crate::process::reap::Exit),
    /// Stop this child: it answered its last request (max_requests) or is
    /// over pm.max_memory, or broke the protocol; with the signal. Its
    /// connection is closed only after the signal.
    StopChild {
        pid: Pid,
        signal: Signal,
        /// For `fpmd_children_stopped_total`.
        why: stats::StopReason,
        /// Boxed, as in `Terminate`: every pool's channel holds a block
        /// of 32 events from the start, so an event's size is paid 32
        /// times per pool (72 bytes unboxed, 32 boxed).
        conn: Option<Box<ChildConn>>,
    },
    /// `request_terminate_timeout`: SIGKILL now (see [`Fate::Terminate`]).
    Terminate {
        pid: Pid,
        conn: Option<Box<ChildConn>>,
    },
    /// Slots out of dispatch for good (old generation, stopping pool),
    /// idle or done with their request: stop their children.
    Retire(Vec<Worker>),
    /// A request found no idle child (dynamic, ondemand): spawn now.
    Demand,
    /// What a php-cgi parent's fork server said
    /// ([`crate::process::fork_server`]).
    Parent {
        parent: i32,
        report: crate::process::fork_server::Report,
    },
}

/// A pool: shared by its listeners' connection tasks and its supervisor.
/// Lives as long as the pool is configured, across reloads.
pub struct Pool {
    name: String,
    table: Mutex<Table>,
    events: mpsc::UnboundedSender<Event>,
    /// Counters for the status page and metrics.
    pub stats: stats::PoolStats,
    /// The `X-Powered-By` line of the configuration it was learned for
    /// (see [`Pool::powered_by`]).
    powered_by: tokio::sync::Mutex<Option<(Arc<PoolConfig>, Option<String>)>>,
    /// The per-child rows were read once ([`Pool::status`] with `full`):
    /// each request reports its peak memory and CPU from then on
    /// ([`crate::process::sapi::Report`]).
    rows_read: AtomicBool,
}

impl Pool {
    /// The per-child rows, which show each child's last request's peak
    /// memory and CPU, were read once: requests are to report them.
    pub fn rows_read(&self) -> bool {
        self.rows_read.load(Ordering::Relaxed)
    }

    /// The `X-Powered-By` header line the current generation's php-cgi
    /// sends (`X-Powered-By: PHP/8.2.36`; `None` with `expose_php` off),
    /// for the pages fpmd answers itself, as php-fpm's carry it. Learned
    /// at the first such page of a configuration by running php-cgi on an
    /// empty script (see `probe.rs`; not at start, so that an `ondemand`
    /// pool has no php-cgi process until a request); concurrent callers
    /// wait for the one probe.
    pub async fn powered_by(&self) -> Option<String> {
        let config = self.config();
        let mut cached = self.powered_by.lock().await;
        if let Some((c, v)) = &*cached {
            if Arc::ptr_eq(c, &config) {
                return v.clone();
            }
        }
        let for_probe = config.clone();
        let probed = tokio::task::spawn_blocking(move || probe::powered_by(&for_probe))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        let v = probed.unwrap_or_else(|e| {
            debug!(pool = %self.name, "cannot learn php-cgi's X-Powered-By header: {e}");
            None
        });
        *cached = Some((config, v.clone()));
        v
    }

    /// The pool's name (its table name in the configuration).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current generation's configuration: what a request arriving now
    /// obeys until it gets a child (then its lease's generation counts).
    pub fn config(&self) -> Arc<PoolConfig> {
        self.table.lock().unwrap().config().clone()
    }

    /// Reads the slot table (status page, tests).
    pub fn with_table<R>(&self, f: impl FnOnce(&Table) -> R) -> R {
        f(&self.table.lock().unwrap())
    }

    /// Takes the most recently used idle child, or waits in the pool's
    /// bounded queue for one. Cancel-safe: a dropped waiter gives nothing up.
    pub async fn acquire(&self) -> Acquired<'_> {
        let rx = {
            let mut t = self.table.lock().unwrap();
            if t.closed {
                return Acquired::Closed;
            }
            while let Some(w) = t.pop_idle(Instant::now()) {
                if w.is_alive() {
                    w.startup.close();
                    return Acquired::Lease(self.lease_for(&t, w));
                }
                t.remove(w.slot);
            }
            if let Some(why) = &t.unstartable {
                // The supervisor tries again after its back-off; an
                // ondemand pool needs the demand to try.
                let _ = self.events.send(Event::Demand);
                return Acquired::Unstartable(why.clone());
            }
            t.waiters.retain(|s| !s.is_closed());
            if t.waiters.len()
                >= crate::listen::effective_backlog(t.config().listen.backlog) as usize
            {
                return Acquired::QueueFull;
            }
            let (tx, rx) = oneshot::channel();
            t.wait(tx);
            let max = t.config().pm.max_children;
            if t.config().pm.mode != PmMode::Static
                && t.busy() >= max as usize
                && self.stats.limit_reached()
            {
                // php-fpm's words (fpm_process_ctl.c), once per episode.
                warn!(pool = %self.name, "server reached pm.max_children setting ({max}), consider raising it");
            }
            if t.config().pm.mode != PmMode::Static {
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
                Acquired::Lease(self.lease_for(&self.table.lock().unwrap(), w))
            }
            // Dropped: the pool stops, or its php-cgi cannot start.
            Err(_) => match &self.table.lock().unwrap().unstartable {
                Some(why) => Acquired::Unstartable(why.clone()),
                None => Acquired::Closed,
            },
        };
        waiting.rx = None;
        result
    }

    /// The lease of `w`, just taken from the table `t` (whose lock the
    /// caller holds): with its slot's [`slots::Death`] and its
    /// generation's configuration (the current one's if that generation is
    /// gone).
    fn lease_for<'p>(&'p self, t: &Table, w: Worker) -> Lease<'p> {
        let config = t
            .slot(w.slot)
            .and_then(|s| t.configs.get(&s.gen))
            .cloned()
            .unwrap_or_else(|| t.config().clone());
        let death = t.death_of(w.slot);
        Lease {
            pool: self,
            worker: Some(w),
            death,
            config,
        }
    }

    /// Carries out a verdict on a child given back by a [`Lease`]; `config`
    /// is its generation's; `rss`: the child's resident memory in bytes
    /// after its request, when read (under `pm.max_memory`).
    fn settle(&self, mut w: Worker, fate: Fate, config: &PoolConfig, rss: Option<u64>) {
        match fate {
            Fate::Keep => self.release(w, config, rss),
            Fate::Reconnect => {
                drop(w.conn.take());
                self.release(w, config, rss);
            }
            Fate::Lost => {
                // php-cgi closes its connection mid-request only on its way
                // out (it may still be dumping core, its listening socket
                // still open): never offer it again. Its exit is reaped (or
                // reported by its php-cgi parent) and logged as a crash
                // (fpmd did not ask for it), and the process manager
                // replaces it.
                drop(w.conn.take());
                self.child_gone(w);
            }
            Fate::Kill | Fate::Unreachable => self.discard(w),
            Fate::Terminate => self.terminate(w),
        }
    }

    /// Gives a child back after a complete exchange: to the oldest waiter,
    /// else onto the idle stack; or retires it when it reached
    /// `pm.max_requests` or its `rss` (bytes, read by
    /// [`Lease::give_back`]) is over `pm.max_memory` (its generation's).
    fn release(&self, mut w: Worker, config: &PoolConfig, rss: Option<u64>) {
        let served = w.child.served_one();
        let max = config.pm.max_requests;
        let over_memory = match (config.pm.max_memory, rss) {
            (Some(limit), Some(rss)) if rss > limit => {
                info!(pool = %self.name, pid = w.log_pid(), "child uses {:.1} MiB (RSS) after a request, over pm.max_memory = {:.1} MiB: retiring it",
                    rss as f64 / 1048576.0, limit as f64 / 1048576.0);
                true
            }
            _ => false,
        };
        if over_memory || (max > 0 && served >= max) {
            if !over_memory {
                debug!(pool = %self.name, pid = w.log_pid(), "child served {served} requests (pm.max_requests): retiring it");
            }
            // Over the memory limit: SIGKILL (the child is idle, its request
            // is complete), so it does not grow further on its way out;
            // otherwise a graceful SIGTERM.
            let (signal, why) = if over_memory {
                (Signal::SIGKILL, stats::StopReason::MaxMemory)
            } else {
                (Signal::SIGTERM, stats::StopReason::MaxRequests)
            };
            let _ = self.events.send(Event::StopChild {
                pid: w.child.pid(),
                signal,
                why,
                conn: w.conn.take().map(Box::new),
            });
            self.child_gone(w);
            return;
        }
        self.offer(w);
    }

    /// Ends the request a child is running (`request_terminate_timeout`):
    /// the child is SIGKILLed, so that no PHP runs after the 504 (see
    /// [`Fate::Terminate`]); its connection is never reused.
    fn terminate(&self, mut w: Worker) {
        let _ = self.events.send(Event::Terminate {
            pid: w.child.pid(),
            conn: w.conn.take().map(Box::new),
        });
        self.child_gone(w);
    }

    /// Drops a child whose connection can no longer be trusted; the
    /// supervisor kills it and starts a replacement.
    fn discard(&self, mut w: Worker) {
        if !w.is_alive() {
            self.table.lock().unwrap().remove(w.slot);
            return;
        }
        let _ = self.events.send(Event::StopChild {
            pid: w.child.pid(),
            signal: Signal::SIGKILL,
            why: stats::StopReason::Killed,
            conn: w.conn.take().map(Box::new),
        });
        self.child_gone(w);
    }

    /// The child behind `w` is gone or on its way out (retired, killed,
    /// lost); its connection, if any, was closed or handed to the
    /// supervisor. The slot was the child, and is removed.
    pub(crate) fn child_gone(&self, w: Worker) {
        self.table.lock().unwrap().remove(w.slot);
    }

    /// Puts a worker back into dispatch: to the oldest waiter, else on the
    /// idle stack. A worker of a generation that is no longer current (or
    /// of a stopping pool) is retired instead.
    fn offer(&self, w: Worker) {
        let mut t = self.table.lock().unwrap();
        if let Some(w) = self.put_back_in(&mut t, w, false) {
            drop(t);
            let _ = self.events.send(Event::Retire(vec![w]));
        }
    }

    /// [`Pool::offer`] under the table's lock, held by the caller. With
    /// `lru` (a new child, no warm cache behind it) the worker goes to the
    /// least recently used end of the idle stack, so that the children
    /// already serving keep the work and their warm caches (as php-fpm's
    /// children, which the kernel wakes most recently waiting first).
    /// Returns the worker if it is to be retired (its slot is Retiring):
    /// its generation is not current, or the pool is stopping.
    fn put_back_in(&self, t: &mut Table, mut w: Worker, lru: bool) -> Option<Worker> {
        if !w.is_alive() {
            t.remove(w.slot);
            return None;
        }
        // Gone if its leader exited while it was leased: nothing to do.
        let gen = t.slot(w.slot)?.gen;
        if t.closed || gen != t.current {
            t.retiring(w.slot);
            return Some(w);
        }
        let now = Instant::now();
        while let Some(tx) = t.waiters.pop_front() {
            t.lease(&w, now);
            match tx.send(w) {
                Ok(()) => return None,
                Err(back) => w = back,
            }
        }
        t.push_idle(w, lru, now);
        self.stats.limit_left();
        None
    }

    /// Puts the slot of the new php-cgi child `pid` (generation `gen`) into
    /// dispatch, cold, with the worker `make` builds for its id and its
    /// [`Child`]. When `gen` is newer than the current generation (the
    /// first child of a reload to be ready), it becomes current under the
    /// same lock, so that every request from then on goes to it. Called by
    /// the supervisor, which carries out what [`Added`] says.
    pub(crate) fn add_slot(
        &self,
        gen: GenId,
        pid: Pid,
        make: impl FnOnce(SlotId, Arc<Child>) -> Worker,
    ) -> Added {
        let mut t = self.table.lock().unwrap();
        let (slot, child) = t.new_slot(gen, pid);
        let w = make(slot, child);
        let switched = (gen > t.current && t.configs.contains_key(&gen)).then(|| t.switch_to(gen));
        let retire = self.put_back_in(&mut t, w, true);
        Added { switched, retire }
    }

    /// Idle children now, and requests waiting for one.
    fn idle_and_waiting(&self) -> (usize, usize) {
        let mut t = self.table.lock().unwrap();
        t.waiters.retain(|s| !s.is_closed());
        (t.idle_len(), t.waiters.len())
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

/// What [`Pool::add_slot`] leaves the supervisor to do.
pub(crate) struct Added {
    /// The new slot's generation became current; these idle workers of
    /// older generations left dispatch (their slots are Retiring), to
    /// retire.
    pub switched: Option<Vec<Worker>>,
    /// The new worker, when it did not enter dispatch (the pool is
    /// stopping, or its generation was abandoned; its slot is Retiring),
    /// to retire.
    pub retire: Option<Worker>,
}

/// Handle used by the daemon to reconfigure and stop a pool.
pub struct PoolHandle {
    pub pool: Arc<Pool>,
    commands: mpsc::UnboundedSender<Command>,
    done: Option<tokio::task::JoinHandle<()>>,
    started: Option<oneshot::Receiver<()>>,
}

impl PoolHandle {
    /// Returns once the pool is started: its first child is ready (none
    /// under ondemand), or starting it failed and is retried with back-off
    /// or takes over 10 s (see the supervisor's `say_started`).
    pub async fn started(&mut self) {
        if let Some(rx) = self.started.take() {
            let _ = rx.await;
        }
    }

    /// Applies a new configuration of the pool; returns once it is in force.
    /// Errors: the new generation could not start (the old one serves on).
    pub async fn reconfigure(&self, config: Arc<PoolConfig>) -> Result<Reconfigured, String> {
        let (done, rx) = oneshot::channel();
        self.commands
            .send(Command::Reconfigure { config, done })
            .map_err(|_| "the pool is gone".to_string())?;
        rx.await
            .map_err(|_| "the pool stopped during the reload".to_string())?
    }

    /// Stops the pool's children and waits until every one is reaped.
    pub async fn stop(mut self, mode: StopMode, grace: Option<Duration>) {
        let _ = self.commands.send(Command::Stop { mode, grace });
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_role_ends_a_child_or_a_parent_with_its_group() {
        assert_eq!(Role::Child.everything_of(42), Pid::from_raw(42));
        assert_eq!(Role::Parent.everything_of(42), Pid::from_raw(-42));
    }

    #[test]
    fn an_event_is_small_since_every_pool_holds_32_of_them() {
        assert!(std::mem::size_of::<Event>() <= 32);
    }

    #[test]
    fn a_child_connection_holds_a_read_buffer_only_while_a_request_runs() {
        let mut buf = BytesMut::new();
        lend_buffer(&mut buf);
        assert!(buf.capacity() >= CHILD_BUF);
        // A response read and forwarded: consumed from the front.
        buf.extend_from_slice(&[1; 300]);
        bytes::Buf::advance(&mut buf, 300);
        return_buffer(&mut buf);
        assert_eq!(buf.capacity(), 0, "an idle connection holds no buffer");
        // What a spare lent next time offers: a whole buffer again.
        lend_buffer(&mut buf);
        assert!(buf.capacity() >= CHILD_BUF && buf.is_empty());
        // Bytes not yet forwarded stay with their connection.
        buf.extend_from_slice(b"partial record");
        return_buffer(&mut buf);
        assert_eq!(&buf[..], b"partial record");
    }

    /// The user a test pool's children run as: `nobody` when the tests
    /// run as root, else the current user.
    pub fn test_user() -> String {
        if nix::unistd::Uid::effective().is_root() {
            "nobody".to_string()
        } else {
            nix::unistd::User::from_uid(nix::unistd::Uid::effective())
                .ok()
                .flatten()
                .map(|u| u.name)
                .unwrap_or_default()
        }
    }

    /// A valid pool configuration (children as [`test_user`]).
    pub fn test_config() -> PoolConfig {
        use std::sync::atomic::AtomicU32;
        static N: AtomicU32 = AtomicU32::new(0);
        let user = test_user();
        let dir = tempfile::tempdir().unwrap();
        let path = dir
            .path()
            .join(format!("t{}.toml", N.fetch_add(1, Ordering::Relaxed)));
        let text = format!("[t]\nuser = {user:?}\nlisten.address = \"127.0.0.1:1\"\npm.max_children = 2\nphp_cgi = \"/bin/true\"\n");
        std::fs::write(&path, text).unwrap();
        Arc::unwrap_or_clone(
            crate::config::load(&path)
                .unwrap_or_else(|e| panic!("{e}"))
                .pools
                .remove(0),
        )
    }

    pub fn test_worker(slot: SlotId, child: Arc<Child>) -> Worker {
        Worker {
            slot,
            child,
            endpoint: Arc::new(PathBuf::from("/nonexistent")),
            conn: None,
            last_usage: None,
            alive: Arc::new(AtomicBool::new(true)),
            startup: crate::process::output::OutputHandle::new(),
        }
    }
}
