//! What the proxy may hold at once: the memory budget of request bodies
//! buffered before dispatch ([`Charge`]) and the cap on open web server
//! connections (from `RLIMIT_NOFILE`; the accept loops read it).

use std::sync::atomic::{AtomicUsize, Ordering};

use tracing::warn;

/// Bytes all connections together may hold for requests not yet handed to
/// a child (PARAMS being read, bodies buffered before dispatch), beyond
/// [`FREE_PER_REQUEST`] each. A request that would go over it: its
/// connection is closed (while reading PARAMS) or it is dispatched with
/// what it has (while buffering its body).
pub const BUDGET: usize = 32 << 20;

/// Bytes a request may hold without drawing on [`BUDGET`]: an ordinary
/// request from nginx never does.
pub const FREE_PER_REQUEST: usize = 16 * 1024;

pub(super) static BUDGET_USED: AtomicUsize = AtomicUsize::new(0);

/// When the budget was last reported exhausted (seconds since start), so
/// the log says it once a second at most.
pub(super) static BUDGET_WARNED: AtomicUsize = AtomicUsize::new(usize::MAX);

/// One connection's share of [`BUDGET`], given back when its request is
/// done (or the connection task ends, however it ends).
#[derive(Debug, Default)]
pub struct Charge {
    pub(super) charged: usize,
}

impl Charge {
    pub fn new() -> Charge {
        Charge { charged: 0 }
    }

    /// Makes sure `stored` bytes held by the current request are covered.
    /// False when the budget cannot cover them (nothing changes then).
    pub fn cover(&mut self, stored: usize) -> bool {
        let want = stored.saturating_sub(FREE_PER_REQUEST);
        if want <= self.charged {
            return true;
        }
        let more = want - self.charged;
        if BUDGET_USED.fetch_add(more, Ordering::Relaxed) + more > BUDGET {
            BUDGET_USED.fetch_sub(more, Ordering::Relaxed);
            let now = crate::log::uptime_secs();
            if BUDGET_WARNED.swap(now, Ordering::Relaxed) != now {
                warn!("the buffer budget for unfinished requests ({} MiB) is used up: requests over {} KiB are refused or dispatched early",
                    BUDGET >> 20, FREE_PER_REQUEST >> 10);
            }
            return false;
        }
        self.charged = want;
        true
    }

    /// Gives this connection's share back.
    pub fn release(&mut self) {
        BUDGET_USED.fetch_sub(std::mem::take(&mut self.charged), Ordering::Relaxed);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.release();
    }
}

/// Connections all listeners together may hold (set by the daemon from
/// `RLIMIT_NOFILE`); also what `FCGI_MAX_CONNS` answers.
pub(super) static MAX_CONNECTIONS: AtomicUsize = AtomicUsize::new(1024);

/// See [`MAX_CONNECTIONS`].
pub fn max_connections() -> usize {
    MAX_CONNECTIONS.load(Ordering::Relaxed)
}

/// Sets [`max_connections`].
pub fn set_max_connections(n: usize) {
    MAX_CONNECTIONS.store(n, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_are_bounded_and_given_back() {
        let mut a = Charge::new();
        assert!(a.cover(FREE_PER_REQUEST), "a small request costs nothing");
        assert_eq!(a.charged, 0);
        assert!(a.cover(FREE_PER_REQUEST + 100));
        assert_eq!(a.charged, 100);
        let mut b = Charge::new();
        assert!(
            !b.cover(BUDGET + FREE_PER_REQUEST + 1),
            "over the whole budget"
        );
        assert_eq!(b.charged, 0);
        drop(a);
        assert!(b.cover(FREE_PER_REQUEST + 10));
        b.release();
        assert_eq!(b.charged, 0);
    }
}
