//! Issue 11, socket activation: fpmd adopts the sockets systemd passes
//! (`LISTEN_PID`/`LISTEN_FDS`/`LISTEN_FDNAMES`), matched to pools by
//! `FileDescriptorName=` (the pool's name) or else by address, serves on
//! them, never binds one of its own for them (the only listening socket
//! at each address is the passed one: same inode), keeps them across
//! reloads, and gives php-cgi neither the variables nor the fds.
//!
//! Started under the real `systemd-socket-activate` (systemd's own tool,
//! which passes sockets exactly as a socket unit does), and under a shell
//! that sets `LISTEN_PID=$$` and execs fpmd with the test's sockets at
//! fds 3 and 4.

use crate::harness::http::{spawn_concurrent, try_get_with};
use crate::harness::*;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

const ACTIVATE: &str = "/usr/bin/systemd-socket-activate";

fn require_activate() {
    assert!(
        Path::new(ACTIVATE).is_file(),
        "{ACTIVATE} is missing: this test starts fpmd under systemd's socket activator; install it with `apt-get install systemd`"
    );
}

/// The inode of the socket at `pid`'s fd `fd` (`socket:[N]`).
fn fd_socket_inode(pid: i32, fd: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    let s = link.to_str()?;
    s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// The inodes of every socket `pid` holds.
fn socket_inodes_of(pid: i32) -> Vec<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|fd| fd_socket_inode(pid, fd))
        .collect()
}

/// Inodes of the listening unix sockets bound at `path` (`/proc/net/unix`:
/// flag `__SO_ACCEPTCON`).
fn unix_listeners_at(path: &Path) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            (flags & 0x10000 != 0 && f.get(7).map(Path::new) == Some(path))
                .then(|| f.get(6)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// Inodes of the TCP sockets listening on `port` (any address, IPv4 or
/// IPv6) in this network namespace.
fn tcp_listeners_on(port: u16) -> Vec<u64> {
    let mut out = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let table = std::fs::read_to_string(file).unwrap_or_default();
        for l in table.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (Some(local), Some(st), Some(ino)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            let p = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *st == "0A" && p == Some(port) {
                out.push(ino.parse().unwrap());
            }
        }
    }
    out
}

fn fstat_inode(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
    nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd))
        .unwrap()
        .st_ino
}

/// No php-cgi below fpmd has a `LISTEN_*` variable or any of `passed`.
fn children_see_nothing(fpmd: &Fpmd, passed: &[u64]) {
    let kids = fpmd.children();
    assert!(!kids.is_empty(), "no php-cgi under fpmd");
    for k in kids.iter().filter(|k| k.alive()) {
        let env = procs::environ(k.pid);
        let listen: Vec<_> = env
            .iter()
            .filter(|(n, _)| n.starts_with("LISTEN_"))
            .collect();
        assert!(listen.is_empty(), "php-cgi {} sees {listen:?}", k.pid);
        let fds = socket_inodes_of(k.pid);
        for ino in passed {
            assert!(
                !fds.contains(ino),
                "php-cgi {} holds the passed socket {ino} (its sockets: {fds:?})",
                k.pid
            );
        }
    }
}

/// Every response 200 from sleep.php.
fn all_done(outcomes: &[crate::harness::http::Outcome]) {
    http::assert_all_200(outcomes);
    for o in outcomes {
        assert!(o.text().ends_with(" done"), "body: {}", o.text());
    }
}

/// Two pools under `systemd-socket-activate`: `www` by name (its
/// configured `listen.address` is elsewhere: fpmd serves on the passed
/// socket and never creates the configured one), `api` by address (TCP,
/// passed as `unknown`). Both serve through nginx; a reload that starts a
/// new generation of `www` serves on under load with no failed request,
/// on the same sockets.
#[test]
fn systemd_socket_activate_by_name_and_by_address() {
    require_activate();
    let dir = TestDir::new();
    let passed_unix = dir.join("www.sock");
    let configured = dir.join("configured.sock");
    let port = free_port();
    let tcp = format!("127.0.0.1:{port}");
    let www = Pool::www().unix_at(&configured).max_children(2);
    let cfg = FpmdConfig::new()
        .pool(www.clone())
        .pool(Pool::new("api").tcp(tcp.clone()).max_children(2));
    let launch = Launch {
        prefix: vec![
            ACTIVATE.into(),
            "-l".into(),
            passed_unix.display().to_string(),
            "-l".into(),
            tcp.clone(),
            "--fdname=www:unknown".into(),
            "-E".into(),
            "FPMD_TEST_TAG".into(),
        ],
        fds: Vec::new(),
        addrs: Some(vec![Addr::Unix(passed_unix.clone()), Addr::parse(&tcp)]),
    };
    let mut fpmd = Fpmd::spawn_launched(&dir, &cfg, &[], launch);
    // The activator listens, then execs fpmd at the first connection
    // attempt (which fpmd then accepts): take its sockets' inodes first.
    wait_for(LONG, "systemd-socket-activate listening", || {
        fd_socket_inode(fpmd.pid(), 4).is_some()
    });
    let unix_ino = fd_socket_inode(fpmd.pid(), 3).unwrap();
    let tcp_ino = fd_socket_inode(fpmd.pid(), 4).unwrap();
    fpmd.wait_ready(LONG);
    assert!(
        std::fs::read_link(format!("/proc/{}/exe", fpmd.pid()))
            .unwrap()
            .ends_with("fpmd"),
        "not fpmd at the activator's pid"
    );
    let log = fpmd.log();
    assert!(
        log.contains("replaced by the socket systemd passed as FileDescriptorName=www"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "socket activation: serving on {tcp} (its listen address)"
        )),
        "{log}"
    );

    let check_sockets = |fpmd: &Fpmd| {
        assert_eq!(fd_socket_inode(fpmd.pid(), 3), Some(unix_ino), "fd 3");
        assert_eq!(fd_socket_inode(fpmd.pid(), 4), Some(tcp_ino), "fd 4");
        assert_eq!(unix_listeners_at(&passed_unix), vec![unix_ino]);
        assert_eq!(tcp_listeners_on(port), vec![tcp_ino]);
        assert!(!configured.exists(), "fpmd bound www's configured address");
        assert!(unix_listeners_at(&configured).is_empty());
    };
    check_sockets(&fpmd);

    let unix_nginx = Nginx::start(
        &dir,
        NginxOpts::default()
            .upstream(format!("unix:{}", passed_unix.display()))
            .name("nginx-www"),
    );
    let tcp_nginx = Nginx::start(
        &dir,
        NginxOpts::default().upstream(tcp.clone()).name("nginx-api"),
    );
    for n in [&unix_nginx, &tcp_nginx] {
        let r = get(&n.url("/hello.php?name=activated"));
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().starts_with("hello activated"), "{}", r.text());
    }
    children_see_nothing(&fpmd, &[unix_ino, tcp_ino]);

    // A reload that starts a new generation of www, under load.
    let url = unix_nginx.url("/sleep.php?ms=5");
    let load = spawn_concurrent(4, 60, move |a, _, _| try_get_with(a, &url));
    wait_for(LONG, "requests before the reload", || load.done() >= 20);
    fpmd.rewrite(&cfg.clone().pool_replaced(www.line("env.RELOADED = \"1\"")));
    let line = fpmd.reload_ok();
    assert!(line.contains("generation"), "no new generation: {line}");
    let outcomes = load.join();
    all_done(&outcomes);
    check_sockets(&fpmd);
    let r = get(&tcp_nginx.url("/hello.php?name=after"));
    assert_eq!(r.status, 200, "{}", r.text());
    children_see_nothing(&fpmd, &[unix_ino, tcp_ino]);

    fpmd.signal(nix::sys::signal::Signal::SIGTERM);
    let st = fpmd.wait_exit(LONG).expect("fpmd still runs after SIGTERM");
    assert_eq!(st.code(), Some(0), "{}", fpmd.log());
    assert!(
        passed_unix.exists(),
        "fpmd unlinked the socket file systemd-socket-activate created"
    );
}

/// A shell as systemd starts a service: `LISTEN_PID=$$ LISTEN_FDS=N exec
/// fpmd`, with `sockets` at fds 3, 4, … and `names` as `LISTEN_FDNAMES`.
fn raw_launch(sockets: Vec<OwnedFd>, names: Option<&str>, addrs: Vec<Addr>) -> Launch {
    let names = names.map_or(String::new(), |n| format!("LISTEN_FDNAMES={n} "));
    Launch {
        prefix: vec![
            "/bin/sh".into(),
            "-c".into(),
            format!(
                "LISTEN_PID=$$ LISTEN_FDS={} {names}exec \"$0\" \"$@\"",
                sockets.len()
            ),
        ],
        fds: sockets,
        addrs: Some(addrs),
    }
}

/// Unnamed sockets (`LISTEN_FDNAMES` unset) bound by the test, a unix and
/// a TCP one, are matched by address; fpmd serves on exactly them. A third
/// pool no socket was passed for binds its own (and removes its file at
/// the stop, unlike the passed one's).
#[test]
fn listen_fds_matched_by_address() {
    let dir = TestDir::new();
    let path = dir.join("raw.sock");
    let unix = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = tcp.local_addr().unwrap();
    let (unix_ino, tcp_ino) = (fstat_inode(unix.as_fd()), fstat_inode(tcp.as_fd()));
    let cfg = FpmdConfig::new()
        .pool(Pool::www().unix_at(&path).max_children(2))
        .pool(Pool::new("api").tcp(addr.to_string()).max_children(1))
        .pool(Pool::new("own").max_children(1));
    let own = dir.join("own.sock");
    let launch = raw_launch(
        vec![OwnedFd::from(unix), OwnedFd::from(tcp)],
        None,
        vec![
            Addr::Unix(path.clone()),
            Addr::Tcp(addr),
            Addr::Unix(own.clone()),
        ],
    );
    let mut fpmd = Fpmd::spawn_launched(&dir, &cfg, &[], launch);
    fpmd.wait_ready(LONG);
    assert_eq!(unix_listeners_at(&path), vec![unix_ino]);
    assert_eq!(tcp_listeners_on(addr.port()), vec![tcp_ino]);
    let held = socket_inodes_of(fpmd.pid());
    assert!(
        held.contains(&unix_ino) && held.contains(&tcp_ino),
        "{held:?}"
    );

    let own_ino = unix_listeners_at(&own);
    assert_eq!(own_ino.len(), 1, "pool own has no socket of its own");
    assert!(held.contains(&own_ino[0]));
    for (i, upstream) in [
        format!("unix:{}", path.display()),
        addr.to_string(),
        format!("unix:{}", own.display()),
    ]
    .into_iter()
    .enumerate()
    {
        let n = Nginx::start(
            &dir,
            NginxOpts::default()
                .upstream(upstream.clone())
                .name(&format!("nginx-{i}")),
        );
        let r = get(&n.url("/sleep.php?ms=1"));
        assert_eq!(r.status, 200, "through {upstream}: {}", r.text());
        assert!(r.text().ends_with(" done"), "{}", r.text());
    }
    children_see_nothing(&fpmd, &[unix_ino, tcp_ino]);
    fpmd.signal(nix::sys::signal::Signal::SIGQUIT);
    let st = fpmd.wait_exit(LONG).expect("fpmd still runs after SIGQUIT");
    assert_eq!(st.code(), Some(0), "{}", fpmd.log());
    assert!(
        path.exists(),
        "fpmd unlinked a socket file it did not create"
    );
    assert!(!own.exists(), "fpmd left the socket file it bound");
}

/// A passed socket no pool matches is kept open (warned); a reload that
/// adds the pool it names serves on it; a reload that removes that pool
/// again leaves it open and its file in place.
#[test]
fn listen_fds_unmatched_socket_waits_for_its_pool() {
    let dir = TestDir::new();
    let www_path = dir.join("www.sock");
    let late_path = dir.join("late.sock");
    let www = std::os::unix::net::UnixListener::bind(&www_path).unwrap();
    let late = std::os::unix::net::UnixListener::bind(&late_path).unwrap();
    let late_ino = fstat_inode(late.as_fd());
    let cfg = FpmdConfig::new().pool(Pool::www().unix_at(&www_path).max_children(1));
    let launch = raw_launch(
        vec![OwnedFd::from(www), OwnedFd::from(late)],
        Some("unknown:late"),
        vec![Addr::Unix(www_path.clone())],
    );
    let mut fpmd = Fpmd::spawn_launched(&dir, &cfg, &[], launch);
    fpmd.wait_ready(LONG);
    let log = fpmd.log();
    assert!(
        log.contains(&format!(
            "{} (FileDescriptorName=late) matches no pool by name or address: kept open",
            late_path.display()
        )),
        "{log}"
    );
    assert!(socket_inodes_of(fpmd.pid()).contains(&late_ino));

    // The pool named "late" is added, configured elsewhere: it serves on
    // the passed socket.
    let elsewhere = dir.join("late-configured.sock");
    let with_late = cfg
        .clone()
        .pool(Pool::new("late").unix_at(&elsewhere).max_children(1));
    fpmd.rewrite(&with_late);
    fpmd.reload_ok();
    let n = Nginx::start(
        &dir,
        NginxOpts::default()
            .upstream(format!("unix:{}", late_path.display()))
            .name("nginx-late"),
    );
    let r = get(&n.url("/hello.php?name=late"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().starts_with("hello late"), "{}", r.text());
    assert!(!elsewhere.exists(), "fpmd bound the configured address");
    assert_eq!(unix_listeners_at(&late_path), vec![late_ino]);

    // Removed again: the socket stays open (systemd's), its file stays.
    fpmd.rewrite(&cfg);
    fpmd.reload_ok();
    assert!(socket_inodes_of(fpmd.pid()).contains(&late_ino));
    assert!(late_path.exists(), "fpmd unlinked systemd's socket file");
    assert_eq!(unix_listeners_at(&late_path), vec![late_ino]);
    fpmd.assert_running();
}

/// A socket named after a pool that fpmd cannot accept on (here a UDP
/// socket) stops the start: exit 78, naming fd and pool; fpmd binds
/// nothing of its own for the pool.
#[test]
fn listen_fds_named_socket_that_cannot_serve_is_refused() {
    let dir = TestDir::new();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = udp.local_addr().unwrap().port();
    let configured: PathBuf = dir.join("www.sock");
    let cfg = FpmdConfig::new().pool(Pool::www().unix_at(&configured).max_children(1));
    let launch = raw_launch(vec![OwnedFd::from(udp)], Some("www"), Vec::new());
    let mut fpmd = Fpmd::spawn_launched(&dir, &cfg, &[], launch);
    let st = fpmd.wait_exit(LONG).expect("fpmd still runs");
    let log = fpmd.log();
    assert_eq!(st.code(), Some(78), "{log}");
    assert!(
        log.contains("socket activation: fd 3 (FileDescriptorName=www) cannot serve pool 'www'")
            && log.contains("not a stream socket"),
        "{log}"
    );
    assert!(!configured.exists(), "fpmd bound a socket of its own");
    assert!(tcp_listeners_on(port).is_empty());
}

/// `fpmd upgrade` hands systemd's socket to the new binary as systemd's:
/// the new fpmd serves on the same socket (matched by its name again),
/// binds nothing of its own, and its stop leaves the file in place.
#[test]
fn upgrade_hands_systemd_sockets_over_as_systemds() {
    let dir = TestDir::new();
    let path = dir.join("act.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let ino = fstat_inode(listener.as_fd());
    let configured = dir.join("configured.sock");
    let cfg = FpmdConfig::new().pool(Pool::www().unix_at(&configured).max_children(1));
    let launch = raw_launch(
        vec![OwnedFd::from(listener)],
        Some("www"),
        vec![Addr::Unix(path.clone())],
    );
    let mut fpmd = Fpmd::spawn_launched(&dir, &cfg, &[], launch);
    fpmd.wait_ready(LONG);
    let old_pid = fpmd.pid();
    let nginx = Nginx::start(
        &dir,
        NginxOpts::default().upstream(format!("unix:{}", path.display())),
    );
    assert_eq!(get(&nginx.url("/hello.php")).status, 200);

    let r = fpmd.cli(&["upgrade"]);
    assert_eq!(r.code(), Some(0), "{r}");
    let st = fpmd.wait_exit(LONG).expect("the old fpmd still runs");
    assert_eq!(st.code(), Some(0), "{}", fpmd.log());
    let new_pid = fpmd
        .pid_file()
        .filter(|p| *p != old_pid)
        .expect("no new pid");
    assert!(procs::alive(new_pid), "the new fpmd is not running");
    let replaced = fpmd
        .log()
        .matches("replaced by the socket systemd passed as FileDescriptorName=www")
        .count();
    assert_eq!(
        replaced,
        2,
        "the new fpmd did not match the socket by its name:\n{}",
        fpmd.log()
    );
    assert!(socket_inodes_of(new_pid).contains(&ino));
    assert_eq!(unix_listeners_at(&path), vec![ino]);
    assert!(
        !configured.exists(),
        "the new fpmd bound the configured address"
    );
    let r = get(&nginx.url("/pid.php"));
    assert_eq!(r.status, 200, "{}", r.text());
    let served_by: i32 = r.text().trim().parse().unwrap();
    assert!(
        procs::descendants(new_pid)
            .iter()
            .any(|p| p.pid == served_by),
        "served by {served_by}, not a child of the new fpmd"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(new_pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    wait_for(LONG, "the new fpmd to exit", || !procs::alive(new_pid));
    assert!(path.exists(), "the new fpmd unlinked systemd's socket file");
}

trait Replace {
    fn pool_replaced(self, p: Pool) -> Self;
}

impl Replace for FpmdConfig {
    /// The configuration with the pool of `p`'s name replaced by `p`.
    fn pool_replaced(mut self, p: Pool) -> FpmdConfig {
        for q in self.pools.iter_mut().filter(|q| q.name == p.name) {
            *q = p.clone();
        }
        self
    }
}
