//! A pool's sample for the status page and the metrics: [`PoolStatus`],
//! with one [`ProcessStatus`] per child, taken under the slot table's
//! lock by [`Pool::status`].
//!
//! Must not touch: dispatch (it reads the slot table, and only drops
//! from the queue the requests that already left) or processes.

use std::time::Instant;

use super::{Pool, RequestInfo, SlotState};

/// One child as the status page shows it (php-fpm's `&full` rows).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessStatus {
    /// The child's pid.
    pub pid: i32,
    /// php-fpm's stage name: `Idle` or `Running`.
    pub state: &'static str,
    /// When the child started (it was ready).
    pub start_time: std::time::SystemTime,
    /// Requests this child served, the running one included (as
    /// php-fpm counts them: [`super::slots::Slot::requests`]).
    pub requests: u32,
    /// The running request's time so far, or the last request's; µs.
    pub request_duration_us: u64,
    pub request: RequestInfo,
    /// The generation (configuration epoch) the child was started with.
    pub generation: u32,
    /// The last request's peak memory in bytes (php-fpm's `last request
    /// memory`), 0 while a request runs or when none reported it.
    pub last_request_memory: u64,
    /// The last request's CPU as a percentage of its duration (php-fpm's
    /// `last request cpu`), 0 while a request runs or when unknown.
    pub last_request_cpu: f64,
    /// Its slot id (stable while it lives).
    pub slot: u32,
}

/// A consistent sample of a pool, taken under the slot table's lock: idle
/// + active = total always, as php-fpm's scoreboard promises.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolStatus {
    pub pool: String,
    /// `static`, `dynamic` or `ondemand`.
    pub process_manager: &'static str,
    pub start_time: std::time::SystemTime,
    pub accepted_conn: u64,
    /// Requests waiting for a child in fpmd's queue now.
    pub listen_queue: usize,
    pub max_listen_queue: usize,
    /// The queue's bound (`listen.backlog`, as the kernel caps it).
    pub listen_queue_len: u32,
    pub idle: usize,
    pub active: usize,
    pub max_active: usize,
    pub max_children_reached: u64,
    pub slow_requests: u64,
    /// `pm.max_children` of the current generation.
    pub max_children: u32,
    /// The current generation.
    pub generation: u32,
    pub processes: Vec<ProcessStatus>,
}

impl Pool {
    /// A sample of the pool for the status page (`full`: with one row per
    /// child). Cheap: one pass over the slot table under its lock.
    pub fn status(&self, full: bool) -> PoolStatus {
        use std::sync::atomic::Ordering::Relaxed;
        let mut t = self.table.lock().unwrap();
        t.waiters.retain(|s| !s.is_closed());
        let config = t.config().clone();
        let now = Instant::now();
        let mut processes = Vec::new();
        if full {
            // Requests report their figures from now on.
            self.rows_read.store(true, Relaxed);
            for (id, s) in t.slots() {
                let (state, duration) = match &s.state {
                    SlotState::Busy { since } => ("Running", now.saturating_duration_since(*since)),
                    SlotState::Idle { .. } | SlotState::Cold => ("Idle", s.last_duration),
                    SlotState::Retiring => continue,
                };
                // php-fpm shows the last request's figures for an idle
                // child only (fpm_status.c), 0 while one runs.
                let idle = state == "Idle";
                let usage = s.last_usage.filter(|_| idle);
                processes.push(ProcessStatus {
                    last_request_memory: usage.map_or(0, |u| u.memory),
                    last_request_cpu: usage
                        .and_then(|u| u.cpu_percent(s.last_duration, None))
                        .unwrap_or(0.0),
                    pid: s.child.pid().as_raw(),
                    state,
                    start_time: s.created,
                    requests: s.requests(),
                    request_duration_us: duration.as_micros() as u64,
                    request: s.request.clone(),
                    generation: s.gen.0,
                    slot: id.0,
                });
            }
        }
        PoolStatus {
            pool: self.name.clone(),
            process_manager: config.pm.mode.as_str(),
            start_time: self.stats.started,
            accepted_conn: self.stats.accepted.load(Relaxed),
            listen_queue: t.waiters.len(),
            max_listen_queue: t.max_waiting,
            listen_queue_len: crate::listen::effective_backlog(config.listen.backlog),
            idle: t.idle_len(),
            active: t.busy(),
            max_active: t.max_busy,
            max_children_reached: self.stats.max_children_reached.load(Relaxed),
            slow_requests: self.stats.slow_requests.load(Relaxed),
            max_children: config.pm.max_children,
            generation: t.current.0,
            processes,
        }
    }
}
