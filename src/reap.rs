//! Reaping: every child exit is collected at once (no zombies) and sent to
//! the pool that owns the child.
//!
//! Owns: `waitpid(-1, WNOHANG)` and the map from child pid to its owner.
//! Must not touch: what an exit means for a pool (the supervisor decides).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::sync::mpsc::UnboundedSender;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// `exit(code)`.
    Code(i32),
    /// Killed by a signal.
    Signal(Signal),
}

/// One reaped child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub pid: i32,
    pub kind: ExitKind,
}

impl std::fmt::Display for ExitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitKind::Code(c) => write!(f, "exited with code {c}"),
            ExitKind::Signal(s) => write!(f, "exited on signal {} ({})", *s as i32, s.as_str()),
        }
    }
}

#[derive(Default)]
struct Owners {
    by_pid: HashMap<i32, UnboundedSender<Exit>>,
    /// Exits reaped before their pid was registered (the child died between
    /// fork and registration).
    early: HashMap<i32, Exit>,
}

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
        if let Some(exit) = o.early.remove(&pid) {
            let _ = owner.send(exit);
        } else {
            o.by_pid.insert(pid, owner);
        }
    }

    /// Collects every exited child without blocking and routes each exit to
    /// its owner. Called on every SIGCHLD (signals coalesce, hence the loop).
    pub fn reap_all(&self) {
        loop {
            let status = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(s) => s,
            };
            let exit = match status {
                WaitStatus::Exited(pid, code) => Exit {
                    pid: pid.as_raw(),
                    kind: ExitKind::Code(code),
                },
                WaitStatus::Signaled(pid, sig, _) => Exit {
                    pid: pid.as_raw(),
                    kind: ExitKind::Signal(sig),
                },
                _ => continue,
            };
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
                        o.early.clear();
                    }
                    o.early.insert(exit.pid, exit);
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
