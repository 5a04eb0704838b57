//! Issue 2, item 4: unix, IPv4, IPv6 and bare-port listeners; socket owner,
//! group and mode; clients outside listen.allowed_clients are turned away
//! before anything is read.

use crate::harness::fcgi::{self, connect_from, read_records, wait_closed, End};
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

#[test]
fn tcp_bare_port_listener() {
    serves_over(free_port().to_string());
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
