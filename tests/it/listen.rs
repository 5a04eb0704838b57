//! Issue 2, item 4: unix, IPv4, IPv6 and bare-port listeners; socket owner,
//! group and mode; clients outside listen.allowed_clients are turned away
//! before anything is read.

use crate::harness::fcgi::{self, connect_from, read_records, wait_closed, End};
use crate::harness::phpfpm::{PhpFpm, PhpFpmOpts};
use crate::harness::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::time::Duration;

fn uid(user: &str) -> u32 {
    nix::unistd::User::from_name(user)
        .unwrap()
        .unwrap()
        .uid
        .as_raw()
}
fn gid(group: &str) -> u32 {
    nix::unistd::Group::from_name(group)
        .unwrap()
        .unwrap()
        .gid
        .as_raw()
}

#[test]
fn unix_socket_owner_group_mode() {
    let cfg = FpmdConfig::new()
        .pool(Pool::new("a").lines(&[
            r#"listen.owner = "www-data""#,
            r#"listen.group = "www-data""#,
            r#"listen.mode = "0660""#,
        ]))
        .pool(Pool::new("b").max_children(1).lines(&[
            r#"listen.owner = "nobody""#,
            r#"listen.group = "nogroup""#,
            r#"listen.mode = "0600""#,
        ]));
    let s = Stack::start_with(cfg, NginxOpts::default());
    for (pool, user, group, mode) in [
        ("a", "www-data", "www-data", 0o660),
        ("b", "nobody", "nogroup", 0o600),
    ] {
        let path = s.dir.join(format!("{pool}.sock"));
        let m = std::fs::metadata(&path).unwrap();
        assert!(
            m.file_type().is_socket(),
            "{} is not a socket",
            path.display()
        );
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            (uid(user), gid(group), mode),
            "owner, group, mode of {}",
            path.display()
        );
    }
    assert_eq!(get(&s.url("/hello.php")).status, 200);
}

fn serves_over(listen: String) {
    let s = Stack::start(Pool::www().tcp(listen.clone()));
    let r = get(&s.url("/hello.php?name=tcp"));
    assert_eq!(r.status, 200, "through {listen}: {}", r.text());
    assert!(r.text().starts_with("hello tcp"));
}

#[test]
fn tcp_ipv4_listener() {
    serves_over(format!("127.0.0.1:{}", free_port()));
}

#[test]
fn tcp_ipv6_listener() {
    serves_over(format!("[::1]:{}", free_port_v6()));
}

/// A FastCGI request for hello.php straight to `addr` (no web server):
/// how it ended and its STDOUT.
fn hello_over(s: &Stack, addr: &str) -> (End, String) {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let params = fcgi::params_for(&s.dir.docroot(), "hello.php", "name=dual", "GET", 0);
    let (recs, end) = fcgi::exchange(
        addr,
        &fcgi::request(1, 0, &params, b""),
        1,
        Duration::from_secs(10),
    );
    (
        end,
        String::from_utf8_lossy(&fcgi::stdout_of(&recs, 1)).into_owned(),
    )
}

/// A bare port is php-fpm's implicit address (php-src's
/// sapi/fpm/tests/socket-ipv4-fallback.phpt): `[::]:PORT`, so IPv4 and
/// IPv6 clients; with `[::]:PORT` taken for IPv6 only, `0.0.0.0:PORT`
/// with php-fpm's NOTICE; with the port taken on both families, exit 78
/// and, under `log_format = "php-fpm"`, php-fpm's two lines.
#[test]
fn tcp_bare_port_listener() {
    serves_over(free_port().to_string());

    let port = free_port_v6();
    let s = Stack::start(Pool::www().tcp(port.to_string()));
    assert!(
        s.fpmd.log().contains(&format!(
            "listening on {port} ([::]:{port}: IPv6 and IPv4 clients)"
        )),
        "{}",
        s.fpmd.log()
    );
    for addr in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let (end, out) = hello_over(&s, &addr);
        assert!(
            out.contains("hello dual"),
            "a client of the bare port {port} through {addr} got {end:?}: {out}"
        );
    }
    drop(s);

    // [::]:PORT taken for IPv6 only: IPv4 clients are served.
    let port = free_port_v6();
    let v6only = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
    v6only.set_only_v6(true).unwrap();
    let any6: std::net::SocketAddr = format!("[::]:{port}").parse().unwrap();
    v6only.bind(&any6.into()).unwrap();
    v6only.listen(1).unwrap();
    let s = Stack::start(Pool::www().tcp(port.to_string()));
    let (end, out) = hello_over(&s, &format!("127.0.0.1:{port}"));
    assert!(
        out.contains("hello dual"),
        "IPv4 after the fallback: {end:?}: {out}"
    );
    for line in [
        "Failed implicitly binding to ::, retrying with 0.0.0.0".to_string(),
        format!("listening on {port} (0.0.0.0:{port}: IPv4 clients only)"),
    ] {
        assert!(
            s.fpmd.log().contains(&line),
            "no {line:?}:\n{}",
            s.fpmd.log()
        );
    }
    drop((s, v6only));

    // The port taken on both families.
    let port = free_port_v6();
    let _both = std::net::TcpListener::bind(format!("[::]:{port}")).unwrap();
    let t = TestDir::new();
    let cfg = FpmdConfig::new().pool(Pool::www().tcp(port.to_string()));
    refused_as_in_use(&t, &cfg, &port.to_string());
    let t = TestDir::new();
    let mut f = Fpmd::spawn(&t, &cfg.global(r#"log_format = "php-fpm""#), &[]);
    let st = f.wait_exit(LONG).expect("fpmd on a taken port still runs");
    assert_eq!(st.code(), Some(78), "{}", f.log());
    let lines: Vec<String> = f
        .log()
        .lines()
        .filter(|l| l.contains("ERROR: "))
        .map(|l| l[l.find("ERROR: ").unwrap()..].to_string())
        .collect();
    assert_eq!(
        lines,
        [
            format!("ERROR: unable to bind listening socket for address '{port}': Address already in use (98)"),
            "ERROR: FPM initialization failed".to_string(),
        ],
        "{}",
        f.log()
    );
}

/// php-fpm binds `[::]:PORT` without `IPV6_V6ONLY`, so it takes IPv4
/// clients too (as IPv4-mapped addresses), and `listen.allowed_clients`
/// matches such a client by its IPv4 address (php-src's
/// sapi/fpm/tests/socket-ipv6-any.phpt, socket-ipv4-allowed-clients.phpt,
/// bug68421-ipv6-access-log.phpt). A web server set up for php-fpm with
/// `fastcgi_pass 127.0.0.1:9000` against `listen = [::]:9000` must work.
#[test]
fn ipv6_any_listener_takes_ipv4_clients_too() {
    let port = free_port();
    let s = Stack::start(Pool::www().tcp(format!("[::]:{port}")));
    for addr in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let (end, out) = hello_over(&s, &addr);
        assert!(
            out.contains("hello dual"),
            "a client of [::]:{port} through {addr} got {end:?}: {out}"
        );
    }
    drop(s);

    // listen.allowed_clients = 127.0.0.1 on [::]: the IPv4 client is
    // allowed, ::1 is not.
    let port = free_port();
    let s = Stack::start(
        Pool::www()
            .tcp(format!("[::]:{port}"))
            .line(r#"listen.allowed_clients = ["127.0.0.1"]"#),
    );
    let (end, out) = hello_over(&s, &format!("127.0.0.1:{port}"));
    assert!(
        out.contains("hello dual"),
        "127.0.0.1 refused: {end:?}: {out}"
    );
    let (end, out) = hello_over(&s, &format!("[::1]:{port}"));
    assert!(
        end == End::Closed && out.is_empty(),
        "::1 is not in listen.allowed_clients but got {end:?}: {out}"
    );
    drop(s);

    // The other way round, under log_format = "php-fpm": the IPv4 client
    // is logged as itself (not ::ffff:127.0.0.1), in php-fpm's words.
    let port = free_port();
    let t = TestDir::new();
    let cfg = FpmdConfig::new().global(r#"log_format = "php-fpm""#).pool(
        Pool::www()
            .tcp(format!("[::]:{port}"))
            .line(r#"listen.allowed_clients = ["::1"]"#),
    );
    let f = Fpmd::start(&t, cfg);
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = wait_closed(&mut c, LONG);
    wait_for(LONG, "the refusal in php-fpm's words", || {
        f.log().contains(
            "WARNING: [pool www] Connection disallowed: IP address '127.0.0.1' has been dropped.",
        )
    });
}

#[test]
fn client_outside_allowed_clients_is_closed_before_any_record() {
    let port = free_port();
    let pool = Pool::www()
        .tcp(format!("127.0.0.1:{port}"))
        .line(r#"listen.allowed_clients = ["127.0.0.1"]"#);
    let s = Stack::start_with(
        FpmdConfig::new().pool(pool),
        NginxOpts::default().bind("127.0.0.1"),
    );
    let addr = s.fpmd.addr(0).tcp();
    let outside: std::net::IpAddr = "127.0.0.2".parse().unwrap();

    // An allowed client is served.
    assert_eq!(get(&s.url("/pid.php")).status, 200);

    // A client from 127.0.0.2 that sends nothing is closed at once (php-cgi
    // itself would wait 5 s for a record, a server that reads first forever).
    let mut c = connect_from(outside, addr);
    let took = wait_closed(&mut c, Duration::from_secs(10))
        .expect("connection from 127.0.0.2 still open after 10 s");
    eprintln!("connection from 127.0.0.2 closed after {took:?}");
    assert!(took < Duration::from_secs(2), "closed only after {took:?}");

    // A whole request from 127.0.0.2 gets no answer and never runs.
    let mut c = connect_from(outside, addr);
    let params = fcgi::params_for(&s.dir.docroot(), "sleep.php", "ms=0&mark=outside", "GET", 0);
    let _ = std::io::Write::write_all(&mut c, &fcgi::request(1, 0, &params, b""));
    let (recs, end) = read_records(&mut c, Duration::from_secs(10), |_| false);
    assert_eq!(end, End::Closed);
    assert!(recs.is_empty(), "a disallowed client got records: {recs:?}");

    // nginx connecting from 127.0.0.2 gets a 502.
    let outside_nginx = Nginx::start(
        &s.dir,
        NginxOpts::default()
            .upstream(s.fpmd.upstream(0))
            .bind("127.0.0.2")
            .name("nginx-outside"),
    );
    assert_eq!(get(&outside_nginx.url("/pid.php")).status, 502);

    assert!(
        s.dir.mark("outside").is_none(),
        "the request from a disallowed client ran"
    );
    wait_for(
        Duration::from_secs(5),
        "fpmd logs the refused address",
        || s.fpmd.log().contains("127.0.0.2"),
    );
}

/// Starts fpmd on `cfg` in `t` and expects it to refuse to start: exit 78,
/// a message naming `address` as in use, nothing of it left running.
fn refused_as_in_use(t: &TestDir, cfg: &FpmdConfig, address: &str) {
    let mut f = Fpmd::spawn(t, cfg, &[]);
    let st = f.wait_exit(Duration::from_secs(30)).unwrap_or_else(|| {
        panic!(
            "fpmd on the taken address {address} still runs after 30 s:\n{}",
            f.log()
        )
    });
    let log = f.log();
    assert_eq!(
        st.code(),
        Some(78),
        "fpmd on the taken address {address}:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains(&format!("listen address {address} is already in use"))),
        "the refusal does not name {address} as in use:\n{log}"
    );
    let gone = wait_until(Duration::from_secs(5), || f.tagged().is_empty());
    assert!(
        gone,
        "the refused fpmd left processes: {}",
        procs::describe(&f.tagged())
    );
}

/// Issue 10: a live socket of a running php-fpm (unix, then TCP) is not
/// stolen: fpmd refuses to start, naming the address, and php-fpm keeps
/// serving on it (same socket file, same master, 200 through nginx).
#[test]
fn live_php_fpm_socket_is_not_stolen() {
    // Unix.
    let t = TestDir::new();
    let fpm = PhpFpm::start(&t);
    let nginx = Nginx::start(
        &t,
        NginxOpts::default()
            .upstream(fpm.upstream())
            .name("nginx-php-fpm"),
    );
    assert_eq!(
        get(&nginx.url("/pid.php")).status,
        200,
        "php-fpm serves before"
    );
    let ino = inode(&fpm.socket);
    let cfg = FpmdConfig::new().pool(Pool::www().unix_at(&fpm.socket));
    refused_as_in_use(&t, &cfg, &fpm.socket.display().to_string());
    assert_eq!(
        inode(&fpm.socket),
        ino,
        "fpmd replaced php-fpm's socket file"
    );
    let r = get(&nginx.url("/pid.php"));
    assert_eq!(
        r.status,
        200,
        "php-fpm after fpmd was refused: {}",
        r.text()
    );
    assert!(
        !fpm.children().is_empty(),
        "php-fpm lost its children: {}",
        fpm.log()
    );

    // TCP.
    let t = TestDir::new();
    let port = free_port();
    let fpm = PhpFpm::start_with(&t, PhpFpmOpts::default().tcp(port));
    let nginx = Nginx::start(
        &t,
        NginxOpts::default()
            .upstream(fpm.upstream())
            .name("nginx-php-fpm"),
    );
    let address = format!("127.0.0.1:{port}");
    let cfg = FpmdConfig::new().pool(Pool::www().tcp(address.clone()));
    refused_as_in_use(&t, &cfg, &address);
    let r = get(&nginx.url("/pid.php"));
    assert_eq!(
        r.status,
        200,
        "php-fpm after fpmd was refused: {}",
        r.text()
    );
}

/// Issue 10: a second fpmd, with a configuration of its own (its own
/// directory and control socket), on the unix socket or the TCP address
/// a running fpmd serves, refuses to start, naming the address; the first
/// one keeps serving on the same socket. (C15 in reload.rs covers a second
/// fpmd on the same configuration and the stale socket after kill -9.)
#[test]
fn second_fpmd_does_not_steal_a_live_socket() {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut s = Stack::start_with(
        FpmdConfig::new()
            .pool(Pool::new("unix").max_children(1))
            .pool(Pool::new("tcp").max_children(1).tcp(address.clone())),
        NginxOpts::default(),
    );
    let sock = s.dir.join("unix.sock");
    let ino = inode(&sock);
    let other = TestDir::new();
    refused_as_in_use(
        &other,
        &FpmdConfig::new().pool(Pool::www().unix_at(&sock)),
        &sock.display().to_string(),
    );
    refused_as_in_use(
        &other,
        &FpmdConfig::new().pool(Pool::www().tcp(address.clone())),
        &address,
    );
    assert_eq!(
        inode(&sock),
        ino,
        "the second fpmd replaced the live socket file"
    );
    s.fpmd.assert_running();
    let r = get(&s.nginx.url("/pid.php"));
    assert_eq!(
        r.status,
        200,
        "the first fpmd's unix pool after the refusals: {}",
        r.text()
    );
    let tcp_nginx = Nginx::start(
        &s.dir,
        NginxOpts::default()
            .upstream(s.fpmd.upstream(1))
            .name("nginx-tcp"),
    );
    let r = get(&tcp_nginx.url("/pid.php"));
    assert_eq!(
        r.status,
        200,
        "the first fpmd's TCP pool after the refusals: {}",
        r.text()
    );
}
