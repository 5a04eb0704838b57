//! Which process holds the other end of a unix socket connection.
//!
//! Owns: the `NETLINK_SOCK_DIAG` query for a unix socket's peer inode
//! (`UDIAG_SHOW_PEER`, the same query `ss -x` makes) and the scan of
//! `/proc/PID/fd` that finds the process holding that inode. Used under the
//! pre-fork strategy, where every child of a php-cgi parent accepts on the
//! same socket and fpmd must learn which child took which connection
//! (design.md, Memory). Must not touch: anything but these lookups.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use nix::sys::socket::MsgFlags;

use super::netlink::{self, u16_at, u32_at, NLMSG_ERROR, NLMSG_HDR};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const UDIAG_SHOW_PEER: u32 = 0x0000_0004;
const UNIX_DIAG_PEER: u16 = 2;
const UNIX_DIAG_MSG: usize = 16;

/// Inode number of the socket behind `fd` (what `/proc/PID/fd/N` shows as
/// `socket:[INODE]`).
pub fn socket_inode(fd: RawFd) -> io::Result<u64> {
    let st = nix::sys::stat::fstat(fd)?;
    Ok(st.st_ino)
}

/// Inode of the peer of the connected unix socket whose inode is `inode`.
/// Errors: netlink unavailable (kernel without `unix_diag`), the socket is
/// unknown, or it has no peer.
pub fn peer_inode(inode: u64) -> io::Result<u64> {
    let sock = netlink::socket(libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG)?;
    // seq 1; port id 0: the kernel.
    let mut req = netlink::message(
        NLMSG_HDR + 24,
        SOCK_DIAG_BY_FAMILY,
        libc::NLM_F_REQUEST as u16,
        1,
        0,
    );
    // struct unix_diag_req
    req.push(libc::AF_UNIX as u8);
    req.push(0);
    req.extend_from_slice(&0u16.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // all states
    req.extend_from_slice(&(inode as u32).to_ne_bytes());
    req.extend_from_slice(&UDIAG_SHOW_PEER.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // no cookie
    req.extend_from_slice(&u32::MAX.to_ne_bytes());

    netlink::send(sock.as_raw_fd(), &req)?;
    let mut buf = [0u8; 1024];
    let n = netlink::recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty())?;
    parse_peer_reply(&buf[..n])
}

/// Parses the kernel's answer: nlmsghdr, struct unix_diag_msg, then rtattrs.
fn parse_peer_reply(b: &[u8]) -> io::Result<u64> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "short sock_diag reply");
    let len = u32_at(b, 0).ok_or_else(bad)? as usize;
    let kind = u16_at(b, 4).ok_or_else(bad)?;
    if kind == NLMSG_ERROR {
        let errno = u32_at(b, NLMSG_HDR).ok_or_else(bad)? as i32;
        return Err(io::Error::from_raw_os_error(-errno));
    }
    let end = len.min(b.len());
    let mut at = NLMSG_HDR + UNIX_DIAG_MSG;
    while at + 4 <= end {
        let rta_len = u16_at(b, at).ok_or_else(bad)? as usize;
        let rta_type = u16_at(b, at + 2).ok_or_else(bad)?;
        if rta_len < 4 {
            break;
        }
        if rta_type == UNIX_DIAG_PEER {
            return Ok(u32_at(b, at + 4).ok_or_else(bad)? as u64);
        }
        at += (rta_len + 3) & !3;
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "socket has no peer",
    ))
}

/// The children of `pid` (from `/proc/PID/task/*/children`).
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    out
}

/// The process among `candidates` that has an fd on socket `inode`.
pub fn holder_of(candidates: &[i32], inode: u64) -> Option<i32> {
    let want = format!("socket:[{inode}]");
    candidates.iter().copied().find(|pid| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .map(|l| l.as_os_str() == want.as_str())
                .unwrap_or(false)
        })
    })
}

/// The pid of the child of `parent` that holds the other end of our
/// connection `fd`. `None` while no child has accepted it yet.
pub fn child_on_connection(fd: RawFd, parent: i32) -> Option<i32> {
    let ours = socket_inode(fd).ok()?;
    let theirs = peer_inode(ours).ok()?;
    holder_of(&children_of(parent), theirs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixListener, UnixStream};

    #[test]
    fn finds_the_peer_of_a_connection_in_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let l = UnixListener::bind(&path).unwrap();
        let c = UnixStream::connect(&path).unwrap();
        let (a, _) = l.accept().unwrap();
        let ours = socket_inode(c.as_raw_fd()).unwrap();
        let theirs = peer_inode(ours).unwrap();
        assert_eq!(theirs, socket_inode(a.as_raw_fd()).unwrap());
        let me = std::process::id() as i32;
        assert_eq!(holder_of(&[me], theirs), Some(me));
        assert_eq!(holder_of(&[me], 1), None);
    }

    #[test]
    fn short_and_error_replies() {
        assert!(parse_peer_reply(&[0; 4]).is_err());
        let mut err = vec![0u8; 20];
        err[0..4].copy_from_slice(&20u32.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[16..20].copy_from_slice(&(-2i32 as u32).to_ne_bytes());
        assert_eq!(parse_peer_reply(&err).unwrap_err().raw_os_error(), Some(2));
    }
}
