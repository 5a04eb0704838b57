//! Plans: what one fuzz connection does ([`Plan`]), drawn from the seed.
//! The bytes it sends and at what pace ([`Pacing`]), what it waits for,
//! how it ends ([`Ending`]); one function per kind of connection: legal
//! FastCGI sent oddly, CONTENT_LENGTH lies, mutated requests, something
//! sent while a request runs, slow readers, management records, noise,
//! idle connections.

use super::checks::Expect;
use super::mutators::{mutate_bytes, mutate_params, mutate_records};
use super::requests::{
    begin_rec, encode_pairs, encode_recs, forged_request, get_values_body, owned, padding,
    stream_recs, valid_request, Rec,
};
use super::rng::{new_marker, Rng};
use super::run::LEGAL_WAIT;
use super::Ctx;
use crate::harness::fcgi::{self, *};
use crate::harness::md5_hex;
use std::time::Duration;

#[derive(Clone)]
pub(super) enum Pacing {
    Whole,
    /// Writes of these sizes, one after the other.
    Chunks(Vec<usize>),
    /// The first `first` bytes one by one, `gap` apart; the rest at once.
    Bytes {
        first: usize,
        gap: Duration,
    },
    /// `chunk` bytes every `every`, for at most `most`; the rest at once.
    Slow {
        chunk: usize,
        every: Duration,
        most: Duration,
    },
}

impl std::fmt::Debug for Pacing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pacing::Whole => write!(f, "at once"),
            Pacing::Chunks(v) => write!(
                f,
                "in {} writes of up to {} bytes",
                v.len() + 1,
                v.iter().max().unwrap_or(&0)
            ),
            Pacing::Bytes { first, gap } => write!(f, "{first} bytes one by one {gap:?} apart"),
            Pacing::Slow { chunk, every, most } => {
                write!(f, "{chunk} bytes every {every:?} for {most:?}")
            }
        }
    }
}

fn pacing(rng: &mut Rng, len: usize) -> Pacing {
    match rng.below(100) {
        0..=54 => Pacing::Whole,
        55..=79 => {
            let max = rng.range(1, 3000);
            let mut v = Vec::new();
            let mut left = len;
            while left > 0 && v.len() < 2000 {
                let n = rng.range(1, max).min(left);
                v.push(n);
                left -= n;
            }
            Pacing::Chunks(v)
        }
        80..=94 => Pacing::Bytes {
            first: len.min(rng.range(50, 800)),
            gap: Duration::from_micros(rng.range(20, 500) as u64),
        },
        _ => Pacing::Slow {
            chunk: rng.range(1, 64),
            every: rng.millis(20, 200),
            most: rng.millis(200, 1000),
        },
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Ending {
    /// close(2), whatever is unread.
    Close,
    /// A reset (TCP: SO_LINGER 0).
    Reset,
    /// shutdown(SHUT_WR), then read until fpmd closes (or 2 s).
    HalfClose,
    /// Kept open this long (among the thread's held connections), then closed.
    Hold(Duration),
    /// The same, then reset.
    HoldReset(Duration),
}

fn ending(rng: &mut Rng) -> Ending {
    match rng.below(100) {
        0..=34 => Ending::Close,
        35..=54 => Ending::Reset,
        55..=74 => Ending::HalfClose,
        75..=89 => Ending::Hold(rng.millis(300, 6000)),
        _ => Ending::HoldReset(rng.millis(300, 6000)),
    }
}

pub(super) enum Step {
    Send(Vec<u8>, Pacing),
    /// Read answers until every request sent has ended, fpmd closes, or this long.
    Await(Duration),
    /// Nothing for this long (the request runs meanwhile).
    Pause(Duration),
    /// Like Await, reading at most `chunk` bytes every `gap`.
    AwaitSlow {
        timeout: Duration,
        chunk: usize,
        gap: Duration,
    },
}

pub(super) struct Plan {
    /// The connection's marker (in the query string of its requests).
    pub(super) marker: String,
    pub(super) what: String,
    pub(super) steps: Vec<Step>,
    /// Only legal FastCGI: these requests (id, answer) must be answered right.
    pub(super) legal: Option<Vec<(u16, Expect)>>,
    /// Legal GET_VALUES records, each owed a GET_VALUES_RESULT.
    pub(super) get_values: u32,
    /// Sent from the held set, `chunk` bytes every `every` (slowloris).
    pub(super) drip: Option<(usize, Duration)>,
    /// Held without reading what fpmd sends.
    pub(super) unread: bool,
    pub(super) ending: Ending,
}

impl Plan {
    fn bytes(&self) -> usize {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Send(b, _) => b.len(),
                _ => 0,
            })
            .sum()
    }
}

/// A slowloris pace for `len` bytes: a few bytes every 30 to 300 ms, all
/// of them within 8 s (fpmd allows 30 s for a head).
fn drip_pace(rng: &mut Rng, len: usize) -> (usize, Duration) {
    let every = rng.millis(30, 300);
    let writes = (8000 / every.as_millis() as usize).max(1);
    (rng.range(1, 40).max(len.div_ceil(writes)), every)
}

fn await_short(rng: &mut Rng) -> Duration {
    Duration::from_millis(rng.pick(&[20, 100, 300, 1000]))
}

/// Legal FastCGI only, sent oddly: its answers must be right.
pub(super) fn legal_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let n = if rng.chance(30) { rng.range(2, 4) } else { 1 };
    let mut steps = Vec::new();
    let mut expects = Vec::new();
    let mut get_values = 0;
    let mut what = vec![format!("legal, {n} requests")];
    if rng.chance(20) {
        let c = get_values_body(rng, false);
        let pad = padding(rng, c.len());
        let b = encode_recs(&[Rec::new(GET_VALUES, 0, c, pad)]);
        steps.push(Step::Send(b, Pacing::Whole));
        get_values = 1;
        what.push("GET_VALUES first".into());
    }
    for k in 0..n {
        let id = if rng.chance(50) {
            1
        } else {
            rng.range(1, 65535) as u16
        };
        let keep = k + 1 < n || rng.chance(50);
        let (params, body, expect) = valid_request(rng, &ctx.docroot, marker, true);
        let long = rng.chance(10);
        let pairs = encode_pairs(rng, &params, long);
        let mut recs = vec![begin_rec(rng, id, if keep { KEEP_CONN } else { 0 })];
        recs.extend(stream_recs(rng, PARAMS, id, &pairs));
        recs.extend(stream_recs(rng, STDIN, id, &body));
        let bytes = encode_recs(&recs);
        let p = pacing(rng, bytes.len());
        what.push(format!(
            "id {id} {expect:?}{}, {} records, {p:?}",
            if long { " (4-byte lengths)" } else { "" },
            recs.len()
        ));
        steps.push(Step::Send(bytes, p));
        if keep && rng.chance(10) {
            // Management records may come at any time, a request in flight
            // too (without FCGI_KEEP_CONN fpmd closes after END_REQUEST
            // and owes nothing more).
            let c = get_values_body(rng, false);
            steps.push(Step::Send(record(GET_VALUES, 0, &c), Pacing::Whole));
            get_values += 1;
            what.push("GET_VALUES in flight".into());
        }
        if matches!(expect, Expect::Big(_)) && rng.chance(50) {
            let (chunk, gap) = (rng.range(16 << 10, 64 << 10), rng.millis(1, 10));
            what.push(format!("read {chunk} bytes every {gap:?}"));
            steps.push(Step::AwaitSlow {
                timeout: LEGAL_WAIT,
                chunk,
                gap,
            });
        } else {
            steps.push(Step::Await(LEGAL_WAIT));
        }
        expects.push((id, expect));
    }
    let mut plan = Plan {
        marker: String::new(),
        what: String::new(),
        steps,
        legal: Some(expects),
        get_values,
        drip: None,
        unread: false,
        ending: ending(rng),
    };
    if n == 1 && plan.bytes() < 6000 && rng.chance(12) {
        plan.drip = Some(drip_pace(rng, plan.bytes()));
    }
    what.push(format!("drip {:?}, then {:?}", plan.drip, plan.ending));
    plan.what = what.join("; ");
    plan
}

/// Well-formed FastCGI whose CONTENT_LENGTH lies (too big, too small,
/// negative, garbage): the request reaches PHP.
pub(super) fn lies_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let mut notes = Vec::new();
    let id = if rng.chance(60) {
        1
    } else {
        rng.range(1, 65535) as u16
    };
    let flags = if rng.chance(70) { KEEP_CONN } else { 0 };
    let (mut params, body, expect) = if rng.chance(70) {
        // Mostly a POST to body.php, which reads what the lie announces.
        let n = rng.below(20_000);
        let body = rng.bytes(n);
        let p = fcgi::params_for(
            &ctx.docroot,
            "body.php",
            &format!("name={marker}"),
            "POST",
            n,
        );
        let md5 = md5_hex(&body);
        (owned(p), body, Expect::Body(n, md5))
    } else {
        valid_request(rng, &ctx.docroot, marker, false)
    };
    let tail = mutate_params(rng, &mut params, &ctx.docroot, body.len(), true, &mut notes);
    let mut pairs = encode_pairs(rng, &params, false);
    pairs.extend(tail);
    let mut recs = vec![begin_rec(rng, id, flags)];
    recs.extend(stream_recs(rng, PARAMS, id, &pairs));
    recs.extend(stream_recs(rng, STDIN, id, &body));
    if rng.chance(20) {
        notes.push("no empty STDIN record".into());
        recs.pop();
    }
    let bytes = encode_recs(&recs);
    let p = pacing(rng, bytes.len());
    let t = await_short(rng);
    let e = ending(rng);
    Plan {
        marker: String::new(),
        what: format!(
            "lies: id {id} flags {flags:#x} {expect:?}, {}, {p:?}, then {e:?}",
            notes.join(", ")
        ),
        steps: vec![Step::Send(bytes, p), Step::Await(t)],
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: e,
    }
}

/// Mutated versions of valid requests.
pub(super) fn mutated_plan(rng: &mut Rng, ctx: &Ctx, marker: &str, owner: u64) -> Plan {
    let n = if rng.chance(25) { rng.range(2, 3) } else { 1 };
    let mut steps = Vec::new();
    let mut what = vec![format!("mutated, {n} requests")];
    for _ in 0..n {
        let mut notes = Vec::new();
        let any = rng.next();
        let id = rng.pick(&[1, 1, 1, 2, any as u16]);
        let flags = rng.pick(&[0, KEEP_CONN, KEEP_CONN, (any >> 16) as u8]);
        let (mut params, body, expect) = valid_request(rng, &ctx.docroot, marker, false);
        notes.push(format!("id {id} flags {flags:#x} {expect:?}"));
        let mut tail = Vec::new();
        if rng.chance(50) {
            tail = mutate_params(
                rng,
                &mut params,
                &ctx.docroot,
                body.len(),
                false,
                &mut notes,
            );
        }
        let long = rng.chance(10);
        let mut pairs = encode_pairs(rng, &params, long);
        pairs.extend(tail);
        let mut recs = vec![begin_rec(rng, id, flags)];
        recs.extend(stream_recs(rng, PARAMS, id, &pairs));
        recs.extend(stream_recs(rng, STDIN, id, &body));
        if rng.chance(15) {
            notes.push("no empty STDIN record".into());
            recs.pop();
        }
        if rng.chance(75) {
            let hidden = forged_request(&ctx.docroot, &new_marker(rng, owner));
            mutate_records(rng, &mut recs, id, &hidden, &mut notes);
        }
        let mut bytes = encode_recs(&recs);
        if rng.chance(35) {
            mutate_bytes(rng, &mut bytes, &mut notes);
        }
        let p = pacing(rng, bytes.len());
        notes.push(format!("{p:?}"));
        steps.push(Step::Send(bytes, p));
        if rng.chance(70) {
            steps.push(Step::Await(await_short(rng)));
        }
        what.push(notes.join(", "));
    }
    let mut plan = Plan {
        marker: String::new(),
        what: String::new(),
        steps,
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: ending(rng),
    };
    if plan.bytes() < 8000 && rng.chance(10) {
        plan.drip = Some(drip_pace(rng, plan.bytes()));
    }
    what.push(format!("drip {:?}, then {:?}", plan.drip, plan.ending));
    plan.what = what.join("; ");
    plan
}

/// The first record boundary of the records `b` at or after `at`.
fn record_boundary(b: &[u8], at: usize) -> usize {
    let mut i = 0;
    while i < at && i + 8 <= b.len() {
        i += 8 + u16::from_be_bytes([b[i + 4], b[i + 5]]) as usize + b[i + 6] as usize;
    }
    i.min(b.len())
}

/// A valid request, and while it runs (or its body streams to the child)
/// something else: an ABORT_REQUEST, management records, a second
/// BEGIN_REQUEST, records of the finished request, noise, or nothing but
/// the end of the connection.
pub(super) fn inflight_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let id = if rng.chance(60) {
        1
    } else {
        rng.range(1, 65535) as u16
    };
    let flags = if rng.chance(70) { KEEP_CONN } else { 0 };
    let q = format!("name={marker}");
    let (params, body, script) = match rng.below(4) {
        0 => {
            let ms = rng.below(300);
            let p = fcgi::params_for(&ctx.docroot, "sleep.php", &format!("ms={ms}&{q}"), "GET", 0);
            (p, Vec::new(), format!("sleep.php?ms={ms}"))
        }
        1 => {
            let p = fcgi::params_for(&ctx.docroot, "hello.php", &q, "GET", 0);
            (p, Vec::new(), "hello.php".into())
        }
        _ => {
            let n = rng.range(1, 600_000);
            let p = fcgi::params_for(&ctx.docroot, "body.php", &q, "POST", n);
            (p, rng.bytes(n), format!("body.php with {n} bytes"))
        }
    };
    let mut head = encode_recs(&[begin_rec(rng, id, flags)]);
    head.extend(encode_recs(&stream_recs(
        rng,
        PARAMS,
        id,
        &encode_params(&params),
    )));
    let stdin = encode_recs(&stream_recs(rng, STDIN, id, &body));
    // The tail goes after the whole request, or in the middle of its body
    // (mostly between two records, else inside one).
    let cut = if body.len() > 300_000 && rng.chance(50) {
        let mut at = rng.range(270_000, stdin.len() - 1);
        if rng.chance(80) {
            at = record_boundary(&stdin, at);
        }
        at
    } else {
        stdin.len()
    };
    let (tail_what, tail): (&str, Vec<u8>) = match rng.below(10) {
        0 => ("ABORT_REQUEST", record(ABORT_REQUEST, id, &[])),
        1 => (
            "small GET_VALUES",
            record(GET_VALUES, 0, &get_values_body(rng, false)),
        ),
        2 => (
            "huge GET_VALUES",
            record(GET_VALUES, 0, &get_values_body(rng, true)),
        ),
        3 => {
            let other = if rng.chance(50) {
                id
            } else {
                id.wrapping_add(1)
            };
            let p = fcgi::params_for(&ctx.docroot, "hello.php", &q, "GET", 0);
            ("a second request", request(other, KEEP_CONN, &p, b""))
        }
        4 => {
            let t = rng.range(12, 255) as u8;
            ("unknown type", record(t, 0, &[0; 8]))
        }
        5 => {
            let n = rng.range(1, 500);
            ("noise", rng.bytes(n))
        }
        6 => {
            let n = rng.range(0, 100);
            ("more STDIN", record(STDIN, id, &rng.bytes(n)))
        }
        7 => ("PARAMS", record(PARAMS, id, &name_value(b"X", b"y"))),
        _ => ("nothing", Vec::new()),
    };
    let pause = match rng.below(3) {
        0 => Duration::ZERO,
        1 => rng.millis(1, 50),
        _ => rng.millis(50, 400),
    };
    let mut first = head;
    first.extend_from_slice(&stdin[..cut]);
    let mut steps = vec![Step::Send(first, Pacing::Whole), Step::Pause(pause)];
    steps.push(Step::Send(tail, Pacing::Whole));
    if cut < stdin.len() && rng.chance(50) {
        steps.push(Step::Send(stdin[cut..].to_vec(), Pacing::Whole));
    }
    if rng.chance(80) {
        steps.push(Step::Await(await_short(rng)));
    }
    let e = ending(rng);
    Plan {
        marker: String::new(),
        what: format!(
            "in flight: id {id} flags {flags:#x} {script}, {tail_what} after {pause:?}{}, then {e:?}",
            if cut < stdin.len() {
                format!(" and {cut} bytes of STDIN")
            } else {
                String::new()
            }
        ),
        steps,
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: e,
    }
}

/// A slow reader: a big response, read a little or not at all, the
/// connection kept open unread for a while, then closed or reset.
pub(super) fn slow_reader_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let mb = rng.range(1, 8);
    let id = if rng.chance(50) {
        1
    } else {
        rng.range(1, 65535) as u16
    };
    let flags = if rng.chance(70) { KEEP_CONN } else { 0 };
    let p = fcgi::params_for(
        &ctx.docroot,
        "big.php",
        &format!("mb={mb}&name={marker}"),
        "GET",
        0,
    );
    let mut steps = vec![Step::Send(request(id, flags, &p, b""), Pacing::Whole)];
    let read = rng.pick(&[0, 1, 8192, 65536, 300_000]);
    if read > 0 {
        steps.push(Step::AwaitSlow {
            timeout: Duration::from_millis(300),
            chunk: read.min(65536),
            gap: Duration::ZERO,
        });
    }
    let hold = rng.millis(200, 3000);
    let ending = if rng.chance(50) {
        Ending::Hold(hold)
    } else {
        Ending::HoldReset(hold)
    };
    Plan {
        marker: String::new(),
        what: format!("slow reader: id {id} flags {flags:#x} big.php?mb={mb}, {read} bytes read, then {ending:?} unread"),
        steps,
        legal: None,
        get_values: 0,
        drip: None,
        unread: true,
        ending,
    }
}

/// Management records: GET_VALUES small and huge, floods of them, unknown types.
pub(super) fn management_plan(rng: &mut Rng) -> Plan {
    let (what, bytes) = match rng.below(4) {
        0 => {
            let c = get_values_body(rng, false);
            ("small GET_VALUES", record(GET_VALUES, 0, &c))
        }
        1 => {
            let c = get_values_body(rng, true);
            ("huge GET_VALUES", record(GET_VALUES, 0, &c))
        }
        2 => {
            let mut b = Vec::new();
            let c = get_values_body(rng, false);
            for _ in 0..rng.range(100, 3000) {
                b.extend(record(GET_VALUES, 0, &c));
            }
            ("a flood of GET_VALUES", b)
        }
        _ => {
            let mut b = Vec::new();
            for _ in 0..rng.range(1, 50) {
                let any = rng.next() as u8;
                let t = rng.pick(&[0u8, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, any]);
                let n = rng.below(40);
                b.extend(record(t, 0, &rng.bytes(n)));
            }
            ("records of id 0 of any type", b)
        }
    };
    let p = pacing(rng, bytes.len());
    let t = await_short(rng);
    let e = ending(rng);
    Plan {
        marker: String::new(),
        what: format!("management: {what}, {p:?}, then {e:?}"),
        steps: vec![Step::Send(bytes, p), Step::Await(t)],
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: e,
    }
}

/// Random bytes, some after a valid BEGIN_REQUEST.
pub(super) fn noise_plan(rng: &mut Rng) -> Plan {
    let mut b = if rng.chance(50) {
        begin_request(1, KEEP_CONN)
    } else {
        Vec::new()
    };
    let n = rng.range(1, 8000);
    b.extend(rng.bytes(n));
    let p = pacing(rng, b.len());
    let t = await_short(rng);
    let e = ending(rng);
    Plan {
        marker: String::new(),
        what: format!("noise ({} bytes), {p:?}, then {e:?}", b.len()),
        steps: vec![Step::Send(b, p), Step::Await(t)],
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: e,
    }
}

/// A connection kept open with nothing or the start of a request.
pub(super) fn idle_plan(rng: &mut Rng, ctx: &Ctx, marker: &str) -> Plan {
    let (params, _, _) = valid_request(rng, &ctx.docroot, marker, false);
    let mut whole = begin_request(1, KEEP_CONN);
    whole.extend(record(PARAMS, 1, &encode_pairs(rng, &params, false)));
    let cut = match rng.below(4) {
        0 => 0,
        1 => rng.range(1, 7),
        2 => 16,
        _ => rng.range(17, whole.len()),
    };
    whole.truncate(cut);
    let hold = rng.millis(500, 8000);
    Plan {
        marker: String::new(),
        what: format!("idle after {cut} bytes, held {hold:?}"),
        steps: vec![Step::Send(whole, Pacing::Whole)],
        legal: None,
        get_values: 0,
        drip: None,
        unread: false,
        ending: Ending::Hold(hold),
    }
}
