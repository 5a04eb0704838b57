//! The slot table of one pool: the single record of every child slot, its
//! generation and its state, with the idle stack and the queue of waiting
//! requests, all under one lock ([`super::Pool`] holds it).
//!
//! A *slot* is one child as dispatch sees it: one php-cgi process in
//! accept() on its own socket, exec'd by fpmd or (`pm.spawn = "prefork"`)
//! forked on fpmd's order by a php-cgi parent. A *generation* is one
//! configuration of the pool: a reload that changes what children are
//! started with makes a new one, and the old one drains.
//!
//! Must not touch: processes, sockets, timers (pure data; the supervisor
//! and the proxy act on what it says).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::Worker;
use crate::config::PoolConfig;

/// A configuration epoch of one pool: 1 at start, +1 per reload that needs
/// new children. Not a pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GenId(pub u32);

impl std::fmt::Display for GenId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A slot's place in the table, stable for the slot's life (the `child`
/// label of per-child figures later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotId(pub u32);

/// What a slot's request is (while Busy) or was, for the status page and
/// for the log line when `graceful_timeout` ends it; empty before the
/// first. Kept in its slot and overwritten in place, as php-fpm's
/// scoreboard keeps it, so that a request costs no allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `SCRIPT_FILENAME`.
    pub script: String,
    /// `REQUEST_URI` (with its query string, as the web server sent it).
    pub uri: String,
    /// `REQUEST_METHOD`.
    pub method: String,
    /// `REMOTE_USER` (HTTP authentication), empty when none.
    pub user: String,
    /// The body's `CONTENT_LENGTH` in bytes (0 when none or unknown).
    pub content_length: u64,
}

impl RequestInfo {
    /// Overwrites the fields with client-supplied bytes as text (invalid
    /// UTF-8 shows as U+FFFD), keeping their buffers.
    pub fn set(&mut self, script: &[u8], uri: &[u8], method: &[u8], user: &[u8], length: u64) {
        fn put(to: &mut String, b: &[u8]) {
            to.clear();
            match std::str::from_utf8(b) {
                Ok(s) => to.push_str(s),
                Err(_) => to.push_str(&String::from_utf8_lossy(b)),
            }
        }
        put(&mut self.script, script);
        put(&mut self.uri, uri);
        put(&mut self.method, method);
        put(&mut self.user, user);
        self.content_length = length;
    }

    /// Empties the fields, keeping their buffers.
    pub fn clear(&mut self) {
        self.script.clear();
        self.uri.clear();
        self.method.clear();
        self.user.clear();
        self.content_length = 0;
    }
}

/// The state of a slot (Horust-style: each state carries its data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotState {
    /// Idle, never connected.
    Cold,
    /// Idle since then.
    Idle { since: Instant },
    /// Leased to a request since then (the request is the slot's
    /// [`Slot::request`]).
    Busy { since: Instant },
    /// Taken out of dispatch for good (old generation, max_requests,
    /// scale-down, stop); the supervisor removes it.
    Retiring,
}

/// One slot.
pub struct Slot {
    /// How the request on this slot hears that its child died
    /// ([`Table::child_died`]).
    pub death: Arc<Death>,
    pub gen: GenId,
    /// The child behind the slot: its pid and the requests it served, kept
    /// here once and shared with the slot's [`Worker`].
    pub child: Arc<Child>,
    pub state: SlotState,
    /// When it last became idle (for the process manager's scale-down);
    /// a slot offered cold keeps the time it had (a new slot's: when it
    /// entered the table).
    pub idle_since: Instant,
    /// The request running (Busy) or last run.
    pub request: RequestInfo,
    /// How long the last request took (while Idle; php-fpm's `request
    /// duration` of an idle process).
    pub last_duration: std::time::Duration,
    /// The last request's peak memory and CPU, as the child's `sapi.php`
    /// reported them (kept from the request before when one did not).
    pub last_usage: Option<crate::process::sapi::Usage>,
    /// When the slot entered the table (exec: its child was ready).
    pub created: std::time::SystemTime,
    /// The slot's worker while it is not leased.
    worker: Option<Worker>,
}

impl Slot {
    /// php-fpm's per-process `requests` (status page, `fpm_get_status()`):
    /// the requests its child served, and the one it runs. php-fpm counts a
    /// request when the child starts to read its headers
    /// (`fpm_request_reading_headers`), so a Running child's count has its
    /// current request in it.
    pub fn requests(&self) -> u32 {
        let running = matches!(self.state, SlotState::Busy { .. });
        self.child.served().saturating_add(u32::from(running))
    }
}

/// The child behind one slot: the one record of its pid and of the
/// requests it served. The slot holds it and so does the slot's [`Worker`]
/// (as a lease holds the slot's [`Death`]), so that the request on a leased
/// slot counts what it served without the table's lock, and the table
/// (status page, [`Table::child_died`], `graceful_timeout`) reads it.
#[derive(Debug)]
pub struct Child {
    /// The php-cgi process (exec'd by fpmd, or forked on its order by a
    /// php-cgi parent); the slot's for its life.
    pid: Pid,
    /// Requests the child has served (for `pm.max_requests`; php-fpm's
    /// per-process `requests`).
    served: AtomicU32,
}

impl Child {
    /// The child behind a new slot: the php-cgi `pid`.
    pub fn new(pid: Pid) -> Child {
        Child {
            pid,
            served: AtomicU32::new(0),
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Requests the child has served.
    pub fn served(&self) -> u32 {
        self.served.load(Ordering::Relaxed)
    }

    /// Counts one more request served; returns the count.
    pub fn served_one(&self) -> u32 {
        self.served.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// A busy slot's child died. The request on it must not wait for the end
/// of its connection: a process the script left behind (`shell_exec('cmd
/// &')`, a `pcntl_fork` copy) inherited php-cgi's end of it and keeps it
/// open, so fpmd would wait as long as that process lives (php-fpm, whose
/// web server connects to the child directly, answers 502 at once). A
/// lease notes the [`Death::epoch`] when it takes the slot; the exchange
/// waits on [`Death::after`] beside the child's answer.
#[derive(Debug, Default)]
pub struct Death {
    /// Deaths signalled on this slot so far.
    epoch: AtomicU64,
    notify: tokio::sync::Notify,
}

impl Death {
    /// Deaths signalled so far.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn signal(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// Resolves once a death was signalled after `epoch` (at once if one
    /// already was).
    pub async fn after(&self, epoch: u64) {
        let n = self.notify.notified();
        tokio::pin!(n);
        n.as_mut().enable();
        if self.epoch() != epoch {
            return;
        }
        n.await
    }
}

/// The table and the queue.
pub struct Table {
    slots: BTreeMap<SlotId, Slot>,
    next: u32,
    /// Idle slots of the current generation, most recently used last.
    idle: Vec<SlotId>,
    /// Requests waiting for a slot, oldest first.
    pub waiters: VecDeque<oneshot::Sender<Worker>>,
    /// The generation new requests go to.
    pub current: GenId,
    /// Configuration of every generation that still has slots or children.
    pub configs: BTreeMap<GenId, Arc<PoolConfig>>,
    /// No new request is accepted (the pool is stopping).
    pub closed: bool,
    /// Busy slots now (kept with every change of state, so that the status
    /// page and `max active processes` need no scan).
    busy: usize,
    /// The most slots busy at once since the pool started (php-fpm's `max
    /// active processes`).
    pub max_busy: usize,
    /// The longest the queue of waiting requests has been (php-fpm's `max
    /// listen queue`).
    pub max_waiting: usize,
    /// The current generation's php-cgi cannot start (why), and the pool
    /// has no child: requests are answered 503 at once instead of waiting
    /// for a child that may never come. Set by the supervisor when a
    /// php-cgi dies at its start (or cannot be exec'd); cleared when it
    /// starts the next one (requests wait for that one) and when a child
    /// has a slot.
    pub unstartable: Option<Arc<str>>,
}

/// Moves a slot to `new`, keeping the table's busy count.
fn transition(busy: &mut usize, max_busy: &mut usize, s: &mut Slot, new: SlotState) {
    let was = matches!(s.state, SlotState::Busy { .. });
    let is = matches!(new, SlotState::Busy { .. });
    match (was, is) {
        (false, true) => {
            *busy += 1;
            *max_busy = (*max_busy).max(*busy);
        }
        (true, false) => *busy -= 1,
        _ => {}
    }
    s.state = new;
}

impl Table {
    pub fn new(config: Arc<PoolConfig>) -> Table {
        let mut configs = BTreeMap::new();
        configs.insert(GenId(1), config);
        Table {
            slots: BTreeMap::new(),
            next: 0,
            idle: Vec::new(),
            waiters: VecDeque::new(),
            current: GenId(1),
            configs,
            closed: false,
            busy: 0,
            max_busy: 0,
            max_waiting: 0,
            unstartable: None,
        }
    }

    /// The current generation's configuration.
    pub fn config(&self) -> &Arc<PoolConfig> {
        &self.configs[&self.current]
    }

    /// A new slot of the php-cgi child `pid`: its id and its [`Child`], for
    /// its worker.
    pub fn new_slot(&mut self, gen: GenId, pid: Pid) -> (SlotId, Arc<Child>) {
        // A php-cgi came up: the pool can start children again.
        self.unstartable = None;
        let id = SlotId(self.next);
        self.next += 1;
        let child = Arc::new(Child::new(pid));
        self.slots.insert(
            id,
            Slot {
                death: Arc::default(),
                gen,
                child: child.clone(),
                state: SlotState::Retiring,
                idle_since: Instant::now(),
                request: RequestInfo::default(),
                last_duration: std::time::Duration::ZERO,
                last_usage: None,
                created: std::time::SystemTime::now(),
                worker: None,
            },
        );
        (id, child)
    }

    /// Slot `id`'s [`Death`] and its epoch now (for a [`super::Lease`]).
    pub fn death_of(&self, id: SlotId) -> Option<(Arc<Death>, u64)> {
        self.slots
            .get(&id)
            .map(|s| (s.death.clone(), s.death.epoch()))
    }

    pub fn slot(&self, id: SlotId) -> Option<&Slot> {
        self.slots.get(&id)
    }

    /// Every slot, in id order.
    pub fn slots(&self) -> impl Iterator<Item = (SlotId, &Slot)> {
        self.slots.iter().map(|(id, s)| (*id, s))
    }

    /// Puts `w` on the idle stack (most recently used end, idle since
    /// `now`; or least with `lru`, keeping the slot's idle time). The
    /// caller checked that its generation is current.
    pub fn push_idle(&mut self, w: Worker, lru: bool, now: Instant) {
        let id = w.slot;
        let Some(s) = self.slots.get_mut(&id) else {
            return;
        };
        if let SlotState::Busy { since } = s.state {
            s.last_duration = since.elapsed();
        }
        if w.last_usage.is_some() {
            s.last_usage = w.last_usage;
        }
        if !lru {
            s.idle_since = now;
        }
        let new = if w.conn.is_none() && s.child.served() == 0 {
            SlotState::Cold
        } else {
            SlotState::Idle {
                since: s.idle_since,
            }
        };
        transition(&mut self.busy, &mut self.max_busy, s, new);
        s.worker = Some(w);
        if lru {
            self.idle.insert(0, id);
        } else {
            self.idle.push(id);
        }
    }

    /// Takes the most recently used idle slot's worker; the slot is Busy.
    pub fn pop_idle(&mut self, now: Instant) -> Option<Worker> {
        while let Some(id) = self.idle.pop() {
            if let Some(w) = self.take(id, now) {
                return Some(w);
            }
        }
        None
    }

    /// Takes the worker of idle slot `id` and marks it Busy (leased).
    fn take(&mut self, id: SlotId, now: Instant) -> Option<Worker> {
        let s = self.slots.get_mut(&id)?;
        let w = s.worker.take()?;
        transition(
            &mut self.busy,
            &mut self.max_busy,
            s,
            SlotState::Busy { since: now },
        );
        s.request.clear();
        Some(w)
    }

    /// Marks `w`'s slot Busy: it is handed straight to a waiting request.
    pub fn lease(&mut self, w: &Worker, now: Instant) {
        if let Some(s) = self.slots.get_mut(&w.slot) {
            if let SlotState::Busy { since } = s.state {
                // Straight from one request to the next.
                s.last_duration = now.saturating_duration_since(since);
            }
            if w.last_usage.is_some() {
                s.last_usage = w.last_usage;
            }
            transition(
                &mut self.busy,
                &mut self.max_busy,
                s,
                SlotState::Busy { since: now },
            );
            s.request.clear();
        }
    }

    /// Notes what the request on a busy slot is: `fill` writes it.
    pub fn set_request(&mut self, id: SlotId, fill: impl FnOnce(&mut RequestInfo)) {
        if let Some(s) = self.slots.get_mut(&id) {
            if let SlotState::Busy { .. } = s.state {
                fill(&mut s.request);
            }
        }
    }

    /// Marks a slot Retiring (its worker is with the caller).
    pub fn retiring(&mut self, id: SlotId) {
        if let Some(s) = self.slots.get_mut(&id) {
            transition(&mut self.busy, &mut self.max_busy, s, SlotState::Retiring);
            s.worker = None;
        }
        self.idle.retain(|i| *i != id);
    }

    /// Removes a slot for good.
    pub fn remove(&mut self, id: SlotId) -> Option<Slot> {
        self.idle.retain(|i| *i != id);
        let s = self.slots.remove(&id);
        if matches!(&s, Some(s) if matches!(s.state, SlotState::Busy { .. })) {
            self.busy -= 1;
        }
        s
    }

    /// Takes up to `limit` idle workers for which `pick` (given the slot
    /// and its worker) holds, least recently used first; their slots are
    /// Retiring until the caller puts them back or removes them.
    pub fn take_idle(
        &mut self,
        limit: usize,
        mut pick: impl FnMut(&Slot, &Worker) -> bool,
    ) -> Vec<Worker> {
        let mut taken = Vec::new();
        let mut i = 0;
        while i < self.idle.len() && taken.len() < limit {
            let id = self.idle[i];
            let hit = self
                .slots
                .get(&id)
                .is_some_and(|s| s.worker.as_ref().is_some_and(|w| pick(s, w)));
            if hit {
                self.idle.remove(i);
                if let Some(s) = self.slots.get_mut(&id) {
                    transition(&mut self.busy, &mut self.max_busy, s, SlotState::Retiring);
                    if let Some(w) = s.worker.take() {
                        taken.push(w);
                    }
                }
            } else {
                i += 1;
            }
        }
        taken
    }

    /// Idle workers for which `pick` (given the slot and its worker)
    /// holds.
    pub fn count_idle(&self, mut pick: impl FnMut(&Slot, &Worker) -> bool) -> usize {
        self.idle
            .iter()
            .filter_map(|id| {
                let s = self.slots.get(id)?;
                Some((s, s.worker.as_ref()?))
            })
            .filter(|(s, w)| pick(s, w))
            .count()
    }

    /// Idle slots now.
    pub fn idle_len(&self) -> usize {
        self.idle.len()
    }

    /// Slots of the child `pid` still in the table (in any state): 0 or 1.
    pub fn slots_of(&self, pid: Pid) -> usize {
        self.slots.values().filter(|s| s.child.pid() == pid).count()
    }

    /// Busy slots of `gen`.
    pub fn busy_of(&self, gen: GenId) -> impl Iterator<Item = (SlotId, &Slot)> {
        self.slots
            .iter()
            .filter(move |(_, s)| s.gen == gen && matches!(s.state, SlotState::Busy { .. }))
            .map(|(id, s)| (*id, s))
    }

    /// Busy slots of every generation.
    pub fn busy(&self) -> usize {
        debug_assert_eq!(
            self.busy,
            self.slots
                .values()
                .filter(|s| matches!(s.state, SlotState::Busy { .. }))
                .count()
        );
        self.busy
    }

    /// Queues a waiting request (the caller checked the bound).
    pub fn wait(&mut self, tx: oneshot::Sender<Worker>) {
        self.waiters.push_back(tx);
        self.max_waiting = self.max_waiting.max(self.waiters.len());
    }

    /// Slots of `gen` in any state.
    pub fn slots_of_gen(&self, gen: GenId) -> usize {
        self.slots.values().filter(|s| s.gen == gen).count()
    }

    /// The child `pid` died: the request on its slot, if busy, hears of it
    /// ([`Death`]).
    pub fn child_died(&self, pid: Pid) {
        for s in self.slots.values() {
            if s.child.pid() == pid && matches!(s.state, SlotState::Busy { .. }) {
                s.death.signal();
            }
        }
    }

    /// Removes the slot of the child `pid` (it exited).
    pub fn forget_child(&mut self, pid: Pid) {
        let gone: Vec<SlotId> = self
            .slots
            .iter()
            .filter(|(_, s)| s.child.pid() == pid)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            // A busy slot's lease finds it gone when given back.
            self.remove(id);
        }
    }

    /// Makes `gen` current; the idle workers of older generations leave the
    /// idle stack (Retiring) and are returned for retirement.
    pub fn switch_to(&mut self, gen: GenId) -> Vec<Worker> {
        self.current = gen;
        let old: Vec<SlotId> = self
            .idle
            .iter()
            .copied()
            .filter(|id| self.slots.get(id).is_some_and(|s| s.gen < gen))
            .collect();
        let mut out = Vec::new();
        for id in old {
            self.idle.retain(|i| *i != id);
            if let Some(s) = self.slots.get_mut(&id) {
                transition(&mut self.busy, &mut self.max_busy, s, SlotState::Retiring);
                if let Some(w) = s.worker.take() {
                    out.push(w);
                }
            }
        }
        out
    }

    /// Closes the queue: waiting requests are told the pool is stopping,
    /// idle workers are returned for retirement.
    pub fn close(&mut self) -> Vec<Worker> {
        self.closed = true;
        self.waiters.clear();
        let idle = std::mem::take(&mut self.idle);
        let mut out = Vec::new();
        for id in idle {
            if let Some(s) = self.slots.get_mut(&id) {
                transition(&mut self.busy, &mut self.max_busy, s, SlotState::Retiring);
                if let Some(w) = s.worker.take() {
                    out.push(w);
                }
            }
        }
        out
    }

    /// Generations other than the current one that have no slot left.
    pub fn drained(&self) -> Vec<GenId> {
        self.configs
            .keys()
            .copied()
            .filter(|g| *g != self.current && self.slots_of_gen(*g) == 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::tests::test_worker;

    fn table() -> Table {
        Table::new(Arc::new(crate::pool::tests::test_config()))
    }

    fn add(t: &mut Table, gen: u32, leader: i32) -> SlotId {
        let leader = Pid::from_raw(leader);
        let (id, child) = t.new_slot(GenId(gen), leader);
        t.push_idle(test_worker(id, child), false, Instant::now());
        id
    }

    #[test]
    fn lifo_dispatch_and_states() {
        let mut t = table();
        let a = add(&mut t, 1, 10);
        let b = add(&mut t, 1, 11);
        assert_eq!(t.slot(a).unwrap().state, SlotState::Cold);
        let now = Instant::now();
        let w = t.pop_idle(now).unwrap();
        assert_eq!(w.slot, b, "most recently used first");
        assert!(matches!(t.slot(b).unwrap().state, SlotState::Busy { .. }));
        t.set_request(b, |r| r.set(b"/srv/x.php", b"/x.php", b"GET", b"", 0));
        assert_eq!(t.slot(b).unwrap().request.uri, "/x.php");
        assert_eq!(t.slot(b).unwrap().child.pid(), Pid::from_raw(11));
        assert_eq!(t.busy_of(GenId(1)).count(), 1);
        t.push_idle(w, false, Instant::now());
        assert_eq!(t.busy(), 0);
        assert_eq!(t.idle_len(), 2);
    }

    /// php-fpm counts a request in its child's `requests` when it starts:
    /// a Running child's count has it, an idle child's the ones it served.
    #[test]
    fn a_running_child_counts_its_request_as_php_fpm_does() {
        let mut t = table();
        let a = add(&mut t, 1, 10);
        assert_eq!(t.slot(a).unwrap().requests(), 0, "cold");
        let w = t.pop_idle(Instant::now()).unwrap();
        assert_eq!(t.slot(a).unwrap().requests(), 1, "its first request runs");
        w.child.served_one();
        t.push_idle(w, false, Instant::now());
        assert_eq!(t.slot(a).unwrap().requests(), 1, "idle after it");
        let w = t.pop_idle(Instant::now()).unwrap();
        assert_eq!(t.slot(a).unwrap().requests(), 2, "its second runs");
        w.child.served_one();
        t.push_idle(w, false, Instant::now());
        assert_eq!(t.slot(a).unwrap().requests(), 2);
    }

    #[test]
    fn switching_generation_retires_old_idle_slots_only() {
        let mut t = table();
        add(&mut t, 1, 10);
        let busy = add(&mut t, 1, 11);
        let w = t.pop_idle(Instant::now()).unwrap();
        assert_eq!(w.slot, busy);
        t.configs.insert(GenId(2), t.config().clone());
        let new = add(&mut t, 2, 20);
        let retired = t.switch_to(GenId(2));
        assert_eq!(retired.len(), 1, "the old idle slot");
        assert_eq!(t.current, GenId(2));
        assert_eq!(t.idle_len(), 1);
        assert_eq!(t.pop_idle(Instant::now()).unwrap().slot, new);
        // the old busy slot is still counted until it is given back
        assert_eq!(t.busy_of(GenId(1)).count(), 1);
        for w in retired {
            t.remove(w.slot);
        }
        assert!(t.drained().is_empty(), "gen 1 still has its busy slot");
        t.remove(busy);
        assert_eq!(t.drained(), vec![GenId(1)]);
    }

    #[test]
    fn take_idle_is_least_recently_used_first_and_close_empties() {
        let mut t = table();
        let a = add(&mut t, 1, 10);
        add(&mut t, 1, 11);
        let taken = t.take_idle(1, |_, _| true);
        assert_eq!(taken[0].slot, a);
        assert_eq!(t.slot(a).unwrap().state, SlotState::Retiring);
        assert_eq!(t.count_idle(|_, _| true), 1);
        let closed = t.close();
        assert_eq!(closed.len(), 1);
        assert!(t.closed);
        assert_eq!(t.idle_len(), 0);
        t.forget_child(Pid::from_raw(10));
        assert_eq!(t.slots_of(Pid::from_raw(10)), 0);
        assert_eq!(t.slots_of(Pid::from_raw(11)), 1);
    }
}
