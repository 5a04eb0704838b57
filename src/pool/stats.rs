//! A pool's counters since it started: what php-fpm keeps in its
//! scoreboard (`accepted conn`, `slow requests`, `max children reached`)
//! and what fpmd adds (latency histograms, spawns and retirements by
//! reason). Atomics, written on the request path without a lock; read by
//! the status page, the metrics endpoint and `fpmd status`.
//!
//! Must not touch: the slot table (its counts, `active`, `idle`, `max
//! active processes`, `max listen queue`, are kept under its lock in
//! [`super::slots`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// Upper bounds of the latency histograms, in seconds (Prometheus'
/// default buckets, plus the long tail PHP requests have).
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A cumulative latency histogram: counts per bucket of
/// [`LATENCY_BUCKETS`] (plus +Inf), their sum and count. Its counts are
/// allocated at the first observation: a pool that has not served holds
/// 16 bytes, not 136.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: OnceLock<Box<Counts>>,
}

#[derive(Debug, Default)]
struct Counts {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    /// Sum of observations in microseconds.
    sum_us: AtomicU64,
    count: AtomicU64,
}

/// A copy of a [`Histogram`]: counts per bucket (not cumulative; the last
/// is +Inf), the sum in seconds, the count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        let c = self.counts.get_or_init(Box::default);
        c.buckets[i].fetch_add(1, Ordering::Relaxed);
        c.sum_us.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        c.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let Some(c) = self.counts.get() else {
            return HistogramSnapshot {
                buckets: vec![0; LATENCY_BUCKETS.len() + 1],
                sum: 0.0,
                count: 0,
            };
        };
        HistogramSnapshot {
            buckets: c
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum: c.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
            count: c.count.load(Ordering::Relaxed),
        }
    }
}

/// Why a child left (the `reason` label of `fpmd_children_stopped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StopReason {
    /// `pm.max_requests` reached.
    MaxRequests,
    /// Over `pm.max_memory` after a request.
    MaxMemory,
    /// Scale-down: idle beyond the process manager's needs.
    Idle,
    /// `request_terminate_timeout`.
    Terminated,
    /// It broke the FastCGI protocol, or could not be reached.
    Killed,
    /// A reload replaced its generation, or the pool stopped.
    Retired,
    /// It died without being asked (crash, signal from outside).
    Died,
}

impl StopReason {
    pub const ALL: [StopReason; 7] = [
        StopReason::MaxRequests,
        StopReason::MaxMemory,
        StopReason::Idle,
        StopReason::Terminated,
        StopReason::Killed,
        StopReason::Retired,
        StopReason::Died,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::MaxRequests => "max_requests",
            StopReason::MaxMemory => "max_memory",
            StopReason::Idle => "idle",
            StopReason::Terminated => "request_terminate_timeout",
            StopReason::Killed => "killed",
            StopReason::Retired => "retired",
            StopReason::Died => "died",
        }
    }
}

/// The counters of one pool, for its life (across reloads).
#[derive(Debug)]
pub struct PoolStats {
    /// When the pool started (php-fpm's `start time`).
    pub started: SystemTime,
    /// Requests received (php-fpm's `accepted conn`: every request read,
    /// the status and ping requests included, as php-fpm counts them).
    pub accepted: AtomicU64,
    /// Requests that ran past `request_slowlog_timeout` (php-fpm's `slow
    /// requests`).
    pub slow_requests: AtomicU64,
    /// Times a request found every one of `pm.max_children` busy under a
    /// dynamic or ondemand process manager (php-fpm's `max children
    /// reached`: counted once until a child frees up, and never for
    /// static, as php-fpm counts it).
    pub max_children_reached: AtomicU64,
    /// Set while the limit is reached and counted.
    at_max: AtomicBool,
    /// Time from the request's arrival to its child (or fpmd's own
    /// answer).
    pub queue_wait: Histogram,
    /// Time from the child taking the request to its END_REQUEST.
    pub service: Histogram,
    /// php-cgi processes started to serve requests: each child, exec'd by
    /// fpmd or forked on its order by a php-cgi parent (`pm.spawn =
    /// "prefork"`). The parents themselves are not counted. Written by the
    /// supervisor only.
    pub spawned: AtomicU64,
    /// Children stopped, by reason.
    stopped: Mutex<std::collections::BTreeMap<StopReason, u64>>,
}

impl PoolStats {
    pub fn new() -> PoolStats {
        PoolStats {
            started: SystemTime::now(),
            accepted: AtomicU64::new(0),
            slow_requests: AtomicU64::new(0),
            max_children_reached: AtomicU64::new(0),
            at_max: AtomicBool::new(false),
            queue_wait: Histogram::default(),
            service: Histogram::default(),
            spawned: AtomicU64::new(0),
            stopped: Mutex::new(Default::default()),
        }
    }

    /// A request had to wait with every child busy: counts once per
    /// episode (see [`PoolStats::max_children_reached`]).
    /// Returns whether this began a new episode (which php-fpm logs).
    pub fn limit_reached(&self) -> bool {
        let new = !self.at_max.swap(true, Ordering::Relaxed);
        if new {
            self.max_children_reached.fetch_add(1, Ordering::Relaxed);
        }
        new
    }

    /// A child became idle with no request waiting: the next time every
    /// child is busy is a new episode.
    pub fn limit_left(&self) {
        self.at_max.store(false, Ordering::Relaxed);
    }

    /// A child started (see [`PoolStats::spawned`]).
    pub fn count_spawned(&self) {
        self.spawned.fetch_add(1, Ordering::Relaxed);
    }

    /// A child stopped for `why`: counted once per child, by the
    /// supervisor, when its exit is seen (reaped, or reported by its
    /// php-cgi parent). Takes a lock: never called on the request path.
    pub fn stopped(&self, why: StopReason) {
        *self.stopped.lock().unwrap().entry(why).or_default() += 1;
    }

    /// Children stopped, per reason (every reason, zeros included).
    pub fn stopped_by_reason(&self) -> Vec<(StopReason, u64)> {
        let m = self.stopped.lock().unwrap();
        StopReason::ALL
            .iter()
            .map(|r| (*r, m.get(r).copied().unwrap_or(0)))
            .collect()
    }
}

impl Default for PoolStats {
    fn default() -> Self {
        PoolStats::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_sum() {
        let h = Histogram::default();
        let empty = h.snapshot();
        assert_eq!((empty.count, empty.sum), (0, 0.0));
        assert_eq!(empty.buckets, vec![0; LATENCY_BUCKETS.len() + 1]);
        assert!(h.counts.get().is_none(), "no counts before an observation");
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], 1, "0.5 ms in the 1 ms bucket");
        assert_eq!(s.buckets[2], 1, "3 ms in the 5 ms bucket");
        assert_eq!(*s.buckets.last().unwrap(), 1, "60 s in +Inf");
        assert!((s.sum - 60.0035).abs() < 1e-9, "{}", s.sum);
    }

    #[test]
    fn max_children_reached_counts_episodes() {
        let s = PoolStats::new();
        s.limit_reached();
        s.limit_reached();
        assert_eq!(s.max_children_reached.load(Ordering::Relaxed), 1);
        s.limit_left();
        s.limit_reached();
        assert_eq!(s.max_children_reached.load(Ordering::Relaxed), 2);
    }
}
