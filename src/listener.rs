//! The pools' listening sockets: bind (with php-fpm's `listen.*` options),
//! accept, filter by `listen.allowed_clients`, and hand each connection to
//! the proxy.
//!
//! Owns: the listening sockets and their files. Must not touch: FastCGI
//! records (the proxy reads them) or processes.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};
use tokio::sync::{mpsc, watch, Notify};
use tracing::{debug, warn};

use crate::config::{ListenAddress, PoolConfig};
use crate::pool::Pool;
use crate::proxy::serve_connection;

/// A pool's listening socket, bound but not yet registered with tokio.
pub struct Bound {
    socket: Socket,
    /// The socket file of a unix listener (removed on drop of the listener).
    path: Option<PathBuf>,
    pub address: ListenAddress,
}

/// Errors binding a listening socket; each names the address.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("listen address {address} is already in use{detail}")]
    InUse { address: String, detail: String },
    #[error("cannot listen on {address}: {source}")]
    Io { address: String, source: io::Error },
}

fn io_err(address: &ListenAddress) -> impl Fn(io::Error) -> BindError + '_ {
    move |source| {
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

/// The kernel's cap on listen backlogs (`net.core.somaxconn`).
pub fn somaxconn() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Binds the listening socket of `pool` with its `listen.backlog` (warning
/// when `somaxconn` caps it). A unix socket gets `listen.owner`,
/// `listen.group` (default: the pool's user and group) and `listen.mode`;
/// a stale socket file nobody listens on is replaced, a live one is not.
pub fn bind(pool: &PoolConfig) -> Result<Bound, BindError> {
    let address = pool.listen.address.clone();
    let backlog = pool.listen.backlog;
    if let Some(max) = somaxconn() {
        if backlog > max {
            warn!(pool = %pool.name, "listen.backlog = {backlog} is capped by the kernel to net.core.somaxconn = {max}");
        }
    }
    let backlog = backlog.min(i32::MAX as u32) as i32;
    match &address {
        ListenAddress::Tcp(addr) => {
            let addr_for_err = address.clone();
            let err = io_err(&addr_for_err);
            let domain = if addr.is_ipv6() {
                Domain::IPV6
            } else {
                Domain::IPV4
            };
            let socket = Socket::new(domain, Type::STREAM, None).map_err(&err)?;
            socket.set_reuse_address(true).map_err(&err)?;
            if addr.is_ipv6() {
                socket.set_only_v6(true).map_err(&err)?;
            }
            socket.bind(&SockAddr::from(*addr)).map_err(&err)?;
            socket.listen(backlog).map_err(&err)?;
            socket.set_nonblocking(true).map_err(&err)?;
            Ok(Bound {
                socket,
                path: None,
                address,
            })
        }
        ListenAddress::Unix(path) => {
            let addr_for_err = address.clone();
            let err = io_err(&addr_for_err);
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                use std::os::unix::fs::FileTypeExt;
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
                std::fs::remove_file(path).map_err(&err)?;
            }
            let socket = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(&err)?;
            socket
                .bind(&SockAddr::unix(path).map_err(&err)?)
                .map_err(&err)?;
            let bound = Bound {
                socket,
                path: Some(path.clone()),
                address: address.clone(),
            };
            set_owner_mode(path, pool).map_err(&err)?;
            bound.socket.listen(backlog).map_err(&err)?;
            bound.socket.set_nonblocking(true).map_err(&err)?;
            Ok(bound)
        }
    }
}

fn set_owner_mode(path: &Path, pool: &PoolConfig) -> io::Result<()> {
    let owner = pool.listen.owner.unwrap_or(pool.user.uid);
    let group = pool.listen.group.unwrap_or(pool.user.gid);
    let me = nix::unistd::Uid::effective();
    if me.is_root() || me.as_raw() != owner {
        std::os::unix::fs::chown(path, Some(owner), Some(group))
            .map_err(|e| io::Error::new(e.kind(), format!("chown {owner}:{group}: {e}")))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(pool.listen.mode))
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Accepts connections on `bound` until `shutdown` turns true, spawning a
/// proxy task for each. Every task holds a clone of `in_flight`, so
/// the daemon knows when they have all finished.
pub async fn accept_loop(
    bound: Bound,
    pool: Arc<Pool>,
    mut shutdown: watch::Receiver<bool>,
    in_flight: mpsc::Sender<()>,
) {
    let name = pool.name().to_string();
    let allowed: Option<Vec<IpAddr>> = pool.config().listen.allowed_clients.clone();
    enum L {
        Tcp(tokio::net::TcpListener),
        Unix(tokio::net::UnixListener),
    }
    let std_socket = bound.socket.try_clone();
    let listener = match (&bound.address, std_socket) {
        (ListenAddress::Tcp(_), Ok(s)) => tokio::net::TcpListener::from_std(s.into()).map(L::Tcp),
        (ListenAddress::Unix(_), Ok(s)) => {
            tokio::net::UnixListener::from_std(s.into()).map(L::Unix)
        }
        (_, Err(e)) => Err(e),
    };
    let listener = match listener {
        Ok(l) => l,
        Err(e) => {
            warn!(pool = %name, "cannot register {} with the event loop: {e}", bound.address);
            return;
        }
    };
    loop {
        // At the connection cap, leave new connections in the kernel's
        // listen queue until one closes (accepting and closing would turn
        // a wait into an error at the web server).
        while OPEN.load(Ordering::Relaxed) >= crate::proxy::max_connections() {
            if !CAP_WARNED.swap(true, Ordering::Relaxed) {
                warn!(pool = %name, "{} web server connections open, the limit (from RLIMIT_NOFILE): new connections wait in the listen queue",
                    crate::proxy::max_connections());
            }
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = CLOSED.notified() => {}
            }
            if *shutdown.borrow() {
                break;
            }
        }
        let accepted = tokio::select! {
            _ = shutdown.changed() => break,
            a = async {
                match &listener {
                    L::Tcp(l) => l.accept().await.map(|(s, peer)| Conn::Tcp(s, peer)),
                    L::Unix(l) => l.accept().await.map(|(s, _)| Conn::Unix(s)),
                }
            } => a,
        };
        let conn = match accepted {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and friends: wait a little instead of spinning.
                warn!(pool = %name, "accept on {} failed: {e}", bound.address);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let pool = pool.clone();
        let shutdown = shutdown.clone();
        let guard = (in_flight.clone(), Open::new());
        match conn {
            Conn::Tcp(stream, peer) => {
                if !client_allowed(&allowed, &peer) {
                    warn!(pool = %name, peer = %peer, "connection refused: {} is not in listen.allowed_clients", peer.ip());
                    drop(stream);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let (r, w) = stream.into_split();
                tokio::spawn(async move {
                    serve_connection(pool, r, w, peer.to_string(), shutdown).await;
                    drop(guard);
                });
            }
            Conn::Unix(stream) => {
                let (r, w) = stream.into_split();
                tokio::spawn(async move {
                    serve_connection(pool, r, w, "unix".to_string(), shutdown).await;
                    drop(guard);
                });
            }
        }
    }
    debug!(pool = %name, "stopped accepting on {}", bound.address);
    drop(listener);
    drop(bound);
}

/// Web server connections open, across all listeners.
static OPEN: AtomicUsize = AtomicUsize::new(0);
/// Woken when one closes (an accept loop may wait at the cap).
static CLOSED: Notify = Notify::const_new();
/// The cap was reported (once per episode).
static CAP_WARNED: AtomicBool = AtomicBool::new(false);

/// Counts one open connection for as long as it lives.
struct Open;

impl Open {
    fn new() -> Open {
        OPEN.fetch_add(1, Ordering::Relaxed);
        Open
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if OPEN.fetch_sub(1, Ordering::Relaxed) <= crate::proxy::max_connections() {
            CAP_WARNED.store(false, Ordering::Relaxed);
        }
        CLOSED.notify_waiters();
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (nginx and systemd
/// units do the same: under systemd's default soft limit of 1,024 about a
/// thousand idle web server connections would refuse every new one) and
/// sets the connection cap from it: what is left after the children's
/// sockets and fpmd's own files. Returns (soft limit, connection cap).
pub fn raise_nofile(children: usize) -> (u64, usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (mut soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((1024, 1024));
    if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => soft = hard,
            Err(e) => warn!("cannot raise RLIMIT_NOFILE from {soft} to {hard}: {e}"),
        }
    }
    // Per child: its connection, its listening socket or output sockets
    // while spawning; plus fpmd's listeners, log files and slack.
    let reserve = 64 + 4 * children;
    let cap = (soft as usize).saturating_sub(reserve).max(16);
    crate::proxy::set_max_connections(cap);
    (soft, cap)
}

enum Conn {
    Tcp(tokio::net::TcpStream, SocketAddr),
    Unix(tokio::net::UnixStream),
}

/// `listen.allowed_clients`: none configured allows everyone; an
/// IPv4-mapped IPv6 peer matches its IPv4 form.
fn client_allowed(allowed: &Option<Vec<IpAddr>>, peer: &SocketAddr) -> bool {
    let Some(list) = allowed else { return true };
    let ip = match peer.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    list.contains(&ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_clients() {
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert!(client_allowed(&None, &peer));
        assert!(client_allowed(
            &Some(vec!["127.0.0.1".parse().unwrap()]),
            &peer
        ));
        assert!(!client_allowed(
            &Some(vec!["127.0.0.2".parse().unwrap()]),
            &peer
        ));
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().unwrap();
        assert!(client_allowed(
            &Some(vec!["127.0.0.1".parse().unwrap()]),
            &mapped
        ));
    }
}
