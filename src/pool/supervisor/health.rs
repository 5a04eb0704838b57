//! What keeps the pool's processes healthy, apart from serving: the
//! pool's cgroup (created with its limits, applied again on reload, emptied
//! and removed at the end, OOM kills named), the once-a-second check of
//! what a script did to its own pool (a stopped php-cgi, a `pcntl_fork`
//! copy serving FastCGI), and the pages a pre-fork parent gives back.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tracing::{debug, error, info, warn};

use super::{phase, Supervisor};
use crate::config::PoolConfig;
use crate::pool::stats::StopReason;
use crate::pool::Role;
use crate::process::reap::ExitKind;
use crate::process::signal;

/// How often the pool's processes are checked for what a script did to
/// them ([`Supervisor::health_check`]).
pub(super) const HEALTH_CHECK: Duration = Duration::from_secs(1);

/// Creates the pool's cgroup and applies its limits (see
/// [`crate::process::cgroup`]); `None`, with a warning when limits were asked
/// for, where there is none.
pub(super) fn pool_cgroup(config: &PoolConfig) -> Option<Arc<crate::process::cgroup::PoolCgroup>> {
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

/// Whether `pid`, a copy of php-cgi that fpmd did not start, is serving
/// FastCGI: blocked in `accept()` on fd 0 (the pool's socket), or reading
/// a socket its parent (one of `tracked`) holds too (their shared
/// connection). `parent`: its parent's pid. Returns the parent.
pub(super) fn stray_copy(
    pid: i32,
    parent: i32,
    tracked: &std::collections::HashSet<i32>,
) -> Option<i32> {
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
pub(super) fn shorthand(bytes: u64) -> String {
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if bytes % (1 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// How often a pre-fork parent's pages are given back again: pages it
/// shared with another process when last advised (another pool's parent
/// mapping the same libraries, a child that exited since) are its alone
/// once that process is gone.
pub(super) const PAGE_OUT_AGAIN: Duration = Duration::from_secs(30);

/// How long after a pre-fork parent is ready its pages are first given
/// back: its first children (the request that started it waits for one)
/// are forked from it with its pages resident, and the page-out does not
/// take a CPU from them (a cold request on a pool with no process: 157 ms
/// at the median with the page-out at once on this 2-core machine).
pub(super) const PAGE_OUT_FIRST: Duration = Duration::from_secs(1);

/// [`PAGE_OUT_FIRST`] after the php-cgi parent `leader` is ready (PHP
/// loaded, waiting for fpmd's orders), gives back the file pages it
/// touched while starting and no other process maps
/// ([`crate::sys::pageout`]), then again every [`PAGE_OUT_AGAIN`] while it
/// lives: its PSS goes from 17.0 to 3.5 MiB with Debian's extensions. It
/// only forks children and waits for them from then on; a page it needs
/// again (to fork a child) is read back from the page cache.
pub(super) async fn page_out_parent(pool: String, leader: i32, alive: Arc<AtomicBool>) {
    tokio::time::sleep(PAGE_OUT_FIRST).await;
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
pub(super) const CGROUP_GRACE: Duration = Duration::from_secs(1);

/// The longest [`CGROUP_GRACE`] grows to while the cgroup keeps emptying.
pub(super) const CGROUP_GRACE_MAX: Duration = Duration::from_secs(10);

impl Supervisor {
    /// Writes `config`'s cgroup limits into the pool's cgroup (a reload
    /// changes them live: the kernel applies a new limit to the processes
    /// already in the cgroup).
    pub(super) fn apply_limits(&self, config: &PoolConfig) {
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
    pub(super) async fn remove_cgroup(&mut self) {
        let Some(cg) = self.cgroup.take() else {
            return;
        };
        // A pre-fork parent's children are still exiting when the parent is
        // gone (its SIGTERM reached them as it exited, fpmd's SIGKILL of its
        // process group after it): give them CGROUP_GRACE to go on their
        // own, so that only what a script left behind is killed and named.
        // While they keep going (hundreds of pools stopping at once exit
        // slowly on a busy machine) the grace starts again, up to
        // CGROUP_GRACE_MAX.
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
    pub(super) fn note_oom(&mut self, pid: i32, kind: ExitKind) -> bool {
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
    ///   killed: a stopped pre-fork parent forks no child and reports no
    ///   exit, a stopped child holds its request for ever (php-fpm
    ///   leaves both to `request_terminate_timeout`, or for ever);
    /// - a php-cgi forked by a script (`pcntl_fork`) whose copy of the
    ///   script ended goes back to serving FastCGI: blocked in `accept()`
    ///   on the pool's socket (fd 0) or reading the connection it shares
    ///   with the child that forked it. It is killed before it takes a
    ///   request meant for a child fpmd knows.
    ///
    /// The processes looked at: the pool's cgroup, or without one the
    /// php-cgi fpmd started, their children and grandchildren.
    pub(super) fn health_check(&mut self) {
        use crate::sys::procfs;
        use crate::sys::procfs::children_of;
        let leaders: Vec<(i32, bool)> = self
            .children
            .leaders
            .iter()
            .map(|(p, c)| (*p, c.role == Role::Parent))
            .collect();
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
                if let Some(c) = self.children.leaders.get(&pid) {
                    if c.role == Role::Parent {
                        warn!(pool = %self.name(), pid, "php-cgi parent {pid} is stopped (SIGSTOP), so it forks no child: SIGKILL, a new one is started");
                    } else {
                        warn!(pool = %self.name(), pid, "child {pid} is stopped (SIGSTOP): SIGKILL");
                    }
                    self.stop_child(pid, Signal::SIGKILL, StopReason::Killed);
                } else if leaders.iter().any(|l| l.1 && parent == l.0) {
                    // Forked by a php-cgi parent, its fork not reported
                    // yet: left alone until it is (then it is a child
                    // above; a fork fpmd did not order is SIGKILLed then).
                } else {
                    warn!(pool = %self.name(), pid, "php-cgi {pid} forked by a script is stopped (SIGSTOP): SIGKILL");
                    let _ = signal::send(&self.pool.name, Pid::from_raw(pid), Signal::SIGKILL);
                }
                continue;
            }
            // A child the pre-fork parent forked since `tracked` was read
            // is the pool's, not a script's copy.
            let parent_is_prefork_leader = leaders.iter().any(|l| l.1 && l.0 == parent);
            if !is_tracked && !parent_is_prefork_leader {
                if let Some(parent) = stray_copy(pid, parent, &tracked) {
                    warn!(pool = %self.name(), pid, "php-cgi {pid} forked by a script in child {parent} (pcntl_fork) went back to serving FastCGI on its parent's sockets: SIGKILL");
                    let _ = signal::send(&self.pool.name, Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
        }
        // A shared parent is in no pool's cgroup: looked at on its own.
        // Stopped, it forks no child for any pool: every pool attached to
        // it then starts a new one.
        for root in self.children.shared_parents() {
            if procfs::state_and_parent(root).is_some_and(|(state, _)| state == 'T') {
                let n = self.stopped.get(&root).copied().unwrap_or(0) + 1;
                if n < 2 {
                    stopped.insert(root, n);
                    continue;
                }
                warn!(pool = %self.name(), pid = root, "shared php-cgi parent {root} is stopped (SIGSTOP), so it forks no child: SIGKILL, a new one is started");
                let _ = signal::send(&self.pool.name, Pid::from_raw(root), Signal::SIGKILL);
            }
        }
        self.stopped = stopped;
    }
}
