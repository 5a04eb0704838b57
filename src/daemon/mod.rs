//! The daemon's life: [`start`] binds every pool's listener and starts the
//! pools and their accept loops; then the daemon acts on orders, one at a
//! time, from one queue that signals, the control socket and the
//! configuration watcher all write ([`crate::control::Order`]):
//! [`reload`], reopen the logs, [`upgrade`]; until one says [`stop`].
//!
//! Owns: the pools by name, the listener table, the route of every listen
//! address ([`routes`]), the order of start, reload and stop, the pid file,
//! the control socket and the private runtime directory of the children's
//! sockets. Must not touch: FastCGI records or single children (the proxy
//! and the pools do).

pub mod accept;
pub mod config_watch;
pub mod detach;
mod reload;
mod routes;
mod start;
mod stop;
pub mod upgrade;

pub use start::{prepare, prepare_inherited, PrepareError, Prepared};

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tracing::{error, info};

use crate::config::{Config, PoolConfig};
use crate::control::socket::{self, Answer};
use crate::control::systemd::Notifier;
use crate::control::{Intent, Order, Orders};
use crate::listen::{Activation, ListenerTable, SocketFile};
use crate::log::LogWriter;
use crate::observe::board::Board;
use crate::observe::metrics::MetricsServer;
use crate::pool::{self, PoolHandle, StopMode};
use crate::process::spawn::Spawner;
use routes::Routes;

/// Why the daemon could not start (nothing it started is left running).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The handlers of SIGUSR2, SIGQUIT, … could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(io::Error),
    /// The SIGCHLD stream could not be set up: exited children could not
    /// be reaped.
    #[error("cannot watch for exited children (SIGCHLD): {0}")]
    Sigchld(io::Error),
    /// The spawner thread could not start.
    #[error("cannot start the spawner thread: {0}")]
    Spawner(io::Error),
    /// The private directory of the children's sockets could not be made.
    #[error("cannot create the runtime directory of the children's sockets: {0}")]
    RuntimeDir(io::Error),
    /// An access log or slowlog could not be opened (the text names pool,
    /// key and path);
    /// php-fpm does not start either.
    #[error("{0}")]
    PoolLog(String),
    /// The pid file could not be written (the text names it).
    #[error("{0}")]
    PidFile(io::Error),
}

/// Everything the running daemon holds.
struct Daemon {
    config: Config,
    listeners: ListenerTable,
    /// The sockets systemd passed: pools named like one serve on it, in
    /// every configuration a reload loads.
    activation: Activation,
    pools: BTreeMap<String, PoolHandle>,
    /// Every address being accepted on, and which pool it goes to.
    routes: Routes,
    spawner: Spawner,
    runtime_dir: tempfile::TempDir,
    /// The directory of `sapi.php` (see [`crate::process::sapi`]), removed
    /// when the daemon ends; `None` when it could not be made.
    #[allow(dead_code)]
    sapi_dir: Option<tempfile::TempDir>,
    /// Each pool's socket for `fpm_get_status()`, beside `sapi.php`.
    status_sockets: crate::observe::sapi_status::StatusSockets,
    sd: Notifier,
    log: LogWriter,
    pid_file: Option<PathBuf>,
    /// Pools removed by a reload, draining.
    removed: Vec<tokio::task::JoinHandle<()>>,
    /// `watch = true`: the configuration watcher.
    watcher: Option<config_watch::ConfigWatcher>,
    /// Where orders arrive (signals, the control socket, the watcher);
    /// kept to re-bind the control socket and re-create the watcher.
    orders: Orders,
    /// Where the control socket is (the configuration's path, also when it
    /// could not be bound there), and its file as bound, if it was.
    control_path: PathBuf,
    control_file: Option<SocketFile>,
    /// The fpmd binary, as started (an upgrade runs what is there now).
    exe: Option<PathBuf>,
    /// The pools the metrics endpoint reads at each scrape (sent again
    /// after every reload).
    pools_view: watch::Sender<Vec<Arc<pool::Pool>>>,
    /// The metrics endpoint (`metrics.listen`), when configured.
    metrics: Option<MetricsServer>,
    /// What `fpmd status` reads (the control socket answers from it).
    board: Arc<Board>,
}

/// Runs the daemon on `prepared` until a stop order; returns once every
/// child is reaped. Must run inside a tokio runtime with I/O, time and
/// signals enabled. `handover`: this fpmd replaces another (a binary
/// upgrade), which waits to hear that this one serves. `detached`: this
/// fpmd detached (`daemonize`), and the process that started it waits to
/// hear the same. Errors: see [`DaemonError`].
pub async fn run(
    prepared: Prepared,
    log: LogWriter,
    handover: Option<upgrade::Handover>,
    detached: Option<detach::Ready>,
) -> Result<(), DaemonError> {
    let (orders, mut queue) = mpsc::unbounded_channel::<Order>();
    crate::control::signals::listen(&orders).map_err(DaemonError::Signals)?;
    let (mut d, shutdown, in_flight) = start::start(prepared, orders, log).await?;
    d.take_over(handover);
    d.open_control_socket();
    d.rewatch();
    d.ready(detached);
    let (mode, upgraded) = d.serve(&mut queue).await;
    stop::stop(d, mode, upgraded, shutdown, in_flight, &mut queue).await;
    Ok(())
}

/// Drops what the daemon does not use of a configuration it runs: where
/// each key was set (`origins`, which only `fpmd -t` prints: a path and
/// a key name for every key of every pool, ~1.4 KiB a pool).
fn to_run(config: &mut Config) {
    config.origins = Default::default();
}

impl Daemon {
    /// Acts on `orders`, one at a time, until one stops the daemon;
    /// returns how to stop, and whether this fpmd handed over to a new
    /// one (an upgrade).
    async fn serve(&mut self, orders: &mut mpsc::UnboundedReceiver<Order>) -> (StopMode, bool) {
        // Orders that arrived while a reload ran, in order.
        let mut queued: VecDeque<Order> = VecDeque::new();
        loop {
            let order = match queued.pop_front() {
                Some(o) => o,
                None => match orders.recv().await {
                    Some(o) => o,
                    None => return (StopMode::Fast, false),
                },
            };
            match order.intent {
                Intent::GracefulStop => {
                    order.answer(Answer::Ok(
                        "stopping: no new connections, in-flight requests finish".into(),
                    ));
                    return (StopMode::Graceful, false);
                }
                Intent::FastStop => return (StopMode::Fast, false),
                Intent::ReopenLogs => self.reopen_logs(),
                Intent::Reload => self.reload_coalescing(order, orders, &mut queued).await,
                Intent::Upgrade => {
                    let answer = self.upgrade().await;
                    let done = matches!(answer, Answer::Ok(_));
                    order.answer(answer);
                    if done {
                        return (StopMode::Graceful, true);
                    }
                }
            }
        }
    }

    /// SIGUSR1: reopens the error log, then every access log (in the
    /// writer thread, after what was pending; the outcome is logged once
    /// it is done).
    fn reopen_logs(&self) {
        match self.log.reopen() {
            Ok(()) => info!(php_fpm = "error log file re-opened", "log file reopened"),
            Err(e) => error!("cannot reopen the log file: {e}"),
        }
        let done = crate::observe::reopen::reopen();
        tokio::spawn(async move {
            let Ok(done) = done.await else { return };
            // php-fpm's line once every access log is open again
            // (fpm_pctl's fpm_log_open(1)), pools with none included.
            if done.failed.is_empty() && done.reopened.is_empty() {
                info!(
                    php_fpm = "access log file re-opened",
                    php_fpm_only = true,
                    ""
                );
            } else if done.failed.is_empty() {
                info!(
                    php_fpm = "access log file re-opened",
                    "access logs and slowlogs reopened: {}",
                    done.reopened.len()
                );
            } else if !done.reopened.is_empty() {
                info!("access logs and slowlogs reopened: {}", done.reopened.len());
            }
            for (path, e) in done.failed {
                error!(
                    "cannot reopen the access log {}: {e}; lines go on to the old file",
                    path.display()
                );
            }
        });
    }

    /// Starts pool `p`, which shares `p` with the running configuration.
    fn start_pool(&mut self, p: &Arc<PoolConfig>) {
        // Its fpm_get_status() socket first: its children (chrooted ones
        // mount it) find it from the start.
        self.status_sockets.open(&p.name, (p.user.uid, p.user.gid));
        let handle = pool::start_pool(
            p.clone(),
            self.spawner.clone(),
            self.runtime_dir.path(),
            self.config.global.emergency_restart,
        );
        self.pools.insert(p.name.clone(), handle);
    }

    /// Points `p`'s listen addresses at its pool (see [`Routes::route`]).
    fn route(&mut self, p: &PoolConfig) {
        if let Some(handle) = self.pools.get(&p.name) {
            self.routes.route(&self.listeners, p, handle);
        }
    }

    /// Tells the metrics endpoint and the status sockets of
    /// `fpm_get_status()` which pools there are now.
    fn publish_pools(&mut self) {
        self.pools_view
            .send_replace(self.pools.values().map(|h| h.pool.clone()).collect());
        self.status_sockets
            .set_pools(self.pools.values().map(|h| h.pool.clone()));
    }

    /// Tells the board which pools serve now.
    fn post_pools(&self) {
        self.board
            .set_pools(self.pools.values().map(|h| h.pool.clone()));
    }

    /// Starts, moves or stops the metrics endpoint as `metrics.listen`
    /// says now (a moved endpoint stops on the old address before it binds
    /// the new one).
    async fn remetrics(&mut self) {
        let want = self.config.global.metrics_listen.clone();
        if self.metrics.as_ref().map(|m| m.address()) == want.as_ref() {
            return;
        }
        if let Some(old) = self.metrics.take() {
            info!("metrics endpoint on {} stopped", old.address());
            old.stop().await;
        }
        self.metrics = want.map(|a| MetricsServer::start(a, self.pools_view.subscribe()));
    }

    /// (Re)creates the configuration watcher as `watch` says, on the
    /// configuration's current files.
    fn rewatch(&mut self) {
        self.watcher = None;
        if !self.config.global.watch {
            return;
        }
        match config_watch::watch(&self.config.sources, self.orders.clone()) {
            Ok(w) => self.watcher = Some(w),
            Err(e) => error!("watch = true, but the configuration cannot be watched: {e}"),
        }
    }

    /// Moves the control socket where the configuration now says, if it
    /// is elsewhere; if the new place cannot be bound it stays where it is
    /// (and the move is tried again after the next reload).
    fn move_control_socket(&mut self) {
        let want = &self.config.global.control_socket;
        if *want == self.control_path {
            return;
        }
        match socket::serve(want, self.orders.clone(), self.status_fn()) {
            Ok(()) => {
                if let Some(f) = self.control_file.take() {
                    f.unlink();
                }
                self.control_path = want.clone();
                self.control_file = SocketFile::at(want).ok();
                info!("control socket moved to {}", want.display());
            }
            Err(e) => error!(
                "cannot move the control socket to {}: {e}; it stays at {}",
                want.display(),
                self.control_path.display()
            ),
        }
    }
}
