//! The pool's php-cgi processes as the supervisor tracks them:
//! [`Children`] holds those fpmd spawned (exec'd children and pre-fork
//! parents, by pid), the children the parents forked (from the kernel's
//! process events) and those still starting; it answers what the process
//! manager asks of them without a process (tested below). The
//! supervisor's methods that start, stop and reap them follow it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tracing::{debug, error, info, warn};

use super::health::page_out_parent;
use super::Supervisor;
use crate::pool::policy::{self, QUICK_DEATH};
use crate::pool::slots::GenId;
use crate::pool::stats::StopReason;
use crate::pool::{Strategy, Worker};
use crate::process::reap::{Exit, ExitKind};
use crate::process::signal;
use crate::process::spawn::Spawned;
use crate::process::spec::child_spec;
use crate::sys::procfs::parent_of;

/// A php-cgi fpmd spawned: a child (exec) or a pre-fork parent.
pub(super) struct ChildState {
    pub gen: GenId,
    pub started: Instant,
    pub alive: Arc<AtomicBool>,
    pub endpoint: Arc<PathBuf>,
    /// Why fpmd asked it to go (retire, stop, broken connection); `None`:
    /// it was not asked (an exit then counts as [`StopReason::Died`]).
    pub stop: Option<StopReason>,
    /// Exec: a child; prefork: a parent (its process group holds its
    /// children).
    pub strategy: Strategy,
}

/// A child forked by a php-cgi parent.
pub(super) struct Forked {
    /// The php-cgi parent (a key of `Supervisor::children`).
    pub parent: i32,
    pub started: Instant,
    /// Why fpmd asked it to go, if it did.
    pub stop: Option<StopReason>,
}

/// A php-cgi whose slots wait for its PHP start-up (modules, ini) to be
/// over: a pre-fork parent once it has forked a child, an exec'd child
/// once it waits in accept(). Until then requests wait in fpmd's queue, and
/// a new generation does not take over.
pub(super) struct Pending {
    pub strategy: Strategy,
    pub leader: i32,
    pub gen: GenId,
    pub endpoint: Arc<PathBuf>,
    pub alive: Arc<AtomicBool>,
    pub startup: crate::process::output::StartupWindow,
    pub since: Instant,
    /// The slow start was reported.
    pub warned: bool,
    /// A warm parent's start permit ([`super::warm::starts`]), given back
    /// once it serves or is gone, or when it is reported slow (a php-cgi
    /// that hangs while starting must not hold other pools' warm starts).
    pub permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// Whether a php-cgi fpmd spawned has finished its PHP start-up: it (exec)
/// or one of its children (prefork) waits in accept(). A php_cgi wrapper
/// that forks a helper and dies does not pass, nor does a process that
/// exited. Where `/proc/PID/syscall` cannot be read (fpmd not root and the
/// child another user), a live process counts after 200 ms.
pub(super) fn started_serving(leader: i32, strategy: Strategy, elapsed: Duration) -> bool {
    let candidates = match strategy {
        Strategy::Prefork => crate::sys::peer::children_of(leader),
        Strategy::Exec => vec![leader],
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

/// Every php-cgi of the pool fpmd knows of.
#[derive(Default)]
pub(super) struct Children {
    /// Those fpmd spawned: exec'd children and pre-fork parents, by pid.
    pub leaders: HashMap<i32, ChildState>,
    /// Pre-forked children seen starting (from the process events), by pid.
    pub forked: HashMap<i32, Forked>,
    /// Those still starting.
    pub pending: Vec<Pending>,
}

impl Children {
    /// No php-cgi fpmd spawned is left.
    pub fn is_empty(&self) -> bool {
        self.leaders.is_empty()
    }

    /// The php-cgi of generation `gen` fpmd spawned, stopping ones
    /// included.
    pub fn of_gen(&self, gen: GenId) -> usize {
        self.leaders.values().filter(|c| c.gen == gen).count()
    }

    /// Those of generation `gen` not asked to stop.
    pub fn active_of(&self, gen: GenId) -> usize {
        self.leaders
            .values()
            .filter(|c| c.gen == gen && c.stop.is_none())
            .count()
    }

    /// The pids of generation `gen`'s php-cgi fpmd spawned.
    pub fn leaders_of(&self, gen: GenId) -> Vec<i32> {
        self.leaders
            .iter()
            .filter(|(_, c)| c.gen == gen)
            .map(|(p, _)| *p)
            .collect()
    }

    /// Those of them not asked to stop.
    pub fn active_leaders_of(&self, gen: GenId) -> Vec<i32> {
        self.leaders
            .iter()
            .filter(|(_, c)| c.gen == gen && c.stop.is_none())
            .map(|(p, _)| *p)
            .collect()
    }

    /// Generation `gen` still has a php-cgi.
    pub fn has_gen(&self, gen: GenId) -> bool {
        self.leaders.values().any(|c| c.gen == gen)
    }

    /// The php-cgi fpmd spawned that was `leader`.
    pub fn get_mut(&mut self, leader: i32) -> Option<&mut ChildState> {
        self.leaders.get_mut(&leader)
    }

    /// Generation `gen` is given up: its php-cgi still starting never
    /// serve.
    pub fn forget_pending_of(&mut self, gen: GenId) {
        self.pending.retain(|p| p.gen != gen);
    }

    /// A pre-forked child `pid` of `parent` is known to exist (at `now`):
    /// whether it is new (it is counted once).
    pub fn note_forked(&mut self, pid: i32, parent: i32, now: Instant) -> bool {
        match self.forked.entry(pid) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Forked {
                    parent,
                    started: now,
                    stop: None,
                });
                true
            }
            std::collections::hash_map::Entry::Occupied(_) => false,
        }
    }

    /// fpmd asks the pre-forked child `pid` of `parent` to go for `why`
    /// (the first reason given counts); one it has not heard of started
    /// with its parent.
    pub fn ask_forked(&mut self, pid: i32, parent: i32, why: StopReason) {
        let started = self
            .leaders
            .get(&parent)
            .map_or_else(Instant::now, |c| c.started);
        self.forked
            .entry(pid)
            .or_insert(Forked {
                parent,
                started,
                stop: None,
            })
            .stop
            .get_or_insert(why);
    }

    /// The pre-forked children of `parent` fpmd still counts, forgotten:
    /// the parent is gone and took them with it.
    pub fn take_forked_of(&mut self, parent: i32) -> Vec<Forked> {
        let mine: Vec<i32> = self
            .forked
            .iter()
            .filter(|(_, f)| f.parent == parent)
            .map(|(pid, _)| *pid)
            .collect();
        mine.into_iter()
            .filter_map(|pid| self.forked.remove(&pid))
            .collect()
    }
}

impl Supervisor {
    /// Signals one child, which is to stop for `why` (the first reason
    /// given counts; see [`super::stats::PoolStats::stopped`]). Exec: the
    /// child is the leader. Prefork: a child of the leader (the parent),
    /// which forks its replacement.
    pub(super) fn stop_child(&mut self, leader: i32, pid: i32, sig: Signal, why: StopReason) {
        let Some(c) = self.children.get_mut(leader) else {
            return;
        };
        if leader == pid {
            c.stop.get_or_insert(why);
        } else if parent_of(pid) != Some(leader) {
            // Already gone, and the pid may have been reused: a root
            // daemon must not signal a stranger.
            return;
        } else if crate::process::proc_events::available() {
            // Counted when its exit is reported (`on_forked`).
            self.children.ask_forked(pid, leader, why);
        } else {
            // No exit will be reported: this is the child's end as fpmd
            // knows it, and the parent forks a replacement.
            self.pool.stats.stopped(why);
            self.pool.stats.count_spawned(1);
        }
        let _ = signal::send(&self.pool.name, Pid::from_raw(pid), sig);
    }

    /// A child of one of this pool's php-cgi parents started or ended: its
    /// exit is logged as php-fpm logs a child's (warning unless fpmd asked
    /// it to go), and a crash counts for `emergency_restart_threshold`.
    pub(super) async fn on_forked(&mut self, ev: crate::process::proc_events::ForkedEvent) {
        use crate::process::proc_events::ForkedEvent;
        match ev {
            ForkedEvent::Started { pid, parent } => self.note_forked(pid, parent),
            ForkedEvent::Exited { pid, parent, kind } => {
                // Its request ends now, whatever holds its connection open.
                self.pool
                    .table
                    .lock()
                    .unwrap()
                    .child_died(Pid::from_raw(parent), Some(Pid::from_raw(pid)));
                let parent_state = self
                    .children
                    .leaders
                    .get(&parent)
                    .map(|c| (c.started, c.stop));
                let forked = self.children.forked.remove(&pid);
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
    pub(super) fn note_forked(&mut self, pid: i32, parent: i32) {
        if self.children.note_forked(pid, parent, Instant::now()) {
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
    pub(super) fn check_pending(&mut self) {
        let mut ready = Vec::new();
        let name = self.pool.name.clone();
        let mut waiting = Vec::new();
        for mut p in std::mem::take(&mut self.children.pending) {
            if !p.alive.load(Ordering::Acquire) {
                continue;
            }
            let started = started_serving(p.leader, p.strategy, p.since.elapsed());
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
        self.children.pending = waiting;
        for p in ready {
            if p.strategy == Strategy::Prefork {
                debug!(pool = %self.name(), pid = p.leader, "php-cgi parent forked its children: its slots serve");
                if crate::process::proc_events::available() {
                    // Children forked before the parent was watched sent
                    // no event that reached this pool.
                    for pid in crate::sys::peer::children_of(p.leader) {
                        self.note_forked(pid, p.leader);
                    }
                }
                let slots = self.gens.config_of(p.gen).map_or(0, |c| c.pm.max_children);
                self.add_slots(&p, slots);
                tokio::spawn(page_out_parent(
                    self.pool.name.clone(),
                    p.leader,
                    slots as usize,
                    p.alive.clone(),
                ));
            } else {
                debug!(pool = %self.name(), pid = p.leader, "php-cgi started: it serves");
                self.add_slots(&p, 1);
            }
        }
    }

    /// Puts `n` slots of `leader` into dispatch. The first php-cgi of a
    /// new generation to be ready makes it current (under the slot table's
    /// lock, see [`crate::pool::Pool::add_slots`]): the reload that asked
    /// for it is answered and the old generation drains.
    pub(super) fn add_slots(&mut self, leader: &Pending, n: u32) {
        // A php-cgi came up: a later failure to start is a new episode.
        self.start_failure_said = false;
        // Exec: the slot's child is the leader; prefork: learned from the
        // slot's connection.
        let leader_pid = Pid::from_raw(leader.leader);
        let pid = (leader.strategy == Strategy::Exec).then_some(leader_pid);
        let added = self
            .pool
            .add_slots(leader.gen, leader_pid, pid, n, |slot, child| Worker {
                slot,
                child,
                strategy: leader.strategy,
                endpoint: leader.endpoint.clone(),
                conn: None,
                last_usage: None,
                alive: leader.alive.clone(),
                startup: leader.startup.clone(),
            });
        if let Some(old) = added.switched {
            self.switched(leader.gen);
            if !old.is_empty() {
                self.retire(old);
            }
        }
        if !added.retire.is_empty() {
            self.retire(added.retire);
        }
    }

    /// A php-cgi parent was reaped: its children that fpmd still counts
    /// as alive end with it, each for the reason it was asked to go, else
    /// for the parent's `why` (without process events fpmd knows only
    /// that the parent kept `pm.max_children` of them).
    pub(super) fn count_orphaned(&mut self, parent: i32, gen: GenId, why: StopReason) {
        if !crate::process::proc_events::available() {
            let n = self
                .gens
                .config_of(gen)
                .map_or(self.config().pm.max_children, |c| c.pm.max_children);
            for _ in 0..n {
                self.pool.stats.stopped(why);
            }
            return;
        }
        for f in self.children.take_forked_of(parent) {
            self.pool.stats.stopped(f.stop.unwrap_or(why));
        }
    }

    pub(super) async fn on_exit(&mut self, exit: Exit) {
        let Some(child) = self.children.leaders.remove(&exit.pid) else {
            return;
        };
        child.alive.store(false, Ordering::Release);
        {
            let mut t = self.pool.table.lock().unwrap();
            let leader = Pid::from_raw(exit.pid);
            t.child_died(leader, None);
            t.forget_leader(leader);
        }
        // Still starting: it died before its PHP start-up was over (before
        // it waited in accept(), or before a pre-fork parent forked).
        let never_ready = self.children.pending.iter().any(|p| p.leader == exit.pid);
        self.children.pending.retain(|p| p.leader != exit.pid);
        let why = child.stop.unwrap_or(StopReason::Died);
        if child.strategy == Strategy::Prefork {
            crate::process::proc_events::unwatch(exit.pid);
            // Children the parent left behind (it only signals them on
            // SIGTERM) must not serve anything any more.
            let _ = signal::send(&self.pool.name, Pid::from_raw(-exit.pid), Signal::SIGKILL);
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
            if child.gen == self.gens.target() && child.strategy == Strategy::Exec {
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
        if child.gen == self.gens.target()
            && self.gens.target() != self.current()
            && child.stop.is_none()
        {
            let why = format!(
                "its php-cgi {} after {:.3} s",
                exit.kind,
                lived.as_secs_f64()
            );
            self.abandon_target(&why);
            return;
        }
        if child.gen != self.gens.target() {
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
            // Only a php-cgi that never got ready says it cannot start; one
            // killed once it was ready (by an admin, the OOM killer) is
            // replaced while requests wait for it, as php-fpm's would.
            if never_ready {
                self.cannot_start(format!(
                    "{} {:.3} s after it started",
                    exit.kind,
                    lived.as_secs_f64()
                ));
            }
            if self.respawn_at.is_some() {
                // Another child of the same round of spawns: the back-off
                // step is already counted and announced.
                debug!(pool = %self.name(), pid = exit.pid, "child died {:.3} s after start", lived.as_secs_f64());
                return;
            }
            self.quick_deaths += 1;
            let delay = policy::backoff(self.quick_deaths);
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

    /// The current generation's php-cgi cannot start (`why`): while the
    /// pool has no child of it at all, the requests waiting and those that
    /// come are answered 503 at once ([`super::slots::Table::unstartable`])
    /// instead of waiting for a child that may never come, until one
    /// starts. Said once per episode, at error level.
    pub(super) fn cannot_start(&mut self, why: String) {
        let current = self.current();
        if self.gens.target() != current || self.children.pending.iter().any(|p| p.gen == current) {
            // A reload is under way, or another php-cgi is still starting.
            return;
        }
        let mut t = self.pool.table.lock().unwrap();
        if t.slots_of_gen(t.current) > 0 {
            return;
        }
        let waiting = t.waiters.len();
        t.waiters.clear();
        if !self.start_failure_said {
            self.start_failure_said = true;
            error!(pool = %self.pool.name, "php-cgi cannot start ({why}): requests are answered 503 until one starts ({waiting} waiting now)");
        }
        t.unstartable = Some(why.into());
    }

    pub(super) async fn spawn_one(&mut self) -> std::io::Result<()> {
        self.serial += 1;
        let gen = self.gens.target();
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
        self.gens.note_spawn(gen);
        if gen == self.current() {
            // A php-cgi is starting: requests wait for it again (see
            // `cannot_start`) rather than get a 503 meant for the back-off.
            self.pool.table.lock().unwrap().unstartable = None;
        }
        let strategy = Strategy::from(config.pm.spawn);
        let prefork = strategy == Strategy::Prefork;
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
        self.children.leaders.insert(
            pid,
            ChildState {
                gen,
                started: Instant::now(),
                alive: alive.clone(),
                endpoint: endpoint.clone(),
                stop: None,
                strategy,
            },
        );
        if prefork {
            crate::process::proc_events::watch(pid, self.forked_tx.clone());
        }
        self.children.pending.push(Pending {
            strategy,
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

    /// Retires an idle worker taken out of the idle stack (scale-down):
    /// SIGTERM (the child is idle and exits at once), then its connection
    /// is closed. Under prefork the slot stays and reconnects to a fresh
    /// fork.
    pub(super) fn retire_idle(&mut self, mut w: Worker) {
        let pid = match w.strategy {
            // A slot never connected has no child of its own to stop.
            Strategy::Prefork if w.conn.is_none() => None,
            Strategy::Prefork => w.child_pid(),
            Strategy::Exec => Some(w.child.leader()),
        };
        if let Some(pid) = pid {
            let leader = w.child.leader().as_raw();
            self.stop_child(leader, pid.as_raw(), Signal::SIGTERM, StopReason::Idle);
        }
        self.pool.child_gone(w);
    }

    /// Slots out of dispatch for good: their children are stopped once
    /// nothing of theirs is busy (a pre-fork parent only when none of its
    /// slots is left, so that no busy child is ever signalled).
    pub(super) fn retire(&mut self, workers: Vec<Worker>) {
        for w in workers {
            self.pool.table.lock().unwrap().remove(w.slot);
            let left = self.pool.table.lock().unwrap().slots_of(w.child.leader());
            let leader = w.child.leader().as_raw();
            if w.strategy == Strategy::Prefork {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(gen: u32, stop: Option<StopReason>, prefork: bool) -> ChildState {
        let strategy = if prefork {
            Strategy::Prefork
        } else {
            Strategy::Exec
        };
        ChildState {
            gen: GenId(gen),
            started: Instant::now(),
            alive: Arc::new(AtomicBool::new(true)),
            endpoint: Arc::new(PathBuf::from("/run/x.sock")),
            stop,
            strategy,
        }
    }

    #[test]
    fn counts_per_generation_and_stop() {
        let mut c = Children::default();
        assert!(c.is_empty());
        c.leaders.insert(10, child(1, None, false));
        c.leaders
            .insert(11, child(1, Some(StopReason::Idle), false));
        c.leaders.insert(20, child(2, None, false));
        assert_eq!((c.of_gen(GenId(1)), c.active_of(GenId(1))), (2, 1));
        let mut l = c.leaders_of(GenId(1));
        l.sort();
        assert_eq!(l, [10, 11]);
        assert_eq!(c.active_leaders_of(GenId(1)), [10]);
        assert!(c.has_gen(GenId(2)) && !c.has_gen(GenId(3)));
        c.get_mut(20).unwrap().stop = Some(StopReason::Retired);
        assert_eq!(c.active_of(GenId(2)), 0);
    }

    #[test]
    fn forked_children_are_counted_once_and_go_with_their_parent() {
        let mut c = Children::default();
        c.leaders.insert(100, child(1, None, true));
        let now = Instant::now();
        assert!(c.note_forked(101, 100, now));
        assert!(!c.note_forked(101, 100, now), "counted once");
        assert!(c.note_forked(102, 100, now));
        // Asked to go: the first reason counts; one not heard of yet is
        // noted with its parent's start.
        c.ask_forked(101, 100, StopReason::Idle);
        c.ask_forked(101, 100, StopReason::Killed);
        c.ask_forked(103, 100, StopReason::Terminated);
        assert_eq!(c.forked[&101].stop, Some(StopReason::Idle));
        assert_eq!(c.forked[&103].started, c.leaders[&100].started);
        c.note_forked(201, 200, now);
        let mut gone: Vec<Option<StopReason>> =
            c.take_forked_of(100).into_iter().map(|f| f.stop).collect();
        gone.sort_by_key(|s| format!("{s:?}"));
        assert_eq!(gone.len(), 3);
        assert_eq!(c.forked.keys().copied().collect::<Vec<_>>(), [201]);
    }
}
