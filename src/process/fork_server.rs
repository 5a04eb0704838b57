//! fpmd's fork server: a php-cgi parent that forks a child only when fpmd
//! orders one (`pm.spawn = "prefork"`).
//!
//! php-cgi's pre-fork parent (`PHP_FCGI_CHILDREN`, `sapi/cgi/cgi_main.c`)
//! forks all its children at once and re-forks each one that exits, so by
//! itself it cannot follow `ondemand` or `dynamic`. The small library
//! `fork_server.c` (built by `build.rs`, embedded here, written next to
//! `sapi.php` at start) is preloaded into the parent (`LD_PRELOAD`):
//! php-cgi's `fork()` then waits for an order on a `SOCK_SEQPACKET`
//! socket ([`FPMD_FORK_FD`]); the order carries the new child's own
//! listening socket, which the child puts on fd 0 before it returns into
//! php-cgi. A forked child is then, to the slot table, what an exec'd
//! child is: one process, one socket, its pid known; only its start is a
//! fork of a loaded PHP (~1–2 ms) instead of an exec (~40 ms).
//!
//! The parent reports, one [`Report`] per message: ready (PHP loaded, the
//! first `fork()`), each child's pid as it forks it, each exit it reaps
//! (wait status), a fork that failed. fpmd closing its end makes the
//! parent exit (its children are stopped first).
//!
//! Must not touch: when a child is wanted (the supervisor decides).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::sys::socket::{self, ControlMessage, MsgFlags};
use tokio::io::unix::AsyncFd;

use crate::process::reap::ExitKind;

/// The library, as built from `fork_server.c`.
pub const LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fpmd-fork.so"));

/// The environment variable that names the parent's end of the order
/// socket (an fd number).
pub const FPMD_FORK_FD: &str = "FPMD_FORK_FD";

/// Where a chrooted parent finds the library (mounted read-only there with
/// PHP's runtime, `crate::process::sandbox::plan::host_runtime`).
pub const IN_CHROOT: &str = "/etc/fpmd/fpmd-fork.so";

static INSTALLED: OnceLock<PathBuf> = OnceLock::new();

/// Writes the library into `dir` (fpmd's `sapi.php` directory, readable by
/// every pool user: [`crate::process::sapi::Installed::for_everyone`]) as
/// `fpmd-fork-HASH.so`, mode 0644, once per process.
///
/// Errors: the file cannot be written; prefork pools then exec their
/// children (the caller says so).
pub fn install(dir: &Path) -> io::Result<&'static Path> {
    if let Some(p) = INSTALLED.get() {
        return Ok(p);
    }
    let path = crate::process::sapi::write_for_everyone(dir, "fpmd-fork", "so", LIBRARY)?;
    Ok(INSTALLED.get_or_init(|| path))
}

/// Where [`install`] put the library, if it did.
pub fn installed() -> Option<&'static Path> {
    INSTALLED.get().map(PathBuf::as_path)
}

/// The library as `config`'s php-cgi parent would see it (its path, or
/// [`IN_CHROOT`] in a chroot); `None` when it is not installed or the
/// pool's user cannot read it (a directory above it not searchable by
/// others, see [`crate::process::sapi::Installed::for_everyone`]): such a
/// `pm.spawn = "prefork"` pool execs its children instead.
pub fn for_pool(config: &crate::config::PoolConfig) -> Option<PathBuf> {
    let path = installed()?;
    let everyone = crate::process::sapi::installed().is_some_and(|i| i.for_everyone);
    if !everyone && config.user.uid != nix::unistd::geteuid().as_raw() {
        return None;
    }
    Some(match config.isolation.chroot {
        Some(_) => PathBuf::from(IN_CHROOT),
        None => path.to_path_buf(),
    })
}

/// One message of a php-cgi parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// PHP is loaded and the parent waits for its first order.
    Ready,
    /// It forked a child (in the order the orders came).
    Forked { pid: i32 },
    /// A child of it exited; it was reaped.
    Exited { pid: i32, kind: ExitKind },
    /// `fork()` failed with this errno (the order is used up).
    Failed { errno: i32 },
}

impl Report {
    /// Decodes one message (`struct report` of `fork_server.c`: three
    /// native-endian `int32`: kind, pid, status). `None`: not a message of
    /// the library.
    fn decode(b: &[u8]) -> Option<Report> {
        let word = |i: usize| -> Option<i32> {
            Some(i32::from_ne_bytes(
                b.get(i * 4..i * 4 + 4)?.try_into().ok()?,
            ))
        };
        if b.len() != 12 {
            return None;
        }
        let (kind, pid, status) = (word(0)?, word(1)?, word(2)?);
        match u8::try_from(kind).ok()? {
            b'r' => Some(Report::Ready),
            b'f' if pid > 0 => Some(Report::Forked { pid }),
            b'x' if pid > 0 => Some(Report::Exited {
                pid,
                kind: ExitKind::from_wait_status(status)?,
            }),
            b'e' => Some(Report::Failed { errno: status }),
            _ => None,
        }
    }
}

/// fpmd's end of one parent's order socket.
pub struct Orders {
    fd: AsyncFd<OwnedFd>,
}

/// A pair of order sockets: fpmd's end, and the parent's (to be made
/// inheritable in the child before exec, see [`inheritable`]).
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (ours, theirs) = socket::socketpair(
        socket::AddressFamily::Unix,
        socket::SockType::SeqPacket,
        None,
        socket::SockFlag::SOCK_CLOEXEC | socket::SockFlag::SOCK_NONBLOCK,
    )?;
    // The parent blocks on its end.
    let flags = nix::fcntl::fcntl(theirs.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(theirs.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(flags))?;
    Ok((ours, theirs))
}

/// Clears `FD_CLOEXEC` of `fd`, between fork and exec (async-signal-safe:
/// one `fcntl`).
///
/// # Safety
/// Only in the forked child before exec: `fd` must be open.
pub unsafe fn inheritable(fd: RawFd) -> bool {
    libc::fcntl(fd, libc::F_SETFD, 0) == 0
}

impl Orders {
    /// fpmd's end, from [`pair`]; needs a tokio runtime.
    pub fn new(fd: OwnedFd) -> io::Result<Orders> {
        // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, which keeps it
        // open for as long as it is registered.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)?;
        Ok(Orders { fd })
    }

    /// Orders one child, whose listening socket is `listener` (the child
    /// accepts on it as fd 0; fpmd keeps its path). Errors: the parent is
    /// gone (`EPIPE`, `ECONNRESET`), or its queue is full (`EAGAIN`, never
    /// seen: an order is 1 byte and the parent reads them as they come).
    pub fn order(&self, listener: &impl AsFd) -> io::Result<()> {
        let fds = [listener.as_fd().as_raw_fd()];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let iov = [io::IoSlice::new(b"o")];
        socket::sendmsg::<()>(
            self.fd.as_raw_fd(),
            &iov,
            &cmsg,
            MsgFlags::MSG_NOSIGNAL,
            None,
        )?;
        Ok(())
    }

    /// The parent's next report; `None` once it is gone (end of file, or
    /// an error reading).
    pub async fn next(&self) -> Option<Report> {
        loop {
            let mut guard = self.fd.readable().await.ok()?;
            let mut buf = [0u8; 16];
            match guard.try_io(|fd| {
                nix::sys::socket::recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())
                    .map_err(io::Error::from)
            }) {
                Err(_would_block) => continue,
                Ok(Ok(0)) => return None,
                Ok(Ok(n)) => match Report::decode(&buf[..n]) {
                    Some(r) => return Some(r),
                    None => continue,
                },
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(_)) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, pid: i32, status: i32) -> Vec<u8> {
        [i32::from(kind), pid, status]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect()
    }

    #[test]
    fn reports_decode_as_fork_server_c_writes_them() {
        assert_eq!(Report::decode(&msg(b'r', 7, 0)), Some(Report::Ready));
        assert_eq!(
            Report::decode(&msg(b'f', 42, 0)),
            Some(Report::Forked { pid: 42 })
        );
        // A wait status: exit code 3 is 3 << 8; SIGKILL is 9.
        assert_eq!(
            Report::decode(&msg(b'x', 42, 3 << 8)),
            Some(Report::Exited {
                pid: 42,
                kind: ExitKind::Code(3)
            })
        );
        assert!(matches!(
            Report::decode(&msg(b'x', 42, 9)),
            Some(Report::Exited {
                kind: ExitKind::Signal { signal: 9, .. },
                ..
            })
        ));
        assert_eq!(
            Report::decode(&msg(b'e', 0, libc::EAGAIN)),
            Some(Report::Failed {
                errno: libc::EAGAIN
            })
        );
        assert_eq!(Report::decode(&msg(b'f', 0, 0)), None);
        assert_eq!(Report::decode(&msg(b'q', 1, 0)), None);
        assert_eq!(Report::decode(&[0; 11]), None);
    }

    #[test]
    fn the_library_is_a_shared_object() {
        assert_eq!(&LIBRARY[..4], b"\x7fELF");
    }
}
