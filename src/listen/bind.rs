//! Binding a pool's listening socket with php-fpm's `listen.*` options, and
//! re-applying them to a socket that is kept: `listen.owner`,
//! `listen.group` and `listen.mode` on a unix socket's file, `listen()`
//! again for `listen.backlog` (Linux updates the backlog of a listening
//! socket in place).
//!
//! Owns: the system calls that create a socket and its file. Must not
//! touch: which sockets exist (the [`ListenerTable`](super::ListenerTable)
//! decides) or connections.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use std::net::{Ipv4Addr, SocketAddr};

use socket2::{Domain, SockAddr, Socket, Type};
use tracing::{info, warn};

use crate::config::{Listen, ListenAddress};

/// Errors binding a listening socket, or re-applying `listen.*` to a kept
/// one; each names the address.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("listen address {address} is already in use{detail}")]
    InUse { address: String, detail: String },
    #[error("cannot listen on {address}: {source}")]
    Io { address: String, source: io::Error },
}

impl BindError {
    /// php-fpm's line for the error (`fpm_sockets_get_listening_socket`,
    /// logged with ZLOG_SYSERROR, which appends `strerror(errno) (errno)`):
    /// `unable to bind listening socket for address '9000': Address
    /// already in use (98)`, the address as the configuration wrote it.
    pub fn php_fpm_line(&self) -> String {
        let (address, errno) = match self {
            BindError::InUse { address, .. } => (address, Some(libc::EADDRINUSE)),
            BindError::Io { address, source } => (address, source.raw_os_error()),
        };
        let why = match errno {
            Some(n) => format!("{} ({n})", nix::errno::Errno::from_raw(n).desc()),
            None => self.to_string(),
        };
        format!("unable to bind listening socket for address '{address}': {why}")
    }

    fn io(address: &ListenAddress, source: io::Error) -> BindError {
        if source.kind() == io::ErrorKind::AddrInUse {
            BindError::InUse {
                address: address.to_string(),
                detail: String::new(),
            }
        } else {
            BindError::Io {
                address: address.to_string(),
                source,
            }
        }
    }
}

/// The file of a unix listening socket, as it was when fpmd bound (or
/// adopted) it. Its device and inode tell fpmd's file from one that
/// replaced it: fpmd changes or unlinks only its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SocketFile {
    pub path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// Records the socket file now at `path`. Errors: there is none, or it
    /// is not a socket.
    pub fn at(path: &Path) -> io::Result<SocketFile> {
        let meta = std::fs::symlink_metadata(path)?;
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a socket", path.display()),
            ));
        }
        Ok(SocketFile {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// Whether the file at the path is still the one recorded.
    pub fn is_current(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.file_type().is_socket() && m.dev() == self.dev && m.ino() == self.ino)
    }

    /// Removes the file if it is still the one recorded (never one that
    /// another process put there since).
    pub fn unlink(&self) {
        if !self.is_current() {
            return;
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                warn!("cannot remove socket file {}: {e}", self.path.display());
            }
        }
    }
}

/// The kernel's cap on listen backlogs (`net.core.somaxconn`).
pub fn somaxconn() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `somaxconn` as last read by a bind (0: never read, or unreadable).
static SOMAXCONN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The queue length `listen.backlog` really gives: capped by
/// `net.core.somaxconn` as the kernel caps a listening socket's queue (as
/// last read when a socket was bound). fpmd bounds its own queue of
/// waiting requests by the same figure, and the status page shows it as
/// `listen queue len` (case C04).
pub fn effective_backlog(backlog: u32) -> u32 {
    match SOMAXCONN.load(std::sync::atomic::Ordering::Relaxed) {
        0 => backlog,
        max => backlog.min(max),
    }
}

/// `listen.backlog` for `listen(2)`, warning when `somaxconn` caps it.
fn backlog(pool: &str, listen: &Listen) -> i32 {
    let backlog = listen.backlog;
    let max = somaxconn();
    SOMAXCONN.store(max.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    if let Some(max) = max {
        if backlog > max {
            warn!(pool = %pool, "listen.backlog = {backlog} is capped by the kernel to net.core.somaxconn = {max}");
        }
    }
    backlog.min(i32::MAX as u32) as i32
}

/// Binds a new listening socket for `listen` (non-blocking, close-on-exec).
/// A unix socket gets `listen.owner`, `listen.group` and `listen.mode`; a
/// stale socket file nobody listens on is replaced, a live one is not, and
/// a path that is not a socket is never touched. On error nothing is left
/// behind (the file bound here is removed).
pub(crate) fn bind(pool: &str, listen: &Listen) -> Result<(Socket, Option<SocketFile>), BindError> {
    let address = &listen.address;
    let err = |e| BindError::io(address, e);
    let backlog = backlog(pool, listen);
    match address {
        ListenAddress::Tcp(addr) => Ok((bind_tcp(*addr, backlog).map_err(err)?, None)),
        ListenAddress::Port(port) => {
            let any6 = address.tcp().expect("a port is a TCP address");
            let socket = bind_tcp(any6, backlog).or_else(|_| {
                // php-fpm's fallback and words (fpm_sockets.c), its error
                // for `[::]` silenced.
                info!("Failed implicitly binding to ::, retrying with 0.0.0.0");
                bind_tcp(
                    SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), *port),
                    backlog,
                )
            });
            match socket.map_err(err) {
                Ok(socket) => Ok((socket, None)),
                Err(BindError::InUse { address, .. }) => Err(BindError::InUse {
                    address,
                    detail: " (on [::], then on 0.0.0.0)".into(),
                }),
                Err(e) => Err(e),
            }
        }
        ListenAddress::Unix(path) => {
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                if !meta.file_type().is_socket() {
                    // Never delete what is not a socket (a typo in the path
                    // must not cost a file).
                    return Err(BindError::Io {
                        address: address.to_string(),
                        source: io::Error::new(
                            io::ErrorKind::AlreadyExists,
                            "the path exists and is not a socket",
                        ),
                    });
                }
                if std::os::unix::net::UnixStream::connect(path).is_ok() {
                    return Err(BindError::InUse {
                        address: address.to_string(),
                        detail: ": another process accepts connections on it".into(),
                    });
                }
                // A stale socket left by a process that is gone.
                std::fs::remove_file(path).map_err(err)?;
            }
            let socket = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(err)?;
            socket
                .bind(&SockAddr::unix(path).map_err(err)?)
                .map_err(err)?;
            let file = match SocketFile::at(path) {
                Ok(f) => f,
                Err(e) => {
                    let _ = std::fs::remove_file(path);
                    return Err(err(e));
                }
            };
            let finish = || -> io::Result<()> {
                set_owner_mode(path, listen)?;
                socket.listen(backlog)?;
                socket.set_nonblocking(true)
            };
            if let Err(e) = finish() {
                file.unlink();
                return Err(err(e));
            }
            Ok((socket, Some(file)))
        }
    }
}

/// A listening TCP socket bound to `addr` (SO_REUSEADDR, non-blocking).
/// As php-fpm, which leaves IPV6_V6ONLY at Linux's default (off), `[::]`
/// takes IPv4 clients too, as IPv4-mapped addresses; any other IPv6
/// address only IPv6 ones.
fn bind_tcp(addr: SocketAddr, backlog: i32) -> io::Result<Socket> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let socket = Socket::new(domain, Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(!addr.ip().is_unspecified())?;
    }
    socket.bind(&SockAddr::from(addr))?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// Re-applies `listen.backlog` (a second `listen()`) and, when `file` is
/// given, `listen.owner`, `listen.group` and `listen.mode` to a socket fpmd
/// keeps.
pub(crate) fn reapply(
    pool: &str,
    listen: &Listen,
    socket: &Socket,
    file: Option<&SocketFile>,
) -> Result<(), BindError> {
    let err = |e| BindError::io(&listen.address, e);
    if let Some(file) = file {
        set_owner_mode(&file.path, listen).map_err(err)?;
    }
    socket.listen(backlog(pool, listen)).map_err(err)
}

fn set_owner_mode(path: &Path, listen: &Listen) -> io::Result<()> {
    // Also when the owner is fpmd's own user: a group other than fpmd's
    // effective gid needs the chown (a non-root fpmd may give its file to
    // any group it is a member of; the configuration check refuses others).
    if listen.owner.is_some() || listen.group.is_some() {
        std::os::unix::fs::chown(path, listen.owner, listen.group).map_err(|e| {
            let show = |id: Option<u32>| id.map_or("-".into(), |g| g.to_string());
            io::Error::new(
                e.kind(),
                format!("chown {}:{}: {e}", show(listen.owner), show(listen.group)),
            )
        })?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(listen.mode))?;
    if listen.acl_users.is_empty() && listen.acl_groups.is_empty() {
        return Ok(());
    }
    let acl = posix_acl(listen.mode, &listen.acl_users, &listen.acl_groups);
    let name = c"system.posix_acl_access";
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: both strings are NUL-terminated and `acl` outlives the call.
    let r = unsafe {
        libc::setxattr(
            c_path.as_ptr(),
            name.as_ptr(),
            acl.as_ptr().cast(),
            acl.len(),
            0,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("setting the ACL of listen.acl_users/acl_groups: {e}"),
        ));
    }
    Ok(())
}

/// The `system.posix_acl_access` value (the kernel's `posix_acl_xattr`
/// layout, `include/uapi/linux/posix_acl_xattr.h`: version 2, then
/// entries of tag, permissions and id, little-endian, sorted by tag then
/// id) that php-fpm's `fpm_unix_set_socket_permissions` builds with
/// libacl: the mode's owner, group and other bits, read and write for each
/// of `users` and `groups`, and the mask `acl_calc_mask` computes.
pub(crate) fn posix_acl(mode: u32, users: &[u32], groups: &[u32]) -> Vec<u8> {
    const UNDEFINED: u32 = u32::MAX;
    let (owner, group, other) = ((mode >> 6) & 7, (mode >> 3) & 7, mode & 7);
    let mut users = users.to_vec();
    users.sort_unstable();
    users.dedup();
    let mut groups = groups.to_vec();
    groups.sort_unstable();
    groups.dedup();
    let rw = 4 | 2;
    let mut entries = vec![(0x01u16, owner, UNDEFINED)];
    entries.extend(users.iter().map(|&u| (0x02, rw, u)));
    entries.push((0x04, group, UNDEFINED));
    entries.extend(groups.iter().map(|&g| (0x08, rw, g)));
    let mask = entries
        .iter()
        .filter(|(tag, _, _)| *tag != 0x01)
        .fold(0, |m, (_, perm, _)| m | perm);
    entries.push((0x10, mask, UNDEFINED));
    entries.push((0x20, other, UNDEFINED));
    let mut out = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        out.extend(tag.to_le_bytes());
        out.extend((perm as u16).to_le_bytes());
        out.extend(id.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_listen(address: ListenAddress) -> Listen {
        Listen {
            address,
            owner: None,
            group: None,
            mode: 0o660,
            backlog: 16,
            allowed_clients: None,
            acl_users: Vec::new(),
            acl_groups: Vec::new(),
        }
    }

    /// A port free on both families now (`[::]` dual-stack, bound and
    /// closed).
    fn free_port() -> u16 {
        let s = bind_tcp("[::]:0".parse().unwrap(), 1).unwrap();
        s.local_addr().unwrap().as_socket().unwrap().port()
    }

    /// A bare port is `[::]` with IPv4 clients (php-fpm's implicit
    /// address); with `[::]` taken for IPv6 only it is `0.0.0.0`; with
    /// the port taken on both, the error is php-fpm's line.
    #[test]
    fn a_bare_port_binds_both_families_then_falls_back_to_ipv4() {
        let port = free_port();
        let listen = tcp_listen(ListenAddress::Port(port));
        let (socket, _) = bind("www", &listen).unwrap();
        let local = socket.local_addr().unwrap().as_socket().unwrap();
        assert_eq!(
            local,
            SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port)
        );
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("an IPv4 client");
        std::net::TcpStream::connect(("::1", port)).expect("an IPv6 client");
        drop(socket);

        let port = free_port();
        let v6only = Socket::new(Domain::IPV6, Type::STREAM, None).unwrap();
        v6only.set_reuse_address(true).unwrap();
        v6only.set_only_v6(true).unwrap();
        let any6 = SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port);
        v6only.bind(&SockAddr::from(any6)).unwrap();
        v6only.listen(1).unwrap();
        let listen = tcp_listen(ListenAddress::Port(port));
        let (socket, _) = bind("www", &listen).unwrap();
        let local = socket.local_addr().unwrap().as_socket().unwrap();
        assert_eq!(local, SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port));
        drop((socket, v6only));

        let port = free_port();
        let both = bind_tcp(
            SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port),
            1,
        )
        .unwrap();
        let e = bind("www", &tcp_listen(ListenAddress::Port(port))).unwrap_err();
        assert_eq!(
            e.php_fpm_line(),
            format!(
                "unable to bind listening socket for address '{port}': Address already in use (98)"
            )
        );
        drop(both);
    }

    /// The layout the kernel reads (and `getfacl` shows as
    /// `user::rw- user:33:rw- group::rw- group:48:rw- mask::rw- other::---`).
    #[test]
    fn posix_acl_layout() {
        let acl = posix_acl(0o660, &[33], &[48]);
        let entries: Vec<(u16, u16, u32)> = acl[4..]
            .chunks(8)
            .map(|e| {
                (
                    u16::from_le_bytes([e[0], e[1]]),
                    u16::from_le_bytes([e[2], e[3]]),
                    u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
                )
            })
            .collect();
        assert_eq!(acl[..4], 2u32.to_le_bytes());
        assert_eq!(
            entries,
            [
                (0x01, 6, u32::MAX),
                (0x02, 6, 33),
                (0x04, 6, u32::MAX),
                (0x08, 6, 48),
                (0x10, 6, u32::MAX),
                (0x20, 0, u32::MAX)
            ]
        );
        // The mask covers the named entries even when the group bits do not.
        let acl = posix_acl(0o600, &[33, 33], &[]);
        assert_eq!(acl.len(), 4 + 5 * 8, "duplicates dropped");
        assert_eq!(
            u16::from_le_bytes([acl[4 + 3 * 8 + 2], acl[4 + 3 * 8 + 3]]),
            6
        );
    }
}
