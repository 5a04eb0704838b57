//! Running plans: a fuzz thread opens connections one after the other
//! (some in bursts, some held open among the others, slowloris drips
//! among them), sends, reads and ends each as its plan says, checks what
//! fpmd answered and counts it all ([`FuzzStats`]).

use super::checks::{Expect, Got, Sent};
use super::plan::{
    idle_plan, inflight_plan, legal_plan, lies_plan, management_plan, mutated_plan, noise_plan,
    slow_reader_plan, Ending, Pacing, Plan, Step,
};
use super::rng::{hex, new_marker, owner, owner_name, Rng};
use super::sock::Sock;
use super::{Ctx, LISTENERS};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Connections one fuzz thread keeps open at most between its others.
const HELD_MAX: usize = 20;
/// How long a legal request sent straight to fpmd may wait for its answer
/// (and a legal write for fpmd to read it): far more than a slow machine
/// needs, since the pool turns over every few ms.
pub(super) const LEGAL_WAIT: Duration = Duration::from_secs(60);
/// How long a write of a fuzzed connection may block (fpmd stops reading
/// a queued request's connection after 64 KiB).
const FUZZ_WRITE_WAIT: Duration = Duration::from_secs(5);

/// Counters of one listener's fuzzer.
#[derive(Default)]
pub(super) struct FuzzStats {
    pub(super) conns: AtomicU64,
    pub(super) legal_conns: AtomicU64,
    pub(super) bursts: AtomicU64,
    pub(super) drips: AtomicU64,
    pub(super) held_peak: AtomicU64,
    pub(super) records: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) answer_records: AtomicU64,
    pub(super) answers: AtomicU64,
    pub(super) closes: AtomicU64,
    /// When each connection was closed (by its marker), and who it was.
    pub(super) closed: Mutex<HashMap<String, (SystemTime, String)>>,
    pub(super) legal_ok: AtomicU64,
    pub(super) legal_cut: AtomicU64,
    pub(super) connect_errors: AtomicU64,
    pub(super) write_timeouts: AtomicU64,
    pub(super) violations: Mutex<Vec<String>>,
}

struct Conn {
    sock: Sock,
    sent: Sent,
    got: Got,
    owner: u64,
    marker: String,
    what: String,
    legal: Option<Vec<(u16, Expect)>>,
    get_values: u32,
    /// The end of the run cut what this connection was to send or read.
    cut: bool,
    /// A write failed: fpmd closed or reset the connection.
    refused: bool,
    /// A legal request was not answered within LEGAL_WAIT.
    timed_out: bool,
    bad: Option<String>,
    listener: usize,
}

impl Conn {
    fn open(ctx: &Ctx, plan: &Plan, owner: u64, stats: &FuzzStats) -> Option<Conn> {
        let sock = match Sock::connect(&ctx.target) {
            Ok(s) => s,
            Err(e) => {
                if stats.connect_errors.fetch_add(1, Relaxed) < 3 {
                    eprintln!("{}: connect: {e}", owner_name(owner));
                }
                return None;
            }
        };
        sock.set_write_timeout(if plan.legal.is_some() {
            LEGAL_WAIT
        } else {
            FUZZ_WRITE_WAIT
        });
        stats.conns.fetch_add(1, Relaxed);
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        let _ = writeln!(
            ctx.plans.lock().unwrap(),
            "{}.{:06} {} {}",
            at.as_secs(),
            at.subsec_micros(),
            owner_name(owner),
            plan.what
        );
        if plan.legal.is_some() {
            stats.legal_conns.fetch_add(1, Relaxed);
        }
        Some(Conn {
            sock,
            sent: Sent::default(),
            got: Got::default(),
            owner,
            marker: plan.marker.clone(),
            what: plan.what.clone(),
            legal: plan.legal.clone(),
            get_values: plan.get_values,
            cut: false,
            refused: false,
            timed_out: false,
            bad: None,
            listener: ctx.listener,
        })
    }

    fn violation(&mut self, msg: String) {
        if self.bad.is_none() {
            self.bad = Some(msg);
        }
    }

    /// One write; false once fpmd refuses more (or a write timed out).
    fn write_part(&mut self, b: &[u8], stats: &FuzzStats) -> Option<usize> {
        if self.refused {
            return None;
        }
        loop {
            match self.sock.write(b) {
                Ok(0) => {
                    self.refused = true;
                    return None;
                }
                Ok(n) => {
                    self.sent.feed(&b[..n]);
                    return Some(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    stats.write_timeouts.fetch_add(1, Relaxed);
                    self.refused = true;
                    if self.legal.is_some() {
                        self.violation(format!(
                            "fpmd read nothing of a legal request for {LEGAL_WAIT:?}"
                        ));
                    }
                    return None;
                }
                Err(_) => {
                    self.refused = true;
                    self.got.write_failed = true;
                    return None;
                }
            }
        }
    }

    fn write_all(&mut self, mut b: &[u8], stats: &FuzzStats) -> bool {
        while !b.is_empty() {
            match self.write_part(b, stats) {
                Some(n) => b = &b[n..],
                None => return false,
            }
        }
        true
    }

    fn send(&mut self, b: &[u8], p: &Pacing, deadline: Instant, stats: &FuzzStats) -> bool {
        let past = |c: &mut Conn| {
            if Instant::now() > deadline {
                c.cut = true;
                return true;
            }
            false
        };
        match p {
            Pacing::Whole => self.write_all(b, stats),
            Pacing::Chunks(sizes) => {
                let mut at = 0;
                for &n in sizes {
                    let end = (at + n).min(b.len());
                    if !self.write_all(&b[at..end], stats) {
                        return false;
                    }
                    at = end;
                }
                self.write_all(&b[at..], stats)
            }
            Pacing::Bytes { first, gap } => {
                for i in 0..(*first).min(b.len()) {
                    if past(self) || !self.write_all(&b[i..i + 1], stats) {
                        return false;
                    }
                    std::thread::sleep(*gap);
                }
                self.write_all(&b[(*first).min(b.len())..], stats)
            }
            Pacing::Slow { chunk, every, most } => {
                let t0 = Instant::now();
                let mut at = 0;
                while at < b.len() && t0.elapsed() < *most {
                    let end = (at + chunk).min(b.len());
                    if past(self) || !self.write_all(&b[at..end], stats) {
                        return false;
                    }
                    at = end;
                    std::thread::sleep(*every);
                }
                self.write_all(&b[at..], stats)
            }
        }
    }

    fn feed_got(&mut self, data: &[u8]) {
        if let Err(e) = self.got.take(data, &self.sent, self.owner) {
            self.violation(e);
        }
    }

    /// One read of at most `timeout`; false once fpmd closed.
    fn read_once(&mut self, timeout: Duration, max: usize) -> bool {
        self.sock.set_read_timeout(timeout);
        let mut buf = [0u8; 65536];
        let max = max.clamp(1, buf.len());
        loop {
            match self.sock.read(&mut buf[..max]) {
                Ok(0) => {
                    self.got.eof = true;
                    return false;
                }
                Ok(n) => {
                    self.feed_got(&buf[..n]);
                    return true;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return true
                }
                Err(_) => {
                    self.got.reset = true;
                    return false;
                }
            }
        }
    }

    /// Reads what a non-blocking socket has.
    fn drain(&mut self) {
        let mut buf = [0u8; 65536];
        while !self.got.closed() {
            match self.sock.read(&mut buf) {
                Ok(0) => self.got.eof = true,
                Ok(n) => self.feed_got(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => self.got.reset = true,
            }
        }
    }

    fn answered(&self) -> bool {
        let begun: u32 = self.sent.begins.values().sum();
        let ended: u32 = self.got.ends.values().sum();
        ended >= begun
            && self.got.gv >= self.sent.get_values
            && self.got.unknown as usize >= self.sent.mgmt.len()
    }

    /// Reads until everything sent is answered, fpmd closes, or `timeout`
    /// (legal requests: also past `until`, the end of the run; others: not).
    fn await_answers(&mut self, timeout: Duration, until: Instant) {
        self.await_paced(timeout, until, 65536, Duration::ZERO)
    }

    /// [`Conn::await_answers`] reading at most `chunk` bytes every `gap` (a slow reader).
    fn await_paced(&mut self, timeout: Duration, until: Instant, chunk: usize, gap: Duration) {
        let legal = self.legal.is_some();
        let t0 = Instant::now();
        let mut limit = t0 + timeout;
        if !legal {
            limit = limit.min(until.max(t0));
        }
        while !self.got.closed() && !self.answered() {
            let now = Instant::now();
            if now >= limit {
                if legal {
                    self.timed_out = true;
                }
                return;
            }
            self.read_once(limit - now, chunk);
            if !gap.is_zero() {
                std::thread::sleep(gap);
            }
        }
    }

    /// Closes as `how` says (a hold counts as a close here) and reports.
    fn end(mut self, how: Ending, deadline: Instant, stats: &FuzzStats) {
        match how {
            Ending::Close | Ending::Hold(_) => {}
            Ending::Reset | Ending::HoldReset(_) => {
                let c = self.settle(stats);
                c.sock.reset();
                return;
            }
            Ending::HalfClose => {
                self.sock.set_nonblocking(false);
                self.sock.shutdown_write();
                let limit = (Instant::now() + Duration::from_secs(2))
                    .min(deadline + Duration::from_secs(1));
                while !self.got.closed() {
                    let now = Instant::now();
                    if now >= limit {
                        break;
                    }
                    self.read_once(limit - now, 65536);
                }
            }
        }
        drop(self.settle(stats));
    }

    /// The checks at the end of a connection, and its counts.
    fn settle(mut self, stats: &FuzzStats) -> Conn {
        stats.closed.lock().unwrap().insert(
            self.marker.clone(),
            (
                SystemTime::now(),
                format!("{} [{}]", owner_name(self.owner), self.what),
            ),
        );
        if let Err(e) = self.got.finish(self.owner) {
            self.violation(e);
        }
        if let Some(expects) = self.legal.clone() {
            for (k, (id, exp)) in expects.iter().enumerate() {
                match self.got.done.get(k) {
                    Some(d) => {
                        let res = if d.id != *id {
                            Err(format!(
                                "END_REQUEST of request id {} for request id {id}",
                                d.id
                            ))
                        } else if d.protocol_status != 0 {
                            Err(format!("protocol status {}", d.protocol_status))
                        } else {
                            exp.check(&d.stdout)
                        };
                        match res {
                            Ok(()) => {
                                stats.legal_ok.fetch_add(1, Relaxed);
                            }
                            Err(e) => self.violation(format!("legal request {k}: {e}")),
                        }
                    }
                    None if self.cut => {
                        stats.legal_cut.fetch_add(1, Relaxed);
                    }
                    None => {
                        let why = if self.timed_out {
                            format!("no answer within {LEGAL_WAIT:?}")
                        } else if self.got.eof {
                            "fpmd closed the connection".into()
                        } else if self.got.reset || self.refused {
                            "fpmd reset the connection".into()
                        } else {
                            "no answer".into()
                        };
                        self.violation(format!(
                            "legal request {k} (id {id}, {exp:?}) unanswered: {why}; {} requests answered before",
                            self.got.done.len()
                        ));
                        break;
                    }
                }
            }
            if self.got.gv < self.get_values && !self.cut && self.bad.is_none() {
                self.violation("a legal GET_VALUES was not answered".into());
            }
        }
        stats.records.fetch_add(self.sent.records, Relaxed);
        stats.bytes.fetch_add(self.sent.bytes, Relaxed);
        stats.answer_records.fetch_add(self.got.records, Relaxed);
        stats.answers.fetch_add(self.got.answers, Relaxed);
        if self.got.closed() {
            stats.closes.fetch_add(1, Relaxed);
        }
        if let Some(bad) = self.bad.take() {
            let log = &self.sent.log;
            let msg = format!(
                "{} {} [{}]: {bad}\n  sent {} bytes ({} records), the first {}: {}",
                LISTENERS[self.listener],
                owner_name(self.owner),
                self.what,
                self.sent.bytes,
                self.sent.records,
                log.len().min(512),
                hex(&log[..log.len().min(512)])
            );
            eprintln!("VIOLATION: {msg}");
            stats.violations.lock().unwrap().push(msg);
        }
        self
    }
}

/// A connection kept open between the thread's others.
struct Held {
    conn: Conn,
    drip: Vec<u8>,
    pos: usize,
    chunk: usize,
    every: Duration,
    next: Instant,
    until: Instant,
    ending: Ending,
    half_closed: bool,
    /// What fpmd sends is left unread.
    unread: bool,
}

impl Held {
    fn new(conn: Conn, drip: Vec<u8>, chunk: usize, every: Duration, plan: &Plan) -> Held {
        let ending = plan.ending;
        conn.sock.set_nonblocking(true);
        let now = Instant::now();
        let steps = drip.len().div_ceil(chunk.max(1)) as u32;
        let hold = match ending {
            Ending::Hold(d) | Ending::HoldReset(d) => d,
            _ => Duration::from_millis(200),
        };
        Held {
            conn,
            drip,
            pos: 0,
            chunk: chunk.max(1),
            every,
            next: now,
            until: now + every * steps + hold,
            ending,
            half_closed: false,
            unread: plan.unread,
        }
    }

    /// Drips, reads; true when it is time to end it.
    fn service(&mut self, now: Instant) -> bool {
        if self.pos < self.drip.len() && now >= self.next {
            let end = (self.pos + self.chunk).min(self.drip.len());
            let part = self.drip[self.pos..end].to_vec();
            match self.conn.sock.write(&part) {
                Ok(n) => {
                    self.conn.sent.feed(&part[..n]);
                    self.pos += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => {
                    self.conn.refused = true;
                    self.conn.got.write_failed = true;
                    self.pos = self.drip.len();
                }
            }
            self.next = now + self.every;
        }
        if !self.unread {
            self.conn.drain();
        }
        now >= self.until
    }

    /// Ends it: a half-close first gets one more second to see fpmd close.
    /// Returns the connection back when it is to be held a little longer.
    fn finish(mut self, deadline: Instant, stats: &FuzzStats, at_end: bool) -> Option<Held> {
        let dripped = self.pos >= self.drip.len();
        if !dripped {
            self.conn.cut = true;
        }
        if self.conn.legal.is_some() && dripped && !self.conn.refused {
            // The whole legal request was sent: its answers must come.
            self.conn.sock.set_nonblocking(false);
            self.conn.await_answers(LEGAL_WAIT, deadline);
        }
        match self.ending {
            Ending::HalfClose if !self.half_closed && !at_end => {
                self.conn.sock.shutdown_write();
                self.half_closed = true;
                self.conn.sock.set_nonblocking(true);
                self.until = Instant::now() + Duration::from_secs(1);
                Some(self)
            }
            Ending::Reset | Ending::HoldReset(_) => {
                self.conn.end(Ending::Reset, deadline, stats);
                None
            }
            _ => {
                self.conn.end(Ending::Close, deadline, stats);
                None
            }
        }
    }
}

/// Opens the connection and sends the plan's first steps, up to its first
/// Await or Pause (which stay in the plan for [`complete`]).
fn start(ctx: &Ctx, plan: &mut Plan, owner: u64, stats: &FuzzStats) -> Option<Conn> {
    let mut conn = Conn::open(ctx, plan, owner, stats)?;
    while let Some(Step::Send(..)) = plan.steps.first() {
        let Step::Send(b, p) = plan.steps.remove(0) else {
            unreachable!()
        };
        conn.send(&b, &p, ctx.deadline, stats);
    }
    Some(conn)
}

/// Runs the rest of the plan; a held connection goes to `held`.
/// Fuzzed connections stop reading at `until` at the latest.
fn complete(
    ctx: &Ctx,
    mut conn: Conn,
    mut plan: Plan,
    until: Instant,
    held: &mut Vec<Held>,
    stats: &FuzzStats,
) {
    for step in std::mem::take(&mut plan.steps) {
        if conn.cut {
            // The run ended in the middle of a send: nothing more is owed.
            break;
        }
        match step {
            Step::Send(b, p) => {
                conn.send(&b, &p, ctx.deadline, stats);
            }
            Step::Await(t) => conn.await_answers(t, until.min(ctx.deadline)),
            Step::AwaitSlow {
                timeout,
                chunk,
                gap,
            } => conn.await_paced(timeout, until.min(ctx.deadline), chunk, gap),
            Step::Pause(d) => {
                std::thread::sleep(d.min(ctx.deadline.saturating_duration_since(Instant::now())))
            }
        }
    }
    match plan.ending {
        Ending::Hold(_) | Ending::HoldReset(_) if Instant::now() < ctx.deadline => {
            if plan.unread {
                // One slow reader per thread at a time: each holds a child
                // (up to request_terminate_timeout), the good loops need the others.
                while let Some(i) = held.iter().position(|h| h.unread) {
                    let _ = held.swap_remove(i).finish(ctx.deadline, stats, true);
                }
            }
            held.push(Held::new(conn, Vec::new(), 1, Duration::ZERO, &plan));
        }
        e => conn.end(e, ctx.deadline, stats),
    }
}

/// Runs one plan; slowloris drips and holds go to `held`.
fn run_plan(ctx: &Ctx, mut plan: Plan, owner: u64, held: &mut Vec<Held>, stats: &FuzzStats) {
    if let Some((chunk, every)) = plan.drip {
        let Some(conn) = Conn::open(ctx, &plan, owner, stats) else {
            return;
        };
        let mut bytes = Vec::new();
        for s in &plan.steps {
            if let Step::Send(b, _) = s {
                bytes.extend_from_slice(b);
            }
        }
        stats.drips.fetch_add(1, Relaxed);
        held.push(Held::new(conn, bytes, chunk, every, &plan));
        return;
    }
    if let Some(conn) = start(ctx, &mut plan, owner, stats) {
        complete(ctx, conn, plan, ctx.deadline, held, stats);
    }
}

fn service_held(held: &mut Vec<Held>, deadline: Instant, stats: &FuzzStats) {
    let now = Instant::now();
    let mut i = 0;
    while i < held.len() {
        if held[i].service(now) {
            let h = held.swap_remove(i);
            if let Some(again) = h.finish(deadline, stats, false) {
                held.push(again);
            }
        } else {
            i += 1;
        }
    }
}

pub(super) fn fuzz_thread(ctx: &Ctx, thread: usize, seed: u64, stats: &FuzzStats) {
    let mut rng = Rng::new(seed ^ ((ctx.listener as u64) << 40) ^ ((thread as u64) << 32));
    let mut held: Vec<Held> = Vec::new();
    let mut n = 0u64;
    let mut next_owner = |rng: &mut Rng| {
        n += 1;
        let o = owner(ctx.listener, thread, n);
        (o, new_marker(rng, o))
    };
    while Instant::now() < ctx.deadline {
        service_held(&mut held, ctx.deadline, stats);
        while held.len() > HELD_MAX {
            let _ = held.remove(0).finish(ctx.deadline, stats, true);
        }
        stats.held_peak.fetch_max(held.len() as u64, Relaxed);
        if rng.chance(6) {
            // A burst: connections opened and sent at once, then read in turn.
            stats.bursts.fetch_add(1, Relaxed);
            let mut started = Vec::new();
            for _ in 0..rng.range(4, 16) {
                let (o, marker) = next_owner(&mut rng);
                let mut plan = if rng.chance(35) {
                    legal_plan(&mut rng, ctx, &marker)
                } else {
                    mutated_plan(&mut rng, ctx, &marker, o)
                };
                plan.drip = None;
                plan.what = format!("{marker} burst: {}", plan.what);
                plan.marker = marker;
                if let Some(c) = start(ctx, &mut plan, o, stats) {
                    started.push((c, plan));
                }
            }
            // Their answers are awaited together, for a second at most.
            let until = Instant::now() + Duration::from_secs(1);
            for (c, plan) in started {
                complete(ctx, c, plan, until, &mut held, stats);
            }
            continue;
        }
        let (o, marker) = next_owner(&mut rng);
        let mut plan = match rng.below(100) {
            0..=22 => legal_plan(&mut rng, ctx, &marker),
            23..=48 => mutated_plan(&mut rng, ctx, &marker, o),
            49..=56 => lies_plan(&mut rng, ctx, &marker),
            57..=70 => inflight_plan(&mut rng, ctx, &marker),
            71..=75 => slow_reader_plan(&mut rng, ctx, &marker),
            76..=83 => management_plan(&mut rng),
            84..=90 => noise_plan(&mut rng),
            _ => idle_plan(&mut rng, ctx, &marker),
        };
        plan.what = format!("{marker} {}", plan.what);
        plan.marker = marker;
        run_plan(ctx, plan, o, &mut held, stats);
    }
    for h in held {
        let _ = h.finish(ctx.deadline, stats, true);
    }
}
