//! Issue 4, items 1 to 3: `pm.mode = "dynamic"` and `"ondemand"`. Scale-up
//! is driven by queued requests (no tick), scale-down retires the least
//! recently used idle children. Under `pm.spawn = "prefork"` every child is
//! forked up front by the php-cgi parent (a cold child costs ~0.7 MiB), so
//! "the pool shrinks" means that children which served requests are
//! replaced by cold ones, and an idle ondemand pool keeps its parent warm
//! while memory allows (`warm_min_available`), else stops it; under `exec`
//! the processes themselves come and go.

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
    if !prefork() {
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
    // php-fpm's ondemand: no warm parent (`warm_min_available = "100%"`:
    // memory never allows one).
    let s = Stack::start_with(
        FpmdConfig::new()
            .global("warm_min_available = \"100%\"")
            .pool(
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
    // The bar: 1 s + spawn time + 0.2 s (printed above); eight exec'd
    // php-cgi starting at once on a loaded machine take longer than one, so
    // the assertion only rules out serving them in turns (php-fpm: 4 s on 2
    // children).
    assert!(
        took <= Duration::from_millis(1000 + 1500) + spawn * 2,
        "took {took:?}"
    );

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

/// Issue 12: under prefork an ondemand pool keeps a warm php-cgi parent
/// while memory allows (`warm_min_available`, default 25% of MemTotal): it
/// is started with the pool, a cold request runs on one of its forks (no
/// exec of php-cgi on the request's path), a child that served is retired
/// after `pm.process_idle_timeout` while the parent stays; once memory is
/// short (here: a reload to `"100%"`), the idle parent is stopped and the
/// pool holds nothing, as php-fpm's; memory back (`0`), the parent comes
/// back ahead of any request.
#[test]
fn ondemand_keeps_a_warm_parent_while_memory_allows() {
    let pool = Pool::www()
        .max_children(3)
        .lines(&["pm.mode = \"ondemand\"", "pm.process_idle_timeout = \"2s\""]);
    // Retiring an idle child is logged at debug level, as php-fpm's.
    let mut s = Stack::start_with(
        FpmdConfig::new().log_level("debug").pool(pool.clone()),
        NginxOpts::default(),
    );
    if !prefork() {
        // Under exec there is no parent to keep: each child is exec'd for
        // a request, and none is started ahead of one.
        assert!(
            holds_for(Duration::from_secs(2), || php_processes(&s) == 0),
            "an exec ondemand pool started a php-cgi before any request:\n{}",
            s.fpmd.log()
        );
        return;
    }
    // The parent and its 3 forks, before any request.
    wait_for(
        Duration::from_secs(20),
        "the warm parent and its 3 forks",
        || php_processes(&s) == 4,
    );
    let parent = |s: &Stack| -> i32 {
        let kids = s.fpmd.children();
        let parents: BTreeSet<i32> = kids
            .iter()
            .filter(|p| p.ppid == s.fpmd.pid())
            .map(|p| p.pid)
            .collect();
        assert_eq!(parents.len(), 1, "one php-cgi parent: {kids:?}");
        *parents.iter().next().unwrap()
    };
    let warm = parent(&s);
    let r = get(&s.url("/pid.php"));
    assert_eq!(r.status, 200);
    let child = pid_of(&r.text());
    let info = s.fpmd.children();
    assert!(
        info.iter().any(|p| p.pid == child && p.ppid == warm),
        "the cold request ran on a fork ({child}) of the warm parent {warm}: {info:?}"
    );
    // Idle past the timeout: the child that served goes, the parent stays.
    wait_for(
        Duration::from_secs(15),
        "the served child to be retired",
        || {
            !s.fpmd
                .children()
                .iter()
                .any(|p| p.pid == child && p.alive())
        },
    );
    assert!(
        s.fpmd.log().contains("pm.process_idle_timeout"),
        "no idle child was retired:\n{}",
        s.fpmd.log()
    );
    wait_for(Duration::from_secs(10), "a fresh fork in its place", || {
        php_processes(&s) == 4
    });
    assert_eq!(parent(&s), warm, "the warm parent stayed");

    // Memory short: the idle parent goes, nothing is left.
    s.fpmd.rewrite(
        &FpmdConfig::new()
            .log_level("debug")
            .global("warm_min_available = \"100%\"")
            .pool(pool.clone()),
    );
    s.fpmd.reload_ok();
    wait_for(
        Duration::from_secs(20),
        "the idle parent to be stopped",
        || php_processes(&s) == 0,
    );
    assert!(
        s.fpmd.log().contains("memory is short"),
        "the shortage was not logged:\n{}",
        s.fpmd.log()
    );
    // A request still gets a child (an exec'd parent, on demand).
    assert_eq!(get(&s.url("/pid.php")).status, 200);

    // Memory back: a warm parent again, ahead of any request.
    s.fpmd.rewrite(
        &FpmdConfig::new()
            .log_level("debug")
            .global("warm_min_available = 0")
            .pool(pool),
    );
    s.fpmd.reload_ok();
    wait_for(Duration::from_secs(20), "a warm parent again", || {
        php_processes(&s) == 4
            && s.fpmd
                .log()
                .contains("memory allows warm php-cgi parents again")
    });
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
    if prefork() {
        // The children that served the burst and went idle were replaced by cold forks.
        assert!(
            s.fpmd.log().contains("pm.process_idle_timeout"),
            "no idle child was recycled:\n{}",
            s.fpmd.log()
        );
    } else {
        let n = php_processes(&s);
        assert!(
            n <= 2,
            "{n} php-cgi processes by the 12th second:\n{}",
            s.fpmd.log()
        );
    }
}
