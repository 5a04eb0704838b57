//! The supervisor of one pool: the one task that owns its children.
//!
//! Owns: every php-cgi the pool spawned (through [`crate::process::spawn`]), their
//! generations, retiring and killing them, respawning with back-off after
//! crashes, the process manager (static / dynamic / ondemand), and the
//! pool's commands (reconfigure, stop). Must not touch: FastCGI or the web
//! server's connections; dispatch state only through the slot table's
//! operations.

mod children;
mod generations;
mod health;

use std::collections::HashMap;

use crate::sys::timer::sleep_until_opt;

use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use tokio::sync::{mpsc, oneshot};

use tracing::{debug, error, info, warn};

use super::policy::{self, CrashWindow, FillState};
use children::Children;
use generations::Generations;
use health::{pool_cgroup, HEALTH_CHECK};

use super::slots::{GenId, SlotState, Table};

use super::stats::StopReason;

use super::{Command, Event, Pool, PoolHandle, StopMode};

use crate::config::{PmMode, PoolConfig, Spawn};

use crate::process::reap::Exit;

use crate::process::signal;

use crate::process::spawn::Spawner;

/// How often a new exec'd child is checked for its end of start-up.
const FORK_POLL: Duration = Duration::from_millis(5);

/// When, within `period`, the next periodic pass to start runs first (and
/// then every `period`): see [`policy::spread`].
fn phase(period: Duration) -> Duration {
    static STARTED: AtomicU64 = AtomicU64::new(0);
    policy::spread(STARTED.fetch_add(1, Ordering::Relaxed), period)
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
    /// Every php-cgi of the pool.
    children: Children,
    exits_tx: mpsc::UnboundedSender<Exit>,
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
    /// Children fpmd stopped that php-fpm would restart (`pm.max_requests`,
    /// a terminate timeout, …), not replaced yet: their replacements get
    /// php-fpm's `child N started` under `log_format = "php-fpm"`.
    replacing_planned: u32,
    /// Children started for demand in the current second (dynamic's
    /// `seems busy` line).
    busy: policy::BusyWindow,
    stopping: Option<Stopping>,
    /// Recent unexpected deaths (`emergency_restart_threshold` within
    /// `emergency_restart_interval`); `None`: not configured.
    crashes: Option<CrashWindow>,
    /// The pool's generations and the target, the newest.
    gens: Generations,
    /// The pool's cgroup (`None`: fpmd is not root, or no cgroup
    /// hierarchy is mounted); every child joins it before exec.
    cgroup: Option<Arc<crate::process::cgroup::PoolCgroup>>,
    /// The cgroup's OOM kill count last seen (to tell an OOM kill from
    /// another SIGKILL).
    oom_kills: u64,
    /// php-cgi processes seen stopped (`T`) at the last health check,
    /// with how many checks in a row.
    stopped: HashMap<i32, u32>,
    /// php-cgi's failure to start was logged, since the last child that
    /// started ([`Supervisor::cannot_start`]: once per episode).
    start_failure_said: bool,
    /// Answered once the pool is started ([`Supervisor::say_started`]).
    started: Option<oneshot::Sender<()>>,
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
        rows_read: Default::default(),
    });
    let cgroup = pool_cgroup(&config);
    let gens = Generations::first(config);
    let oom_kills = cgroup.as_ref().and_then(|c| c.oom_kills()).unwrap_or(0);
    let (started_tx, started_rx) = oneshot::channel();
    let sup = Supervisor {
        cgroup,
        oom_kills,
        stopped: HashMap::new(),
        start_failure_said: false,
        started: Some(started_tx),
        pool: pool.clone(),
        spawner,
        runtime_dir: runtime_dir.to_path_buf(),
        children: Children::default(),
        exits_tx: relay(events_tx, Event::Exited),
        serial: 0,
        quick_deaths: 0,
        respawn_at: None,
        unstartable: None,
        replacing: 0,
        replacing_planned: 0,
        busy: policy::BusyWindow::default(),
        stopping: None,
        crashes: emergency_restart.map(|(n, within)| CrashWindow::new(n, within)),
        gens,
    };
    let done = tokio::spawn(sup.run(events_rx, commands_rx));
    PoolHandle {
        pool,
        commands: commands_tx,
        done: Some(done),
        started: Some(started_rx),
    }
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

impl Supervisor {
    fn name(&self) -> &str {
        &self.pool.name
    }

    /// The configuration children are spawned with now.
    fn config(&self) -> Arc<PoolConfig> {
        self.gens.config()
    }

    /// The generation requests go to now.
    fn current(&self) -> GenId {
        self.pool.table.lock().unwrap().current
    }

    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
        mut commands: mpsc::UnboundedReceiver<Command>,
    ) {
        let pm = self.config().pm.clone();
        info!(pool = %self.name(), "starting (pm.mode = {}, pm.max_children = {}, pm.spawn = {})",
            pm.mode.as_str(), pm.max_children, pm.spawn.as_str());
        self.fill().await;
        if matches!(pm.mode, PmMode::Ondemand { .. }) || self.respawn_at.is_some() {
            self.say_started();
        }
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
            let drain_at = self.gens.next_deadline();
            let ticking = self.config().pm.mode != PmMode::Static;
            let polling = !self.children.pending.is_empty();
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

    async fn command(&mut self, c: Command) {
        match c {
            Command::Reconfigure { config, done } => self.reconfigure(config, done).await,
            Command::Stop { mode, grace } => self.begin_stop(mode, grace),
        }
    }

    /// `pm.max_children` lowered by a reload: idle children over it are
    /// retired.
    fn trim_excess(&mut self) {
        let config = self.config();
        let gen = self.gens.target();
        let active = self.children.active_of(gen);
        let max = config.pm.max_children as usize;
        let excess = policy::excess(active, max);
        if excess > 0 {
            let extra = self
                .pool
                .table
                .lock()
                .unwrap()
                .take_idle(excess, |s, _| s.gen == gen);
            for w in extra {
                info!(pool = %self.name(), pid = w.log_pid(), "pm.max_children lowered to {max}: retiring an idle child");
                self.retire_idle(w);
            }
        }
    }

    /// Retires idle children the process manager no longer wants: under
    /// ondemand those idle longer than `pm.process_idle_timeout`, under
    /// dynamic the least recently used one while more than
    /// `pm.max_spare_servers` are idle (one per tick, as php-fpm). A
    /// php-cgi parent left with no child is stopped when it is not wanted
    /// ([`Supervisor::stop_idle_parents`]).
    async fn scale_down(&mut self) {
        let config = self.config();
        let now = Instant::now();
        match config.pm.mode {
            PmMode::Static => {}
            PmMode::Ondemand {
                process_idle_timeout,
                ..
            } => {
                let before = now.checked_sub(process_idle_timeout).unwrap_or(now);
                let idle = self
                    .pool
                    .table
                    .lock()
                    .unwrap()
                    .take_idle(usize::MAX, |s, _| s.idle_since <= before);
                for w in idle {
                    debug!(pool = %self.name(), pid = w.log_pid(), "child idle for {:.1} s (pm.process_idle_timeout): retiring it", process_idle_timeout.as_secs_f64());
                    self.retire_idle(w);
                }
            }
            PmMode::Dynamic {
                max_spare_servers, ..
            } => {
                let max = max_spare_servers as usize;
                let idle = self.pool.table.lock().unwrap().count_idle(|_, _| true);
                let retire = policy::spares_to_retire(idle, max_spare_servers);
                if retire > 0 {
                    let taken = self
                        .pool
                        .table
                        .lock()
                        .unwrap()
                        .take_idle(retire, |_, _| true);
                    for w in taken {
                        // php-fpm logs its scaling at debug level too.
                        debug!(pool = %self.name(), pid = w.log_pid(), "{idle} idle children, over pm.max_spare_servers = {max}: retiring the least recently used");
                        self.retire_idle(w);
                    }
                }
                self.fill().await;
            }
        }
        self.stop_idle_parents();
    }

    /// Counts an unexpected child death; past `emergency_restart_threshold`
    /// within `emergency_restart_interval`, restarts this pool's children
    /// as a new generation (php-fpm restarts its whole master; here other
    /// pools go on, and busy children finish their requests).
    async fn note_crash(&mut self) {
        let Some(window) = self.crashes.as_mut() else {
            return;
        };
        let Some(n) = window.note(Instant::now()) else {
            return;
        };
        error!(pool = %self.name(), "{n} children died within {:.0} s (emergency_restart_threshold = {}): restarting the pool's children",
            window.interval().as_secs_f64(), window.threshold());
        let config = self.config();
        self.new_generation(config, None).await;
    }

    fn begin_stop(&mut self, mode: StopMode, grace: Option<Duration>) {
        self.say_started();
        let idle = self.pool.table.lock().unwrap().close();
        self.gens.fail_all("the pool is stopping");
        self.children.pending.clear();
        let now = tokio::time::Instant::now();
        match mode {
            StopMode::Graceful => {
                self.stopping = Some(Stopping {
                    mode,
                    deadline: grace.map(|g| now + g),
                });
                self.retire(idle);
                // Children with no slot at all (an exec'd child still
                // starting); parents go once they have no child.
                let orphans: Vec<i32> = self
                    .children
                    .leaders
                    .iter()
                    .filter(|(_, c)| c.forker.is_none())
                    .map(|(pid, _)| *pid)
                    .filter(|leader| {
                        self.pool
                            .table
                            .lock()
                            .unwrap()
                            .slots_of(Pid::from_raw(*leader))
                            == 0
                    })
                    .collect();
                for leader in orphans {
                    self.stop_child(leader, Signal::SIGTERM, StopReason::Retired);
                }
                self.stop_idle_parents();
            }
            StopMode::Fast => {
                self.stopping = Some(Stopping {
                    mode,
                    deadline: Some(now + Duration::from_secs(1)),
                });
                drop(idle);
                for (pid, c) in self.children.leaders.iter_mut() {
                    c.stop.get_or_insert(StopReason::Retired);
                    // php-cgi only finishes its script on SIGTERM (an
                    // interrupted sleep() even returns early and the script
                    // runs on): a fast stop kills, as php-fpm's does.
                    if !c.is_shared_parent() {
                        let _ = signal::send(
                            &self.pool.name,
                            c.role.everything_of(*pid),
                            Signal::SIGKILL,
                        );
                    }
                }
                self.let_go_of_shared_parents();
            }
        }
    }

    /// The pool lets go of every shared php-cgi parent it is attached to
    /// (its children were signalled on their own).
    fn let_go_of_shared_parents(&mut self) {
        let shared: Vec<i32> = self
            .children
            .leaders
            .iter()
            .filter(|(_, c)| c.is_shared_parent())
            .map(|(id, _)| *id)
            .collect();
        for id in shared {
            self.stop_child(id, Signal::SIGKILL, StopReason::Retired);
        }
    }

    /// The stop's grace is over: whatever is left is killed.
    fn kill_the_rest(&mut self) {
        let busy: Vec<(i32, Option<super::RequestInfo>)> = {
            let t = self.pool.table.lock().unwrap();
            t.slots()
                .filter_map(|(_, s)| match &s.state {
                    SlotState::Busy { .. } => {
                        Some((s.child.pid().as_raw(), Some(s.request.clone())))
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
        for (pid, c) in self.children.leaders.iter_mut() {
            c.stop.get_or_insert(StopReason::Retired);
            if c.is_shared_parent() {
                continue;
            }
            debug!(pool = %name, pid, "child still alive after the stop grace period: SIGKILL");
            let _ = signal::send(&name, c.role.everything_of(*pid), Signal::SIGKILL);
        }
        self.let_go_of_shared_parents();
        if let Some(s) = &mut self.stopping {
            s.mode = StopMode::Fast;
            s.deadline = None;
        }
    }

    async fn handle(&mut self, ev: Event) {
        match ev {
            Event::Exited(exit) => self.on_exit(exit).await,
            Event::StopChild {
                pid,
                signal,
                why,
                conn,
            } => {
                self.stop_child(pid.as_raw(), signal, why);
                drop(conn);
            }
            Event::Terminate { pid, conn } => {
                // SIGKILL, not SIGTERM: php-cgi runs the script on to its
                // end after a SIGTERM (`fcgi_signal_handler` only marks the
                // shutdown), and what it wrote after the 504 is what the
                // timeout is set to prevent.
                self.stop_child(pid.as_raw(), Signal::SIGKILL, StopReason::Terminated);
                drop(conn);
            }
            Event::Retire(workers) => self.retire(workers),
            Event::Demand => self.fill().await,
            Event::Parent { parent, report } => self.on_parent_report(parent, report).await,
        }
    }

    /// Starts children of the target generation until the process manager
    /// has what it wants: exec'd, or forked on order by the generation's
    /// php-cgi parent, which is started first (and kept while static or
    /// dynamic; ondemand: while it has children, then for
    /// `warm_timeout`).
    async fn fill(&mut self) {
        if self.stopping.is_some()
            || self.respawn_at.is_some()
            || self.unstartable == Some(self.gens.target())
        {
            return;
        }
        let gen = self.gens.target();
        let config = self.config();
        let pm = &config.pm;
        let max = pm.max_children as usize;
        let mine = self.children.of_gen(gen);
        let active = self.children.active_of(gen);
        let first_round = self.gens.first_round(gen);
        let (mut idle, mut waiting) = if gen == self.current() {
            self.pool.idle_and_waiting()
        } else {
            (0, 0)
        };
        let idle_serving = idle;
        // An exec'd child still starting, or one ordered from a parent and
        // not forked yet, is idle as php-fpm counts a child it just forked:
        // `pm.start_servers` children do not make the first tick start one
        // more for the spares (a parent shared by hundreds of pools may
        // take a while to get to an order).
        idle += self
            .children
            .pending
            .iter()
            .filter(|p| p.gen == gen && p.role == super::Role::Child)
            .count();
        idle += self
            .children
            .parent_of_gen(gen)
            .and_then(|p| self.children.leaders.get(&p))
            .and_then(|c| c.forker.as_ref())
            .map_or(0, |f| f.ordered.len());
        // A pool whose php-cgi could not start answers 503 instead of
        // queueing: try one as if a request waited.
        if gen == self.current() && self.pool.table.lock().unwrap().unstartable.is_some() {
            waiting = waiting.max(1);
        }
        let spawns = policy::fill(&FillState {
            mode: pm.mode,
            max_children: max,
            mine,
            active,
            first_round,
            current: gen == self.current(),
            idle,
            waiting,
        });
        if matches!(pm.mode, PmMode::Dynamic { .. }) && !first_round && gen == self.current() {
            if let Some(n) = self.busy.note(Instant::now(), spawns) {
                // php-fpm's words once its spawn rate reaches 8
                // (fpm_process_ctl.c); fpmd starts children as requests
                // wait, not once a second: N is what it started in this
                // second, the idle ones those that serve (not those still
                // starting), the total what ran before this second's.
                let before = mine.saturating_sub(n - spawns);
                let php_fpm = format!("seems busy (you may need to increase pm.start_servers, or pm.min/max_spare_servers), spawning {n} children, there are {idle_serving} idle, and {before} total children");
                warn!(pool = %self.name(), php_fpm = %php_fpm, "busy: {n} children started for waiting requests within a second ({waiting} waiting, {idle_serving} idle, {before} children before); consider raising pm.start_servers or pm.min/max_spare_servers");
            }
        }
        let forks = match pm.spawn {
            Spawn::Prefork => crate::process::fork_server::for_pool(&config).is_some(),
            Spawn::Shared => crate::process::fork_server::installed().is_some(),
            Spawn::Exec => false,
        };
        if forks {
            match self.children.parent_of_gen(gen) {
                Some(parent) => {
                    let ready = self
                        .children
                        .leaders
                        .get(&parent)
                        .and_then(|c| c.forker.as_ref())
                        .is_some_and(|f| f.ready);
                    if !ready {
                        // It orders once ready (`on_parent_report`).
                        return;
                    }
                    for _ in 0..spawns {
                        if let Err(e) = self.order_child(parent, gen) {
                            self.spawn_failed(e);
                            return;
                        }
                    }
                    return;
                }
                None if spawns == 0 && matches!(pm.mode, PmMode::Ondemand { .. }) => return,
                // The parent first; its children once it is ready.
                None => {}
            }
        }
        let spawns = if forks { 1 } else { spawns };
        for _ in 0..spawns {
            if self.stopping.is_some() {
                return;
            }
            if let Err(e) = self.spawn_one().await {
                self.spawn_failed(e);
                return;
            }
        }
    }

    /// The pool is started, as php-fpm's is when it says it is ready to
    /// handle connections: its first child is ready (static, dynamic), or
    /// it has none to start (ondemand), or starting one failed and is
    /// retried with back-off, or is slow (10 s), or the pool stops. The
    /// daemon waits for every pool's before it says it is ready.
    fn say_started(&mut self) {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
        }
    }

    /// A php-cgi could not be started, or a parent could not be given an
    /// order: a reload's generation is abandoned; else the next try waits
    /// for the back-off, and the pool's waiting requests get 503 while it
    /// has no child (`cannot_start`).
    fn spawn_failed(&mut self, e: std::io::Error) {
        self.say_started();
        if self.gens.target() != self.current() {
            self.abandon_target(&format!("cannot start php-cgi: {e}"));
            return;
        }
        if e.raw_os_error() == Some(libc::E2BIG) {
            // The same arguments and environment fail the same way
            // every time: said once, not retried.
            error!(pool = %self.name(), "cannot start php-cgi: {e}: its arguments and environment (env.*, php_value.*, and fpmd's own environment without clear_env) are too large for execve; not retried until a reload changes the pool (fpmd -t names the key)");
            self.unstartable = Some(self.gens.target());
            self.cannot_start(format!("execve: {e}"));
            return;
        }
        self.quick_deaths += 1;
        let delay = policy::backoff(self.quick_deaths);
        error!(pool = %self.name(), "cannot start php-cgi: {e}; next try in {:.1} s", delay.as_secs_f64());
        self.respawn_at = Some(tokio::time::Instant::now() + delay);
        self.cannot_start(e.to_string());
    }
}
