//! Listen sockets across reloads: `listen.mode`, `listen.backlog` and the
//! address changed under load (item 6); a unix socket's owner, group and
//! mode exact after reloads, restarts and `kill -9` (C15).

use super::helpers::*;
use crate::harness::fpmd::cli;
use crate::harness::http::{agent_with_timeout, try_get_with};
use crate::harness::*;
use nix::sys::signal::Signal;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

// ---------------------------------------------------------------------------
// Item 6: listen.mode, listen.backlog and the address change under load
// ---------------------------------------------------------------------------

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .mode()
        & 0o7777
}

#[test]
fn listen_mode_backlog_and_address_change_under_load() {
    let dir = TestDir::new();
    let m1 = dir.join("moved-1.sock");
    let m2 = dir.join("moved-2.sock");
    let cfg = |stay: &[&str], moved_at: &Path, moved: &[&str]| {
        FpmdConfig::new()
            .pool(pool("stay", "64M").lines(stay))
            .pool(pool("moved", "64M").unix_at(moved_at).lines(moved))
    };
    let fpmd = Fpmd::start(&dir, cfg(&[], &m1, &[r#"listen.mode = "0600""#]));
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    let n1 = Nginx::start(
        &dir,
        NginxOpts::default()
            .upstream(format!("unix:{}", m1.display()))
            .name("nginx-m1"),
    );
    let n2 = Nginx::start(
        &dir,
        NginxOpts::default()
            .upstream(format!("unix:{}", m2.display()))
            .name("nginx-m2"),
    );
    let mut s = Stack { nginx, fpmd, dir };
    wait_for(LONGER, "4 workers in each pool", || {
        pool_workers(&s.fpmd, "stay").len() == 4 && pool_workers(&s.fpmd, "moved").len() == 4
    });
    let stay = sock_path(&s.fpmd.addr(0));
    let stay_ino = inode(&stay);
    assert_eq!(mode_of(&stay), 0o660);
    assert_eq!(mode_of(&m1), 0o600);
    assert_eq!(s.fpmd.addr(0).backlog(), Some(511));

    let load = Load::start(8, s.url("/sleep.php?ms=20"), Duration::ZERO);
    let t0 = load.started;
    let in_flight: Vec<_> = (0..2)
        .map(|i| get_async(n1.url(&format!("/usleep.php?ms=3000&kb=64&mark=m1-{i}"))))
        .collect();
    wait_for(LONGER, "2 requests running on the old address", || {
        (0..2).all(|i| s.dir.mark(&format!("m1-{i}")).is_some())
    });
    run_for(&mut s.fpmd, Duration::from_millis(500));
    s.fpmd.rewrite(&cfg(
        &[r#"listen.mode = "0666""#, "listen.backlog = 64"],
        &m2,
        &[r#"listen.mode = "0666""#, "listen.backlog = 32"],
    ));
    let line = s.fpmd.reload_ok();
    eprintln!("{line}");
    // The new address serves at once.
    let r = try_get_with(&agent_with_timeout(LONGER), &n2.url("/pid.php"))
        .unwrap_or_else(|e| panic!("the new address right after the reload: {e}"));
    assert_eq!(
        r.status,
        200,
        "the new address right after the reload: {}",
        r.text()
    );
    let m2_addr = Addr::Unix(m2.clone());
    assert_eq!(mode_of(&m2), 0o666, "mode of the new address");
    assert_eq!(m2_addr.backlog(), Some(32), "backlog of the new address");
    // The kept socket: same file, new mode and backlog.
    assert_eq!(inode(&stay), stay_ino, "the kept socket was replaced");
    assert_eq!(mode_of(&stay), 0o666, "mode of the kept socket");
    assert_eq!(
        s.fpmd.addr(0).backlog(),
        Some(64),
        "backlog of the kept socket"
    );
    // The old address: its requests complete; it is closed and unlinked.
    for (i, h) in in_flight.into_iter().enumerate() {
        let (r, took) = h.join().unwrap();
        check_usleep(
            &r,
            3000,
            64,
            &format!("in-flight request {i} on the old address"),
        );
        eprintln!("in-flight request {i} on the old address: 200 after {took:?}");
    }
    wait_for(
        LONGER,
        "the old address closed and its file removed",
        || !m1.exists() && !Addr::Unix(m1.clone()).accepts(),
    );
    run_for(&mut s.fpmd, Duration::from_millis(500));
    let samples = load.stop();
    eprintln!(
        "{} requests on the kept address, p99 {} ms",
        samples.len(),
        ms(quantile(samples.iter(), 0.99))
    );
    assert_no_failure(&samples, t0, "the address that stays configured");
    for i in 0..4 {
        let r = get(&n2.url("/pid.php"));
        assert_eq!(
            r.status,
            200,
            "request {i} on the new address: {}",
            r.text()
        );
    }
}

// ---------------------------------------------------------------------------
// C15: unix socket owner, group and mode
// ---------------------------------------------------------------------------

/// C15: listen.owner = nobody, listen.group = www-data, mode 0660: exact
/// after start, after each of 5 reloads and 5 restarts, and after `kill -9`
/// of fpmd and a new start (the stale socket is replaced); a second fpmd
/// refuses to steal the live socket.
#[test]
fn c15_socket_owner_group_mode_exact_after_reloads_restarts_and_kill_9() {
    use nix::unistd::{Group, User};
    let dir = TestDir::new();
    let cfg = |limit: &str| {
        FpmdConfig::new().pool(pool("www", limit).lines(&[
            r#"listen.owner = "nobody""#,
            r#"listen.group = "www-data""#,
            r#"listen.mode = "0660""#,
        ]))
    };
    let uid = User::from_name("nobody")
        .unwrap()
        .expect("user nobody")
        .uid
        .as_raw();
    let gid = Group::from_name("www-data")
        .unwrap()
        .expect("group www-data")
        .gid
        .as_raw();
    let sock = dir.join("www.sock");
    let mut fpmd = Some(Fpmd::start(&dir, cfg("64M")));
    let nginx = Nginx::start(
        &dir,
        NginxOpts::default().upstream(fpmd.as_ref().unwrap().upstream(0)),
    );
    let check = |what: &str| {
        let m = std::fs::metadata(&sock).unwrap_or_else(|e| panic!("{what}: stat: {e}"));
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            (uid, gid, 0o660),
            "{what}: owner, group, mode of {} (want nobody:www-data 0660)",
            sock.display()
        );
        let r = get(&nginx.url("/pid.php"));
        assert_eq!(r.status, 200, "{what}: {}", r.text());
    };
    check("after start");
    for i in 0..5 {
        let f = fpmd.as_mut().unwrap();
        f.rewrite(&cfg(&format!("{}M", 65 + i)));
        f.reload_ok();
        check(&format!("after reload {i}"));
    }
    for i in 0..5 {
        let mut f = fpmd.take().unwrap();
        f.signal(Signal::SIGQUIT);
        let st = f.wait_exit(LONGER).expect("fpmd runs 60 s after SIGQUIT");
        assert_eq!(st.code(), Some(0));
        drop(f);
        assert!(!sock.exists(), "restart {i}: the socket outlived a stop");
        fpmd = Some(Fpmd::start(&dir, cfg("70M")));
        check(&format!("after restart {i}"));
    }

    // A second fpmd on the same configuration must not steal the socket.
    let ino = inode(&sock);
    let conf = fpmd.as_ref().unwrap().conf().to_path_buf();
    let second = cli(dir.path(), &conf, &dir.tag(), &[]);
    eprintln!("second fpmd: {second}");
    assert_eq!(second.code(), Some(EX_CONFIG), "{second}");
    assert!(
        second.output().contains(&sock.display().to_string()),
        "the refusal does not name {}: {second}",
        sock.display()
    );
    assert_eq!(
        inode(&sock),
        ino,
        "the second fpmd replaced the live socket"
    );
    fpmd.as_mut().unwrap().assert_running();
    check("after a second fpmd was refused");

    // kill -9: the socket file stays behind, stale; a new start replaces it.
    let mut f = fpmd.take().unwrap();
    f.signal(Signal::SIGKILL);
    f.wait_exit(LONGER).expect("fpmd runs after SIGKILL");
    let tag = dir.tag();
    wait_for(LONGER, "every process of the killed fpmd gone", || {
        procs::tagged(&tag).is_empty()
    });
    drop(f);
    assert!(sock.exists(), "no stale socket after kill -9");
    assert!(
        !Addr::Unix(sock.clone()).accepts(),
        "the stale socket accepts"
    );
    // Marked, to tell it from its replacement (an inode number can be reused).
    chmod(&sock, 0o600);
    fpmd = Some(Fpmd::start(&dir, cfg("70M")));
    check("after kill -9 and a new start");
    drop(fpmd);
}
