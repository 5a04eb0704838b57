//! Issue 4, items 1 to 3, and issue 23: `pm.mode = "dynamic"` and
//! `"ondemand"` as php-fpm's. Scale-up is driven by queued requests (no
//! tick), scale-down retires the least recently used idle children, and
//! the processes themselves come and go under both `pm.spawn` values:
//! under `"prefork"` a php-cgi parent forks each child on fpmd's order,
//! and an idle ondemand pool keeps that parent, with no child, for
//! `warm_timeout` while memory allows (`warm_min_available`).

use crate::harness::http::{assert_all_200, concurrent, get, try_get_with};
use crate::harness::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Every php-cgi process of the stack (the pre-fork parent included).
fn php_processes(s: &Stack) -> usize {
    s.fpmd.children().iter().filter(|p| p.alive()).count()
}

#[test]
fn dynamic_spawns_at_once_for_queued_requests() {
    let s = Stack::start(Pool::www().max_children(32).lines(&[
        "pm.mode = \"dynamic\"",
        "pm.start_servers = 2",
        "pm.min_spare_servers = 1",
        "pm.max_spare_servers = 4",
    ]));
    // One request on a started pool: the time a child takes to answer.
    let t = Instant::now();
    assert_eq!(get(&s.url("/pid.php")).status, 200);
    let one = t.elapsed();
    let url = s.url("/sleep.php?ms=2000");
    let t0 = Instant::now();
    let out = concurrent(32, 1, move |a, _, _| try_get_with(a, &url));
    let took = t0.elapsed();
    assert_all_200(&out);
    let pids: BTreeSet<i32> = out.iter().map(|o| pid_of(&o.text())).collect();
    eprintln!("32 concurrent 2 s requests: {took:?} in all, {} children served them (one request alone: {one:?})", pids.len());
    // Every queued request made fpmd start a child at once: 32 children
    // exist right after the burst (the idle ones are retired one per second
    // from now). Which child served which request depends on how fast each
    // php-cgi started on a loaded machine (a request waits in fpmd's queue
    // for the first child ready, not behind one still starting).
    let after = s.fpmd.workers().len();
    assert!(
        after >= 30,
        "only {after} children after 32 concurrent requests"
    );
    // The bar is 2 s + spawn time + 0.3 s; the spawn time of 30 php-cgi at
    // once depends on the machine (0.02 s prefork, 0.4-1.1 s exec on 2
    // cores), so the printed figure is the measurement and the assertion
    // only rules out a tick-driven scale-up (php-fpm: 10.9 s, 10 children).
    assert!(took <= Duration::from_secs(2 + 4), "took {took:?}");
    assert!(s.fpmd.workers().len() <= 32);
    // Back to at most max_spare_servers idle children, one retired per second.
    {
        wait_for(
            Duration::from_secs(45),
            "the pool to shrink to max_spare_servers",
            || s.fpmd.workers().len() <= 4,
        );
        // Issue 20, item 6: quietly, as php-fpm (its scaling is logged at
        // debug level): not a line a second at notice.
        let log = s.fpmd.log();
        let scaling: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("pm.max_spare_servers"))
            .collect();
        assert!(
            scaling.is_empty(),
            "scale-down logged at notice: {scaling:#?}"
        );
    }
}

#[test]
fn ondemand_starts_from_nothing_and_gives_everything_back() {
    // php-fpm's ondemand: no warm parent (`warm_timeout = 0`).
    let s = Stack::start_with(
        FpmdConfig::new().global("warm_timeout = 0").pool(
            Pool::www()
                .max_children(8)
                .lines(&["pm.mode = \"ondemand\"", "pm.process_idle_timeout = \"2s\""]),
        ),
        NginxOpts::default().keepalive(),
    );
    assert!(
        holds_for(Duration::from_millis(500), || php_processes(&s) == 0),
        "an ondemand pool starts with no php-cgi at all"
    );
    // A cold start: the spawn time.
    let t = Instant::now();
    assert_eq!(get(&s.url("/pid.php")).status, 200);
    let spawn = t.elapsed();
    // After 5 s idle there is no php-cgi process.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        php_processes(&s),
        0,
        "php-cgi left after 5 s idle:\n{}",
        s.fpmd.log()
    );

    let url = s.url("/sleep.php?ms=1000");
    let t0 = Instant::now();
    let out = concurrent(8, 1, move |a, _, _| try_get_with(a, &url));
    let took = t0.elapsed();
    assert_all_200(&out);
    let pids: BTreeSet<i32> = out.iter().map(|o| pid_of(&o.text())).collect();
    eprintln!("8 concurrent 1 s requests on an empty pool: {took:?}, {} children (cold start alone: {spawn:?})", pids.len());
    assert_eq!(pids.len(), 8);
    // The bar: 1 s + spawn time + 0.2 s (printed above); eight php-cgi
    // starting at once on a loaded machine take longer than one (3.1 s
    // seen under exec with the whole suite running), so the assertion only
    // rules out serving them in turns (php-fpm: 4 s on 2 children; 8 s on
    // one): the 8 children above ran at once.
    assert!(took < Duration::from_secs(8), "took {took:?}");

    // A kept-alive connection reused just after the idle timeout still gets 200.
    let agent = crate::harness::http::agent();
    assert_eq!(
        try_get_with(&agent, &s.url("/pid.php")).unwrap().status,
        200
    );
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        try_get_with(&agent, &s.url("/pid.php")).unwrap().status,
        200
    );
}

/// The php-cgi parents of the stack (fpmd's own children that fork the
/// pool's children): none under exec.
fn parents(s: &Stack) -> Vec<i32> {
    let workers = s.fpmd.workers();
    s.fpmd
        .children()
        .iter()
        .filter(|p| p.alive() && !workers.contains(&p.pid))
        .map(|p| p.pid)
        .collect()
}

/// Issue 23, Must show 1: an ondemand pool holds no php-cgi before its
/// first request, no idle child once `pm.process_idle_timeout` has passed,
/// and nothing once `warm_timeout` has passed too (php-fpm holds 0). Under
/// prefork the cold request after the children retired runs on a fork of
/// the warm parent; memory short (a reload to `warm_min_available =
/// "100%"`) stops a warm parent at once.
#[test]
fn ondemand_holds_no_process_before_its_first_request_nor_once_idle() {
    ondemand_holds_nothing_when_idle(None);
}

/// The same under a parent shared by pools (`pm.spawn = "shared"`): it
/// is the pool's warm parent, and stops once no pool holds it.
#[test]
fn ondemand_holds_no_process_before_its_first_request_nor_once_idle_shared() {
    ondemand_holds_nothing_when_idle(Some("pm.spawn = \"shared\""));
}

/// `spawn`: a `pm.spawn` line, else the run's (`FPMD_TEST_SPAWN`).
fn ondemand_holds_nothing_when_idle(spawn: Option<&str>) {
    let prefork = || spawn.is_some() || prefork();
    let mut lines = vec!["pm.mode = \"ondemand\"", "pm.process_idle_timeout = \"2s\""];
    lines.extend(spawn);
    let pool = Pool::www().max_children(8).lines(&lines);
    let config = |warm: &str| {
        FpmdConfig::new()
            .log_level("debug")
            .global(format!("warm_timeout = \"{warm}\""))
            .pool(pool.clone())
    };
    let mut s = Stack::start_with(config("4s"), NginxOpts::default());
    assert!(
        holds_for(Duration::from_secs(2), || php_processes(&s) == 0),
        "an ondemand pool started a php-cgi before any request: {:?}\n{}",
        s.fpmd.children(),
        s.fpmd.log()
    );
    let first = pid_of(&get(&s.url("/pid.php")).text());
    assert_eq!(s.fpmd.workers(), [first], "one child for one request");
    assert_eq!(
        parents(&s).len(),
        usize::from(prefork()),
        "{:?}",
        s.fpmd.children()
    );
    // Idle past pm.process_idle_timeout: no child. Under prefork the parent
    // stays, with no child, for warm_timeout.
    wait_for(Duration::from_secs(15), "the idle child to retire", || {
        s.fpmd.workers().is_empty()
    });
    if prefork() {
        assert_eq!(
            parents(&s).len(),
            1,
            "the warm parent: {:?}",
            s.fpmd.children()
        );
        let warm = parents(&s)[0];
        // A request in the warm period runs on a fork of it.
        let child = pid_of(&get(&s.url("/pid.php")).text());
        let info = s.fpmd.children();
        assert!(
            info.iter().any(|p| p.pid == child && p.ppid == warm),
            "the cold request ran on a fork ({child}) of the warm parent {warm}: {info:?}"
        );
        wait_for(Duration::from_secs(15), "the child to retire again", || {
            s.fpmd.workers().is_empty()
        });
    }
    // warm_timeout over: nothing at all.
    wait_for(Duration::from_secs(20), "no php-cgi at all", || {
        php_processes(&s) == 0
    });
    if prefork() {
        assert!(
            s.fpmd.log().contains("no request for warm_timeout"),
            "{}",
            s.fpmd.log()
        );
        // A long warm period, then memory short: the parent goes at once.
        s.fpmd.rewrite(&config("1h"));
        s.fpmd.reload_ok();
        assert_eq!(get(&s.url("/pid.php")).status, 200);
        wait_for(Duration::from_secs(15), "the child to retire", || {
            s.fpmd.workers().is_empty()
        });
        assert_eq!(parents(&s).len(), 1, "kept for warm_timeout = 1h");
        s.fpmd
            .rewrite(&config("1h").global("warm_min_available = \"100%\""));
        s.fpmd.reload_ok();
        wait_for(Duration::from_secs(15), "the warm parent to stop", || {
            php_processes(&s) == 0
        });
        assert!(s.fpmd.log().contains("memory is short"), "{}", s.fpmd.log());
    }
    // The next visitor is served as the first was.
    assert_eq!(get(&s.url("/pid.php")).status, 200);
}

/// Issue 23, Must show 3: a dynamic pool (`pm.max_children` 12,
/// `pm.start_servers` 2, spare 1–3) starts 2 children (and, under prefork,
/// their parent: 3 processes), grows for a burst and shrinks back into the
/// spare range, one idle child a second, as php-fpm's.
#[test]
fn dynamic_follows_the_load_within_the_spare_range() {
    dynamic_follows_the_load(None);
}

/// The same with the children forked by a parent shared by pools
/// (`pm.spawn = "shared"`): 3 processes at start, the shared parent one.
#[test]
fn dynamic_follows_the_load_within_the_spare_range_shared() {
    dynamic_follows_the_load(Some("pm.spawn = \"shared\""));
}

/// `spawn`: a `pm.spawn` line, else the run's (`FPMD_TEST_SPAWN`).
fn dynamic_follows_the_load(spawn: Option<&str>) {
    let prefork = || spawn.is_some() || prefork();
    let mut lines = vec![
        "pm.mode = \"dynamic\"",
        "pm.start_servers = 2",
        "pm.min_spare_servers = 1",
        "pm.max_spare_servers = 3",
    ];
    lines.extend(spawn);
    let s = Stack::start_with(
        FpmdConfig::new()
            .log_level("debug")
            .pool(Pool::www().max_children(12).lines(&lines)),
        NginxOpts::default(),
    );
    let at_start = usize::from(prefork()) + 2;
    wait_for(Duration::from_secs(20), "start_servers children", || {
        php_processes(&s) == at_start && s.fpmd.workers().len() == 2
    });
    assert!(
        holds_for(Duration::from_secs(2), || php_processes(&s) == at_start),
        "not {at_start} php-cgi processes at rest: {:?}",
        s.fpmd.children()
    );
    let url = s.url("/sleep.php?ms=1500");
    let out = concurrent(10, 1, move |a, _, _| try_get_with(a, &url));
    assert_all_200(&out);
    let pids: BTreeSet<i32> = out.iter().map(|o| pid_of(&o.text())).collect();
    assert_eq!(pids.len(), 10, "10 concurrent requests on 10 children");
    let peak = s.fpmd.workers().len();
    assert!((10..=12).contains(&peak), "{peak} children after the burst");
    // Back into the spare range: at most 3 idle, at least 1.
    wait_for(
        Duration::from_secs(30),
        "the pool to shrink to 3 idle children",
        || s.fpmd.workers().len() == 3,
    );
    assert!(
        holds_for(Duration::from_secs(3), || {
            let n = s.fpmd.workers().len();
            (1..=3).contains(&n)
        }),
        "left the spare range: {:?}",
        s.fpmd.children()
    );
    assert_eq!(parents(&s).len(), usize::from(prefork()));
}

#[test]
fn light_traffic_after_a_burst_runs_on_few_children() {
    // Issue 4 item 3 (C06) scaled down in time: idle timeout 3 s instead of
    // 10 s, checked at the 12th second instead of the 30th.
    // Retiring an idle child is logged at debug level, as php-fpm's.
    let s = Stack::start_with(
        FpmdConfig::new().log_level("debug").pool(
            Pool::www()
                .max_children(6)
                .lines(&["pm.mode = \"ondemand\"", "pm.process_idle_timeout = \"3s\""]),
        ),
        NginxOpts::default(),
    );
    let url = s.url("/sleep.php?ms=200");
    let out = concurrent(6, 5, move |a, _, _| try_get_with(a, &url));
    assert_all_200(&out);
    let burst: BTreeSet<i32> = out.iter().map(|o| pid_of(&o.text())).collect();
    assert_eq!(burst.len(), 6, "the burst ran on 6 children");
    let t0 = Instant::now();
    let mut late = BTreeSet::new();
    while t0.elapsed() < Duration::from_secs(12) {
        let r = get(&s.url("/sleep.php?ms=10"));
        assert_eq!(r.status, 200);
        if t0.elapsed() > Duration::from_secs(8) {
            late.insert(pid_of(&r.text()));
        }
        std::thread::sleep(Duration::from_millis(1000));
    }
    eprintln!(
        "after the burst, the last 4 s of 1 req/s ran on {} children: {late:?}",
        late.len()
    );
    assert!(late.len() <= 2, "light traffic ran on {late:?}");
    let n = s.fpmd.workers().len();
    assert!(
        n <= 2,
        "{n} php-cgi children by the 12th second:\n{}",
        s.fpmd.log()
    );
}
