//! The netlink plumbing that fpmd's two netlink users share: the
//! `NETLINK_SOCK_DIAG` query of [`super::peer`] and the process events
//! connector of `process::proc_events`. Owns: opening the socket, the
//! `struct nlmsghdr` both write (`linux/netlink.h`), sending, receiving,
//! binding to multicast groups, and the native-endian fields both read.
//! Must not touch: what the messages say (each user builds and decodes
//! its own payload).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{MsgFlags, NetlinkAddr};

/// Size of `struct nlmsghdr`: len (u32), type (u16), flags (u16), seq
/// (u32), port id (u32), in native byte order.
pub const NLMSG_HDR: usize = 16;

/// `NLMSG_ERROR`: the message is a `struct nlmsgerr` (a negative errno,
/// then the request's header).
pub const NLMSG_ERROR: u16 = 2;

/// A netlink socket: `socket(AF_NETLINK, kind, protocol)`, where `kind` is
/// `SOCK_RAW` or `SOCK_DGRAM` ORed with `SOCK_CLOEXEC`/`SOCK_NONBLOCK`
/// and `protocol` a `NETLINK_*` number (nix names no `NETLINK_CONNECTOR`,
/// hence the raw call). Errors: socket(2)'s, e.g. `EPROTONOSUPPORT` on a
/// kernel without that family.
pub fn socket(kind: libc::c_int, protocol: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) with integer arguments; the fd is owned at
    // once.
    let raw = unsafe { libc::socket(libc::AF_NETLINK, kind, protocol) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh, valid fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A message of `len` bytes in all (header included) starting with its
/// `struct nlmsghdr`; the caller appends the payload.
pub fn message(len: usize, kind: u16, flags: u16, seq: u32, port: u32) -> Vec<u8> {
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&port.to_ne_bytes());
    msg
}

/// Binds `fd` to the multicast `groups` (a bit mask), the kernel
/// choosing the port id. Errors: bind(2)'s, e.g. `EPERM` without
/// `CAP_NET_ADMIN` for groups that need it.
pub fn bind_groups(fd: RawFd, groups: u32) -> io::Result<()> {
    nix::sys::socket::bind(fd, &NetlinkAddr::new(0, groups))?;
    Ok(())
}

/// Sends `msg` whole on `fd` (to the kernel). Errors: send(2)'s.
pub fn send(fd: RawFd, msg: &[u8]) -> io::Result<()> {
    nix::sys::socket::send(fd, msg, MsgFlags::empty())?;
    Ok(())
}

/// Receives one message into `buf`: its length (a longer datagram is cut
/// to `buf`). Errors: recv(2)'s (`WouldBlock` with `MSG_DONTWAIT` and
/// nothing queued; `ENOBUFS` when the kernel dropped messages).
pub fn recv(fd: RawFd, buf: &mut [u8], flags: MsgFlags) -> io::Result<usize> {
    Ok(nix::sys::socket::recv(fd, buf, flags)?)
}

/// The native-endian u16 at byte `at` of `b`, if `b` holds it.
pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// The native-endian u32 at byte `at` of `b`, if `b` holds it.
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
