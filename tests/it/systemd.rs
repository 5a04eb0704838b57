//! systemd's notify protocol, as under `Type=notify`: fpmd started with
//! `NOTIFY_SOCKET` pointing at a datagram socket of the test sends
//! `READY=1` with a `STATUS=` line only once its pool accepts connections
//! and its first children run, nothing while it serves, and `STOPPING=1`
//! when a stop begins (SIGQUIT or SIGTERM). A `NOTIFY_SOCKET` nobody
//! listens on is logged, never fatal.

use crate::harness::fcgi;
use crate::harness::fpmd::describe_status;
use crate::harness::systemd::{self, NOTIFY_SOCKET};
use crate::harness::*;
use nix::sys::signal::Signal;
use std::time::Instant;

/// fpmd under a stand-in systemd; READY, a request, then `sig` and its
/// `STOPPING=1` datagram, which must read `stopping`. With `in_flight_ms`,
/// a request of that many ms runs when the signal comes: STOPPING=1 must
/// come at the start of the stop, while it still runs.
fn ready_then_stopping(sig: Signal, stopping: &str, in_flight_ms: Option<u32>) {
    let dir = TestDir::new();
    let port = free_port();
    let cfg = FpmdConfig::new()
        .pool(Pool::www().tcp(format!("127.0.0.1:{port}")).max_children(2))
        .log_level("debug");
    let (mut fpmd, sd, ready, took) = start_notified(&dir, cfg);
    // READY=1 came only once the pool accepts and its children run.
    assert!(
        fpmd.addr(0).accepts(),
        "READY=1 before the pool accepts; log:\n{}",
        fpmd.log()
    );
    // Spawns are logged before READY=1 is sent: they are in the log now.
    let log = fpmd.log();
    assert!(
        log.contains("child started") || log.contains("php-cgi parent started"),
        "READY=1 before any php-cgi was started; log:\n{log}"
    );
    assert!(!fpmd.children().is_empty(), "no php-cgi at READY=1");
    assert_eq!(ready, "READY=1\nSTATUS=1 pool, up to 2 children");
    eprintln!("READY=1 {took:?} after fpmd was started");

    // It serves at once.
    let params = fcgi::params_for(&dir.docroot(), "hello.php", "", "GET", 0);
    let (recs, _) = fcgi::exchange(
        fpmd.addr(0).tcp(),
        &fcgi::request(1, 0, &params, b""),
        1,
        LONG,
    );
    let (status, _, body) = fcgi::cgi_response(&fcgi::stdout_of(&recs, 1));
    assert_eq!(
        (status, String::from_utf8_lossy(&body).lines().next()),
        (200, Some("hello world")),
        "first request after READY=1"
    );
    assert_eq!(
        sd.pending(),
        Vec::<String>::new(),
        "datagrams while serving"
    );

    let busy = in_flight_ms.map(|ms| {
        let addr = fpmd.addr(0).tcp();
        let query = format!("ms={ms}&mark=busy");
        let params = fcgi::params_for(&dir.docroot(), "sleep.php", &query, "GET", 0);
        let h = std::thread::spawn(move || {
            let (recs, _) = fcgi::exchange(addr, &fcgi::request(1, 0, &params, b""), 1, LONG);
            fcgi::cgi_response(&fcgi::stdout_of(&recs, 1))
        });
        wait_for(LONG, "the request running in PHP", || {
            dir.mark("busy").is_some()
        });
        h
    });

    fpmd.signal(sig);
    let t0 = Instant::now();
    let msg = sd.next_from(&mut fpmd, LONG, "STOPPING=1");
    let stopping_after = t0.elapsed();
    assert_eq!(msg, format!("STOPPING=1\nSTATUS={stopping}"), "after {sig}");
    if let Some(h) = busy {
        assert!(
            !h.is_finished() && fpmd.running(),
            "STOPPING=1 only after the in-flight request ({stopping_after:?})"
        );
        let (status, _, body) = h.join().unwrap();
        let body = String::from_utf8_lossy(&body).into_owned();
        assert!(
            status == 200 && body.ends_with(" done"),
            "in-flight request: {status} {body:?}"
        );
    }
    let st = fpmd
        .wait_exit(LONG)
        .unwrap_or_else(|| panic!("fpmd still running 30 s after {sig}"));
    let exited_after = t0.elapsed();
    assert_eq!(st.code(), Some(0), "exit status after {sig}");
    assert_eq!(
        sd.pending(),
        Vec::<String>::new(),
        "datagrams after STOPPING=1"
    );
    eprintln!(
        "{sig}: STOPPING=1 after {stopping_after:?}, fpmd exited ({}) after {exited_after:?}",
        describe_status(&st)
    );
}

#[test]
fn sd_notify_ready_after_listening_then_stopping_on_sigquit() {
    ready_then_stopping(
        Signal::SIGQUIT,
        "graceful stop: waiting for in-flight requests",
        Some(1000),
    );
}

#[test]
fn sd_notify_stopping_on_sigterm() {
    ready_then_stopping(Signal::SIGTERM, "fast stop", None);
}

#[test]
fn sd_notify_socket_nobody_listens_on_is_not_fatal() {
    let dir = TestDir::new();
    let absent = dir.join("nobody.sock");
    let cfg = FpmdConfig::new()
        .pool(Pool::www().max_children(1))
        .env(NOTIFY_SOCKET, &absent.display().to_string());
    let mut fpmd = Fpmd::start(&dir, cfg);
    wait_for(LONG, "the failed READY=1 logged", || {
        fpmd.log().contains("cannot notify systemd")
    });
    fpmd.assert_running();
    fpmd.signal(Signal::SIGTERM);
    let st = fpmd
        .wait_exit(LONG)
        .expect("fpmd still running after SIGTERM");
    assert_eq!(st.code(), Some(0), "exit status; log:\n{}", fpmd.log());
}

/// The check the reload test uses, against fpmd's own notifier (no
/// daemon): RELOADING=1 with CLOCK_MONOTONIC, then READY=1.
#[test]
fn sd_notify_reload_check_helper() {
    use ::fpmd::control::systemd::{Notifier, Notify};
    let dir = TestDir::new();
    let sd = NotifySocket::bind(&dir);
    let n = Notifier::new(sd.path()).unwrap();
    let before = systemd::monotonic_usec();
    n.notify(&[Notify::Reloading]).unwrap();
    let after = systemd::monotonic_usec();
    n.notify(&[
        Notify::Ready,
        Notify::Status("1 pool, up to 4 children".into()),
    ])
    .unwrap();
    let got = sd.pending();
    assert_eq!(got.len(), 2, "{got:?}");
    systemd::check_reload(&got[0], &got[1], before, after);
    assert_eq!(got[1], "READY=1\nSTATUS=1 pool, up to 4 children");
}
