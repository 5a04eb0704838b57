//! fpmd's own scheduling policy (`sched_setscheduler(2)` on the thread
//! that runs the event loop): `SCHED_BATCH` or `SCHED_OTHER`. A thread
//! inherits its creator's policy (`SCHED_RESET_ON_FORK` resets real-time
//! policies only), so the spawner thread sets `SCHED_OTHER` for itself
//! and every php-cgi it forks ([`crate::process::spawn`]).
//!
//! Must not touch: the children's own priority (`process.priority`, the
//! sandbox applies it).

use std::io;

/// Sets the calling thread's policy: `SCHED_BATCH` when `batch`, else
/// `SCHED_OTHER` (nice value unchanged either way). Errors: the kernel
/// refused (`EPERM` in a container that forbids it, `EINVAL` on a kernel
/// without `SCHED_BATCH`).
pub fn set_batch(batch: bool) -> io::Result<()> {
    let policy = if batch {
        libc::SCHED_BATCH
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid
    // param struct.
    let r = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// [`set_batch`] for the global `sched_batch`, on the event loop's thread
/// (at start and on every reload); a refusal is logged, once per value,
/// and fpmd runs on under the policy it has.
pub fn apply(batch: bool) {
    static REFUSED: std::sync::Mutex<Option<bool>> = std::sync::Mutex::new(None);
    if let Err(e) = set_batch(batch) {
        let mut last = REFUSED.lock().unwrap_or_else(|p| p.into_inner());
        if *last != Some(batch) {
            *last = Some(batch);
            let policy = if batch { "SCHED_BATCH" } else { "SCHED_OTHER" };
            tracing::warn!("sched_batch = {batch}: cannot switch to {policy}: {e}");
        }
    }
}

/// Whether the calling thread runs under `SCHED_BATCH`.
pub fn is_batch() -> bool {
    // SAFETY: sched_getscheduler of the calling thread.
    let p = unsafe { libc::sched_getscheduler(0) };
    p == libc::SCHED_BATCH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_is_set_inherited_by_new_threads_and_taken_back() {
        std::thread::spawn(|| {
            set_batch(true).unwrap();
            assert!(is_batch());
            let inner = std::thread::spawn(is_batch).join().unwrap();
            assert!(inner, "a new thread inherits SCHED_BATCH");
            set_batch(false).unwrap();
            assert!(!is_batch());
        })
        .join()
        .unwrap();
    }
}
