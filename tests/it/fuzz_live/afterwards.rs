//! Afterwards: the figures of the run (per listener, and the kinds of
//! lines fpmd logged), and what is checked once it is over: children kept
//! for clients that had left, zombies, each pool still running its
//! requests at once.

use super::good::{GoodStats, GOOD_KINDS};
use super::run::FuzzStats;
use super::LISTENERS;
use crate::harness::http::try_get_with;
use crate::harness::{log_time, procs, Fpmd, Nginx};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Prints what the fuzzers and the good loops of each listener did, and
/// the 25 most frequent kinds of lines of fpmd's `log`.
pub(super) fn report(fuzz: &[FuzzStats], good: &[GoodStats], log: &str) {
    for (l, name) in LISTENERS.iter().enumerate() {
        let f = &fuzz[l];
        let g = |a: &AtomicU64| a.load(Relaxed);
        eprintln!(
            "{name}: {} fuzz connections ({} legal, {} bursts, {} slowloris drips, up to {} held open by a thread), \
             {} records / {} bytes sent; {} answers ({} records) received; fpmd closed {} connections; \
             legal requests answered right: {} ({} cut by the end of the run); connect errors {}, writes timed out {}",
            g(&f.conns), g(&f.legal_conns), g(&f.bursts), g(&f.drips), g(&f.held_peak),
            g(&f.records), g(&f.bytes), g(&f.answers), g(&f.answer_records), g(&f.closes),
            g(&f.legal_ok), g(&f.legal_cut), g(&f.connect_errors), g(&f.write_timeouts),
        );
        let gs = &good[l];
        let per_kind: Vec<String> = (0..3)
            .map(|k| {
                let n = g(&gs.done[k]);
                format!(
                    "{} {n} (mean {:.1} ms)",
                    GOOD_KINDS[k],
                    g(&gs.micros[k]) as f64 / 1000.0 / n.max(1) as f64
                )
            })
            .collect();
        eprintln!(
            "{name}: good requests through nginx: {}; failures {}",
            per_kind.join(", "),
            g(&gs.failed)
        );
    }
    eprintln!("fpmd's log: {} lines; by kind:", log.lines().count());
    for (n, k) in log_kinds(log).into_iter().take(25) {
        eprintln!("  {n:6}  {k}");
    }
}

/// A script that needs no more time once its client has gone (it reads
/// end of input, its output goes nowhere) still ran this long after the
/// client closed its connection: a child kept for nobody.
const HELD_AFTER_CLOSE: Duration = Duration::from_secs(3);

/// fpmd's request_terminate_timeout terminations of requests whose client
/// (a fuzz connection, known by the marker in the request's URI) had
/// closed its connection more than [`HELD_AFTER_CLOSE`] before: without
/// the timeout, the child would have stayed on it for good. sleep.php is
/// left out (it sleeps whatever its client does).
pub(super) fn held_for_gone_clients(log: &str, fuzz: &[FuzzStats]) -> Vec<String> {
    let mut out = Vec::new();
    for line in log
        .lines()
        .filter(|l| l.contains("over request_terminate_timeout") && !l.contains("/sleep.php"))
    {
        let Some(at) = log_time(line) else {
            continue;
        };
        let mut rest = line;
        while let Some(i) = rest.find("FZMK") {
            let m = rest[i..].get(..20).unwrap_or("");
            rest = &rest[i + 4..];
            for f in fuzz {
                if let Some((closed, who)) = f.closed.lock().unwrap().get(m) {
                    if let Ok(after) = at.duration_since(*closed) {
                        if after > HELD_AFTER_CLOSE {
                            out.push(format!(
                                "{who}: a child still ran this connection's request {:.1} s after \
                                 the connection was closed, until request_terminate_timeout ended it \
                                 (without it the child would be lost): {line}",
                                after.as_secs_f64()
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

pub(super) fn zombies(fpmd: &Fpmd) -> Vec<procs::ProcInfo> {
    fpmd.children().into_iter().filter(|p| !p.alive()).collect()
}

/// `n` barrier.php requests at once through `nginx`: the pool runs `n` at the same time.
pub(super) fn n_concurrent(nginx: &Nginx, n: usize, group: &str) {
    let url = nginx.url(&format!("/barrier.php?group={group}&n={n}&name="));
    let out = crate::harness::http::concurrent(n, 1, move |a, t, _| {
        try_get_with(a, &format!("{url}{t}"))
    });
    crate::harness::http::assert_all_200(&out);
    for o in &out {
        assert_eq!(
            o.text(),
            format!("met {}", o.thread),
            "{group}: the pool did not run {n} requests at once"
        );
    }
}

/// The log's lines by kind (digits and quoted text folded), most frequent first.
fn log_kinds(log: &str) -> Vec<(usize, String)> {
    let mut kinds: HashMap<String, usize> = HashMap::new();
    for l in log.lines().filter(|l| !l.trim().is_empty()) {
        let mut k = String::new();
        let mut quoted = false;
        let mut last_digit = false;
        for c in l.chars() {
            if c == '"' {
                quoted = !quoted;
                if quoted {
                    k.push_str("\"…\"");
                }
                continue;
            }
            if quoted {
                continue;
            }
            if c.is_ascii_digit() {
                if !last_digit {
                    k.push('N');
                }
                last_digit = true;
                continue;
            }
            last_digit = false;
            k.push(c);
        }
        let k: String = k.chars().take(160).collect();
        *kinds.entry(k).or_default() += 1;
    }
    let mut v: Vec<(usize, String)> = kinds.into_iter().map(|(k, n)| (n, k)).collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    v
}
