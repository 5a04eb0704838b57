//! Issue 2, item 11 (and the stop signals of the CLI): SIGQUIT drains
//! in-flight requests then exits 0; SIGTERM/SIGINT stop fast; no php-cgi
//! outlives fpmd, even when fpmd is SIGKILLed.

use crate::harness::fpmd::describe_status;
use crate::harness::*;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

/// Starts `n` requests of sleep.php?ms=`ms` and waits until all of them run in PHP.
fn in_flight(s: &Stack, n: usize, ms: u32) -> Vec<std::thread::JoinHandle<(Resp, Duration)>> {
    let handles = (0..n)
        .map(|i| {
            let url = s.url(&format!("/sleep.php?ms={ms}&mark=r{i}"));
            std::thread::spawn(move || {
                let t0 = Instant::now();
                (get(&url), t0.elapsed())
            })
        })
        .collect();
    wait_for(LONG, "all requests running in PHP", || {
        (0..n).all(|i| s.dir.mark(&format!("r{i}")).is_some())
    });
    handles
}

#[test]
fn sigquit_drains_in_flight_requests() {
    let mut s = Stack::start(Pool::www().max_children(4));
    s.fpmd.wait_workers(4, LONG);
    let reqs = in_flight(&s, 4, 2000);
    s.fpmd.signal(Signal::SIGQUIT);
    let t0 = Instant::now();
    for (i, h) in reqs.into_iter().enumerate() {
        let (r, took) = h.join().unwrap();
        assert_eq!(r.status, 200, "request {i} during SIGQUIT: {}", r.text());
        let text = r.text();
        let parts: Vec<&str> = text.split(' ').collect();
        assert!(
            parts.len() == 3 && parts[2] == "done",
            "request {i}: body {text:?}"
        );
        let slept: u64 = parts[1].parse().unwrap();
        assert!(slept >= 2000, "request {i} slept only {slept} ms");
        eprintln!("request {i}: 200 after {took:?} ({slept} ms in PHP)");
    }
    let st = s
        .fpmd
        .wait_exit(LONG)
        .expect("fpmd still running 30 s after SIGQUIT");
    eprintln!(
        "fpmd exited {} {:?} after SIGQUIT",
        describe_status(&st),
        t0.elapsed()
    );
    assert_eq!(st.code(), Some(0), "exit status after SIGQUIT");
    let gone = wait_until(Duration::from_secs(1), || s.fpmd.tagged().is_empty());
    assert!(
        gone,
        "left running after SIGQUIT: {}",
        procs::describe(&s.fpmd.tagged())
    );
}

#[test]
fn sigkill_of_fpmd_leaves_no_php_cgi() {
    let mut s = Stack::start(Pool::www().max_children(4));
    s.fpmd.wait_workers(4, LONG);
    let tag = s.dir.tag();
    assert_eq!(procs::tagged_php(&tag).len(), s.fpmd.children().len());
    // One child busy (php-cgi finishes a request before obeying SIGTERM), three idle.
    let _busy = in_flight(&s, 1, 10_000);
    s.fpmd.signal(Signal::SIGKILL);
    let t0 = Instant::now();
    let gone = wait_until(Duration::from_secs(10), || {
        procs::tagged_php(&tag).is_empty()
    });
    let took = t0.elapsed();
    eprintln!("php-cgi processes gone {took:?} after SIGKILL of fpmd (gone: {gone})");
    assert!(
        gone,
        "php-cgi left 10 s after SIGKILL of fpmd: {:?}",
        procs::tagged_php(&tag)
    );
    assert!(
        took <= Duration::from_secs(1) + SLACK,
        "php-cgi children outlived fpmd by {took:?} (bar: 1 s)"
    );
    s.fpmd.wait_exit(LONG);
}

fn fast_stop(sig: Signal) {
    let mut s = Stack::start(Pool::www().max_children(2));
    s.fpmd.wait_workers(2, LONG);
    let _busy = in_flight(&s, 1, 20_000);
    s.fpmd.signal(sig);
    let t0 = Instant::now();
    let st = s
        .fpmd
        .wait_exit(LONG)
        .unwrap_or_else(|| panic!("fpmd still running 30 s after {sig}"));
    let exited = t0.elapsed();
    let gone = wait_until(Duration::from_secs(10), || s.fpmd.tagged().is_empty());
    let all_gone = t0.elapsed();
    eprintln!(
        "{sig}: fpmd exited ({}) after {exited:?}, every process gone after {all_gone:?}",
        describe_status(&st)
    );
    assert!(
        gone,
        "left running after {sig}: {}",
        procs::describe(&s.fpmd.tagged())
    );
    // A fast stop does not wait for the 20 s request.
    assert!(
        all_gone <= Duration::from_secs(3),
        "{sig} took {all_gone:?} to stop everything"
    );
}

#[test]
fn sigterm_stops_fast() {
    fast_stop(Signal::SIGTERM);
}

#[test]
fn sigint_stops_fast() {
    fast_stop(Signal::SIGINT);
}

/// A graceful stop of a dynamic pool, whose pre-fork parent has forked
/// workers fpmd gave no request (its spare capacity): every php-cgi goes by
/// itself, none is left for the cgroup sweep to SIGKILL and warn about
/// (a new-user trial saw "killing 4 process(es) still in the pool's
/// cgroup" on every stop under pm.spawn = "prefork").
#[test]
fn sigquit_of_a_dynamic_pool_kills_nothing_left_behind() {
    let mut s = Stack::start(Pool::www().max_children(5).lines(&[
        r#"pm.mode = "dynamic""#,
        "pm.start_servers = 2",
        "pm.min_spare_servers = 1",
        "pm.max_spare_servers = 3",
    ]));
    assert_eq!(get(&s.url("/hello.php")).status, 200);
    s.fpmd.signal(Signal::SIGQUIT);
    s.fpmd
        .wait_exit(LONG)
        .expect("fpmd still running 30 s after SIGQUIT");
    let log = s.fpmd.log();
    assert!(!log.contains("still in the pool's cgroup"), "{log}");
}
