//! A stand-in for systemd's notification socket: a `UnixDatagram` bound in
//! the test dir that fpmd finds in `$NOTIFY_SOCKET`, as under a
//! `Type=notify` unit. Each `sd_notify` datagram is read back as text.
//!
//! [`start_notified`] starts fpmd under it and returns at `READY=1`; the
//! reload test follows it with SIGUSR2 and [`NotifySocket::expect_reload`].

use super::{Fpmd, FpmdConfig, TestDir};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

pub struct NotifySocket {
    sock: UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    /// Binds `<test dir>/notify.sock`.
    pub fn bind(dir: &TestDir) -> NotifySocket {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path)
            .unwrap_or_else(|e| panic!("bind notify socket {}: {e}", path.display()));
        NotifySocket { sock, path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `cfg` with fpmd's `NOTIFY_SOCKET` pointing here.
    pub fn env(&self, cfg: FpmdConfig) -> FpmdConfig {
        cfg.env(NOTIFY_SOCKET, &self.path.display().to_string())
    }

    /// The next datagram within `timeout`, or None.
    pub fn recv(&self, timeout: Duration) -> Option<String> {
        self.sock.set_nonblocking(false).unwrap();
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .unwrap();
        let mut buf = vec![0u8; 64 << 10];
        match self.sock.recv(&mut buf) {
            Ok(n) => Some(
                String::from_utf8(buf[..n].to_vec())
                    .unwrap_or_else(|e| panic!("notify datagram is not UTF-8: {e}")),
            ),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(e) => panic!("recv on {}: {e}", self.path.display()),
        }
    }

    /// The next datagram from `fpmd`; panics (with fpmd's log) after
    /// `timeout`, or as soon as fpmd exits without sending one.
    pub fn next_from(&self, fpmd: &mut Fpmd, timeout: Duration, what: &str) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(m) = self.recv(Duration::from_millis(50)) {
                return m;
            }
            if let Some(st) = fpmd.try_wait() {
                // It may have sent the datagram just before exiting.
                if let Some(m) = self.recv(Duration::from_millis(1)) {
                    return m;
                }
                panic!(
                    "fpmd exited ({st}) before sending {what}; its log:\n{}",
                    fpmd.log()
                );
            }
            if t0.elapsed() > timeout {
                panic!(
                    "no notify datagram ({what}) within {timeout:?}; fpmd's log:\n{}",
                    fpmd.log()
                );
            }
        }
    }

    /// Every datagram already queued, without waiting.
    pub fn pending(&self) -> Vec<String> {
        let mut all = Vec::new();
        while let Some(m) = self.recv(Duration::from_millis(1)) {
            all.push(m);
        }
        all
    }

    /// A reload as systemd ≥ 253 (`Type=notify-reload`) wants it: the next
    /// datagram is `RELOADING=1` with `MONOTONIC_USEC=` (CLOCK_MONOTONIC
    /// now), then, within `timeout`, one starting with `READY=1` (see
    /// [`check_reload`]). Call it right after signalling the reload.
    /// Returns both datagrams.
    pub fn expect_reload(&self, fpmd: &mut Fpmd, timeout: Duration) -> (String, String) {
        let before = monotonic_usec();
        let reloading = self.next_from(fpmd, timeout, "RELOADING=1");
        let after = monotonic_usec();
        let ready = self.next_from(fpmd, timeout, "READY=1 after RELOADING=1");
        check_reload(&reloading, &ready, before, after);
        (reloading, ready)
    }
}

/// `reloading` is `RELOADING=1\nMONOTONIC_USEC=<µs>` (other lines may
/// follow) with a time read at most 5 s before `before_usec` (the reload
/// was signalled shortly before) and not after `after_usec`; `ready` starts
/// with `READY=1`.
pub fn check_reload(reloading: &str, ready: &str, before_usec: u64, after_usec: u64) {
    let mut lines = reloading.lines();
    assert_eq!(lines.next(), Some("RELOADING=1"), "datagram {reloading:?}");
    let usec: u64 = lines
        .next()
        .and_then(|l| l.strip_prefix("MONOTONIC_USEC="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no MONOTONIC_USEC= after RELOADING=1: {reloading:?}"));
    assert!(
        usec + 5_000_000 >= before_usec && usec <= after_usec,
        "MONOTONIC_USEC={usec} is not CLOCK_MONOTONIC of the reload ({before_usec}..{after_usec})"
    );
    assert!(
        ready.starts_with("READY=1"),
        "after {reloading:?} came {ready:?}, not READY=1"
    );
}

/// CLOCK_MONOTONIC in µs, the clock of `MONOTONIC_USEC=`.
pub fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into memory we own.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) },
        0
    );
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Starts fpmd with `NOTIFY_SOCKET` pointing at a fresh [`NotifySocket`]
/// and returns once its first datagram, which must begin with `READY=1`,
/// has come; that datagram is returned too, with the time it took.
pub fn start_notified(dir: &TestDir, cfg: FpmdConfig) -> (Fpmd, NotifySocket, String, Duration) {
    let sd = NotifySocket::bind(dir);
    let cfg = sd.env(cfg);
    let t0 = Instant::now();
    let mut fpmd = Fpmd::spawn(dir, &cfg, &[]);
    let ready = sd.next_from(&mut fpmd, Duration::from_secs(30), "READY=1");
    let took = t0.elapsed();
    assert!(
        ready.starts_with("READY=1"),
        "fpmd's first notify datagram is {ready:?}, not READY=1"
    );
    (fpmd, sd, ready, took)
}
