//! Requests in flight across a reload: a 10 s request keeps its old
//! child, its full sleep and body while new requests go to the new
//! generation (item 2, C01); a child still busy `graceful_timeout` after
//! the reload is killed, and says so (item 11).

use super::helpers::*;
use crate::harness::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Item 2: a 10 s request across a reload
// ---------------------------------------------------------------------------

#[test]
fn request_in_flight_across_a_reload_gets_its_full_sleep_and_body() {
    let cfg = |limit: &str| FpmdConfig::new().pool(pool("www", limit));
    let mut s = Stack::start_with(cfg("64M"), NginxOpts::default());
    let old: BTreeSet<i32> = s.fpmd.wait_workers(4, LONGER).into_iter().collect();
    let long = get_async(s.url("/usleep.php?ms=10000&kb=256&mark=long"));
    wait_for(LONGER, "the 10 s request running in PHP", || {
        s.dir.mark("long").is_some()
    });
    let victim = s.dir.marked_pid("long");
    s.fpmd.rewrite(&cfg("96M"));
    let line = s.fpmd.reload_ok();
    eprintln!("{line}");
    assert!(!long.is_finished(), "the long request ended at the reload");
    assert_eq!(memory_limit(&s.nginx), "96M");
    // New requests go to the new generation while the old child works on.
    for i in 0..8 {
        let pid = get_pid(&s.nginx);
        assert!(
            !old.contains(&pid),
            "request {i} after the reload went to child {pid} of the old generation {old:?}"
        );
    }
    assert!(
        procs::alive(victim),
        "the busy child {victim} is gone before its request ended"
    );
    let (r, took) = long.join().unwrap();
    let (pid, slept) = check_usleep(&r, 10_000, 256, "the request across the reload");
    eprintln!("the long request: 200 after {took:?}, slept {slept} µs in child {pid}");
    assert_eq!(pid, victim);
    wait_for(LONGER, "the old child to exit after its request", || {
        !procs::alive(victim)
    });
    wait_only_generation(&s.fpmd, "96M", "after the long request");
    let now = s.fpmd.wait_workers(4, LONGER);
    assert!(now.iter().all(|p| !old.contains(p)), "{now:?} vs {old:?}");
}

// ---------------------------------------------------------------------------
// Item 11 (and the last expectation of C01): graceful_timeout
// ---------------------------------------------------------------------------

#[test]
fn graceful_timeout_kills_the_child_still_busy_2s_after_the_reload() {
    let cfg =
        |limit: &str| FpmdConfig::new().pool(pool("www", limit).line(r#"graceful_timeout = "2s""#));
    let mut s = Stack::start_with(cfg("64M"), NginxOpts::default());
    s.fpmd.wait_workers(4, LONGER);
    let load = Load::start(4, s.url("/sleep.php?ms=50"), Duration::ZERO);
    let t0 = load.started;
    let uri = "/usleep.php?ms=30000&kb=1&mark=long";
    let long = get_async(s.url(uri));
    wait_for(LONGER, "the 30 s request running", || {
        s.dir.mark("long").is_some()
    });
    let victim = s.dir.marked_pid("long");
    s.fpmd.rewrite(&cfg("96M"));
    let mark = s.fpmd.log_len();
    s.fpmd.reload_ok();
    let done = Instant::now();
    wait_for(
        LONGER,
        "the child busy past graceful_timeout to be killed",
        || !procs::alive(victim),
    );
    let gone_after = done.elapsed();
    let (r, took) = long.join().unwrap();
    eprintln!(
        "child {victim} gone {gone_after:?} after the reload; its request: {:?} after {took:?}",
        r.as_ref()
            .map(|r| (r.status, r.text().chars().take(80).collect::<String>()))
    );
    if let Ok(r) = &r {
        assert!(
            !r.text().contains("\nend\n"),
            "the killed request completed: {}",
            r.status
        );
    }
    let script = s.dir.docroot().join("usleep.php").display().to_string();
    let lines = s.fpmd.log_lines_since(mark);
    let killed: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("graceful_timeout") && l.contains(&victim.to_string()))
        .collect();
    assert_eq!(
        killed.len(),
        1,
        "one log line about the kill of {victim} (graceful_timeout): {lines:#?}"
    );
    let k = killed[0];
    assert!(
        k.contains(&script) && k.contains(uri),
        "the line does not name {script} and {uri}: {k}"
    );
    let reloading = lines
        .iter()
        .find(|l| l.contains("reloading "))
        .expect("reloading line");
    let reload_done = lines
        .iter()
        .find(|l| l.contains("reload done"))
        .expect("reload done line");
    let (from_start, from_done) = (
        secs_between(stamp_of(reloading), stamp_of(k)),
        secs_between(stamp_of(reload_done), stamp_of(k)),
    );
    eprintln!("kill logged {from_start:.3} s after the reload began, {from_done:.3} s after it was done: {k}");
    assert!(
        from_start >= 2.0 - SLACK.as_secs_f64() && from_done <= 2.0 + SLACK.as_secs_f64(),
        "killed {from_start:.3} s after the reload began / {from_done:.3} s after it was done (bar: 2 s)"
    );
    run_for(&mut s.fpmd, Duration::from_millis(500));
    let samples = load.stop();
    assert_no_failure(&samples, t0, "the other requests");
    s.fpmd.wait_workers(4, LONGER);
    wait_only_generation(&s.fpmd, "96M", "after graceful_timeout");
}

// ---------------------------------------------------------------------------
// C01: reload under load, with a long request
// ---------------------------------------------------------------------------

/// C01: static 4; a 10 s request; at t = 1 s a reload; `sleep.php?ms=10`
/// every 50 ms for 15 s. The long request returns 200 after ≥ 10 s with its
/// body intact, no 502/504 (no failure at all), requests started 1 s after
/// the reload go to new-generation children, their p99 rises by less than
/// 500 ms, and the old children are gone once idle. (Children busy past
/// `graceful_timeout`: see the graceful_timeout test.)
#[test]
fn c01_reload_keeps_the_long_request_and_moves_new_requests_to_new_children() {
    let cfg = |limit: &str| FpmdConfig::new().pool(pool("www", limit));
    let mut s = Stack::start_with(cfg("64M"), NginxOpts::default());
    let old: BTreeSet<i32> = s.fpmd.wait_workers(4, LONGER).into_iter().collect();
    let t0 = Instant::now();
    let long = get_async(s.url("/usleep.php?ms=10000&kb=64&mark=long"));
    let short = Load::start(1, s.url("/sleep.php?ms=10"), Duration::from_millis(50));
    wait_for(LONGER, "the long request running", || {
        s.dir.mark("long").is_some()
    });
    let victim = s.dir.marked_pid("long");
    run_for(
        &mut s.fpmd,
        Duration::from_secs(1).saturating_sub(t0.elapsed()),
    );
    s.fpmd.rewrite(&cfg("96M"));
    let t_signal = Instant::now();
    let line = s.fpmd.reload_ok();
    eprintln!("reload done after {:?}: {line}", t_signal.elapsed());
    let idle_old: Vec<i32> = old.iter().copied().filter(|p| *p != victim).collect();
    let idle_gone = wait_until(Duration::from_secs(5), || {
        idle_old.iter().all(|p| !procs::alive(*p))
    });
    eprintln!(
        "old idle children {idle_old:?} gone within 5 s of the reload: {idle_gone} (the busy one {victim} alive: {})",
        procs::alive(victim)
    );
    let (r, took) = long.join().unwrap();
    let (pid, slept) = check_usleep(&r, 10_000, 64, "the long request");
    eprintln!("long request: 200 after {took:?} (slept {slept} µs in {pid})");
    assert!(took >= Duration::from_secs(10));
    assert_eq!(pid, victim);
    run_for(
        &mut s.fpmd,
        Duration::from_secs(15).saturating_sub(t0.elapsed()),
    );
    let samples = short.stop();
    let statuses_5xx = samples
        .iter()
        .filter(|x| x.status == 502 || x.status == 504)
        .count();
    let before: Vec<&Sample> = samples.iter().filter(|x| x.start < t_signal).collect();
    let after: Vec<&Sample> = samples.iter().filter(|x| x.start >= t_signal).collect();
    let stray: Vec<String> = after
        .iter()
        .filter(|x| x.start >= t_signal + Duration::from_secs(1))
        .filter(|x| x.pid.is_some_and(|p| old.contains(&p)))
        .map(|x| {
            format!(
                "{:.3} s after the reload: pid {:?}",
                (x.start - t_signal).as_secs_f64(),
                x.pid
            )
        })
        .collect();
    let (p99_before, p99_after) = (
        quantile(before.iter().copied(), 0.99),
        quantile(after.iter().copied(), 0.99),
    );
    eprintln!(
        "{} short requests ({} 502/504): before the reload {} (p99 {} ms), after {} (p99 {} ms)",
        samples.len(),
        statuses_5xx,
        before.len(),
        ms(p99_before),
        after.len(),
        ms(p99_after)
    );
    assert_no_failure(&samples, t0, "the short requests");
    assert!(
        stray.is_empty(),
        "requests served by old children more than 1 s after the reload: {stray:#?}"
    );
    assert!(
        p99_after <= p99_before + Duration::from_millis(500) + SLACK,
        "p99 rose from {p99_before:?} to {p99_after:?} (bar: +500 ms)"
    );
    wait_for(LONGER, "every old child gone", || {
        old.iter().all(|p| !procs::alive(*p))
    });
    wait_only_generation(&s.fpmd, "96M", "after the long request");
    s.fpmd.wait_workers(4, LONGER);
}
