//! Issue 2, item 9: bad FastCGI input sent raw to a TCP listener closes
//! only that connection and logs one line, while 20 good requests through
//! nginx (keep-alive connections to the same listener) all succeed.
//! Also: FCGI_GET_VALUES is answered by fpmd, and a raw good request works.

use crate::harness::fcgi::{self, *};
use crate::harness::http::{assert_all_200, spawn_concurrent, try_get_with};
use crate::harness::*;
use std::io::{ErrorKind, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::Duration;

fn tcp_stack() -> Stack {
    let pool = Pool::www()
        .max_children(4)
        .tcp(format!("127.0.0.1:{}", free_port()));
    Stack::start_with(
        FpmdConfig::new().pool(pool),
        NginxOpts::default().keepalive(),
    )
}

/// Runs `bad` against the pool's TCP listener while 20 good requests run
/// through nginx; then checks the good ones, fpmd, and its log.
fn with_bad_client(bad: impl FnOnce(&Stack, SocketAddr)) {
    let mut s = tcp_stack();
    s.fpmd.wait_workers(4, Duration::from_secs(30));
    let addr = s.fpmd.addr(0).tcp();
    // Open nginx's keep-alive connections first, so that they live through the bad input.
    for _ in 0..4 {
        assert_eq!(get(&s.url("/pid.php")).status, 200);
    }
    let log_mark = s.fpmd.log_len();

    let url = s.url("/sleep.php?ms=300&mark=good");
    let good = spawn_concurrent(20, 1, move |a, t, _| try_get_with(a, &format!("{url}{t}")));
    // The bad input arrives while every child is busy and good requests wait.
    let marks = || {
        (0..20)
            .filter(|t| s.dir.mark(&format!("good{t}")).is_some())
            .count()
    };
    wait_for(
        Duration::from_secs(30),
        "the 4 children to be busy with good requests",
        || marks() >= 4,
    );
    bad(&s, addr);
    let out = good.join();
    assert_all_200(&out);
    for o in &out {
        assert!(
            o.text().ends_with(" done"),
            "truncated body: {:?}",
            o.text()
        );
    }

    wait_for(
        Duration::from_secs(10),
        "a log line about the bad connection",
        || !s.fpmd.log_lines_since(log_mark).is_empty(),
    );
    holds_for(Duration::from_millis(500), || {
        s.fpmd.log_lines_since(log_mark).len() <= 1
    });
    let lines = s.fpmd.log_lines_since(log_mark);
    eprintln!("fpmd logged: {lines:#?}");
    assert_eq!(
        lines.len(),
        1,
        "expected one log line about the bad connection, got: {lines:#?}"
    );

    s.fpmd.assert_running();
    for _ in 0..5 {
        assert_eq!(get(&s.url("/pid.php")).status, 200);
    }
    assert_eq!(
        s.fpmd.workers().len(),
        4,
        "children after the bad input: {:?}",
        s.fpmd.children()
    );
    let ngx = s.nginx.error_log();
    assert!(
        !ngx.contains("[error]"),
        "nginx saw errors on its connections:\n{ngx}"
    );
}

fn expect_closed(c: &mut std::net::TcpStream, within: Duration, what: &str) {
    let took = wait_closed(c, within)
        .unwrap_or_else(|| panic!("{what}: connection still open after {within:?}"));
    eprintln!("{what}: closed after {took:?}");
}

#[test]
fn random_bytes() {
    with_bad_client(|_, addr| {
        let mut c = connect(addr);
        let mut junk = noise(42, 4096);
        junk[0] = 0xa5; // not FastCGI version 1
        let _ = c.write_all(&junk); // the server may close while we write
        expect_closed(&mut c, Duration::from_secs(5), "random bytes");
    });
}

#[test]
fn truncated_header() {
    with_bad_client(|_, addr| {
        let mut c = connect(addr);
        send(&mut c, &begin_request(1, 0)[..3]);
        c.shutdown(Shutdown::Write).unwrap();
        expect_closed(&mut c, Duration::from_secs(5), "truncated header");
    });
}

#[test]
fn record_announcing_65535_bytes_then_close() {
    with_bad_client(|_, addr| {
        let mut c = connect(addr);
        let mut b = begin_request(1, 0);
        b.extend(header(PARAMS, 1, 65535, 0));
        b.extend(noise(7, 1000));
        send(&mut c, &b);
        drop(c);
    });
}

#[test]
fn unknown_record_type() {
    with_bad_client(|_, addr| {
        let mut c = connect(addr);
        send(&mut c, &record(42, 1, &[0; 8]));
        expect_closed(&mut c, Duration::from_secs(5), "unknown record type");
    });
}

#[test]
fn second_begin_request_on_busy_connection() {
    with_bad_client(|s, addr| {
        let mut c = connect(addr);
        let params = fcgi::params_for(&s.dir.docroot(), "sleep.php", "ms=1000", "GET", 0);
        let mut b = request(1, KEEP_CONN, &params, b"");
        b.extend(begin_request(2, KEEP_CONN));
        send(&mut c, &b);
        expect_closed(&mut c, Duration::from_secs(10), "second BEGIN_REQUEST");
    });
}

#[test]
fn params_that_never_end() {
    with_bad_client(|_, addr| {
        let mut c = connect(addr);
        send(&mut c, &begin_request(1, 0));
        let value = vec![b'v'; 60_000];
        let mut sent = 0usize;
        let cap = 256 << 20;
        let err = loop {
            let rec = record(
                PARAMS,
                1,
                &name_value(format!("HTTP_X_{sent}").as_bytes(), &value),
            );
            match c.write_all(&rec) {
                Ok(()) => sent += rec.len(),
                Err(e) => break e,
            }
            assert!(
                sent < cap,
                "fpmd accepted {sent} bytes of PARAMS for one request without closing"
            );
        };
        eprintln!("fpmd closed after {sent} bytes of PARAMS ({err})");
        assert!(
            !matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "fpmd stopped reading PARAMS after {sent} bytes but kept the connection open"
        );
    });
}

#[test]
fn full_request_then_vanish() {
    with_bad_client(|s, addr| {
        let mut c = connect(addr);
        let params = fcgi::params_for(&s.dir.docroot(), "sleep.php", "ms=500", "GET", 0);
        send(&mut c, &request(1, 0, &params, b""));
        drop(c);
    });
}

#[test]
fn get_values_answered_by_fpmd() {
    let s = tcp_stack();
    let mut c = connect(s.fpmd.addr(0).tcp());
    let mut q = Vec::new();
    for n in ["FCGI_MPXS_CONNS", "FCGI_MAX_CONNS", "FCGI_MAX_REQS"] {
        q.extend(name_value(n.as_bytes(), b""));
    }
    send(&mut c, &record(GET_VALUES, 0, &q));
    let (recs, _) = read_records(&mut c, Duration::from_secs(10), |r| {
        r.iter().any(|r| r.ty == GET_VALUES_RESULT)
    });
    let res = recs
        .iter()
        .find(|r| r.ty == GET_VALUES_RESULT)
        .expect("no FCGI_GET_VALUES_RESULT");
    assert_eq!(res.id, 0);
    let pairs = decode_pairs(&res.content);
    eprintln!("GET_VALUES_RESULT: {pairs:?}");
    assert!(
        pairs.contains(&("FCGI_MPXS_CONNS".into(), "0".into())),
        "{pairs:?}"
    );
}

#[test]
fn raw_request_is_served() {
    let s = tcp_stack();
    let mut c = connect(s.fpmd.addr(0).tcp());
    let body = noise(3, 100_000);
    let params = fcgi::params_for(&s.dir.docroot(), "body.php", "", "POST", body.len());
    // The same request twice on one kept connection, the body in small records.
    for id in [1u16, 2] {
        let mut b = begin_request(id, KEEP_CONN);
        b.extend(stream(PARAMS, id, &encode_params(&params)));
        for chunk in body.chunks(1000) {
            b.extend(record(STDIN, id, chunk));
        }
        b.extend(record(STDIN, id, &[]));
        send(&mut c, &b);
        let (recs, end) = read_records(&mut c, Duration::from_secs(20), |r| has_end_request(r, id));
        assert_eq!(
            end,
            End::Stopped,
            "no END_REQUEST for request {id}: {recs:?}"
        );
        let out = String::from_utf8_lossy(&stdout_of(&recs, id)).into_owned();
        let expect = format!("100000 {}", md5_hex(&body));
        assert!(out.ends_with(&expect), "request {id}: {out:?}");
    }
}

#[test]
fn closed_connection_is_never_dispatched() {
    let s = tcp_stack();
    s.fpmd.wait_workers(4, Duration::from_secs(30));
    // Every child busy for 1 s.
    let url = s.url("/sleep.php?ms=1000&mark=busy");
    let busy = spawn_concurrent(4, 1, move |a, t, _| try_get_with(a, &format!("{url}{t}")));
    wait_for(Duration::from_secs(30), "4 busy children", || {
        (0..4).all(|t| s.dir.mark(&format!("busy{t}")).is_some())
    });
    // A whole request, queued, whose client leaves before a child is free.
    let mut c = connect(s.fpmd.addr(0).tcp());
    let params = fcgi::params_for(&s.dir.docroot(), "sleep.php", "ms=0&mark=ghost", "GET", 0);
    send(&mut c, &request(1, 0, &params, b""));
    drop(c);
    assert_all_200(&busy.join());
    // Children are free again; a later request runs, the abandoned one never does.
    assert_eq!(get(&s.url("/sleep.php?ms=0&mark=after")).status, 200);
    assert!(s.dir.mark("after").is_some());
    assert!(
        s.dir.mark("ghost").is_none(),
        "the request of a client that had left was run"
    );
}
