//! The daemon's routes: for every listen address being accepted on, which
//! pool gets its connections (its [`Route`]) and the accept loop that
//! hands them over ([`accept::accept_loop`]).
//!
//! Owns: the accept loops by address, and the last accepts on a socket
//! about to close ([`Routes::close`]). Must not touch: the sockets
//! themselves (the [`ListenerTable`] binds, adopts and closes them) or what
//! a pool does with a connection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::accept::{self, Listener, Route};
use crate::config::{Listen, PoolConfig};
use crate::listen::{ListenKey, ListenerTable};
use crate::pool::PoolHandle;

/// How long a TCP handshake under way when its socket begins to refuse new
/// connections has to complete: its final ACK is one round trip away.
const HANDSHAKE_SETTLE: Duration = Duration::from_millis(20);

/// An address being accepted on: its route (which pool gets its
/// connections) and its accept loop.
struct Accepting {
    route: watch::Sender<Option<Arc<Route>>>,
    task: tokio::task::JoinHandle<()>,
}

/// Every address being accepted on, by address.
pub struct Routes {
    accepting: BTreeMap<ListenKey, Accepting>,
    /// Turns true when the daemon stops: every accept loop ends.
    shutdown: watch::Receiver<bool>,
    /// Held by every accept loop and connection task: the daemon knows
    /// when they have all finished.
    in_flight: mpsc::Sender<()>,
}

impl Routes {
    /// No route yet. `shutdown` and `in_flight`: as [`accept::accept_loop`]
    /// takes them.
    pub fn new(shutdown: watch::Receiver<bool>, in_flight: mpsc::Sender<()>) -> Routes {
        Routes {
            accepting: BTreeMap::new(),
            shutdown,
            in_flight,
        }
    }

    /// Points `p`'s listen addresses (its `listen.address`, and its
    /// `pm.status_listen`) at its pool (`handle`), starting the accept loop
    /// of an address that has none.
    pub fn route(&mut self, listeners: &ListenerTable, p: &PoolConfig, handle: &PoolHandle) {
        for (listen, status_only) in p.listeners() {
            self.route_one(listeners, p, handle, &listen, status_only);
        }
    }

    fn route_one(
        &mut self,
        listeners: &ListenerTable,
        p: &PoolConfig,
        handle: &PoolHandle,
        listen: &Listen,
        status_only: bool,
    ) {
        let key = ListenKey::new(&listen.address);
        let route = Some(Arc::new(Route {
            pool: handle.pool.clone(),
            allowed_clients: listen.allowed_clients.clone(),
            status_only,
        }));
        if let Some(a) = self.accepting.get(&key) {
            if !a.task.is_finished() {
                let _ = a.route.send(route);
                return;
            }
        }
        let (tx, rx) = watch::channel(route);
        match Listener::register(listeners, &key) {
            Ok(l) => {
                let what = if status_only {
                    " (status and ping only)"
                } else {
                    ""
                };
                // A bare port: which of php-fpm's two it got.
                let bound = match key.address() {
                    crate::config::ListenAddress::Port(_) => listeners
                        .clone_socket(&key)
                        .ok()
                        .and_then(|s| s.local_addr().ok()?.as_socket())
                        .map(|a| match a.is_ipv6() {
                            true => format!(" ({a}: IPv6 and IPv4 clients)"),
                            false => format!(" ({a}: IPv4 clients only)"),
                        })
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                info!(pool = %p.name, "listening on {key}{bound}{what}");
                let task = tokio::spawn(accept::accept_loop(
                    l,
                    rx,
                    self.shutdown.clone(),
                    self.in_flight.clone(),
                ));
                self.accepting.insert(key, Accepting { route: tx, task });
            }
            Err(e) => warn!(pool = %p.name, "cannot register {key} with the event loop: {e}"),
        }
    }

    /// Stops accepting on `key` (connections already accepted go on);
    /// returns the route its accept loop served, if it had one.
    pub async fn unroute(&mut self, key: &ListenKey) -> Option<Arc<Route>> {
        let a = self.accepting.remove(key)?;
        let route = a.route.send_replace(None);
        let _ = a.task.await;
        route
    }

    /// Ends the accept loops of `keys`, whose sockets are to close, and
    /// serves what waits in them ([`serve_last`]): they refuse new
    /// connections from now on.
    pub async fn close(&mut self, listeners: &mut ListenerTable, keys: &[ListenKey]) {
        let mut closing = Vec::new();
        for key in keys {
            if let Some(route) = self.unroute(key).await {
                closing.push((key.clone(), route));
            }
        }
        serve_last(listeners, &closing, &self.shutdown, &self.in_flight).await;
    }

    /// The stop: waits for every accept loop to end (the daemon has turned
    /// `shutdown` true), then, when `serve_queued`, serves what waits in
    /// their sockets ([`serve_last`]). Returns the `in_flight` sender, the
    /// last one the daemon holds.
    pub async fn end(self, listeners: &mut ListenerTable, serve_queued: bool) -> mpsc::Sender<()> {
        let mut routes = Vec::new();
        for (key, a) in self.accepting {
            let route = a.route.borrow().clone();
            let _ = a.task.await;
            if let Some(route) = route {
                routes.push((key, route));
            }
        }
        if serve_queued {
            serve_last(listeners, &routes, &self.shutdown, &self.in_flight).await;
        }
        self.in_flight
    }
}

/// The last accepts on sockets about to close for good (`routes`: each
/// socket and where its connections go, its accept loop ended). Each socket
/// refuses new connections first ([`ListenerTable::refuse_new`]); then
/// every connection waiting in it is served, and once more after
/// [`HANDSHAKE_SETTLE`] for the handshakes that were under way. Closing a
/// socket resets each connection still queued, with a request the web
/// server has sent and, for a POST, will not send to another upstream.
async fn serve_last(
    listeners: &mut ListenerTable,
    routes: &[(ListenKey, Arc<Route>)],
    shutdown: &watch::Receiver<bool>,
    in_flight: &mpsc::Sender<()>,
) {
    let mut served = vec![0; routes.len()];
    let mut settle = false;
    for ((key, route), n) in routes.iter().zip(&mut served) {
        match listeners.refuse_new(key) {
            Ok(refusing) => settle |= refusing,
            Err(e) => {
                warn!(pool = %route.pool.name(), "{key} cannot refuse new connections before it closes: {e}")
            }
        }
        *n += accept::serve_queued(listeners, key, route, shutdown, in_flight);
    }
    if settle {
        tokio::time::sleep(HANDSHAKE_SETTLE).await;
        for ((key, route), n) in routes.iter().zip(&mut served) {
            *n += accept::serve_queued(listeners, key, route, shutdown, in_flight);
        }
    }
    for ((key, route), n) in routes.iter().zip(served) {
        if n > 0 {
            debug!(pool = %route.pool.name(), "{n} connections were waiting on {key} as it closed: served");
        }
    }
}
