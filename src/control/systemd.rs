//! systemd's service notification protocol (`sd_notify(3)`), written
//! against the protocol, without libsystemd: one datagram of `KEY=VALUE`
//! lines, separated by `\n`, sent to the `AF_UNIX` socket named by
//! `$NOTIFY_SOCKET` (a path, or an abstract name when it starts with `@`).
//!
//! Owns: the notification address and the bytes of each datagram. Must not
//! touch: the daemon's life cycle (the daemon decides when to notify) or the
//! environment (`$NOTIFY_SOCKET` is read, never set or removed: changing the
//! environment of a running multi-threaded process is unsound, and systemd's
//! default `NotifyAccess=main` ignores a child that would inherit it).
//!
//! Without `$NOTIFY_SOCKET` (fpmd started from a shell, or `Type=simple`)
//! every call is a no-op. Tests give the address explicitly with
//! [`Notifier::new`]: the environment is process-global and tests run in
//! parallel.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use tracing::warn;

/// The variable systemd sets for a `Type=notify` service.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// One state line of a notification.
///
/// No `ERRNO=`: fpmd's start-up failures are an exit status (78,
/// `EX_CONFIG`, which systemd shows as `status=78/CONFIG`) and a log line;
/// an errno would say less than both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notify {
    /// `READY=1`: start-up, or a reload, is finished; every pool serves.
    Ready,
    /// `RELOADING=1` with `MONOTONIC_USEC=` (`CLOCK_MONOTONIC` now, in µs,
    /// as `Type=notify-reload` of systemd ≥ 253 requires; older systemd
    /// ignores it). A reload begins; send [`Notify::Ready`] when it is done.
    Reloading,
    /// `STOPPING=1`: a stop begins.
    Stopping,
    /// `STATUS=text`: one human line for `systemctl status`. A newline in
    /// the text would start another assignment: it is sent as a space.
    Status(String),
    /// `MAINPID=pid`: another process is now the main one (an upgrade that
    /// hands over to a new fpmd).
    MainPid(u32),
    /// `WATCHDOG=1`: the keep-alive ping of `WatchdogSec=`. Not sent yet:
    /// the packaged unit sets no `WatchdogSec=`.
    WatchdogPing,
}

/// Where notifications go: `$NOTIFY_SOCKET`'s address, or nowhere.
#[derive(Debug, Clone)]
pub struct Notifier {
    target: Target,
}

#[derive(Debug, Clone)]
enum Target {
    /// No `$NOTIFY_SOCKET`: not supervised by systemd's notify protocol.
    Disabled,
    /// The address, and the value it was given as (for messages).
    Socket(SocketAddr, String),
    /// `$NOTIFY_SOCKET` is set but unusable: each notification reports it.
    Invalid(String),
}

impl Notifier {
    /// The address in `$NOTIFY_SOCKET`; disabled when it is unset. An
    /// unusable value (relative path, `vsock:` address, too long) is kept
    /// as an error that every [`Notifier::notify`] returns.
    pub fn from_env() -> Notifier {
        Notifier::from_env_value(std::env::var_os(NOTIFY_SOCKET))
    }

    /// [`Notifier::from_env`] given the variable's value.
    fn from_env_value(value: Option<std::ffi::OsString>) -> Notifier {
        match value {
            None => Notifier::disabled(),
            Some(value) => Notifier::new(&value).unwrap_or_else(|e| Notifier {
                target: Target::Invalid(e.to_string()),
            }),
        }
    }

    /// Notifications to `address`, written as in `$NOTIFY_SOCKET`: an
    /// absolute path, or `@name` for the abstract socket `name`. Errors:
    /// anything else (`InvalidInput`), or a name longer than `sun_path`.
    pub fn new(address: impl AsRef<OsStr>) -> io::Result<Notifier> {
        let address = address.as_ref();
        let bytes = address.as_bytes();
        let addr = match bytes.first() {
            Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..])?,
            Some(b'/') => SocketAddr::from_pathname(address)?,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{NOTIFY_SOCKET}={}: not an absolute path or an @abstract name",
                        address.to_string_lossy()
                    ),
                ))
            }
        };
        Ok(Notifier {
            target: Target::Socket(addr, address.to_string_lossy().into_owned()),
        })
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Notifier {
        Notifier {
            target: Target::Disabled,
        }
    }

    /// Whether notifications are sent anywhere.
    pub fn enabled(&self) -> bool {
        !matches!(self.target, Target::Disabled)
    }

    /// Sends `state` as one datagram. `Ok(false)`: disabled (or `state` is
    /// empty), nothing sent; `Ok(true)`: sent. Errors: an unusable
    /// `$NOTIFY_SOCKET`, or the send failed (no socket there, refused).
    /// Blocks only if systemd's queue is full, as libsystemd's does.
    pub fn notify(&self, state: &[Notify]) -> io::Result<bool> {
        let addr = match &self.target {
            Target::Disabled => return Ok(false),
            Target::Invalid(e) => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, e.clone()))
            }
            Target::Socket(addr, _) => addr,
        };
        if state.is_empty() {
            return Ok(false);
        }
        let datagram = encode(state, monotonic_usec);
        let sock = UnixDatagram::unbound()?;
        sock.send_to_addr(datagram.as_bytes(), addr)?;
        Ok(true)
    }

    /// [`Notifier::notify`] for the daemon: a failure is logged as a
    /// warning and fpmd goes on (systemd then times the start out, or shows
    /// a stale status; fpmd itself serves either way).
    pub fn send(&self, state: &[Notify]) {
        if let Err(e) = self.notify(state) {
            warn!("cannot notify systemd ({}): {e}", self.describe());
        }
    }

    fn describe(&self) -> &str {
        match &self.target {
            Target::Socket(_, shown) => shown,
            _ => NOTIFY_SOCKET,
        }
    }
}

/// Sends `state` to `$NOTIFY_SOCKET` (see [`Notifier::notify`]); `Ok(false)`
/// and nothing done when the variable is unset.
pub fn notify(state: &[Notify]) -> io::Result<bool> {
    Notifier::from_env().notify(state)
}

/// The datagram: one line per item, in order, joined by `\n`, no trailing
/// newline. `now_usec` gives `MONOTONIC_USEC` for [`Notify::Reloading`].
fn encode(state: &[Notify], now_usec: fn() -> u64) -> String {
    let mut lines = Vec::with_capacity(state.len() + 1);
    for item in state {
        match item {
            Notify::Ready => lines.push("READY=1".to_string()),
            Notify::Reloading => {
                lines.push("RELOADING=1".to_string());
                lines.push(format!("MONOTONIC_USEC={}", now_usec()));
            }
            Notify::Stopping => lines.push("STOPPING=1".to_string()),
            Notify::Status(text) => lines.push(format!("STATUS={}", text.replace('\n', " "))),
            Notify::MainPid(pid) => lines.push(format!("MAINPID={pid}")),
            Notify::WatchdogPing => lines.push("WATCHDOG=1".to_string()),
        }
    }
    lines.join("\n")
}

/// `CLOCK_MONOTONIC` in microseconds, the clock systemd compares
/// `MONOTONIC_USEC` with.
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into memory we own; with
    // CLOCK_MONOTONIC it cannot fail on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A socket playing systemd's notification socket in a temp dir.
    fn listener() -> (tempfile::TempDir, std::path::PathBuf, UnixDatagram) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (dir, path, sock)
    }

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).expect("a datagram");
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    fn nothing_more(sock: &UnixDatagram) {
        sock.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        let e = sock.recv(&mut buf).expect_err("no further datagram");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn systemd_ready_with_status_is_one_datagram() {
        let (_dir, path, sock) = listener();
        let n = Notifier::new(&path).unwrap();
        assert!(n.enabled());
        let sent = n
            .notify(&[Notify::Ready, Notify::Status("2 pools, 8 children".into())])
            .unwrap();
        assert!(sent);
        assert_eq!(recv(&sock), "READY=1\nSTATUS=2 pools, 8 children");
        nothing_more(&sock);
    }

    #[test]
    fn systemd_each_state_line() {
        let (_dir, path, sock) = listener();
        let n = Notifier::new(&path).unwrap();
        for (state, bytes) in [
            (Notify::Ready, "READY=1"),
            (Notify::Stopping, "STOPPING=1"),
            (Notify::MainPid(4242), "MAINPID=4242"),
            (Notify::WatchdogPing, "WATCHDOG=1"),
            (Notify::Status("a\nb".into()), "STATUS=a b"),
            (Notify::Status(String::new()), "STATUS="),
        ] {
            assert!(n.notify(std::slice::from_ref(&state)).unwrap());
            assert_eq!(recv(&sock), bytes, "{state:?}");
        }
        nothing_more(&sock);
    }

    #[test]
    fn systemd_reloading_carries_clock_monotonic() {
        let (_dir, path, sock) = listener();
        let n = Notifier::new(&path).unwrap();
        let before = monotonic_usec();
        n.notify(&[Notify::Reloading]).unwrap();
        let after = monotonic_usec();
        let text = recv(&sock);
        let usec: u64 = text
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .unwrap_or_else(|| panic!("datagram {text:?}"))
            .parse()
            .unwrap_or_else(|e| panic!("datagram {text:?}: {e}"));
        assert!(
            before <= usec && usec <= after,
            "{before} <= {usec} <= {after}"
        );
    }

    #[test]
    fn systemd_encode_order_and_reload_then_ready() {
        let now = || 1_234_567_u64;
        assert_eq!(
            encode(
                &[Notify::Reloading, Notify::Status("reloading".into())],
                now
            ),
            "RELOADING=1\nMONOTONIC_USEC=1234567\nSTATUS=reloading"
        );
        assert_eq!(
            encode(
                &[Notify::Ready, Notify::Status("1 pool, 4 children".into())],
                now
            ),
            "READY=1\nSTATUS=1 pool, 4 children"
        );
        assert_eq!(
            encode(&[Notify::Stopping, Notify::Status("fast stop".into())], now),
            "STOPPING=1\nSTATUS=fast stop"
        );
        assert_eq!(encode(&[], now), "");
    }

    #[test]
    fn systemd_abstract_socket() {
        let name = format!("fpmd-test-notify-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sock = UnixDatagram::bind_addr(&addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = Notifier::new(format!("@{name}")).unwrap();
        assert!(n.notify(&[Notify::Stopping]).unwrap());
        assert_eq!(recv(&sock), "STOPPING=1");
    }

    #[test]
    fn systemd_disabled_sends_nothing() {
        let n = Notifier::disabled();
        assert!(!n.enabled());
        assert!(!n.notify(&[Notify::Ready]).unwrap());
        n.send(&[Notify::Ready]);
    }

    #[test]
    fn systemd_empty_state_sends_nothing() {
        let (_dir, path, sock) = listener();
        let n = Notifier::new(&path).unwrap();
        assert!(!n.notify(&[]).unwrap());
        nothing_more(&sock);
    }

    #[test]
    fn systemd_bad_addresses_are_refused() {
        for bad in ["", "relative/notify.sock", "vsock:2:1234"] {
            let e = Notifier::new(bad).expect_err(bad);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}: {e}");
        }
        let long = format!("/{}", "x".repeat(200));
        assert!(Notifier::new(&long).is_err());
        let long = format!("@{}", "x".repeat(200));
        assert!(Notifier::new(&long).is_err());
    }

    #[test]
    fn systemd_send_error_when_nobody_listens() {
        let dir = tempfile::tempdir().unwrap();
        let n = Notifier::new(dir.path().join("absent.sock")).unwrap();
        let e = n.notify(&[Notify::Ready]).expect_err("no socket there");
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        // The daemon's variant logs and goes on.
        n.send(&[Notify::Ready]);
    }

    #[test]
    fn systemd_env_value_unset_set_or_unusable() {
        assert!(!Notifier::from_env_value(None).enabled());

        let (_dir, path, sock) = listener();
        let n = Notifier::from_env_value(Some(path.into()));
        assert!(n.notify(&[Notify::Ready]).unwrap());
        assert_eq!(recv(&sock), "READY=1");

        // Set but unusable: every notification says so (the daemon logs it).
        let n = Notifier::from_env_value(Some("run/notify".into()));
        assert!(n.enabled());
        for _ in 0..2 {
            let e = n.notify(&[Notify::Ready]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("NOTIFY_SOCKET=run/notify"), "{e}");
        }
    }
}
