//! Issue 23, item 3: `pm.spawn = "shared"`, php-fpm's model of one loaded
//! PHP that forks every pool's children. Pools whose php-cgi would be the
//! same (binary, php.ini, ini values) share one php-cgi parent; each child
//! it forks is its own pool's (environment, status, process title); a
//! pool that goes takes only its own children, and the parent goes with
//! the last pool that holds it.

use crate::harness::*;
use std::collections::BTreeSet;
use std::time::Duration;

/// The php-cgi processes fpmd itself started: the parents.
fn parents(fpmd: &Fpmd) -> BTreeSet<i32> {
    fpmd.children()
        .iter()
        .filter(|p| p.alive() && p.ppid == fpmd.pid())
        .map(|p| p.pid)
        .collect()
}

/// The parent of `pid`, from `/proc`.
fn parent_of(pid: i32) -> i32 {
    procs::info(pid)
        .unwrap_or_else(|| panic!("no process {pid}"))
        .ppid
}

fn pool(name: &str, port: u16, site: &str) -> Pool {
    Pool::new(name)
        .tcp(format!("127.0.0.1:{port}"))
        .max_children(2)
        .lines(&["pm.spawn = \"shared\"", &format!("env.SITE = {site:?}")])
}

#[test]
fn pools_with_the_same_php_share_a_parent_and_go_their_own_ways() {
    let t = TestDir::new();
    let ports = [free_port(), free_port(), free_port()];
    let a = pool("a", ports[0], "site-a");
    let b = pool("b", ports[1], "site-b");
    // Other ini values: another parent.
    let c = pool("c", ports[2], "site-c").line("php_admin_value.memory_limit = \"77M\"");
    let cfg = FpmdConfig::new().log_level("debug");
    let mut fpmd = Fpmd::start(&t, cfg.clone().pool(a.clone()).pool(b.clone()).pool(c));
    let addrs: Vec<_> = (0..3).map(|i| fpmd_addr(&fpmd, i)).collect();
    let ask = |i: usize, script: &str, query: &str| {
        let addr = addrs[i];
        let (status, body) = fcgi::get_script(addr, &t.docroot(), script, query);
        assert_eq!(status, 200, "pool {i}: {body}");
        body
    };
    wait_for(Duration::from_secs(20), "every pool's children", || {
        fpmd.workers().len() == 6
    });
    let roots = parents(&fpmd);
    assert_eq!(
        roots.len(),
        2,
        "a and b share one parent, c has its own: {:?}",
        fpmd.children()
    );
    // Each child is its pool's: its environment, its status socket.
    let pid_a: i32 = ask(0, "pid.php", "").trim().parse().unwrap();
    let pid_b: i32 = ask(1, "pid.php", "").trim().parse().unwrap();
    let pid_c: i32 = ask(2, "pid.php", "").trim().parse().unwrap();
    let shared = parent_of(pid_a);
    assert_eq!(parent_of(pid_b), shared, "a and b: one parent");
    assert_ne!(parent_of(pid_c), shared, "c: another");
    assert!(roots.contains(&shared));
    assert_eq!(ask(0, "env.php", "names=SITE"), "SITE='site-a'\n");
    assert_eq!(ask(1, "env.php", "names=SITE"), "SITE='site-b'\n");
    assert_eq!(ask(2, "ini.php", "name=memory_limit"), "'77M'");
    assert_eq!(ask(0, "ini.php", "name=opcache.validate_permission"), "'1'");
    let status: serde_json::Value = serde_json::from_str(&ask(1, "fpm_status.php", "")).unwrap();
    assert_eq!(status["pool"], "b", "{status}");
    assert_eq!(status["rows"], 2, "{status}");
    let cmdline = std::fs::read(format!("/proc/{pid_b}/cmdline")).unwrap();
    assert!(
        cmdline.starts_with(b"php-cgi: pool b\0"),
        "{}",
        String::from_utf8_lossy(&cmdline)
    );
    // Pool b goes: a's children and the parent stay.
    let a_children: BTreeSet<i32> = fpmd
        .children()
        .iter()
        .filter(|p| p.ppid == shared)
        .map(|p| p.pid)
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"php-cgi: pool a\0"))
        })
        .collect();
    assert_eq!(a_children.len(), 2);
    fpmd.rewrite(&cfg.clone().pool(a.clone()));
    fpmd.reload_ok();
    // b's and c's children go; a's are the same processes.
    wait_for(Duration::from_secs(20), "only a's children left", || {
        fpmd.workers().into_iter().collect::<BTreeSet<i32>>() == a_children
    });
    assert!(a_children.iter().all(|p| procs::alive(*p)));
    // c's parent goes with c, a little after c's last child.
    wait_for(Duration::from_secs(20), "c's parent to stop", || {
        parents(&fpmd) == BTreeSet::from([shared])
    });
    assert_eq!(ask(0, "env.php", "names=SITE"), "SITE='site-a'\n");
    // The last pool that holds it goes: the parent goes too.
    let d = Pool::new("d")
        .tcp(format!("127.0.0.1:{}", free_port()))
        .max_children(1);
    fpmd.rewrite(&cfg.pool(d));
    fpmd.reload_ok();
    wait_for(Duration::from_secs(20), "the shared parent to stop", || {
        !procs::alive(shared)
    });
    assert!(!fpmd.log().contains("pool(s) used it"), "{}", fpmd.log());
}

fn fpmd_addr(fpmd: &Fpmd, i: usize) -> std::net::SocketAddr {
    match fpmd.addr(i) {
        Addr::Tcp(a) => a,
        other => panic!("pool {i} is not on TCP: {other:?}"),
    }
}

/// A shared parent killed (SIGKILL, as the OOM killer would) takes its
/// children with it: every pool that used it logs it, starts a new one and
/// serves on; nothing of the old one is left.
#[test]
fn a_killed_shared_parent_is_replaced_and_its_pools_serve_on() {
    let t = TestDir::new();
    let ports = [free_port(), free_port()];
    let fpmd = Fpmd::start(
        &t,
        FpmdConfig::new()
            .pool(pool("a", ports[0], "site-a"))
            .pool(pool("b", ports[1], "site-b")),
    );
    let addrs: Vec<_> = (0..2).map(|i| fpmd_addr(&fpmd, i)).collect();
    let pid_in = |i: usize| -> i32 {
        let (status, body) = fcgi::get_script(addrs[i], &t.docroot(), "pid.php", "");
        assert_eq!(status, 200, "pool {i}: {body}");
        body.trim().parse().unwrap()
    };
    let before = [pid_in(0), pid_in(1)];
    let old = parent_of(before[0]);
    assert_eq!(parent_of(before[1]), old);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for(Duration::from_secs(20), "a new shared parent", || {
        let p = parents(&fpmd);
        p.len() == 1 && !p.contains(&old) && fpmd.workers().len() == 4
    });
    for c in before {
        assert!(!procs::alive(c), "child {c} of the killed parent is alive");
    }
    let after = [pid_in(0), pid_in(1)];
    assert_eq!(parent_of(after[0]), parent_of(after[1]));
    assert_ne!(parent_of(after[0]), old);
    let log = fpmd.log();
    assert!(
        log.contains("shared php-cgi parent exited on signal 9"),
        "{log}"
    );
}

/// A shared parent stopped (SIGSTOP) forks nothing for any pool: the
/// health check kills it and its pools start a new one, as for a pool's
/// own stopped parent.
#[test]
fn a_stopped_shared_parent_is_killed_and_replaced() {
    let t = TestDir::new();
    let port = free_port();
    let fpmd = Fpmd::start(&t, FpmdConfig::new().pool(pool("a", port, "site-a")));
    let addr = fpmd_addr(&fpmd, 0);
    let (status, body) = fcgi::get_script(addr, &t.docroot(), "pid.php", "");
    assert_eq!(status, 200, "{body}");
    let old = parent_of(body.trim().parse().unwrap());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    wait_for(Duration::from_secs(20), "a new shared parent", || {
        let p = parents(&fpmd);
        p.len() == 1 && !p.contains(&old) && fpmd.workers().len() == 2
    });
    assert!(!procs::alive(old));
    let (status, body) = fcgi::get_script(addr, &t.docroot(), "pid.php", "");
    assert_eq!(status, 200, "{body}");
    let log = fpmd.log();
    assert!(
        log.contains(&format!("shared php-cgi parent {old} is stopped")),
        "{log}"
    );
}
