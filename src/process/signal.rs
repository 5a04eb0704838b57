//! Signals to processes fpmd started: one way to send them, so that a
//! failure other than "already gone" is never silent.
//!
//! Must not touch: when to signal (the pool's supervisor and the daemon
//! decide).

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tracing::warn;

/// Sends `sig` to `target` (a pid, or a negated process group id: the
/// group). A process already gone (`ESRCH`: it exited, or its group
/// emptied, between the decision and the signal) is what the signal was
/// for and is not reported; any other error (`EPERM`: the process changed
/// its user; `EINVAL`) is logged at warning level with `pool` (the pool
/// the process belongs to) and returned.
pub fn send(pool: &str, target: Pid, sig: Signal) -> Result<(), Errno> {
    match kill(target, sig) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => {
            warn!(pool = %pool, pid = target.as_raw(), "cannot send {sig}: {e}");
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_already_gone_is_not_an_error() {
        // The largest pid the kernel never hands out.
        assert_eq!(send("t", Pid::from_raw(i32::MAX), Signal::SIGTERM), Ok(()));
    }
}
