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
//! A parent shared by pools (`pm.spawn = "shared"`,
//! [`crate::process::shared_parent`]) gets the other kind of order,
//! [`Orders::order_shared`]: with the socket, the pool's [`ChildSetup`],
//! which the child applies before it serves.
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

/// What a child forked by a shared parent takes from its pool before it
/// serves (an `'s'` order of `fork_server.c`, `struct shared_order`),
/// built once per pool generation: its output, limits, working directory,
/// cgroup, priority, user, dumpable, `no_new_privs`, Landlock, environment
/// and process title, in the order of [`crate::process::sandbox`]'s header.
pub struct ChildSetup {
    message: Vec<u8>,
    /// stdout, stderr, the Landlock ruleset if any, the cgroup.procs files.
    fds: Vec<OwnedFd>,
}

/// Largest order `fork_server.c` reads (its `order_buf`), in bytes;
/// `fpmd -t` checks that a shared pool's fits.
pub const MAX_ORDER: usize = crate::config::SHARED_ORDER_MAX;

impl ChildSetup {
    /// The setup of `spec`'s children (a pool's spec as
    /// [`crate::process::spec::child_spec`] built it), with their stdout
    /// and stderr, the pool's Landlock ruleset
    /// ([`crate::process::sandbox::landlock_fd`]) and its cgroup.procs
    /// files opened for writing. Errors: the environment and title do not
    /// fit in one order ([`MAX_ORDER`], `E2BIG`), or a string holds a NUL
    /// byte (`EINVAL`).
    pub fn new(
        spec: &crate::process::spawn::ChildSpec,
        stdout: OwnedFd,
        stderr: OwnedFd,
        landlock: Option<OwnedFd>,
        cgroups: Vec<OwnedFd>,
    ) -> io::Result<ChildSetup> {
        use std::os::unix::ffi::OsStrExt;
        let nul = |b: &[u8]| b.contains(&0);
        let cwd = spec.sandbox.cwd.as_os_str().as_bytes();
        let mut env = Vec::new();
        for (k, v) in &spec.env {
            let (k, v) = (k.as_bytes(), v.as_bytes());
            if nul(k) || nul(v) || k.contains(&b'=') {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            env.extend_from_slice(k);
            env.push(b'=');
            env.extend_from_slice(v);
            env.push(0);
        }
        let title = spec.arg0.as_bytes();
        if nul(cwd) || nul(title) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let switch_user = spec.switches_user();
        let (files_set, files) = (
            spec.sandbox.rlimit_files.is_some(),
            spec.sandbox.rlimit_files,
        );
        let (core_set, core) = (spec.sandbox.rlimit_core.is_some(), spec.sandbox.rlimit_core);
        // u64::MAX is RLIM_INFINITY, which is u64::MAX too on Linux.
        let header: [i64; 17] = [
            i64::from(spec.uid),
            i64::from(spec.gid),
            i64::from(switch_user),
            spec.groups.len() as i64,
            i64::from(files_set),
            files.unwrap_or(0) as i64,
            i64::from(core_set),
            core.unwrap_or(0) as i64,
            i64::from(spec.sandbox.priority.is_some()),
            i64::from(spec.sandbox.priority.unwrap_or(0)),
            i64::from(spec.sandbox.dumpable),
            i64::from(spec.sandbox.no_new_privs),
            i64::from(landlock.is_some()),
            cgroups.len() as i64,
            cwd.len() as i64,
            env.len() as i64,
            title.len() as i64,
        ];
        let mut message = Vec::with_capacity(1 + 8 * 17 + env.len() + 256);
        message.push(b's');
        for w in header {
            message.extend_from_slice(&w.to_ne_bytes());
        }
        for g in &spec.groups {
            message.extend_from_slice(&g.to_ne_bytes());
        }
        message.extend_from_slice(cwd);
        message.extend_from_slice(&env);
        message.extend_from_slice(title);
        if message.len() > MAX_ORDER {
            return Err(io::Error::other(format!(
                    "the pool's environment and groups take {} bytes, more than a shared php-cgi parent's order holds ({MAX_ORDER})",
                message.len()
            )));
        }
        let mut fds = vec![stdout, stderr];
        fds.extend(landlock);
        fds.extend(cgroups);
        Ok(ChildSetup { message, fds })
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
        self.send(b"o", &[listener.as_fd().as_raw_fd()])
    }

    /// One message with its fds.
    fn send(&self, message: &[u8], fds: &[RawFd]) -> io::Result<()> {
        let cmsg = [ControlMessage::ScmRights(fds)];
        let iov = [io::IoSlice::new(message)];
        socket::sendmsg::<()>(
            self.fd.as_raw_fd(),
            &iov,
            &cmsg,
            MsgFlags::MSG_NOSIGNAL,
            None,
        )?;
        Ok(())
    }

    /// Orders one child of a shared parent (`pm.spawn = "shared"`) for the
    /// pool `setup` was made for: its listening socket `listener`, then
    /// what the child applies before it serves. Errors as [`Orders::order`].
    pub fn order_shared(&self, listener: &impl AsFd, setup: &ChildSetup) -> io::Result<()> {
        let mut fds = Vec::with_capacity(1 + setup.fds.len());
        fds.push(listener.as_fd().as_raw_fd());
        fds.extend(setup.fds.iter().map(|f| f.as_raw_fd()));
        self.send(&setup.message, &fds)
    }

    /// Waits until the socket may take an order again, then runs `send`,
    /// which says whether an order still met a full queue (`EAGAIN`): then
    /// the readiness is cleared, so that the next wait is for the parent
    /// to read.
    pub async fn when_writable(&self, send: impl FnOnce() -> bool) {
        if let Ok(mut guard) = self.fd.writable().await {
            if send() {
                guard.clear_ready();
            }
        }
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

    /// The `'s'` order's layout, as `fork_server.c`'s `shared_order_whole`
    /// checks it: the header's lengths add up to the message, and the
    /// strings follow in their order.
    #[test]
    fn a_shared_order_is_laid_out_as_fork_server_c_reads_it() {
        let config = crate::pool::tests::test_config();
        let mut spec = crate::process::spec::child_spec(&config, "/run/x.sock".into());
        spec.env = vec![("SITE".into(), "a".into()), ("USER".into(), "www".into())];
        spec.groups = vec![33, 44];
        spec.sandbox.rlimit_files = Some(777);
        let null = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let setup = ChildSetup::new(&spec, null(), null(), None, vec![null()]).unwrap();
        let m = &setup.message;
        assert_eq!(m[0], b's');
        let word = |i: usize| i64::from_ne_bytes(m[1 + 8 * i..9 + 8 * i].try_into().unwrap());
        assert_eq!(
            (word(0), word(1)),
            (i64::from(spec.uid), i64::from(spec.gid))
        );
        assert_eq!(word(3), 2, "ngroups");
        assert_eq!((word(4), word(5)), (1, 777), "rlimit_files");
        assert_eq!(word(6), 0, "rlimit_core unset");
        assert_eq!(word(12), 0, "no Landlock");
        assert_eq!(word(13), 1, "one cgroup file");
        let (cwd, env, title) = (word(14) as usize, word(15) as usize, word(16) as usize);
        assert_eq!(m.len(), 1 + 8 * 17 + 4 * 2 + cwd + env + title);
        let strings = &m[1 + 8 * 17 + 8..];
        assert_eq!(
            &strings[..cwd],
            spec.sandbox.cwd.as_os_str().as_encoded_bytes()
        );
        assert_eq!(&strings[cwd..cwd + env], b"SITE=a\0USER=www\0");
        assert_eq!(&strings[cwd + env..], spec.arg0.as_bytes());
        assert_eq!(setup.fds.len(), 3, "stdout, stderr, the cgroup file");
        // A NUL in the environment cannot be sent.
        spec.env.push(("BAD".into(), "a\0b".into()));
        assert!(ChildSetup::new(&spec, null(), null(), None, Vec::new()).is_err());
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
