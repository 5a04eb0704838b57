//! Reaping: every child exit is collected at once (no zombies) and sent to
//! the pool that owns the child.
//!
//! Owns: `waitpid(-1, WNOHANG)` and the map from child pid to its owner.
//! Must not touch: what an exit means for a pool (the supervisor decides).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::mpsc::UnboundedSender;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// `exit(code)`.
    Code(i32),
    /// Killed by signal number `signal` (any number: real-time signals
    /// have no [`Signal`] of their own), with a core dump or not.
    Signal { signal: i32, core_dumped: bool },
}

impl ExitKind {
    /// The exit of a wait status (`waitpid`'s, or one a php-cgi parent's
    /// fork server reports); `None` for a stop or continue status.
    pub fn from_wait_status(status: i32) -> Option<ExitKind> {
        if libc::WIFEXITED(status) {
            Some(ExitKind::Code(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Some(ExitKind::Signal {
                signal: libc::WTERMSIG(status),
                core_dumped: libc::WCOREDUMP(status),
            })
        } else {
            None
        }
    }
}

/// One reaped child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub pid: i32,
    pub kind: ExitKind,
}

/// php-fpm's wording (`fpm_children.c`): `exited with code 0`,
/// `exited on signal 9 (SIGKILL)`, `exited on signal 11 (SIGSEGV - core
/// dumped)`, `exited on signal 35 (SIGRTMIN+1)`.
impl std::fmt::Display for ExitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ExitKind::Code(c) => write!(f, "exited with code {c}"),
            ExitKind::Signal {
                signal,
                core_dumped,
            } => {
                write!(f, "exited on signal {signal} (")?;
                write_signal_name(f, signal)?;
                f.write_str(if core_dumped { " - core dumped)" } else { ")" })
            }
        }
    }
}

/// `SIGKILL`, `SIGRTMIN+3`, or nothing for a number Linux does not have.
fn write_signal_name(f: &mut std::fmt::Formatter<'_>, signal: i32) -> std::fmt::Result {
    if let Ok(s) = Signal::try_from(signal) {
        return f.write_str(s.as_str());
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    match signal {
        s if s == min => f.write_str("SIGRTMIN"),
        s if s == max => f.write_str("SIGRTMAX"),
        s if s > min && s < max => write!(f, "SIGRTMIN+{}", s - min),
        _ => Ok(()),
    }
}

impl Exit {
    /// The log line php-fpm writes for a child exit, given how long the
    /// child lived: `child 1234 exited on signal 9 (SIGKILL) after
    /// 1.234567 seconds from start`.
    pub fn describe(&self, lived: Duration) -> impl std::fmt::Display + '_ {
        struct Line<'a>(&'a Exit, Duration);
        impl std::fmt::Display for Line<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(
                    f,
                    "child {} {} after {}.{:06} seconds from start",
                    self.0.pid,
                    self.0.kind,
                    self.1.as_secs(),
                    self.1.subsec_micros()
                )
            }
        }
        Line(self, lived)
    }
}

#[derive(Default)]
struct Owners {
    by_pid: HashMap<i32, UnboundedSender<Exit>>,
    /// Exits reaped before their pid was registered (the child died between
    /// fork and registration), with when. Most are orphaned grandchildren
    /// (a script's forks) that nobody registers; with `pid_max` at 32768
    /// their pids come back soon, so one older than [`EARLY_MAX_AGE`] is
    /// never taken for a new child's exit.
    early: HashMap<i32, (Exit, std::time::Instant)>,
}

/// How long an exit reaped before its pid was registered can still be
/// its child's: the spawner registers a pid right after `fork` returns.
const EARLY_MAX_AGE: Duration = Duration::from_secs(5);

/// The daemon's single reaper.
#[derive(Default)]
pub struct Reaper {
    owners: Mutex<Owners>,
}

impl Reaper {
    pub fn new() -> Arc<Reaper> {
        Arc::new(Reaper::default())
    }

    /// Records that `pid` belongs to `owner`; delivers at once an exit that
    /// was reaped before this call.
    pub fn register(&self, pid: i32, owner: UnboundedSender<Exit>) {
        let mut o = self.owners.lock().unwrap();
        if let Some((exit, _)) = o
            .early
            .remove(&pid)
            .filter(|(_, at)| at.elapsed() < EARLY_MAX_AGE)
        {
            let _ = owner.send(exit);
        } else {
            o.by_pid.insert(pid, owner);
        }
    }

    /// Collects every exited child without blocking and routes each exit to
    /// its owner. Called on every SIGCHLD (signals coalesce, hence the loop).
    pub fn reap_all(&self) {
        loop {
            // libc, not nix: nix's waitpid reaps a child killed by a
            // real-time signal and then fails to convert its status, and
            // that exit would be lost.
            let mut status = 0;
            // SAFETY: waitpid writes the status into a valid local int.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            let Some(kind) = ExitKind::from_wait_status(status) else {
                continue;
            };
            let exit = Exit { pid, kind };
            let mut o = self.owners.lock().unwrap();
            match o.by_pid.remove(&exit.pid) {
                Some(owner) => {
                    let _ = owner.send(exit);
                }
                None => {
                    // Either a child whose registration is on its way, or an
                    // orphaned grandchild nobody registers: keep a bounded
                    // number of these.
                    if o.early.len() >= 4096 {
                        o.early.retain(|_, (_, at)| at.elapsed() < EARLY_MAX_AGE);
                    }
                    if o.early.len() >= 4096 {
                        o.early.clear();
                    }
                    o.early.insert(exit.pid, (exit, std::time::Instant::now()));
                }
            }
        }
    }

    /// Runs forever: reaps on every SIGCHLD. The signal stream must exist
    /// before the first child is forked, so call this (spawn it) first.
    pub async fn run(self: Arc<Self>, mut sigchld: tokio::signal::unix::Signal) {
        loop {
            self.reap_all();
            if sigchld.recv().await.is_none() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_unclaimed_exit_is_not_a_new_childs() {
        let r = Reaper::new();
        let exit = |pid| Exit {
            pid,
            kind: ExitKind::Code(0),
        };
        {
            let mut o = r.owners.lock().unwrap();
            let old = std::time::Instant::now()
                .checked_sub(Duration::from_secs(60))
                .unwrap();
            // A script's fork reaped a minute ago, whose pid came back.
            o.early.insert(100, (exit(100), old));
            // A child that died between fork and registration.
            o.early.insert(200, (exit(200), std::time::Instant::now()));
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        r.register(100, tx.clone());
        assert!(rx.try_recv().is_err(), "the stale exit was delivered");
        assert!(r.owners.lock().unwrap().by_pid.contains_key(&100));
        r.register(200, tx);
        assert_eq!(rx.try_recv().unwrap().pid, 200);
    }

    #[test]
    fn php_fpm_wording() {
        let kill = Exit {
            pid: 1234,
            kind: ExitKind::Signal {
                signal: 9,
                core_dumped: false,
            },
        };
        assert_eq!(
            kill.describe(Duration::from_micros(1_234_567)).to_string(),
            "child 1234 exited on signal 9 (SIGKILL) after 1.234567 seconds from start"
        );
        let segv = ExitKind::Signal {
            signal: libc::SIGSEGV,
            core_dumped: true,
        };
        assert_eq!(
            segv.to_string(),
            "exited on signal 11 (SIGSEGV - core dumped)"
        );
        let rt = ExitKind::Signal {
            signal: libc::SIGRTMIN() + 1,
            core_dumped: false,
        };
        assert_eq!(
            rt.to_string(),
            format!("exited on signal {} (SIGRTMIN+1)", libc::SIGRTMIN() + 1)
        );
        assert_eq!(
            ExitKind::Signal {
                signal: 200,
                core_dumped: false
            }
            .to_string(),
            "exited on signal 200 ()"
        );
        let ok = Exit {
            pid: 7,
            kind: ExitKind::Code(0),
        };
        assert_eq!(
            ok.describe(Duration::from_millis(20)).to_string(),
            "child 7 exited with code 0 after 0.020000 seconds from start"
        );
    }
}
