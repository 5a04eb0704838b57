//! The pool's php-cgi processes as the supervisor tracks them:
//! [`Children`] holds every one by pid (exec'd children, pre-fork parents
//! and the children the parents forked on fpmd's order) and those still
//! starting; it answers what the process manager asks of them without a
//! process (tested below). The supervisor's methods that start, stop and
//! reap them follow it.

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
use crate::config::PmMode;
use crate::pool::policy::{self, QUICK_DEATH};
use crate::pool::slots::GenId;
use crate::pool::stats::StopReason;
use crate::pool::{Role, Worker};
use crate::process::fork_server::Report;
use crate::process::reap::{Exit, ExitKind};
use crate::process::signal;
use crate::process::spawn::Spawned;
use crate::process::spec::child_spec;

/// Listen backlog of a child's own socket (fpmd connects at most once per
/// slot; the rest is room for a reconnect).
const CHILD_BACKLOG: i32 = 8;

/// A php-cgi fpmd spawned: a child (exec) or a pre-fork parent.
pub(super) struct ChildState {
    pub gen: GenId,
    pub started: Instant,
    pub alive: Arc<AtomicBool>,
    pub endpoint: Arc<PathBuf>,
    /// Why fpmd asked it to go (retire, stop, broken connection); `None`:
    /// it was not asked (an exit then counts as [`StopReason::Died`]).
    pub stop: Option<StopReason>,
    /// A child (exec'd, or forked on order by a parent) or a parent (its
    /// process group holds its children).
    pub role: Role,
    /// A child forked by a php-cgi parent: that parent (a key of
    /// [`Children::leaders`]), which reaps it and reports its exit.
    pub parent: Option<i32>,
    /// A php-cgi parent: its fork server.
    pub forker: Option<Forker>,
}

impl ChildState {
    /// It is the pool's hold on a shared php-cgi parent (attached or let
    /// go of), kept under an attachment id: never signalled.
    pub fn is_shared_parent(&self) -> bool {
        self.forker.as_ref().is_some_and(|f| f.orders.is_shared())
    }
}

/// Where a pool's orders go.
pub(super) enum OrderTo {
    /// The generation's own php-cgi parent (`pm.spawn = "prefork"`).
    Own(Arc<crate::process::fork_server::Orders>),
    /// A parent shared with other pools (`pm.spawn = "shared"`): kept in
    /// [`Children::leaders`] under the attachment's id
    /// ([`crate::process::shared_parent::ID_BASE`]), not its pid; `setup`
    /// is what each child takes from the pool.
    Shared {
        attachment: crate::process::shared_parent::Attachment,
        setup: Arc<crate::process::fork_server::ChildSetup>,
    },
    /// Let go of: the pool is detached from its shared parent.
    Detached,
}

impl OrderTo {
    /// A shared parent, attached or let go of.
    pub fn is_shared(&self) -> bool {
        !matches!(self, OrderTo::Own(_))
    }
}

/// What fpmd knows of a php-cgi parent's fork server
/// ([`crate::process::fork_server`]).
pub(super) struct Forker {
    pub orders: OrderTo,
    /// It said it is ready (PHP loaded, waiting for orders).
    pub ready: bool,
    /// Orders sent and not yet forked, oldest first: each child's socket.
    pub ordered: std::collections::VecDeque<Arc<PathBuf>>,
    /// Since when it has had no child (none forked, or the last one
    /// gone): an ondemand pool's warm period counts from there.
    pub childless_since: Instant,
    /// Its output's start-up window, shared with the children it forks.
    pub startup: crate::process::output::OutputHandle,
}

/// A php-cgi whose slots wait for its PHP start-up (modules, ini) to be
/// over: a pre-fork parent once its fork server says it is ready, an
/// exec'd child once it waits in accept(). Until then requests wait in
/// fpmd's queue, and a new generation does not take over.
pub(super) struct Pending {
    pub role: Role,
    pub leader: i32,
    pub gen: GenId,
    pub endpoint: Arc<PathBuf>,
    pub alive: Arc<AtomicBool>,
    pub startup: crate::process::output::OutputHandle,
    pub since: Instant,
    /// The slow start was reported.
    pub warned: bool,
}

/// Whether an exec'd child has finished its PHP start-up: it waits in
/// accept(). A php_cgi wrapper that forks a helper and dies does not pass,
/// nor does a process that exited. Where `/proc/PID/syscall` cannot be
/// read (fpmd not root and the child another user), a live process counts
/// after 200 ms.
pub(super) fn started_serving(pid: i32, elapsed: Duration) -> bool {
    match crate::sys::procfs::in_accept(pid) {
        Some(ready) => ready,
        None => crate::sys::procfs::alive(pid) && elapsed > Duration::from_millis(200),
    }
}

/// Every php-cgi of the pool fpmd knows of.
#[derive(Default)]
pub(super) struct Children {
    /// Every one, by pid: exec'd children, pre-fork parents and the
    /// children they forked.
    pub leaders: HashMap<i32, ChildState>,
    /// Those still starting.
    pub pending: Vec<Pending>,
}

impl Children {
    /// No php-cgi fpmd spawned is left.
    pub fn is_empty(&self) -> bool {
        self.leaders.is_empty()
    }

    /// The children of generation `gen` (exec'd, forked, or ordered from
    /// a parent and not forked yet), stopping ones included; parents are
    /// not children.
    pub fn of_gen(&self, gen: GenId) -> usize {
        self.count(gen, |_| true)
    }

    /// Those of generation `gen` not asked to stop.
    pub fn active_of(&self, gen: GenId) -> usize {
        self.count(gen, |c| c.stop.is_none())
    }

    fn count(&self, gen: GenId, also: impl Fn(&ChildState) -> bool) -> usize {
        self.leaders
            .values()
            .filter(|c| c.gen == gen && also(c))
            .map(|c| match &c.forker {
                Some(f) => f.ordered.len(),
                None => 1,
            })
            .sum()
    }

    /// Generation `gen`'s php-cgi parent not asked to stop, if any.
    pub fn parent_of_gen(&self, gen: GenId) -> Option<i32> {
        self.leaders
            .iter()
            .find(|(_, c)| c.gen == gen && c.stop.is_none() && c.forker.is_some())
            .map(|(p, _)| *p)
    }

    /// The children `parent` forked that fpmd still counts.
    pub fn forked_by(&self, parent: i32) -> Vec<i32> {
        self.leaders
            .iter()
            .filter(|(_, c)| c.parent == Some(parent))
            .map(|(p, _)| *p)
            .collect()
    }

    /// The parents with no child, forked or ordered: (pid, generation,
    /// since when, asked to stop already).
    pub fn childless_parents(&self) -> Vec<(i32, GenId, Instant, bool)> {
        self.leaders
            .iter()
            .filter_map(|(p, c)| {
                let f = c.forker.as_ref()?;
                let childless =
                    f.ordered.is_empty() && !self.leaders.values().any(|k| k.parent == Some(*p));
                childless.then_some((*p, c.gen, f.childless_since, c.stop.is_some()))
            })
            .collect()
    }

    /// The pids of the shared php-cgi parents the pool is attached to.
    pub fn shared_parents(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .leaders
            .values()
            .filter_map(|c| match &c.forker.as_ref()?.orders {
                OrderTo::Shared { attachment, .. } => Some(attachment.pid()),
                _ => None,
            })
            .collect();
        // Two generations may hold the same parent.
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// The pids of generation `gen`'s php-cgi fpmd spawned.
    pub fn leaders_of(&self, gen: GenId) -> Vec<i32> {
        self.leaders
            .iter()
            .filter(|(_, c)| c.gen == gen)
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
}

impl Supervisor {
    /// php-fpm logs every exit of a child (`fpm_children_bury`), those it
    /// caused included: under `log_format = "php-fpm"` (only) the exit of
    /// a child fpmd stopped is php-fpm's line, at NOTICE for a clean one
    /// (exit code 0, SIGQUIT) and WARNING otherwise, as php-fpm's
    /// severity; and a child that php-fpm would restart in its place
    /// (after `pm.max_requests`, `pm.max_memory`, a terminate timeout, a
    /// broken child) gets its `child N started` ([`Self::log_planned_replacement`]).
    fn log_planned_exit(
        &mut self,
        exit: &Exit,
        lived: Duration,
        why: StopReason,
        gen: GenId,
        role: Role,
    ) {
        // Not a stop nor a reload's retirement (php-fpm's master logs no
        // child's exit then: it exits, or re-execs), nor a php-cgi parent
        // (php-fpm has none).
        if crate::log::current_format() != crate::config::LogFormat::PhpFpm
            || self.stopping.is_some()
            || why == StopReason::Retired
            || role != Role::Child
        {
            return;
        }
        let line = exit.describe(lived).to_string();
        let clean = matches!(
            exit.kind,
            ExitKind::Code(0)
                | ExitKind::Signal {
                    signal: libc::SIGQUIT,
                    ..
                }
        );
        if clean {
            info!(pool = %self.name(), php_fpm = %line, php_fpm_only = true, "");
        } else {
            warn!(pool = %self.name(), php_fpm = %line, php_fpm_only = true, "");
        }
        let replaced = matches!(
            why,
            StopReason::MaxRequests
                | StopReason::MaxMemory
                | StopReason::Terminated
                | StopReason::Killed
        );
        if replaced && gen == self.gens.target() {
            self.replacing_planned += 1;
        }
    }

    /// `child N started` (php-fpm's format only) for the replacement of a
    /// child counted by [`Self::log_planned_exit`].
    fn log_planned_replacement(&mut self, pid: i32) {
        if self.replacing_planned > 0 {
            self.replacing_planned -= 1;
            info!(pool = %self.name(), php_fpm = %format_args!("child {pid} started"), php_fpm_only = true, "");
        }
    }

    /// Signals one php-cgi fpmd knows (a child, exec'd or forked, or a
    /// parent), which is to stop for `why` (the first reason given counts;
    /// see [`super::stats::PoolStats::stopped`]). One fpmd does not know
    /// (gone already) is not signalled.
    pub(super) fn stop_child(&mut self, pid: i32, sig: Signal, why: StopReason) {
        let Some(c) = self.children.get_mut(pid) else {
            return;
        };
        c.stop.get_or_insert(why);
        if let Some(f) = c.forker.as_mut().filter(|f| f.orders.is_shared()) {
            // A shared parent is not signalled: the pool lets go of it,
            // and it is gone for the pool as if it had exited.
            if !matches!(f.orders, OrderTo::Detached) {
                f.orders = OrderTo::Detached;
                let kind = ExitKind::Code(0);
                let report = Report::Exited { pid, kind };
                let _ = self.pool.events.send(crate::pool::Event::Parent {
                    parent: pid,
                    report,
                });
            }
            return;
        }
        let _ = signal::send(&self.pool.name, Pid::from_raw(pid), sig);
    }

    /// What a php-cgi parent's fork server said.
    pub(super) async fn on_parent_report(&mut self, parent: i32, report: Report) {
        match report {
            Report::Ready => {
                if let Some(f) = self.forker_mut(parent) {
                    f.ready = true;
                    f.childless_since = Instant::now();
                }
                self.check_pending();
                self.fill().await;
            }
            Report::Forked { pid } => self.on_forked(parent, pid),
            Report::Exited { pid, kind } => self.on_exit(Exit { pid, kind }).await,
            Report::Failed { errno } => {
                if let Some(endpoint) = self.forker_mut(parent).and_then(|f| f.ordered.pop_front())
                {
                    let _ = std::fs::remove_file(endpoint.as_path());
                }
                self.quick_deaths += 1;
                let delay = policy::backoff(self.quick_deaths);
                error!(pool = %self.name(), pid = parent, "php-cgi parent cannot fork a child ({}); next try in {:.1} s",
                    std::io::Error::from_raw_os_error(errno), delay.as_secs_f64());
                self.respawn_at = Some(tokio::time::Instant::now() + delay);
            }
        }
    }

    fn forker_mut(&mut self, parent: i32) -> Option<&mut Forker> {
        self.children.get_mut(parent)?.forker.as_mut()
    }

    /// A parent forked a child on the oldest order it had: the child
    /// serves at once (it is in accept() on its own socket within
    /// microseconds; a connection before that waits in its backlog).
    fn on_forked(&mut self, parent: i32, pid: i32) {
        let Some(p) = self.children.leaders.get_mut(&parent) else {
            return;
        };
        let gen = p.gen;
        let Some(f) = p.forker.as_mut() else {
            return;
        };
        let Some(endpoint) = f.ordered.pop_front() else {
            // Not ordered: never happens with the library as built; such a
            // child must not serve.
            warn!(pool = %self.pool.name, pid, "php-cgi parent {parent} forked a child fpmd did not order: SIGKILL");
            let _ = signal::send(&self.pool.name, Pid::from_raw(pid), Signal::SIGKILL);
            return;
        };
        let startup = f.startup.clone();
        // The pid of the parent that forked it (a shared one is kept under
        // its attachment's id), for the log.
        let forker = match &f.orders {
            OrderTo::Shared { attachment, .. } => attachment.pid(),
            _ => parent,
        };
        let child = self.track(pid, gen, endpoint, Some(parent), None, startup);
        self.pool.stats.count_spawned();
        if self.replacing > 0 {
            self.replacing -= 1;
            info!(pool = %self.name(), pid, php_fpm = %format_args!("child {pid} started"), "child forked by php-cgi parent {forker} in place of one that exited");
        } else {
            debug!(pool = %self.name(), pid, "child forked by php-cgi parent {forker} (generation {gen})");
            self.log_planned_replacement(pid);
        }
        self.add_slot(&child);
    }

    /// Orders one child of generation `gen` from its ready `parent`: a
    /// socket of its own, bound here, goes with the order.
    pub(super) fn order_child(&mut self, parent: i32, gen: GenId) -> std::io::Result<()> {
        self.serial += 1;
        let endpoint = self
            .runtime_dir
            .join(format!("{}.{}.sock", self.pool.name, self.serial));
        let listener = crate::process::spawn::listening_socket(&endpoint, CHILD_BACKLOG)?;
        let Some(f) = self.forker_mut(parent) else {
            return Err(std::io::Error::other("the php-cgi parent is gone"));
        };
        let sent = match &f.orders {
            OrderTo::Own(orders) => orders.order(&listener),
            OrderTo::Shared { attachment, setup } => attachment.order(&listener, setup),
            OrderTo::Detached => Err(std::io::Error::other(
                "the pool let go of its shared php-cgi parent",
            )),
        };
        if let Err(e) = sent {
            let _ = std::fs::remove_file(&endpoint);
            return Err(e);
        }
        f.ordered.push_back(Arc::new(endpoint));
        self.gens.note_spawn(gen);
        Ok(())
    }

    /// Stops the php-cgi parents that have no child, forked or ordered,
    /// and are not wanted: of a generation that is not the target, of a
    /// stopping pool, or of an ondemand pool whose warm period
    /// ([`super::super::warm::timeout`]) ran out, or memory is short.
    pub(super) fn stop_idle_parents(&mut self) {
        let target = self.gens.target();
        let config = self.config();
        let ondemand = matches!(config.pm.mode, PmMode::Ondemand { .. });
        let warm = crate::pool::warm::timeout();
        for (pid, gen, since, asked) in self.children.childless_parents() {
            if asked {
                continue;
            }
            let why = if self.stopping.is_some() {
                "the pool stops"
            } else if gen != target {
                "its generation is replaced"
            } else if ondemand && !crate::pool::warm::allowed() {
                "memory is short (warm_min_available)"
            } else if ondemand && since.elapsed() >= warm {
                "no request for warm_timeout"
            } else {
                continue;
            };
            if self
                .children
                .leaders
                .get(&pid)
                .is_some_and(ChildState::is_shared_parent)
            {
                debug!(pool = %self.name(), "no child of the shared php-cgi parent and {why}: letting go of it");
            } else {
                debug!(pool = %self.name(), pid, "php-cgi parent has no child and {why}: stopping it");
            }
            self.stop_child(pid, Signal::SIGTERM, StopReason::Idle);
        }
    }

    /// New php-cgi processes: once one has finished its PHP start-up (see
    /// [`Pending`]), an exec'd child's slot enters dispatch (for a new
    /// generation that makes it current), and a parent forks on order.
    pub(super) fn check_pending(&mut self) {
        let mut ready = Vec::new();
        let name = self.pool.name.clone();
        let mut waiting = Vec::new();
        for mut p in std::mem::take(&mut self.children.pending) {
            if !p.alive.load(Ordering::Acquire) {
                continue;
            }
            let started = match p.role {
                Role::Parent => self
                    .children
                    .leaders
                    .get(&p.leader)
                    .and_then(|c| c.forker.as_ref())
                    .is_some_and(|f| f.ready),
                Role::Child => started_serving(p.leader, p.since.elapsed()),
            };
            if started {
                ready.push(p);
                continue;
            }
            if !p.warned && p.since.elapsed() > Duration::from_secs(10) {
                p.warned = true;
                if let Some(tx) = self.started.take() {
                    let _ = tx.send(());
                }
                match p.role {
                    Role::Parent => {
                        warn!(pool = %name, pid = p.leader, "php-cgi parent has not finished starting after 10 s (or its fork server was not loaded: LD_PRELOAD is not honoured by a static or setuid php_cgi; use pm.spawn = \"exec\" for it)")
                    }
                    Role::Child => {
                        warn!(pool = %name, pid = p.leader, "php-cgi has not finished starting after 10 s")
                    }
                }
            }
            waiting.push(p);
        }
        self.children.pending = waiting;
        for p in ready {
            if p.role == Role::Parent {
                // A php-cgi came up: a later failure to start is a new episode.
                self.start_failure_said = false;
                let shared = self
                    .children
                    .leaders
                    .get(&p.leader)
                    .and_then(|c| c.forker.as_ref())
                    .and_then(|f| match &f.orders {
                        OrderTo::Shared { attachment, .. } => Some(attachment),
                        _ => None,
                    });
                // The parent to page out: the pool's own, or a shared one
                // by the pool that started it.
                let page_out = match shared {
                    Some(a) => {
                        debug!(pool = %self.name(), pid = a.pid(), "shared php-cgi parent ready for the pool: it forks its children on order");
                        a.started_here().then(|| a.pid())
                    }
                    None => {
                        debug!(pool = %self.name(), pid = p.leader, "php-cgi parent loaded PHP in {:.3} s: it forks children on order", p.since.elapsed().as_secs_f64());
                        Some(p.leader)
                    }
                };
                if let Some(pid) = page_out {
                    tokio::spawn(page_out_parent(
                        self.pool.name.clone(),
                        pid,
                        p.alive.clone(),
                    ));
                }
            } else {
                debug!(pool = %self.name(), pid = p.leader, "php-cgi started: it serves");
                self.add_slot(&p);
            }
        }
    }

    /// Puts the slot of the ready child `child` into dispatch. The first
    /// child of a new generation to be ready makes it current (under the
    /// slot table's lock, see [`crate::pool::Pool::add_slot`]): the reload
    /// that asked for it is answered and the old generation drains.
    pub(super) fn add_slot(&mut self, child: &Pending) {
        self.say_started();
        // A php-cgi came up: a later failure to start is a new episode.
        self.start_failure_said = false;
        let added = self
            .pool
            .add_slot(child.gen, Pid::from_raw(child.leader), |slot, c| Worker {
                slot,
                child: c,
                endpoint: child.endpoint.clone(),
                conn: None,
                last_usage: None,
                alive: child.alive.clone(),
                startup: child.startup.clone(),
            });
        if let Some(old) = added.switched {
            self.switched(child.gen);
            if !old.is_empty() {
                self.retire(old);
            }
        }
        if let Some(w) = added.retire {
            self.retire(vec![w]);
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
            t.child_died(leader);
            t.forget_child(leader);
        }
        // Still starting: it died before its PHP start-up was over (before
        // it waited in accept(), or before a pre-fork parent forked).
        let never_ready = self.children.pending.iter().any(|p| p.leader == exit.pid);
        self.children.pending.retain(|p| p.leader != exit.pid);
        let why = child.stop.unwrap_or(StopReason::Died);
        if let Some(f) = &child.forker {
            // Children the parent left behind (it only signals them on
            // SIGTERM) must not serve anything any more; nobody reports
            // their exits now: they end here. A shared parent's process
            // group holds other pools' children: only this pool's go.
            if !f.orders.is_shared() {
                let _ = signal::send(&self.pool.name, Pid::from_raw(-exit.pid), Signal::SIGKILL);
            }
            for pid in self.children.forked_by(exit.pid) {
                if f.orders.is_shared() {
                    let _ = signal::send(&self.pool.name, Pid::from_raw(pid), Signal::SIGKILL);
                }
                let kind = ExitKind::Signal {
                    signal: libc::SIGKILL,
                    core_dumped: false,
                };
                let _ = self.exits_tx.send(Exit { pid, kind });
            }
            for endpoint in &f.ordered {
                let _ = std::fs::remove_file(endpoint.as_path());
            }
        } else {
            self.pool.stats.stopped(why);
        }
        if let Some(parent) = child.parent.and_then(|p| self.forker_mut(p)) {
            parent.childless_since = Instant::now();
        }
        let _ = std::fs::remove_file(child.endpoint.as_path());
        let lived = child.started.elapsed();
        self.note_oom(exit.pid, exit.kind);
        let shared = child.is_shared_parent();
        if shared && child.stop.is_some() {
            debug!(pool = %self.name(), "let go of the shared php-cgi parent (generation {})", child.gen);
        } else if shared {
            warn!(pool = %self.name(), "the shared php-cgi parent {} after {:.3} s: its children of this pool are stopped", exit.kind, lived.as_secs_f64());
        } else if let Some(why) = child.stop {
            debug!(pool = %self.name(), pid = exit.pid, "{}", exit.describe(lived));
            self.log_planned_exit(&exit, lived, why, child.gen, child.role);
        } else {
            if child.gen == self.gens.target() && child.role == Role::Child {
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
        self.stop_idle_parents();
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
        self.say_started();
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

    /// Starts one php-cgi for the target generation: an exec'd child, or,
    /// when the pool's children are forked
    /// ([`crate::process::spec::child_spec`] gave it the fork server), the
    /// generation's parent.
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
        if config.pm.spawn == crate::config::Spawn::Shared {
            if let Some(library) = crate::process::fork_server::installed() {
                return self.attach_shared(gen, spec, library.to_path_buf()).await;
            }
        }
        let Spawned {
            pid,
            output,
            orders,
        } = self.spawner.spawn(spec, self.exits_tx.clone()).await?;
        if gen == self.current() {
            // A php-cgi is starting: requests wait for it again (see
            // `cannot_start`) rather than get a 503 meant for the back-off.
            self.pool.table.lock().unwrap().unstartable = None;
        }
        let startup = crate::process::output::OutputHandle::new();
        crate::process::output::forward(&config, pid, output, startup.clone());
        let forker = match orders {
            Some(fd) => {
                debug!(pool = %self.name(), pid, "php-cgi parent started (generation {gen}): it forks children on order");
                let orders = Arc::new(crate::process::fork_server::Orders::new(fd)?);
                let reports = orders.clone();
                let events = self.pool.events.clone();
                tokio::spawn(async move {
                    while let Some(report) = reports.next().await {
                        if events
                            .send(crate::pool::Event::Parent {
                                parent: pid,
                                report,
                            })
                            .is_err()
                        {
                            return;
                        }
                    }
                });
                Some(Forker {
                    orders: OrderTo::Own(orders),
                    ready: false,
                    ordered: Default::default(),
                    childless_since: Instant::now(),
                    startup: startup.clone(),
                })
            }
            None => {
                self.gens.note_spawn(gen);
                self.pool.stats.count_spawned();
                if self.replacing > 0 {
                    self.replacing -= 1;
                    info!(pool = %self.name(), pid, php_fpm = %format_args!("child {pid} started"), "child started (generation {gen}) in place of one that exited");
                } else {
                    debug!(pool = %self.name(), pid, "child started (generation {gen})");
                    self.log_planned_replacement(pid);
                }
                None
            }
        };
        let started = self.track(pid, gen, endpoint, None, forker, startup);
        self.children.pending.push(started);
        self.check_pending();
        Ok(())
    }

    /// Attaches generation `gen` to the shared php-cgi parent of its
    /// children's `spec` (`pm.spawn = "shared"`,
    /// [`crate::process::shared_parent`]), starting it if none runs: it is
    /// tracked as the generation's parent, under its attachment id, and
    /// gets its orders once ready. Its children write to this pool's own
    /// output sockets, opened here.
    async fn attach_shared(
        &mut self,
        gen: GenId,
        spec: crate::process::spawn::ChildSpec,
        library: PathBuf,
    ) -> std::io::Result<()> {
        use crate::process::shared_parent::{self, Attachment, Heard};
        let config = self.config();
        let id = shared_parent::next_id();
        let cgroups = crate::process::spawn::open_cgroup_procs(&spec.cgroup_procs)?;
        let landlock = crate::process::sandbox::landlock_fd(&spec.sandbox, &spec.program)?;
        let (stdio, readers) = crate::process::output::open(config.catch_workers_output)?;
        let setup = Arc::new(crate::process::fork_server::ChildSetup::new(
            &spec,
            stdio.stdout,
            stdio.stderr,
            landlock,
            cgroups,
        )?);
        self.serial += 1;
        let root_endpoint = self
            .runtime_dir
            .join(format!("shared.{}.{}.sock", config.name, self.serial));
        let root = shared_parent::root_spec(&spec, library, root_endpoint);
        let events = self.pool.events.clone();
        let sink: shared_parent::Sink = Box::new(move |heard| {
            let report = match heard {
                Heard::Report(r) => r,
                Heard::ParentExited(kind) => Report::Exited { pid: id, kind },
            };
            events
                .send(crate::pool::Event::Parent { parent: id, report })
                .is_ok()
        });
        let startup = crate::process::output::OutputHandle::new();
        let first = config.clone();
        let attachment = Attachment::attach(id, root, &self.spawner, sink, |pid, out| {
            crate::process::output::forward(
                &first,
                pid,
                out,
                crate::process::output::OutputHandle::new(),
            );
        })
        .await?;
        if gen == self.current() {
            self.pool.table.lock().unwrap().unstartable = None;
        }
        crate::process::output::forward(&config, attachment.pid(), readers, startup.clone());
        debug!(pool = %self.name(), pid = attachment.pid(), "attached to the shared php-cgi parent (generation {gen})");
        let forker = Forker {
            orders: OrderTo::Shared { attachment, setup },
            ready: false,
            ordered: Default::default(),
            childless_since: Instant::now(),
            startup: startup.clone(),
        };
        let started = self.track(
            id,
            gen,
            Arc::new(PathBuf::new()),
            None,
            Some(forker),
            startup,
        );
        self.children.pending.push(started);
        self.check_pending();
        Ok(())
    }

    /// Tracks the new php-cgi `pid` of generation `gen` (a child, forked by
    /// `parent` or exec'd; or, with a `forker`, a parent), and returns what
    /// its readiness is checked with: an exec'd child or a parent waits in
    /// [`Children::pending`], a forked child's slot is added at once.
    fn track(
        &mut self,
        pid: i32,
        gen: GenId,
        endpoint: Arc<PathBuf>,
        parent: Option<i32>,
        forker: Option<Forker>,
        startup: crate::process::output::OutputHandle,
    ) -> Pending {
        let role = match forker {
            Some(_) => Role::Parent,
            None => Role::Child,
        };
        let alive = Arc::new(AtomicBool::new(true));
        self.children.leaders.insert(
            pid,
            ChildState {
                gen,
                started: Instant::now(),
                alive: alive.clone(),
                endpoint: endpoint.clone(),
                stop: None,
                role,
                parent,
                forker,
            },
        );
        Pending {
            role,
            leader: pid,
            gen,
            endpoint,
            alive,
            startup,
            since: Instant::now(),
            warned: false,
        }
    }

    /// Retires an idle worker taken out of the idle stack (scale-down):
    /// SIGTERM (the child is idle and exits at once), then its connection
    /// is closed.
    pub(super) fn retire_idle(&mut self, w: Worker) {
        self.stop_child(w.child.pid().as_raw(), Signal::SIGTERM, StopReason::Idle);
        self.pool.child_gone(w);
    }

    /// Slots out of dispatch for good (they are idle, or their request
    /// ended): their children are stopped; a parent left with no child is
    /// stopped once that child is gone ([`Supervisor::stop_idle_parents`]).
    pub(super) fn retire(&mut self, workers: Vec<Worker>) {
        for w in workers {
            self.pool.table.lock().unwrap().remove(w.slot);
            self.stop_child(w.child.pid().as_raw(), Signal::SIGTERM, StopReason::Retired);
            drop(w);
        }
        self.collect_drained();
        self.stop_idle_parents();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(gen: u32, stop: Option<StopReason>, parent: Option<i32>) -> ChildState {
        ChildState {
            gen: GenId(gen),
            started: Instant::now(),
            alive: Arc::new(AtomicBool::new(true)),
            endpoint: Arc::new(PathBuf::from("/run/x.sock")),
            stop,
            role: Role::Child,
            parent,
            forker: None,
        }
    }

    fn parent(gen: u32, ordered: usize) -> ChildState {
        let (ours, _theirs) = crate::process::fork_server::pair().unwrap();
        ChildState {
            role: Role::Parent,
            forker: Some(Forker {
                orders: OrderTo::Own(Arc::new(
                    crate::process::fork_server::Orders::new(ours).unwrap(),
                )),
                ready: true,
                ordered: (0..ordered)
                    .map(|i| Arc::new(PathBuf::from(format!("/run/{i}.sock"))))
                    .collect(),
                childless_since: Instant::now(),
                startup: crate::process::output::OutputHandle::new(),
            }),
            ..child(gen, None, None)
        }
    }

    #[test]
    fn counts_per_generation_and_stop() {
        let mut c = Children::default();
        assert!(c.is_empty());
        c.leaders.insert(10, child(1, None, None));
        c.leaders.insert(11, child(1, Some(StopReason::Idle), None));
        c.leaders.insert(20, child(2, None, None));
        assert_eq!((c.of_gen(GenId(1)), c.active_of(GenId(1))), (2, 1));
        let mut l = c.leaders_of(GenId(1));
        l.sort();
        assert_eq!(l, [10, 11]);
        assert!(c.has_gen(GenId(2)) && !c.has_gen(GenId(3)));
        c.get_mut(20).unwrap().stop = Some(StopReason::Retired);
        assert_eq!(c.active_of(GenId(2)), 0);
    }

    #[tokio::test]
    async fn a_parent_is_not_a_child_but_its_orders_are() {
        let mut c = Children::default();
        c.leaders.insert(100, parent(1, 2));
        c.leaders.insert(101, child(1, None, Some(100)));
        c.leaders
            .insert(102, child(1, Some(StopReason::Idle), Some(100)));
        // Two forked (one stopping) and two ordered.
        assert_eq!((c.of_gen(GenId(1)), c.active_of(GenId(1))), (4, 3));
        assert_eq!(c.parent_of_gen(GenId(1)), Some(100));
        assert_eq!(c.parent_of_gen(GenId(2)), None);
        let mut forked = c.forked_by(100);
        forked.sort();
        assert_eq!(forked, [101, 102]);
        assert!(c.childless_parents().is_empty());
        c.leaders.remove(&101);
        c.leaders.remove(&102);
        assert!(c.childless_parents().is_empty(), "orders still out");
        c.get_mut(100)
            .unwrap()
            .forker
            .as_mut()
            .unwrap()
            .ordered
            .clear();
        let idle = c.childless_parents();
        assert_eq!((idle.len(), idle[0].0, idle[0].3), (1, 100, false));
        c.get_mut(100).unwrap().stop = Some(StopReason::Idle);
        assert_eq!(c.parent_of_gen(GenId(1)), None, "a stopping parent");
    }
}
