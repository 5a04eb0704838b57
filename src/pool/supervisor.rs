//! The supervisor of one pool: the one task that owns its children.
//!
//! Owns: every php-cgi the pool spawned (through [`crate::process::spawn`]), their
//! generations, retiring and killing them, respawning with back-off after
//! crashes, the process manager (static / dynamic / ondemand), and the
//! pool's commands (reconfigure, stop). Must not touch: FastCGI or the web
//! server's connections; dispatch state only through the slot table's
//! operations.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};

use super::slots::{GenId, SlotState, Table};
use super::stats::StopReason;
use super::{Command, Event, Pool, PoolHandle, Reconfigured, StopMode, Worker};
use crate::config::{PmMode, PoolConfig, Spawn};
use crate::process::reap::{Exit, ExitKind};
use crate::process::spawn::{Spawned, Spawner};
use crate::process::spec::{child_spec, template};
use crate::sys::procfs::parent_of;

/// Back-off after a child that died within [`QUICK_DEATH`] of its start:
/// first delay, doubled per further quick death, capped at [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const QUICK_DEATH: Duration = Duration::from_secs(1);
/// How often a new pre-fork parent is checked for its first child.
const FORK_POLL: Duration = Duration::from_millis(5);
/// How often the pool's processes are checked for what a script did to
/// them ([`Supervisor::health_check`]).
const HEALTH_CHECK: Duration = Duration::from_secs(1);

/// When, within `period`, the next periodic pass to start runs first (and
/// then every `period`): the k-th is offset by the fractional part of
/// k × 0.618… (the golden ratio's inverse) of the period, which spreads
/// any number of passes evenly. Hundreds of pools start together; without
/// it their scale-down and health passes ([`HEALTH_CHECK`], reading
/// `/proc` for every process) would all run in the same few milliseconds
/// of every second, on the threads that accept and proxy requests (200
/// pools: ~40 ms of CPU a second, measured), and a request arriving then
/// would wait for all of them.
fn phase(period: Duration) -> Duration {
    static STARTED: AtomicU64 = AtomicU64::new(0);
    let k = STARTED.fetch_add(1, Ordering::Relaxed);
    period.mul_f64((k as f64 * 0.618_033_988_749_895).fract())
}

/// A php-cgi fpmd spawned: a child (exec) or a pre-fork parent.
struct ChildState {
    gen: GenId,
    started: Instant,
    alive: Arc<AtomicBool>,
    endpoint: Arc<PathBuf>,
    /// Why fpmd asked it to go (retire, stop, broken connection); `None`:
    /// it was not asked (an exit then counts as [`StopReason::Died`]).
    stop: Option<StopReason>,
    /// A pre-fork parent (its process group holds its children).
    prefork: bool,
}

/// A child forked by a php-cgi parent.
struct Forked {
    /// The php-cgi parent (a key of `Supervisor::children`).
    parent: i32,
    started: Instant,
    /// Why fpmd asked it to go, if it did.
    stop: Option<StopReason>,
}

/// One generation as the supervisor sees it.
struct GenState {
    config: Arc<PoolConfig>,
    /// Spawns made for it (dynamic: the first round is `start_servers`).
    spawned: u64,
    /// The reload waiting for it to become current.
    done: Option<oneshot::Sender<Result<Reconfigured, String>>>,
    /// The generation current when this one was started.
    from: GenId,
    /// Draining (no longer current): when `graceful_timeout` runs out.
    drain_deadline: Option<tokio::time::Instant>,
}

/// A php-cgi whose slots wait for its PHP start-up (modules, ini) to be
/// over: a pre-fork parent once it has forked a child, an exec'd child
/// once it waits in accept(). Until then requests wait in fpmd's queue, and
/// a new generation does not take over.
struct Pending {
    prefork: bool,
    leader: i32,
    gen: GenId,
    endpoint: Arc<PathBuf>,
    alive: Arc<AtomicBool>,
    startup: crate::process::output::StartupWindow,
    since: Instant,
    /// The slow start was reported.
    warned: bool,
    /// A warm parent's start permit ([`super::warm::starts`]), given back
    /// once it serves or is gone, or when it is reported slow (a php-cgi
    /// that hangs while starting must not hold other pools' warm starts).
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

struct Stopping {
    mode: StopMode,
    /// When remaining children are killed.
    deadline: Option<tokio::time::Instant>,
}

struct Supervisor {
    pool: Arc<Pool>,
    spawner: Spawner,
    runtime_dir: PathBuf,
    children: HashMap<i32, ChildState>,
    exits_tx: mpsc::UnboundedSender<Exit>,
    forked_tx: mpsc::UnboundedSender<crate::process::proc_events::ForkedEvent>,
    /// Counter for unique socket names.
    serial: u64,
    /// Children that died within [`QUICK_DEATH`] of start, in a row.
    quick_deaths: u32,
    /// When the back-off allows the next spawn.
    respawn_at: Option<tokio::time::Instant>,
    /// A generation whose php-cgi the kernel refused to exec for its size
    /// (`E2BIG`): never tried again, since it cannot change (a reload
    /// makes a new generation).
    unstartable: Option<GenId>,
    /// Children of the target generation that exited unasked and are not
    /// replaced yet: their replacements are logged at NOTICE (php-fpm's
    /// `child N started` after a death; other starts at DEBUG).
    replacing: u32,
    stopping: Option<Stopping>,
    emergency_restart: Option<(u32, Duration)>,
    /// Recent unexpected deaths (for `emergency_restart_threshold`).
    crashes: VecDeque<Instant>,
    /// Pre-forked children seen starting (from the process events).
    forked: HashMap<i32, Forked>,
    gens: BTreeMap<GenId, GenState>,
    /// The newest generation: the one children are spawned for.
    target: GenId,
    pending: Vec<Pending>,
    /// The pool's cgroup (`None`: fpmd is not root, or no cgroup
    /// hierarchy is mounted); every child joins it before exec.
    cgroup: Option<Arc<crate::process::cgroup::PoolCgroup>>,
    /// The cgroup's OOM kill count last seen (to tell an OOM kill from
    /// another SIGKILL).
    oom_kills: u64,
    /// php-cgi processes seen stopped (`T`) at the last health check,
    /// with how many checks in a row.
    stopped: HashMap<i32, u32>,
    /// A permit to start a warm parent is asked for ([`super::warm`]).
    warm_wait: bool,
    /// The permit, while [`Supervisor::fill`] uses it.
    warm_permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// Starts a pool's supervisor, which spawns the pool's first generation.
/// `runtime_dir` is fpmd's private 0700 directory for the children's
/// sockets. `emergency_restart` is the global (threshold, interval),
/// applied to this pool alone.
pub fn start_pool(
    config: Arc<PoolConfig>,
    spawner: Spawner,
    runtime_dir: &Path,
    emergency_restart: Option<(u32, Duration)>,
) -> PoolHandle {
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let (commands_tx, commands_rx) = mpsc::unbounded_channel();
    let pool = Arc::new(Pool {
        name: config.name.clone(),
        table: Mutex::new(Table::new(config.clone())),
        events: events_tx.clone(),
        stats: super::stats::PoolStats::new(),
        powered_by: tokio::sync::Mutex::new(None),
    });
    let mut gens = BTreeMap::new();
    gens.insert(
        GenId(1),
        GenState {
            config,
            spawned: 0,
            done: None,
            from: GenId(1),
            drain_deadline: None,
        },
    );
    let cgroup = pool_cgroup(&gens[&GenId(1)].config);
    let oom_kills = cgroup.as_ref().and_then(|c| c.oom_kills()).unwrap_or(0);
    let sup = Supervisor {
        cgroup,
        oom_kills,
        stopped: HashMap::new(),
        warm_wait: false,
        warm_permit: None,
        pool: pool.clone(),
        spawner,
        runtime_dir: runtime_dir.to_path_buf(),
        children: HashMap::new(),
        exits_tx: relay(events_tx.clone(), Event::Exited),
        forked_tx: relay(events_tx, Event::Forked),
        serial: 0,
        quick_deaths: 0,
        respawn_at: None,
        unstartable: None,
        replacing: 0,
        stopping: None,
        emergency_restart,
        crashes: VecDeque::new(),
        forked: HashMap::new(),
        gens,
        target: GenId(1),
        pending: Vec::new(),
    };
    let (started_tx, started_rx) = oneshot::channel();
    let done = tokio::spawn(sup.run(events_rx, commands_rx, started_tx));
    PoolHandle {
        pool,
        commands: commands_tx,
        done: Some(done),
        started: Some(started_rx),
    }
}

/// Creates the pool's cgroup and applies its limits (see
/// [`crate::process::cgroup`]); `None`, with a warning when limits were asked
/// for, where there is none.
fn pool_cgroup(config: &PoolConfig) -> Option<Arc<crate::process::cgroup::PoolCgroup>> {
    let limited = config.cgroup != crate::config::CgroupLimits::default();
    let Some(layout) = crate::process::cgroup::Layout::system() else {
        if limited {
            warn!(pool = %config.name, "cgroup.* limits are set but fpmd cannot use cgroups (it is not root, or none is mounted): they do not apply");
        }
        return None;
    };
    let name = crate::process::cgroup::cgroup_name(std::process::id(), &config.name);
    match crate::process::cgroup::PoolCgroup::create(layout, &name) {
        Ok(cg) => {
            if let Err(e) = cg.apply(&config.cgroup) {
                warn!(pool = %config.name, "cannot apply the pool's cgroup limits: {e}");
            }
            debug!(pool = %config.name, "children run in the cgroup {name}");
            Some(Arc::new(cg))
        }
        Err(e) => {
            warn!(pool = %config.name, "cannot create the pool's cgroup: {e}; its children run without one");
            None
        }
    }
}

/// SIGKILL to `pid`; an error other than "no such process" is logged.
fn kill_logged(pool: &str, pid: i32) {
    if let Err(e) = kill(Pid::from_raw(pid), Signal::SIGKILL) {
        if e != nix::errno::Errno::ESRCH {
            warn!(pool = %pool, pid, "cannot send SIGKILL: {e}");
        }
    }
}

/// Whether `pid`, a copy of php-cgi that fpmd did not start, is serving
/// FastCGI: blocked in `accept()` on fd 0 (the pool's socket), or reading
/// a socket its parent (one of `tracked`) holds too (their shared
/// connection). `parent`: its parent's pid. Returns the parent.
fn stray_copy(pid: i32, parent: i32, tracked: &std::collections::HashSet<i32>) -> Option<i32> {
    if !tracked.contains(&parent) {
        return None;
    }
    let (nr, fd) = crate::sys::procfs::syscall(pid)?;
    if (nr == libc::SYS_accept || nr == libc::SYS_accept4) && fd == 0 {
        return Some(parent);
    }
    if nr == libc::SYS_read || nr == libc::SYS_recvfrom {
        let target = crate::sys::procfs::fd_target(pid, fd)?;
        if target.to_string_lossy().starts_with("socket:")
            && crate::sys::procfs::holds(parent, &target)
        {
            return Some(parent);
        }
    }
    None
}

/// `cgroup.memory_max` as written in the configuration's shorthand
/// (`256M`), for log lines.
fn shorthand(bytes: u64) -> String {
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if bytes % (1 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A sender of `T` whose messages reach the supervisor as events.
fn relay<T: Send + 'static>(
    events: mpsc::UnboundedSender<Event>,
    wrap: fn(T) -> Event,
) -> mpsc::UnboundedSender<T> {
    let (tx, mut rx) = mpsc::unbounded_channel::<T>();
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if events.send(wrap(m)).is_err() {
                return;
            }
        }
    });
    tx
}

/// Whether a php-cgi fpmd spawned has finished its PHP start-up: it (exec)
/// or one of its children (prefork) waits in accept(). A php_cgi wrapper
/// that forks a helper and dies does not pass, nor does a process that
/// exited. Where `/proc/PID/syscall` cannot be read (fpmd not root and the
/// child another user), a live process counts after 200 ms.
fn started_serving(leader: i32, prefork: bool, elapsed: Duration) -> bool {
    let candidates = if prefork {
        crate::sys::peer::children_of(leader)
    } else {
        vec![leader]
    };
    let mut unknown = false;
    for pid in candidates {
        match crate::sys::procfs::in_accept(pid) {
            Some(true) => return true,
            Some(false) => {}
            None => unknown |= crate::sys::procfs::alive(pid),
        }
    }
    unknown && elapsed > Duration::from_millis(200)
}

/// How long a pre-fork parent may take to fork all its children before its
/// start-up pages are given back anyway ([`page_out_parent`]).
const FORKS_DONE_WAIT: Duration = Duration::from_secs(2);
/// How often a pre-fork parent's pages are given back again: pages it
/// shared with another process when last advised (another pool's parent
/// mapping the same libraries, a child that exited since) are its alone
/// once that process is gone.
const PAGE_OUT_AGAIN: Duration = Duration::from_secs(30);

/// Once the php-cgi parent `leader` has forked its `children`, gives back
/// the file pages it touched while starting and no other process maps
/// ([`crate::sys::pageout`]), then again every [`PAGE_OUT_AGAIN`] while it
/// lives: its PSS goes from 17.0 to 3.5 MiB with Debian's extensions. It
/// only waits for its children from then on; a page it needs again (to
/// fork a replacement) is read back from the page cache.
async fn page_out_parent(pool: String, leader: i32, children: usize, alive: Arc<AtomicBool>) {
    let since = Instant::now();
    while crate::sys::peer::children_of(leader).len() < children
        && since.elapsed() < FORKS_DONE_WAIT
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One page-out at a time over all pools: it is kernel work of a few
    // milliseconds per parent, and hundreds of parents started together
    // would otherwise take both CPUs from the requests at once.
    static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let mut first = true;
    while alive.load(Ordering::Acquire) {
        let Ok(permit) = ONE_AT_A_TIME.acquire().await else {
            return;
        };
        let done = tokio::task::spawn_blocking(move || {
            // The resident size is only read for the first time's log line.
            let rss = || {
                first
                    .then(|| crate::sys::procfs::resident_bytes(leader))
                    .flatten()
            };
            let before = rss();
            let advised = crate::sys::pageout::page_out_process(leader);
            (before, advised, rss())
        })
        .await;
        let mib =
            |b: Option<u64>| b.map_or("?".to_string(), |b| format!("{:.1}", b as f64 / 1048576.0));
        match done {
            Ok((before, Ok(()), after)) if first => {
                debug!(pool = %pool, pid = leader, "php-cgi parent's start-up pages given back: resident {} → {} MiB", mib(before), mib(after));
            }
            Ok((_, Ok(()), _)) => {}
            Ok((_, Err(e), _)) if e.raw_os_error() == Some(libc::ESRCH) => return,
            Ok((_, Err(e), _)) => {
                debug!(pool = %pool, pid = leader, "cannot give back the php-cgi parent's pages: {e}");
                return;
            }
            Err(e) => {
                debug!(pool = %pool, pid = leader, "giving back the php-cgi parent's pages failed: {e}");
                return;
            }
        }
        drop(permit);
        // The repeats of parents that started together are spread over the
        // period ([`phase`]).
        let again = if first {
            PAGE_OUT_AGAIN + phase(PAGE_OUT_AGAIN)
        } else {
            PAGE_OUT_AGAIN
        };
        first = false;
        tokio::time::sleep(again).await;
    }
}

/// How long a stopped pool's cgroup may take to empty by itself before
/// what is left in it is killed ([`Supervisor::remove_cgroup`]).
const CGROUP_GRACE: Duration = Duration::from_secs(1);
/// The longest [`CGROUP_GRACE`] grows to while the cgroup keeps emptying.
const CGROUP_GRACE_MAX: Duration = Duration::from_secs(10);

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

impl Supervisor {
    fn name(&self) -> &str {
        &self.pool.name
    }

    /// The configuration children are spawned with now.
    fn config(&self) -> Arc<PoolConfig> {
        self.gens[&self.target].config.clone()
    }

    /// The generation requests go to now.
    fn current(&self) -> GenId {
        self.pool.table.lock().unwrap().current
    }

    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
        mut commands: mpsc::UnboundedReceiver<Command>,
        started: oneshot::Sender<()>,
    ) {
        let pm = self.config().pm.clone();
        info!(pool = %self.name(), "starting (pm.mode = {}, pm.max_children = {}, pm.spawn = {})",
            pm.mode.as_str(), pm.max_children, pm.spawn.as_str());
        self.fill().await;
        let _ = started.send(());
        // The process manager's scale-down pass (dynamic, ondemand); scale-up
        // is driven by queued requests (Event::Demand), not by this tick.
        let now = tokio::time::Instant::now();
        let second = Duration::from_secs(1);
        let mut tick = tokio::time::interval_at(now + phase(second), second);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut fork_poll = tokio::time::interval(FORK_POLL);
        let mut health = tokio::time::interval_at(now + phase(HEALTH_CHECK), HEALTH_CHECK);
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut commands_open = true;
        loop {
            if let Some(s) = &self.stopping {
                if self.children.is_empty() {
                    info!(pool = %self.name(), "all children are gone");
                    self.remove_cgroup().await;
                    return;
                }
                let deadline = s.deadline;
                tokio::select! {
                    Some(ev) = events.recv() => self.handle(ev).await,
                    _ = sleep_until_opt(deadline), if deadline.is_some() => self.kill_the_rest(),
                }
                continue;
            }
            let respawn_at = self.respawn_at;
            let drain_at = self.gens.values().filter_map(|g| g.drain_deadline).min();
            let ticking = self.config().pm.mode != PmMode::Static;
            let polling = !self.pending.is_empty();
            tokio::select! {
                Some(ev) = events.recv() => self.handle(ev).await,
                c = commands.recv(), if commands_open => match c {
                    Some(c) => self.command(c).await,
                    // The daemon dropped the handle without stopping: stop.
                    None => {
                        commands_open = false;
                        self.begin_stop(StopMode::Fast, None);
                    }
                },
                _ = sleep_until_opt(respawn_at), if respawn_at.is_some() => {
                    self.respawn_at = None;
                    self.fill().await;
                }
                _ = sleep_until_opt(drain_at), if drain_at.is_some() => self.drain_deadline_passed(),
                _ = fork_poll.tick(), if polling => self.check_pending(),
                _ = tick.tick(), if ticking => self.scale_down().await,
                _ = health.tick() => self.health_check(),
            }
        }
    }

    /// Writes `config`'s cgroup limits into the pool's cgroup (a reload
    /// changes them live: the kernel applies a new limit to the processes
    /// already in the cgroup).
    fn apply_limits(&self, config: &PoolConfig) {
        match &self.cgroup {
            Some(cg) => match cg.apply(&config.cgroup) {
                Ok(()) => {
                    info!(pool = %self.name(), "cgroup limits applied live to the cgroup {}", cg.name())
                }
                Err(e) => warn!(pool = %self.name(), "cannot apply the new cgroup limits: {e}"),
            },
            None => {
                warn!(pool = %self.name(), "cgroup.* limits changed but the pool has no cgroup: they do not apply")
            }
        }
    }

    /// The pool has stopped: whatever its scripts left running (a
    /// grandchild that called `setsid()`, a fork that escaped its parent)
    /// is killed, and the cgroup removed.
    async fn remove_cgroup(&mut self) {
        let Some(cg) = self.cgroup.take() else {
            return;
        };
        // A pre-fork parent's workers are still exiting when the parent is
        // gone (its SIGTERM reached them as it exited, and the ones it had
        // just forked anew): give them CGROUP_GRACE to go on their own, so
        // that only what a script left behind is killed and named. While
        // they keep going (hundreds of pools stopping at once exit slowly
        // on a busy machine) the grace starts again, up to CGROUP_GRACE_MAX.
        let start = tokio::time::Instant::now();
        let mut deadline = start + CGROUP_GRACE;
        let mut left = cg.pids();
        while !left.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = cg.pids();
            if now.len() < left.len() {
                deadline =
                    (tokio::time::Instant::now() + CGROUP_GRACE).min(start + CGROUP_GRACE_MAX);
            }
            left = now;
        }
        if !left.is_empty() {
            warn!(pool = %self.name(), "killing {} process(es) still in the pool's cgroup after its children: {left:?}", left.len());
        }
        let name = self.pool.name.clone();
        let done = tokio::task::spawn_blocking(move || cg.kill_all_and_remove()).await;
        match done {
            Ok(Ok(())) => debug!(pool = %name, "the pool's cgroup is removed"),
            Ok(Err(e)) => warn!(pool = %name, "cannot remove the pool's cgroup: {e}"),
            Err(e) => warn!(pool = %name, "removing the pool's cgroup failed: {e}"),
        }
    }

    /// After a child ended on SIGKILL: whether the pool's memory cgroup
    /// OOM-killed a process since the last look; if so it is logged with
    /// the limit.
    fn note_oom(&mut self, pid: i32, kind: ExitKind) -> bool {
        if !matches!(
            kind,
            ExitKind::Signal {
                signal: libc::SIGKILL,
                ..
            }
        ) {
            return false;
        }
        let Some(now) = self.cgroup.as_ref().and_then(|c| c.oom_kills()) else {
            return false;
        };
        if now <= self.oom_kills {
            return false;
        }
        self.oom_kills = now;
        let limit = self
            .config()
            .cgroup
            .memory_max
            .map_or("none".to_string(), shorthand);
        error!(pool = %self.name(), pid, "child {pid} killed by the pool's cgroup memory limit (cgroup.memory_max = {limit})");
        true
    }

    /// What a script can do to its own pool, undone once a second:
    ///
    /// - a php-cgi of the pool stopped by a signal (`SIGSTOP`: state `T`;
    ///   a tracer's stop, `t`, is left alone) on two checks in a row is
    ///   killed: a stopped pre-fork parent replaces no child and accepts
    ///   nothing, a stopped child holds its request for ever (php-fpm
    ///   leaves both to `request_terminate_timeout`, or for ever);
    /// - a php-cgi forked by a script (`pcntl_fork`) whose copy of the
    ///   script ended goes back to serving FastCGI: blocked in `accept()`
    ///   on the pool's socket (fd 0) or reading the connection it shares
    ///   with the child that forked it. It is killed before it takes a
    ///   request meant for a child fpmd knows.
    ///
    /// The processes looked at: the pool's cgroup, or without one the
    /// php-cgi fpmd started, their children and grandchildren.
    fn health_check(&mut self) {
        use crate::sys::peer::children_of;
        use crate::sys::procfs;
        let leaders: Vec<(i32, bool)> =
            self.children.iter().map(|(p, c)| (*p, c.prefork)).collect();
        if leaders.is_empty() {
            self.stopped.clear();
            return;
        }
        let mut tracked: std::collections::HashSet<i32> = leaders.iter().map(|l| l.0).collect();
        let exes: std::collections::HashSet<PathBuf> =
            leaders.iter().filter_map(|l| procfs::exe(l.0)).collect();
        for (leader, prefork) in &leaders {
            if *prefork {
                tracked.extend(children_of(*leader));
            }
        }
        let candidates: Vec<i32> = match &self.cgroup {
            Some(cg) => cg.pids(),
            None => {
                let mut v: Vec<i32> = tracked.iter().copied().collect();
                let kids: Vec<i32> = v.iter().flat_map(|p| children_of(*p)).collect();
                v.extend(kids);
                v
            }
        };
        let mut stopped = HashMap::new();
        for pid in candidates {
            let is_tracked = tracked.contains(&pid);
            if !is_tracked && !procfs::exe(pid).is_some_and(|e| exes.contains(&e)) {
                // Not a php-cgi (a program a script runs): its own business.
                continue;
            }
            // One read of /proc/PID/stat for both: this runs once a second
            // for every process of every pool.
            let Some((state, parent)) = procfs::state_and_parent(pid) else {
                continue; // gone
            };
            if state == 'T' {
                let n = self.stopped.get(&pid).copied().unwrap_or(0) + 1;
                if n < 2 {
                    stopped.insert(pid, n);
                    continue;
                }
                if let Some(c) = self.children.get(&pid) {
                    if c.prefork {
                        warn!(pool = %self.name(), pid, "php-cgi parent {pid} is stopped (SIGSTOP), so it replaces no child: SIGKILL, a new one is started");
                    } else {
                        warn!(pool = %self.name(), pid, "child {pid} is stopped (SIGSTOP): SIGKILL");
                    }
                    self.stop_child(pid, pid, Signal::SIGKILL, StopReason::Killed);
                } else if let Some(leader) =
                    leaders.iter().find(|l| l.1 && parent == l.0).map(|l| l.0)
                {
                    warn!(pool = %self.name(), pid, "child {pid} is stopped (SIGSTOP): SIGKILL");
                    self.stop_child(leader, pid, Signal::SIGKILL, StopReason::Killed);
                } else {
                    warn!(pool = %self.name(), pid, "php-cgi {pid} forked by a script is stopped (SIGSTOP): SIGKILL");
                    kill_logged(&self.pool.name, pid);
                }
                continue;
            }
            // A child the pre-fork parent forked since `tracked` was read
            // is the pool's, not a script's copy.
            let parent_is_prefork_leader = leaders.iter().any(|l| l.1 && l.0 == parent);
            if !is_tracked && !parent_is_prefork_leader {
                if let Some(parent) = stray_copy(pid, parent, &tracked) {
                    warn!(pool = %self.name(), pid, "php-cgi {pid} forked by a script in child {parent} (pcntl_fork) went back to serving FastCGI on its parent's sockets: SIGKILL");
                    kill_logged(&self.pool.name, pid);
                }
            }
        }
        self.stopped = stopped;
    }

    async fn command(&mut self, c: Command) {
        match c {
            Command::Reconfigure { config, done } => self.reconfigure(config, done).await,
            Command::Stop { mode, grace } => self.begin_stop(mode, grace),
        }
    }

    /// Applies a new configuration: live when the children would be started
    /// the same way, else by a new generation (see the module docs of
    /// [`super`]).
    async fn reconfigure(
        &mut self,
        config: Arc<PoolConfig>,
        done: oneshot::Sender<Result<Reconfigured, String>>,
    ) {
        if self.stopping.is_some() {
            let _ = done.send(Err("the pool is stopping".into()));
            return;
        }
        let old = self.config();
        if old.cgroup != config.cgroup {
            self.apply_limits(&config);
        }
        if template(&old) == template(&config) {
            self.gens
                .get_mut(&self.target)
                .expect("target generation")
                .config = config.clone();
            self.pool
                .table
                .lock()
                .unwrap()
                .configs
                .insert(self.target, config);
            info!(pool = %self.name(), "reloaded: new settings applied to the running children (generation {})", self.target);
            let _ = done.send(Ok(Reconfigured::Retuned));
            self.trim_excess();
            self.fill().await;
            return;
        }
        self.new_generation(config, Some(done)).await;
    }

    /// Starts a new generation with `config`; it becomes current when its
    /// first child is ready, and `done` is answered then.
    async fn new_generation(
        &mut self,
        config: Arc<PoolConfig>,
        done: Option<oneshot::Sender<Result<Reconfigured, String>>>,
    ) {
        let from = self.current();
        let gen = GenId(self.target.0 + 1);
        // A generation still starting is superseded: it never serves.
        if self.target != from {
            self.abandon_target("superseded by a newer configuration");
        }
        info!(pool = %self.name(), "reloading: starting generation {gen} (generation {from} drains)");
        self.pool
            .table
            .lock()
            .unwrap()
            .configs
            .insert(gen, config.clone());
        self.gens.insert(
            gen,
            GenState {
                config,
                spawned: 0,
                done,
                from,
                drain_deadline: None,
            },
        );
        self.target = gen;
        self.respawn_at = None;
        self.quick_deaths = 0;
        self.fill().await;
    }

    /// The generation being started never becomes current: its children are
    /// stopped, its reload is answered with `why`, and the current one
    /// serves on.
    fn abandon_target(&mut self, why: &str) {
        let gen = self.target;
        let current = self.current();
        if gen == current {
            return;
        }
        self.target = current;
        if let Some(mut g) = self.gens.remove(&gen) {
            if let Some(done) = g.done.take() {
                let _ = done.send(Err(why.to_string()));
            }
        }
        self.pool.table.lock().unwrap().configs.remove(&gen);
        self.pending.retain(|p| p.gen != gen);
        let leaders: Vec<i32> = self
            .children
            .iter()
            .filter(|(_, c)| c.gen == gen)
            .map(|(p, _)| *p)
            .collect();
        for leader in leaders {
            self.stop_child(leader, leader, Signal::SIGTERM, StopReason::Retired);
        }
        warn!(pool = %self.name(), "generation {gen} abandoned ({why}); generation {current} serves on");
    }

    /// A generation became current: the older ones drain, bounded by the
    /// new generation's `graceful_timeout`.
    fn switched(&mut self, gen: GenId) {
        let grace = self.gens.get(&gen).and_then(|g| g.config.graceful_timeout);
        let now = tokio::time::Instant::now();
        let mut from = gen;
        for (id, g) in self.gens.iter_mut() {
            if *id < gen && g.drain_deadline.is_none() {
                g.drain_deadline = grace.map(|d| now + d);
            }
        }
        if let Some(g) = self.gens.get_mut(&gen) {
            from = g.from;
            if let Some(done) = g.done.take() {
                let _ = done.send(Ok(Reconfigured::Respawned { from, to: gen }));
            }
        }
        info!(pool = %self.name(), "generation {gen} serves; generation {from} drains");
        self.collect_drained();
    }

    /// Forgets generations with no slot and no child left.
    fn collect_drained(&mut self) {
        let drained = self.pool.table.lock().unwrap().drained();
        for gen in drained {
            if gen == self.target || self.children.values().any(|c| c.gen == gen) {
                continue;
            }
            self.gens.remove(&gen);
            self.pool.table.lock().unwrap().configs.remove(&gen);
            debug!(pool = %self.name(), "generation {gen} has drained");
        }
    }

    /// `graceful_timeout` ran out for a draining generation: its children
    /// still busy are killed, each logged with what it was running.
    fn drain_deadline_passed(&mut self) {
        let now = tokio::time::Instant::now();
        let due: Vec<GenId> = self
            .gens
            .iter()
            .filter(|(_, g)| g.drain_deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for gen in due {
            if let Some(g) = self.gens.get_mut(&gen) {
                g.drain_deadline = None;
            }
            let grace = self.config().graceful_timeout.unwrap_or_default();
            let busy: Vec<(i32, Option<i32>, Instant, Option<super::RequestInfo>)> = {
                let t = self.pool.table.lock().unwrap();
                t.busy_of(gen)
                    .map(|(_, s)| match &s.state {
                        SlotState::Busy { since } => {
                            (s.leader, s.pid, *since, Some(s.request.clone()))
                        }
                        _ => (s.leader, s.pid, Instant::now(), None),
                    })
                    .collect()
            };
            for (leader, pid, since, request) in busy {
                let r = request.unwrap_or_default();
                let target = pid.unwrap_or(leader);
                warn!(pool = %self.name(), pid = target, script = %r.script, uri = %r.uri,
                    "child of generation {gen} still busy {:.1} s after the reload, past graceful_timeout = {:.1} s: killing it",
                    since.elapsed().as_secs_f64(), grace.as_secs_f64());
                match pid {
                    Some(pid) => self.stop_child(leader, pid, Signal::SIGKILL, StopReason::Retired),
                    // A pre-forked child fpmd could not name: its whole
                    // (old) group goes.
                    None => {
                        if let Some(c) = self.children.get_mut(&leader) {
                            c.stop.get_or_insert(StopReason::Retired);
                            let _ = kill(Pid::from_raw(-leader), Signal::SIGKILL);
                        }
                    }
                }
            }
        }
    }

    /// Under exec, `pm.max_children` lowered by a reload: idle children over
    /// it are retired.
    fn trim_excess(&mut self) {
        let config = self.config();
        if config.pm.spawn != Spawn::Exec {
            return;
        }
        let gen = self.target;
        let active = self
            .children
            .values()
            .filter(|c| c.gen == gen && c.stop.is_none())
            .count();
        let max = config.pm.max_children as usize;
        if active > max {
            let extra = self
                .pool
                .table
                .lock()
                .unwrap()
                .take_idle(active - max, |w| w.gen == gen);
            for w in extra {
                info!(pool = %self.name(), pid = w.log_pid(), "pm.max_children lowered to {max}: retiring an idle child");
                self.retire_idle(w);
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
        let config = self.config();
        let prefork = config.pm.spawn == Spawn::Prefork;
        let gen = self.current();
        let now = Instant::now();
        match config.pm.mode {
            PmMode::Static => {}
            PmMode::Ondemand {
                process_idle_timeout,
                ..
            } => {
                let before = now.checked_sub(process_idle_timeout).unwrap_or(now);
                if prefork {
                    let slots = config.pm.max_children as usize;
                    let leaders: Vec<i32> = self
                        .children
                        .iter()
                        .filter(|(_, c)| c.stop.is_none() && c.gen == gen)
                        .map(|(p, _)| *p)
                        .collect();
                    for leader in leaders {
                        let all_idle = !super::warm::allowed() && {
                            let t = self.pool.table.lock().unwrap();
                            t.slots_of(leader) >= slots
                                && t.count_idle(|w| w.leader == leader) >= slots
                                && t.count_idle(|w| w.leader == leader && w.idle_since > before)
                                    == 0
                        };
                        if all_idle {
                            info!(pool = %self.name(), pid = leader, "every child idle for {:.1} s (pm.process_idle_timeout): stopping the php-cgi parent",
                                process_idle_timeout.as_secs_f64());
                            let workers = self
                                .pool
                                .table
                                .lock()
                                .unwrap()
                                .take_idle(usize::MAX, |w| w.leader == leader);
                            for w in workers {
                                self.pool.table.lock().unwrap().remove(w.slot);
                            }
                            self.stop_child(leader, leader, Signal::SIGTERM, StopReason::Idle);
                        }
                    }
                }
                let idle = self.pool.table.lock().unwrap().take_idle(usize::MAX, |w| {
                    w.idle_since <= before && (!w.prefork || w.conn.is_some())
                });
                for w in idle {
                    debug!(pool = %self.name(), pid = w.log_pid(), "child idle for {:.1} s (pm.process_idle_timeout): retiring it", process_idle_timeout.as_secs_f64());
                    self.retire_idle(w);
                }
                if prefork {
                    // Memory allows a warm parent again.
                    self.fill().await;
                }
            }
            PmMode::Dynamic {
                max_spare_servers, ..
            } => {
                let max = max_spare_servers as usize;
                // Under prefork only children that served requests count:
                // a cold fork costs next to nothing and is not retired.
                let warm = |w: &Worker| !w.prefork || w.conn.is_some();
                let idle = self.pool.table.lock().unwrap().count_idle(warm);
                if idle > max {
                    let taken = self.pool.table.lock().unwrap().take_idle(1, warm);
                    for w in taken {
                        // php-fpm logs its scaling at debug level too.
                        debug!(pool = %self.name(), pid = w.log_pid(), "{idle} idle children, over pm.max_spare_servers = {max}: retiring the least recently used");
                        self.retire_idle(w);
                    }
                }
                self.fill().await;
            }
        }
    }

    /// Counts an unexpected child death; past `emergency_restart_threshold`
    /// within `emergency_restart_interval`, restarts this pool's children
    /// as a new generation (php-fpm restarts its whole master; here other
    /// pools go on, and busy children finish their requests).
    async fn note_crash(&mut self) {
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
        let config = self.config();
        self.new_generation(config, None).await;
    }

    /// Retires an idle worker taken out of the idle stack (scale-down):
    /// SIGTERM (the child is idle and exits at once), then its connection
    /// is closed. Under prefork the slot stays and reconnects to a fresh
    /// fork.
    fn retire_idle(&mut self, mut w: Worker) {
        if w.prefork {
            if w.conn.is_some() {
                w.learn_pid();
                if let Some(pid) = w.pid {
                    self.stop_child(w.leader, pid, Signal::SIGTERM, StopReason::Idle);
                }
            }
            w.reset_slot();
            self.pool.offer_cold(w);
        } else {
            self.pool.table.lock().unwrap().remove(w.slot);
            self.stop_child(w.leader, w.leader, Signal::SIGTERM, StopReason::Idle);
        }
    }

    /// Slots out of dispatch for good: their children are stopped once
    /// nothing of theirs is busy (a pre-fork parent only when none of its
    /// slots is left, so that no busy child is ever signalled).
    fn retire(&mut self, workers: Vec<Worker>) {
        for w in workers {
            self.pool.table.lock().unwrap().remove(w.slot);
            let leader = w.leader;
            let left = self.pool.table.lock().unwrap().slots_of(leader);
            if w.prefork {
                if left == 0 {
                    debug!(pool = %self.name(), pid = leader, "every slot of the php-cgi parent is retired: stopping it");
                    self.stop_child(leader, leader, Signal::SIGTERM, StopReason::Retired);
                }
            } else {
                self.stop_child(leader, leader, Signal::SIGTERM, StopReason::Retired);
            }
            drop(w);
        }
        self.collect_drained();
    }

    fn begin_stop(&mut self, mode: StopMode, grace: Option<Duration>) {
        let idle = self.pool.table.lock().unwrap().close();
        for g in self.gens.values_mut() {
            if let Some(done) = g.done.take() {
                let _ = done.send(Err("the pool is stopping".into()));
            }
        }
        self.pending.clear();
        let now = tokio::time::Instant::now();
        match mode {
            StopMode::Graceful => {
                self.stopping = Some(Stopping {
                    mode,
                    deadline: grace.map(|g| now + g),
                });
                self.retire(idle);
                // Children with no slot at all (a parent still starting).
                let orphans: Vec<i32> = self
                    .children
                    .keys()
                    .copied()
                    .filter(|leader| self.pool.table.lock().unwrap().slots_of(*leader) == 0)
                    .collect();
                for leader in orphans {
                    self.stop_child(leader, leader, Signal::SIGTERM, StopReason::Retired);
                }
            }
            StopMode::Fast => {
                self.stopping = Some(Stopping {
                    mode,
                    deadline: Some(now + Duration::from_secs(1)),
                });
                drop(idle);
                for (pid, c) in self.children.iter_mut() {
                    c.stop.get_or_insert(StopReason::Retired);
                    // php-cgi only finishes its script on SIGTERM (an
                    // interrupted sleep() even returns early and the script
                    // runs on): a fast stop kills, as php-fpm's does.
                    let target = if c.prefork { -*pid } else { *pid };
                    let _ = kill(Pid::from_raw(target), Signal::SIGKILL);
                }
            }
        }
    }

    /// The stop's grace is over: whatever is left is killed.
    fn kill_the_rest(&mut self) {
        let busy: Vec<(i32, Option<super::RequestInfo>)> = {
            let t = self.pool.table.lock().unwrap();
            t.slots()
                .filter_map(|(_, s)| match &s.state {
                    SlotState::Busy { .. } => {
                        Some((s.pid.unwrap_or(s.leader), Some(s.request.clone())))
                    }
                    _ => None,
                })
                .collect()
        };
        for (pid, r) in busy {
            let r = r.unwrap_or_default();
            warn!(pool = %self.name(), pid, script = %r.script, uri = %r.uri, "child still busy when the stop's grace ran out: SIGKILL");
        }
        let name = self.pool.name.clone();
        for (pid, c) in self.children.iter_mut() {
            c.stop.get_or_insert(StopReason::Retired);
            debug!(pool = %name, pid, "child still alive after the stop grace period: SIGKILL");
            let target = if c.prefork { -*pid } else { *pid };
            let _ = kill(Pid::from_raw(target), Signal::SIGKILL);
        }
        if let Some(s) = &mut self.stopping {
            s.mode = StopMode::Fast;
            s.deadline = None;
        }
    }

    async fn handle(&mut self, ev: Event) {
        match ev {
            Event::Exited(exit) => self.on_exit(exit).await,
            Event::StopChild {
                leader,
                pid,
                signal,
                why,
                conn,
            } => {
                self.stop_child(leader, pid, signal, why);
                drop(conn);
            }
            Event::Terminate { leader, pid, conn } => {
                // SIGKILL, not SIGTERM: php-cgi runs the script on to its
                // end after a SIGTERM (`fcgi_signal_handler` only marks the
                // shutdown), and what it wrote after the 504 is what the
                // timeout is set to prevent.
                self.stop_child(leader, pid, Signal::SIGKILL, StopReason::Terminated);
                drop(conn);
            }
            Event::Retire(workers) => self.retire(workers),
            Event::Switched(gen) => self.switched(gen),
            Event::Demand => self.fill().await,
            Event::Crashed => {
                // Without process events this is all fpmd learns of the
                // child's end; the parent forks a replacement.
                self.pool.stats.stopped(StopReason::Died);
                self.pool.stats.count_spawned(1);
                self.note_crash().await
            }
            Event::Forked(ev) => self.on_forked(ev).await,
            Event::WarmPermit(permit) => {
                self.warm_wait = false;
                self.warm_permit = Some(permit);
                self.fill().await;
                // Not used (a request started the parent meanwhile, or the
                // pool stops): the next pool's turn.
                self.warm_permit = None;
            }
        }
    }

    /// Signals one child, which is to stop for `why` (the first reason
    /// given counts; see [`super::stats::PoolStats::stopped`]). Exec: the
    /// child is the leader. Prefork: a child of the leader (the parent),
    /// which forks its replacement.
    fn stop_child(&mut self, leader: i32, pid: i32, sig: Signal, why: StopReason) {
        if let Some(c) = self.children.get_mut(&leader) {
            if leader == pid {
                c.stop.get_or_insert(why);
            } else if parent_of(pid) != Some(leader) {
                // Already gone, and the pid may have been reused: a root
                // daemon must not signal a stranger.
                return;
            } else if crate::process::proc_events::available() {
                // Counted when its exit is reported (`on_forked`).
                self.forked
                    .entry(pid)
                    .or_insert(Forked {
                        parent: leader,
                        started: c.started,
                        stop: None,
                    })
                    .stop
                    .get_or_insert(why);
            } else {
                // No exit will be reported: this is the child's end as fpmd
                // knows it, and the parent forks a replacement.
                self.pool.stats.stopped(why);
                self.pool.stats.count_spawned(1);
            }
            if let Err(e) = kill(Pid::from_raw(pid), sig) {
                if e != nix::errno::Errno::ESRCH {
                    warn!(pool = %self.pool.name, pid, "cannot send {sig}: {e}");
                }
            }
        }
    }

    /// A child of one of this pool's php-cgi parents started or ended: its
    /// exit is logged as php-fpm logs a child's (warning unless fpmd asked
    /// it to go), and a crash counts for `emergency_restart_threshold`.
    async fn on_forked(&mut self, ev: crate::process::proc_events::ForkedEvent) {
        use crate::process::proc_events::ForkedEvent;
        match ev {
            ForkedEvent::Started { pid, parent } => self.note_forked(pid, parent),
            ForkedEvent::Exited { pid, parent, kind } => {
                // Its request ends now, whatever holds its connection open.
                self.pool
                    .table
                    .lock()
                    .unwrap()
                    .child_died(parent, Some(pid));
                let parent_state = self.children.get(&parent).map(|c| (c.started, c.stop));
                let forked = self.forked.remove(&pid);
                let started = forked
                    .as_ref()
                    .map(|f| f.started)
                    .or(parent_state.map(|p| p.0))
                    .unwrap_or_else(Instant::now);
                let asked = forked
                    .and_then(|f| f.stop)
                    .or(parent_state.and_then(|p| p.1))
                    .or(self.stopping.is_some().then_some(StopReason::Retired));
                // The parent ending takes its children with it; those it
                // left were counted when it was reaped (`on_exit`).
                let expected = asked.is_some() || parent_state.is_none();
                if parent_state.is_some() {
                    self.pool.stats.stopped(asked.unwrap_or(StopReason::Died));
                }
                let exit = Exit { pid, kind };
                let lived = started.elapsed();
                self.note_oom(pid, kind);
                if !expected && self.stopping.is_none() {
                    // Its parent forks a replacement.
                    self.replacing += 1;
                }
                match (expected, kind) {
                    (true, _) => debug!(pool = %self.name(), pid, "{}", exit.describe(lived)),
                    (false, ExitKind::Code(0)) => {
                        info!(pool = %self.name(), pid, "{}", exit.describe(lived))
                    }
                    (false, _) => warn!(pool = %self.name(), pid, "{}", exit.describe(lived)),
                }
                if matches!(
                    kind,
                    ExitKind::Signal {
                        signal: libc::SIGSEGV | libc::SIGBUS,
                        ..
                    }
                ) && self.stopping.is_none()
                {
                    self.note_crash().await;
                }
            }
        }
    }

    /// A pre-forked child is known to exist: counted once.
    fn note_forked(&mut self, pid: i32, parent: i32) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.forked.entry(pid) {
            e.insert(Forked {
                parent,
                started: Instant::now(),
                stop: None,
            });
            self.pool.stats.count_spawned(1);
            if self.replacing > 0 {
                self.replacing -= 1;
                info!(pool = %self.name(), pid, php_fpm = %format_args!("child {pid} started"), "child forked by php-cgi parent {parent} in place of one that exited");
            }
        }
    }

    /// New php-cgi processes: once one has finished its PHP start-up (see
    /// [`Pending`]), its slots enter dispatch; for a new generation that
    /// makes it current.
    fn check_pending(&mut self) {
        let mut ready = Vec::new();
        let name = self.pool.name.clone();
        let mut waiting = Vec::new();
        for mut p in std::mem::take(&mut self.pending) {
            if !p.alive.load(Ordering::Acquire) {
                continue;
            }
            let started = started_serving(p.leader, p.prefork, p.since.elapsed());
            if started {
                ready.push(p);
                continue;
            }
            if !p.warned && p.since.elapsed() > Duration::from_secs(10) {
                p.warned = true;
                p.permit = None;
                warn!(pool = %name, pid = p.leader, "php-cgi has not finished starting after 10 s");
            }
            waiting.push(p);
        }
        self.pending = waiting;
        for p in ready {
            if p.prefork {
                debug!(pool = %self.name(), pid = p.leader, "php-cgi parent forked its children: its slots serve");
                if crate::process::proc_events::available() {
                    // Children forked before the parent was watched sent
                    // no event that reached this pool.
                    for pid in crate::sys::peer::children_of(p.leader) {
                        self.note_forked(pid, p.leader);
                    }
                }
                let slots = self
                    .gens
                    .get(&p.gen)
                    .map_or(0, |g| g.config.pm.max_children);
                self.add_slots(&p, true, slots);
                tokio::spawn(page_out_parent(
                    self.pool.name.clone(),
                    p.leader,
                    slots as usize,
                    p.alive.clone(),
                ));
            } else {
                debug!(pool = %self.name(), pid = p.leader, "php-cgi started: it serves");
                self.add_slots(&p, false, 1);
            }
        }
    }

    /// Puts `n` slots of `leader` into dispatch.
    fn add_slots(&mut self, leader: &Pending, prefork: bool, n: u32) {
        for _ in 0..n {
            let pid = (!prefork).then_some(leader.leader);
            let slot = self
                .pool
                .table
                .lock()
                .unwrap()
                .new_slot(leader.gen, leader.leader, pid);
            self.pool.offer_cold(Worker {
                slot,
                gen: leader.gen,
                leader: leader.leader,
                pid,
                prefork,
                endpoint: leader.endpoint.clone(),
                conn: None,
                served: 0,
                alive: leader.alive.clone(),
                idle_since: Instant::now(),
                startup: leader.startup.clone(),
            });
        }
    }

    /// A php-cgi parent was reaped: its children that fpmd still counts
    /// as alive end with it, each for the reason it was asked to go, else
    /// for the parent's `why` (without process events fpmd knows only
    /// that the parent kept `pm.max_children` of them).
    fn count_orphaned(&mut self, parent: i32, gen: GenId, why: StopReason) {
        if !crate::process::proc_events::available() {
            let n = self
                .gens
                .get(&gen)
                .map_or(self.config().pm.max_children, |g| g.config.pm.max_children);
            for _ in 0..n {
                self.pool.stats.stopped(why);
            }
            return;
        }
        let mine: Vec<i32> = self
            .forked
            .iter()
            .filter(|(_, f)| f.parent == parent)
            .map(|(pid, _)| *pid)
            .collect();
        for pid in mine {
            if let Some(f) = self.forked.remove(&pid) {
                self.pool.stats.stopped(f.stop.unwrap_or(why));
            }
        }
    }

    async fn on_exit(&mut self, exit: Exit) {
        let Some(child) = self.children.remove(&exit.pid) else {
            return;
        };
        child.alive.store(false, Ordering::Release);
        {
            let mut t = self.pool.table.lock().unwrap();
            t.child_died(exit.pid, None);
            t.forget_leader(exit.pid);
        }
        self.pending.retain(|p| p.leader != exit.pid);
        let why = child.stop.unwrap_or(StopReason::Died);
        if child.prefork {
            crate::process::proc_events::unwatch(exit.pid);
            // Children the parent left behind (it only signals them on
            // SIGTERM) must not serve anything any more.
            let _ = kill(Pid::from_raw(-exit.pid), Signal::SIGKILL);
            self.count_orphaned(exit.pid, child.gen, why);
        } else {
            self.pool.stats.stopped(why);
        }
        let _ = std::fs::remove_file(child.endpoint.as_path());
        let lived = child.started.elapsed();
        self.note_oom(exit.pid, exit.kind);
        if child.stop.is_some() {
            debug!(pool = %self.name(), pid = exit.pid, "{}", exit.describe(lived));
        } else {
            if child.gen == self.target && !child.prefork {
                self.replacing += 1;
            }
            match exit.kind {
                ExitKind::Code(0) => {
                    info!(pool = %self.name(), pid = exit.pid, "{}", exit.describe(lived))
                }
                _ => warn!(pool = %self.name(), pid = exit.pid, "{}", exit.describe(lived)),
            }
        }
        self.collect_drained();
        if self.stopping.is_some() {
            return;
        }
        // A new generation's php-cgi that dies before it served: the reload
        // fails, the current generation serves on.
        if child.gen == self.target && self.target != self.current() && child.stop.is_none() {
            let why = format!(
                "its php-cgi {} after {:.3} s",
                exit.kind,
                lived.as_secs_f64()
            );
            self.abandon_target(&why);
            return;
        }
        if child.gen != self.target {
            // An old generation draining: nothing to replace.
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
            self.note_crash().await;
        }
        if child.stop.is_none() && lived < QUICK_DEATH {
            self.cannot_start(format!(
                "{} {:.3} s after it started",
                exit.kind,
                lived.as_secs_f64()
            ));
            if self.respawn_at.is_some() {
                // Another child of the same round of spawns: the back-off
                // step is already counted and announced.
                debug!(pool = %self.name(), pid = exit.pid, "child died {:.3} s after start", lived.as_secs_f64());
                return;
            }
            self.quick_deaths += 1;
            let delay = BACKOFF_FIRST
                .saturating_mul(1 << (self.quick_deaths - 1).min(16))
                .min(BACKOFF_MAX);
            warn!(pool = %self.name(), pid = exit.pid, "child died {:.3} s after start ({} in a row): next spawn in {:.1} s",
                lived.as_secs_f64(), self.quick_deaths, delay.as_secs_f64());
            self.respawn_at = Some(tokio::time::Instant::now() + delay);
            return;
        }
        if lived >= QUICK_DEATH {
            self.quick_deaths = 0;
        }
        self.fill().await;
    }

    /// Spawns children of the target generation until the process manager
    /// has what it wants (exec: processes; prefork: one parent that keeps
    /// `pm.max_children` forked).
    async fn fill(&mut self) {
        if self.stopping.is_some()
            || self.respawn_at.is_some()
            || self.unstartable == Some(self.target)
        {
            return;
        }
        let gen = self.target;
        let config = self.config();
        let pm = &config.pm;
        let max = pm.max_children as usize;
        let mine = self.children.values().filter(|c| c.gen == gen).count();
        let active = self
            .children
            .values()
            .filter(|c| c.gen == gen && c.stop.is_none())
            .count();
        let first_round = self.gens.get(&gen).is_none_or(|g| g.spawned == 0);
        let (idle, mut waiting) = if gen == self.current() {
            self.pool.idle_and_waiting()
        } else {
            (0, 0)
        };
        // A pool whose php-cgi could not start answers 503 instead of
        // queueing: try one as if a request waited.
        if gen == self.current() && self.pool.table.lock().unwrap().unstartable.is_some() {
            waiting = waiting.max(1);
        }
        let spawns = match (pm.spawn, pm.mode) {
            (Spawn::Exec, PmMode::Static) => max.saturating_sub(mine),
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
                let want = if first_round {
                    start_servers as usize
                } else {
                    waiting + min_idle.saturating_sub(idle)
                };
                want.min(max.saturating_sub(mine))
                    .min(max_spawn_rate as usize)
            }
            (Spawn::Exec, PmMode::Ondemand { max_spawn_rate, .. }) => {
                // A new generation of an ondemand pool starts one child, so
                // that it can take over.
                let want = if gen != self.current() && mine == 0 {
                    1
                } else {
                    waiting
                };
                want.min(max.saturating_sub(mine))
                    .min(max_spawn_rate as usize)
            }
            // One parent keeps all children forked; ondemand starts it for
            // a request (or to take over after a reload) at once, and
            // ahead of any request, warm, while memory allows
            // (`super::warm`), one start per CPU at a time.
            (Spawn::Prefork, PmMode::Ondemand { .. }) => {
                if active > 0 {
                    0
                } else if waiting > 0 || gen != self.current() || self.warm_permit.is_some() {
                    1
                } else {
                    if super::warm::allowed() && !self.warm_wait {
                        self.warm_wait = true;
                        let events = self.pool.events.clone();
                        let starts = super::warm::starts();
                        tokio::spawn(async move {
                            if let Ok(permit) = starts.acquire_owned().await {
                                let _ = events.send(Event::WarmPermit(permit));
                            }
                        });
                    }
                    0
                }
            }
            (Spawn::Prefork, _) => usize::from(active == 0),
        };
        for _ in 0..spawns {
            if self.stopping.is_some() {
                return;
            }
            if let Err(e) = self.spawn_one().await {
                if self.target != self.current() {
                    self.abandon_target(&format!("cannot start php-cgi: {e}"));
                    return;
                }
                if e.raw_os_error() == Some(libc::E2BIG) {
                    // The same arguments and environment fail the same way
                    // every time: said once, not retried.
                    error!(pool = %self.name(), "cannot start php-cgi: {e}: its arguments and environment (env.*, php_value.*, and fpmd's own environment without clear_env) are too large for execve; not retried until a reload changes the pool (fpmd -t names the key)");
                    self.unstartable = Some(self.target);
                    self.cannot_start(format!("execve: {e}"));
                    return;
                }
                self.quick_deaths += 1;
                let delay = BACKOFF_FIRST
                    .saturating_mul(1 << (self.quick_deaths - 1).min(16))
                    .min(BACKOFF_MAX);
                error!(pool = %self.name(), "cannot start php-cgi: {e}; next try in {:.1} s", delay.as_secs_f64());
                self.respawn_at = Some(tokio::time::Instant::now() + delay);
                self.cannot_start(e.to_string());
                return;
            }
        }
    }

    /// The current generation's php-cgi cannot start (`why`): while the
    /// pool has no child of it at all, the requests waiting and those that
    /// come are answered 503 at once ([`super::slots::Table::unstartable`])
    /// instead of waiting for a child that may never come, until one
    /// starts. Said once per episode, at error level.
    fn cannot_start(&mut self, why: String) {
        if self.target != self.current() {
            return;
        }
        let mut t = self.pool.table.lock().unwrap();
        if t.slots_of_gen(t.current) > 0 {
            return;
        }
        let waiting = t.waiters.len();
        t.waiters.clear();
        if t.unstartable.is_none() {
            error!(pool = %self.pool.name, "php-cgi cannot start ({why}): requests are answered 503 until one starts ({waiting} waiting now)");
        }
        t.unstartable = Some(why.into());
    }

    async fn spawn_one(&mut self) -> std::io::Result<()> {
        self.serial += 1;
        let gen = self.target;
        let config = self.config();
        let endpoint = Arc::new(
            self.runtime_dir
                .join(format!("{}.{}.sock", config.name, self.serial)),
        );
        let mut spec = child_spec(&config, endpoint.to_path_buf());
        if let Some(cg) = &self.cgroup {
            spec.cgroup_procs = cg.procs_files();
        }
        let Spawned { pid, output } = self.spawner.spawn(spec, self.exits_tx.clone()).await?;
        if let Some(g) = self.gens.get_mut(&gen) {
            g.spawned += 1;
        }
        let prefork = config.pm.spawn == Spawn::Prefork;
        if !prefork {
            self.pool.stats.count_spawned(1);
        } else if !crate::process::proc_events::available() {
            // The parent forks pm.max_children at once; with process
            // events each fork is counted as it is reported.
            self.pool.stats.count_spawned(config.pm.max_children.into());
        }
        if prefork {
            debug!(pool = %self.name(), pid, "php-cgi parent started (generation {gen}), pre-forking {} children", config.pm.max_children);
        } else if self.replacing > 0 {
            self.replacing -= 1;
            info!(pool = %self.name(), pid, php_fpm = %format_args!("child {pid} started"), "child started (generation {gen}) in place of one that exited");
        } else {
            debug!(pool = %self.name(), pid, "child started (generation {gen})");
        }
        let startup = crate::process::output::StartupWindow::new();
        crate::process::output::forward(&config, pid, output, startup.clone());
        let alive = Arc::new(AtomicBool::new(true));
        self.children.insert(
            pid,
            ChildState {
                gen,
                started: Instant::now(),
                alive: alive.clone(),
                endpoint: endpoint.clone(),
                stop: None,
                prefork,
            },
        );
        if prefork {
            crate::process::proc_events::watch(pid, self.forked_tx.clone());
        }
        self.pending.push(Pending {
            prefork,
            leader: pid,
            gen,
            endpoint,
            alive,
            startup,
            since: Instant::now(),
            warned: false,
            permit: self.warm_permit.take(),
        });
        self.check_pending();
        Ok(())
    }
}
