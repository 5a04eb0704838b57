//! Issue 4: `emergency_restart_threshold` / `emergency_restart_interval`
//! (php-fpm's global settings). php-fpm restarts its whole master; fpmd
//! restarts the children of the pool whose children crash, and other pools
//! are left alone.

use crate::harness::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::time::Duration;

/// The live workers of `pool` (its children carry `POOL=<pool>`).
fn workers_of(s: &Stack, pool: &str) -> BTreeSet<i32> {
    s.fpmd.workers_with_env("POOL", pool).into_iter().collect()
}

#[test]
fn emergency_restart_restarts_only_the_crashing_pool() {
    let cfg = FpmdConfig::new()
        .global("emergency_restart_threshold = 3")
        .global("emergency_restart_interval = \"10s\"")
        .pool(
            Pool::new("crashy")
                .max_children(4)
                .line("env.POOL = \"crashy\""),
        )
        .pool(
            Pool::new("steady")
                .max_children(2)
                .line("env.POOL = \"steady\""),
        );
    let s = Stack::start_with(cfg, NginxOpts::default());
    s.fpmd.wait_workers(6, Duration::from_secs(30));
    let steady_before = workers_of(&s, "steady");
    assert_eq!(steady_before.len(), 2);
    let crashy_before = workers_of(&s, "crashy");

    // Three children of `crashy` segfault in the middle of a request.
    let mut victims = Vec::new();
    for i in 0..3 {
        let mark = format!("victim{i}");
        let url = s.url(&format!("/sleep.php?ms=5000&mark={mark}"));
        let req = std::thread::spawn(move || get(&url).status);
        let pid = {
            let dir = &s.dir;
            let mut pid = None;
            wait_for(Duration::from_secs(10), "the victim to start", || {
                pid = dir.mark(&mark).and_then(|m| m.trim().parse::<i32>().ok());
                pid.is_some()
            });
            pid.unwrap()
        };
        kill(Pid::from_raw(pid), Signal::SIGSEGV).unwrap();
        assert_eq!(
            req.join().unwrap(),
            502,
            "the crashed request costs only itself"
        );
        victims.push(pid);
        if i < 2 {
            // Not yet at the threshold: no restart.
            assert!(
                !s.fpmd.log().contains("emergency_restart_threshold"),
                "restarted too early:\n{}",
                s.fpmd.log()
            );
        }
    }
    wait_for(Duration::from_secs(5), "the emergency restart line", || {
        s.fpmd.log().contains("emergency_restart_threshold = 3")
    });
    let before: BTreeSet<i32> = victims.iter().copied().chain(crashy_before).collect();
    wait_for(
        Duration::from_secs(10),
        "crashy to have 4 new children",
        || {
            let now = workers_of(&s, "crashy");
            now.len() == 4 && now.is_disjoint(&before)
        },
    );
    assert_eq!(
        workers_of(&s, "steady"),
        steady_before,
        "the other pool keeps its children"
    );
    assert_eq!(get(&s.url("/pid.php")).status, 200);
}
