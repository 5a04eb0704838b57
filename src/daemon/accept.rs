//! The accept loop of one listening address: accepts connections, turns
//! away clients outside `listen.allowed_clients`, and hands each connection
//! to the proxy for the pool its [`Route`] names at that moment.
//!
//! The route is a `watch` the daemon writes: a reload points it at another
//! pool (or changes `allowed_clients`) without touching the socket, and
//! `None` ends the loop. Ending a loop closes only its clone of the socket:
//! the socket stays in the [`ListenerTable`], nothing is unlinked, and
//! connections already accepted go on.
//!
//! Owns: the connection cap (from `RLIMIT_NOFILE`) and the count of open
//! web server connections. Must not touch: the socket's life or its file
//! (the table), FastCGI records (the proxy reads them) or processes.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, watch, Notify};
use tracing::{debug, warn};

use crate::config::ListenAddress;
use crate::listen::{ListenKey, ListenerTable};
use crate::pool::Pool;
use crate::proxy::serve_connection;
use crate::sys::stream::Stream;

/// Where the connections of one address go.
pub struct Route {
    pub pool: Arc<Pool>,
    /// `listen.allowed_clients` (TCP only): `None` allows any client.
    pub allowed_clients: Option<Vec<IpAddr>>,
    /// `pm.status_listen`: the address serves the status page and ping
    /// only.
    pub status_only: bool,
}

impl Route {
    /// The route to `pool` with its configured `listen.allowed_clients`.
    pub fn to_pool(pool: Arc<Pool>) -> Route {
        let allowed_clients = pool.config().listen.allowed_clients.clone();
        Route {
            pool,
            allowed_clients,
            status_only: false,
        }
    }
}

/// What an accept loop reads its route from; `None` stops it.
pub type RouteWatch = watch::Receiver<Option<Arc<Route>>>;

/// A clone of a table socket registered with the event loop (readability
/// only: a listening socket has nothing to write).
pub struct Listener {
    key: ListenKey,
    socket: AsyncFd<OwnedFd>,
    tcp: bool,
}

enum Conn {
    Tcp(Stream, SocketAddr),
    Unix(Stream),
}

impl Listener {
    /// Registers a clone of the table's socket for `key`. Must be called
    /// inside a tokio runtime.
    pub fn register(table: &ListenerTable, key: &ListenKey) -> io::Result<Listener> {
        let socket = table.clone_socket(key)?;
        socket.set_nonblocking(true)?;
        // SAFETY: the OwnedFd is moved into the AsyncFd, which keeps it open
        // for as long as it is registered.
        let socket =
            unsafe { AsyncFd::register_with_interest(OwnedFd::from(socket), Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
        Ok(Listener {
            key: key.clone(),
            socket,
            tcp: !matches!(key.address(), ListenAddress::Unix(_)),
        })
    }

    pub fn key(&self) -> &ListenKey {
        &self.key
    }

    /// The next connection: `accept4(SOCK_NONBLOCK|SOCK_CLOEXEC)` once
    /// the socket is readable, the peer's address from the same call, the
    /// connection registered as a [`Stream`] (woken for reads only).
    /// Polls the socket in place (`poll_fn`), so the future is small: every
    /// accept loop holds it while it waits.
    async fn accept(&self) -> io::Result<Conn> {
        std::future::poll_fn(|cx| loop {
            let mut guard = std::task::ready!(self.socket.poll_read_ready(cx))?;
            match guard.try_io(|s| accept4(s.as_raw_fd())) {
                Ok(Ok((fd, peer))) => {
                    let stream = Stream::new(fd, true)?;
                    return std::task::Poll::Ready(Ok(match (self.tcp, peer) {
                        // An IPv4 client of `[::]` (a bare port) as itself,
                        // not `::ffff:a.b.c.d`, in the log.
                        (true, Some(peer)) => Conn::Tcp(
                            stream,
                            SocketAddr::new(peer.ip().to_canonical(), peer.port()),
                        ),
                        _ => Conn::Unix(stream),
                    }));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ECONNABORTED: that one is gone; take the next.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::ECONNABORTED) => continue,
                Ok(Err(e)) => return std::task::Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        })
        .await
    }
}

/// One `accept4(2)`: the connection, non-blocking and close-on-exec, and
/// its peer's address when it has one (TCP). `WouldBlock`: none waiting.
fn accept4(listener: std::os::fd::RawFd) -> io::Result<(OwnedFd, Option<SocketAddr>)> {
    // SAFETY: accept4 writes at most `len` bytes of address into the
    // storage socket2 gives, and returns a new fd that we then own.
    let (fd, addr) = unsafe {
        socket2::SockAddr::try_init(|storage, len| {
            let fd = libc::accept4(
                listener,
                storage.cast(),
                len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            );
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(OwnedFd::from_raw_fd(fd))
            }
        })?
    };
    Ok((fd, addr.as_socket()))
}

/// Accepts connections on `listener` until its route turns `None` (or its
/// sender is dropped) or `shutdown` turns true, spawning a proxy task for
/// each. Every task holds a clone of `in_flight`, and so does the loop, so
/// the daemon knows when they have all finished.
///
/// Every listening address holds this future for as long as it listens,
/// so it is kept small (424 bytes, a task of 640; it was 800 and 1,024):
/// an `async` block, whose arguments are not copied into locals of their
/// own as an `async fn`'s are; the socket polled in place
/// ([`Listener::accept`]); the wait at the connection cap boxed, held
/// only while it waits.
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub fn accept_loop(
    listener: Listener,
    mut route: RouteWatch,
    mut shutdown: watch::Receiver<bool>,
    in_flight: mpsc::Sender<()>,
) -> impl std::future::Future<Output = ()> {
    async move {
        // The route last served, for the pool's name in the last log line.
        let mut last: Option<Arc<Route>> = None;
        loop {
            if *shutdown.borrow_and_update() {
                break;
            }
            let Some(current) = route.borrow_and_update().clone() else {
                break;
            };
            last = Some(current.clone());
            // At the connection cap, leave new connections in the kernel's
            // listen queue until one closes (accepting and closing would
            // turn a wait into an error at the web server).
            if OPEN.load(Ordering::Relaxed) >= crate::proxy::max_connections() {
                match Box::pin(wait_for_room(&mut shutdown, &mut route, &current)).await {
                    Room::Ended => break,
                    Room::Changed | Room::Free => continue,
                }
            }
            let accepted = tokio::select! {
                r = shutdown.changed() => if r.is_err() { break } else { continue },
                r = route.changed() => if r.is_err() { break } else { continue },
                a = listener.accept() => a,
            };
            let conn = match accepted {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and friends: wait a little instead of spinning.
                    warn!(pool = %current.pool.name(), "accept on {} failed: {e}", listener.key);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // The route as it is now; a connection accepted as the route
            // was withdrawn still goes to the pool it was accepted for.
            let current = route.borrow().clone().unwrap_or(current);
            serve(conn, &current, &shutdown, &in_flight);
        }
        let pool = last.as_ref().map_or("", |r| r.pool.name());
        debug!(pool = %pool, "stopped accepting on {}", listener.key);
    }
}

/// What [`wait_for_room`] saw.
enum Room {
    /// The shutdown or the route's sender is gone: the loop ends.
    Ended,
    /// The shutdown or the route changed: look again.
    Changed,
    /// A connection closed, or there was room after all.
    Free,
}

/// At the connection cap: waits until a web server connection closes, or
/// the shutdown or the route changes. Warns once, naming `current`'s pool.
async fn wait_for_room(
    shutdown: &mut watch::Receiver<bool>,
    route: &mut RouteWatch,
    current: &Route,
) -> Room {
    let mut closed = pin!(CLOSED.notified());
    closed.as_mut().enable();
    if OPEN.load(Ordering::Relaxed) < crate::proxy::max_connections() {
        return Room::Free;
    }
    if !CAP_WARNED.swap(true, Ordering::Relaxed) {
        warn!(pool = %current.pool.name(), "{} web server connections open, the limit (from RLIMIT_NOFILE): new connections wait in the listen queue",
            crate::proxy::max_connections());
    }
    tokio::select! {
        r = shutdown.changed() => if r.is_err() { Room::Ended } else { Room::Changed },
        r = route.changed() => if r.is_err() { Room::Ended } else { Room::Changed },
        _ = closed => Room::Free,
    }
}

/// Before the daemon closes the socket of `key` (its accept loop has
/// ended): accepts every connection waiting in its queue, without waiting,
/// and serves each on `route` as the accept loop would have. Closing the
/// socket would reset them, each with a request the web server has sent or
/// is sending. A connection that arrives after the last accept and before
/// the close is still reset, unless the socket refuses new ones first
/// ([`ListenerTable::refuse_new`]; a socket of systemd's, or one handed to
/// a new fpmd, is not closed: what arrives waits in it for the process that
/// serves on). Returns how many were taken.
pub fn serve_queued(
    table: &ListenerTable,
    key: &ListenKey,
    route: &Route,
    shutdown: &watch::Receiver<bool>,
    in_flight: &mpsc::Sender<()>,
) -> usize {
    let Ok(socket) = table.clone_socket(key) else {
        return 0;
    };
    let mut n = 0;
    loop {
        let conn = match socket.accept() {
            Ok((s, _)) => {
                let conn = match key.address() {
                    ListenAddress::Tcp(_) | ListenAddress::Port(_) => {
                        let s = std::net::TcpStream::from(s);
                        s.peer_addr().and_then(|peer| {
                            Ok(Conn::Tcp(Stream::new(OwnedFd::from(s), false)?, peer))
                        })
                    }
                    ListenAddress::Unix(_) => Stream::new(OwnedFd::from(s), false).map(Conn::Unix),
                };
                match conn {
                    Ok(c) => c,
                    Err(e) => {
                        warn!(pool = %route.pool.name(), "a connection waiting on {key} at the stop: {e}");
                        continue;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                warn!(pool = %route.pool.name(), "accept on {key} at the stop failed: {e}");
                break;
            }
        };
        serve(conn, route, shutdown, in_flight);
        n += 1;
    }
    n
}

/// Spawns the proxy task of one accepted connection (after the
/// `allowed_clients` check), counted in `in_flight` and the open
/// connections.
fn serve(
    conn: Conn,
    route: &Route,
    shutdown: &watch::Receiver<bool>,
    in_flight: &mpsc::Sender<()>,
) {
    let name = route.pool.name();
    let pool = route.pool.clone();
    let status_only = route.status_only;
    let shutdown = shutdown.clone();
    let guard = (in_flight.clone(), Open::new());
    match conn {
        Conn::Tcp(stream, peer) => {
            if !client_allowed(&route.allowed_clients, &peer) {
                warn!(pool = %name, peer = %peer,
                    php_fpm = %format_args!("Connection disallowed: IP address '{}' has been dropped.", peer.ip()),
                    "connection refused: {} is not in listen.allowed_clients", peer.ip());
                return;
            }
            let _ = socket2::SockRef::from(&stream).set_nodelay(true);
            let (r, w) = stream.into_split();
            tokio::spawn(async move {
                serve_connection(pool, r, w, peer.to_string(), status_only, shutdown).await;
                drop(guard);
            });
        }
        Conn::Unix(stream) => {
            let (r, w) = stream.into_split();
            tokio::spawn(async move {
                serve_connection(pool, r, w, "unix".to_string(), status_only, shutdown).await;
                drop(guard);
            });
        }
    }
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

    /// A loop whose route is withdrawn (`None`, or its sender gone) or
    /// whose shutdown comes ends; the socket stays in the table, listening,
    /// and its file stays.
    #[tokio::test]
    async fn a_withdrawn_route_ends_the_loop_and_leaves_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("www.sock");
        let listen = crate::config::Listen {
            address: ListenAddress::Unix(path.clone()),
            owner: None,
            group: None,
            mode: 0o600,
            backlog: 8,
            allowed_clients: None,
            acl_users: Vec::new(),
            acl_groups: Vec::new(),
        };
        let mut table = ListenerTable::new();
        table.obtain("www", &listen).unwrap();
        let key = ListenKey::new(&listen.address);
        let (_shutdown_tx, shutdown) = watch::channel(false);
        let (in_flight, mut all_done) = mpsc::channel(1);

        let (route_tx, route) = watch::channel::<Option<Arc<Route>>>(None);
        let l = Listener::register(&table, &key).unwrap();
        let run = tokio::spawn(accept_loop(l, route, shutdown.clone(), in_flight.clone()));
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("a None route ends the loop")
            .unwrap();
        drop(route_tx);

        let (route_tx, route) = watch::channel::<Option<Arc<Route>>>(None);
        drop(route_tx);
        let l = Listener::register(&table, &key).unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            accept_loop(l, route, shutdown.clone(), in_flight.clone()),
        )
        .await
        .expect("a dropped route sender ends the loop");

        let (shutdown_tx, shutdown) = watch::channel(true);
        let (_route_tx, route) = watch::channel::<Option<Arc<Route>>>(None);
        let l = Listener::register(&table, &key).unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            accept_loop(l, route, shutdown, in_flight),
        )
        .await
        .expect("shutdown ends the loop");
        drop(shutdown_tx);
        assert!(all_done.recv().await.is_none(), "no loop holds in_flight");

        assert!(table.contains(&key));
        assert!(path.exists(), "the loop unlinked the socket file");
        let c = tokio::net::UnixStream::connect(&path).await;
        assert!(c.is_ok(), "the socket no longer listens: {c:?}");
    }
}
