//! A child's fd 1 and fd 2: the socket pair fpmd reads them from
//! ([`open`]), shared by a pre-fork parent and its children, and the
//! receiving side's reads.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The child's ends: what `spawn` makes its fd 1 and fd 2 (blocking, as a
/// pipe would be; not close-on-exec once dup'ed there).
#[derive(Debug)]
pub struct ChildStdio {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// fpmd's ends (non-blocking, close-on-exec), for [`forward`]. `stdout` is
/// `None` when it is not caught (the child's fd 1 is `/dev/null`).
#[derive(Debug)]
pub struct Readers {
    pub(super) stdout: Option<OwnedFd>,
    pub(super) stderr: OwnedFd,
}

/// Creates a child's fd 1 and fd 2 and fpmd's ends of them: with `catch`
/// (`catch_workers_output`), one `SO_PASSCRED` unix socket per stream;
/// without, `/dev/null` for stdout and a socket for stderr (for start-up
/// output, see the module documentation). Errors: socketpair, setsockopt,
/// fcntl or opening `/dev/null` failed (out of fds).
pub fn open(catch: bool) -> io::Result<(ChildStdio, Readers)> {
    let (err_r, err_w) = socket()?;
    let (out_r, out_w) = if catch {
        let (r, w) = socket()?;
        (Some(r), w)
    } else {
        (
            None,
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")?
                .into(),
        )
    };
    Ok((
        ChildStdio {
            stdout: out_w,
            stderr: err_w,
        },
        Readers {
            stdout: out_r,
            stderr: err_r,
        },
    ))
}

/// A unix stream socketpair: fpmd's end (non-blocking, `SO_PASSCRED`,
/// shut for writing), the child's end (blocking).
pub(super) fn socket() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType};
    let (r, w) = socket::socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )?;
    socket::setsockopt(&r, socket::sockopt::PassCred, &true)?;
    nix::fcntl::fcntl(
        w.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )?;
    let _ = socket::shutdown(r.as_raw_fd(), socket::Shutdown::Write);
    Ok((r, w))
}

/// Reads what children wrote on one socket: the byte count and the pid of
/// the process that wrote them (from `SCM_CREDENTIALS`; the kernel never
/// merges two writers' bytes into one read). `Ok((0, _))`: every writer
/// has closed it. Errors: `WouldBlock` when nothing is there.
pub(super) fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<i32>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(libc::ucred);
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_DONTWAIT)?;
    let pid = msg.cmsgs()?.find_map(|c| match c {
        ControlMessageOwned::ScmCredentials(cred) => Some(cred.pid()),
        _ => None,
    });
    Ok((msg.bytes, pid))
}

/// Bytes waiting in a socket's receive queue (`FIONREAD`); 0 on error.
pub(super) fn queued(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into `n`.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    if r < 0 {
        0
    } else {
        n.max(0) as usize
    }
}
