//! The daemon's life: bind every pool's listener, start the pools and
//! accept loops, act on intents (signals, the control socket), reload,
//! drain and stop.
//!
//! Owns: the pools by name, the listener table, the route of every listen
//! address, the order of start, reload and stop, the pid file and the
//! private runtime directory of the children's sockets. Must not touch:
//! FastCGI records or single children (the proxy and the pools do).
//!
//! A reload is all or nothing up to the point where anything changes: the
//! new configuration is read and validated whole, then every new or
//! changed address is bound or re-configured (a failure closes what this
//! reload bound and changes nothing else), then every pool is told at once:
//! added pools start, removed ones stop accepting and drain, the others
//! apply the new settings (live, or with a new generation of children; see
//! [`crate::pool`]).

pub mod accept;
pub mod config_watch;
pub mod detach;
pub mod upgrade;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};

use accept::{Listener, Route};

use crate::config::{Config, PoolConfig};
use crate::control::signals::Intent;
use crate::control::socket::{self, Answer, Call, Request};
use crate::control::systemd::{Notifier, Notify};
use crate::listen::{self, Activation, BindError, ListenKey, ListenerTable, Obtained, SocketFile};
use crate::log::LogWriter;
use crate::observe::board::{Board, Phase};
use crate::observe::metrics::MetricsServer;
use crate::pool::{self, PoolHandle, Reconfigured, StopMode};
use crate::process::reap::Reaper;
use crate::process::spawn::Spawner;

/// How long a stopping pool's children get after SIGTERM before SIGKILL
/// (every request has finished by then in a graceful stop).
const STOP_GRACE: Duration = Duration::from_secs(3);

/// A configuration whose listeners are all bound: nothing has been spawned
/// yet, so a failure up to here leaves nothing running.
pub struct Prepared {
    config: Config,
    listeners: ListenerTable,
    activation: Activation,
}

/// Why [`prepare_inherited`] failed: nothing is left running.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    Activation(#[from] crate::listen::ActivationError),
}

/// Binds every pool's listening socket. Errors: the first address that
/// cannot be bound (in use, permission); sockets bound before it are closed
/// (and their files removed).
pub fn prepare(config: Config) -> Result<Prepared, PrepareError> {
    prepare_inherited(config, Vec::new(), Vec::new())
}

/// [`prepare`] with inherited listening sockets: those an upgrading fpmd
/// handed over (`inherited`, by address) and those systemd passed
/// (`activated`, by `FileDescriptorName=` and fd; matched to pools as
/// [`crate::listen::activation`] says). They are adopted (the same
/// sockets: connections waiting in their queues stay); a pool that got
/// none binds its own; fpmd's own sockets for addresses no longer
/// configured are closed. Errors: an address that cannot be bound, or a
/// socket systemd passed for a pool that fpmd cannot accept on.
pub fn prepare_inherited(
    mut config: Config,
    inherited: Vec<(ListenKey, std::os::fd::OwnedFd)>,
    activated: Vec<(String, std::os::fd::OwnedFd)>,
) -> Result<Prepared, PrepareError> {
    let mut listeners = ListenerTable::new();
    for (key, fd) in inherited {
        if let Err(e) = listeners.adopt(key, fd, listen::Inherited::Upgrade) {
            warn!("cannot take over a listening socket: {e}");
        }
    }
    let activation = if activated.is_empty() {
        Activation::none()
    } else {
        Activation::adopt(activated, &config, &mut listeners)?
    };
    activation.apply(&mut config);
    bind_all(&mut listeners, &config)?;
    let keep: Vec<ListenKey> = config
        .pools
        .iter()
        .flat_map(|p| p.listeners())
        .map(|(l, _)| ListenKey::new(&l.address))
        .collect();
    listeners.retain(&keep);
    Ok(Prepared {
        config,
        listeners,
        activation,
    })
}

/// `obtain` for every pool of `config`, refusing two pools on one address.
fn bind_all(
    listeners: &mut ListenerTable,
    config: &Config,
) -> Result<Vec<(ListenKey, Obtained)>, BindError> {
    let mut got: Vec<(ListenKey, Obtained)> = Vec::new();
    for pool in &config.pools {
        for (listen, _) in pool.listeners() {
            let key = ListenKey::new(&listen.address);
            if got.iter().any(|(k, _)| *k == key) {
                // Validation refuses this; never bind one address twice.
                return Err(BindError::InUse {
                    address: listen.address.to_string(),
                    detail: format!(
                        ": two listeners of the configuration (pool '{}') are on it",
                        pool.name
                    ),
                });
            }
            let o = listeners.obtain(&pool.name, &listen)?;
            got.push((key, o));
        }
    }
    Ok(got)
}

/// An address being accepted on: its route (which pool gets its
/// connections) and its accept loop.
struct Accepting {
    route: watch::Sender<Option<Arc<Route>>>,
    task: tokio::task::JoinHandle<()>,
}

/// Everything the running daemon holds.
struct Daemon {
    config: Config,
    listeners: ListenerTable,
    /// The sockets systemd passed: pools named like one serve on it, in
    /// every configuration a reload loads.
    activation: Activation,
    pools: BTreeMap<String, PoolHandle>,
    accepting: BTreeMap<ListenKey, Accepting>,
    spawner: Spawner,
    runtime_dir: tempfile::TempDir,
    shutdown: watch::Receiver<bool>,
    in_flight: mpsc::Sender<()>,
    sd: Notifier,
    log: LogWriter,
    pid_file: Option<PathBuf>,
    /// Pools removed by a reload, draining.
    removed: Vec<tokio::task::JoinHandle<()>>,
    /// `watch = true`: the configuration watcher, and where it asks for
    /// reloads.
    watcher: Option<crate::daemon::config_watch::ConfigWatcher>,
    watch_tx: mpsc::UnboundedSender<()>,
    /// Where control socket requests arrive (kept to re-bind the socket
    /// when a reload moves it).
    calls_tx: mpsc::UnboundedSender<Call>,
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

/// Runs until a stop intent; returns once every child is reaped. Must run
/// inside a tokio runtime with I/O, time and signals enabled.
/// `handover`: this fpmd replaces another (a binary upgrade), which waits
/// to hear that this one serves. `detached`: this fpmd detached
/// (`daemonize`), and the process that started it waits to hear the same.
pub async fn run(
    prepared: Prepared,
    mut intents: mpsc::UnboundedReceiver<Intent>,
    log: LogWriter,
    handover: Option<crate::daemon::upgrade::Handover>,
    detached: Option<crate::daemon::detach::Ready>,
) -> anyhow::Result<()> {
    let Prepared {
        config,
        listeners,
        activation,
    } = prepared;
    let pid = std::process::id();
    info!(
        php_fpm = %format_args!("fpm is running, pid {pid}"),
        "fpmd {} running, pid {pid}",
        env!("CARGO_PKG_VERSION")
    );
    let config_file = std::path::absolute(&config.file).unwrap_or_else(|_| config.file.clone());
    // Orphans of our children (a pre-fork parent's children, processes a
    // script started) are reparented to fpmd and reaped here, not left as
    // zombies elsewhere.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    // The SIGCHLD stream exists before the first fork.
    let sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
    let reaper = Reaper::new();
    tokio::spawn(reaper.clone().run(sigchld));
    let spawner = Spawner::start(reaper)?;
    if let Err(e) = crate::process::proc_events::start() {
        info!("no process events ({e}): the exit status of pre-forked children will not be known");
    }
    // 0700: only fpmd reaches the children's sockets (php-cgi never opens
    // the path: its socket is its fd 0) and the pools' private /tmp (bind
    // mounted by the child while still root).
    let runtime_dir = {
        use std::os::unix::fs::PermissionsExt;
        tempfile::Builder::new()
            .prefix("fpmd.")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?
    };
    // As php-fpm: an access log that cannot be opened stops the start.
    open_access_logs(&config).map_err(anyhow::Error::msg)?;
    let pid_file = write_pid_file(&config)?;
    let (nofile, cap) = accept::raise_nofile(children_of(&config));
    debug!("RLIMIT_NOFILE {nofile}: at most {cap} web server connections");
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (in_flight_tx, mut in_flight_rx) = mpsc::channel::<()>(1);
    let (watch_tx, mut watch_rx) = mpsc::unbounded_channel::<()>();
    let (calls_tx, mut calls) = mpsc::unbounded_channel::<Call>();
    let mut d = Daemon {
        config,
        listeners,
        activation,
        pools: BTreeMap::new(),
        accepting: BTreeMap::new(),
        spawner,
        runtime_dir,
        shutdown: shutdown_rx,
        in_flight: in_flight_tx,
        sd: Notifier::from_env(),
        log,
        pid_file,
        removed: Vec::new(),
        watcher: None,
        watch_tx,
        calls_tx,
        exe: std::env::current_exe().ok(),
        pools_view: watch::channel(Vec::new()).0,
        metrics: None,
        board: Board::new(config_file),
    };
    let pools: Vec<PoolConfig> = d.config.pools.clone();
    crate::pool::warm::configure(d.config.global.warm_min_available);
    tokio::spawn(crate::pool::warm::monitor());
    tokio::spawn(crate::sys::pageout::trim_heap_periodically());
    // What a SIGKILLed fpmd's scripts left in their cgroups goes now.
    if let Some(layout) = crate::process::cgroup::Layout::system() {
        layout.sweep_stale();
    }
    for p in &pools {
        d.start_pool(p);
    }
    for p in &pools {
        d.route(p);
    }
    d.publish_pools();
    d.remetrics().await;
    for h in d.pools.values_mut() {
        h.started().await;
    }
    d.post_pools();
    if let Some(h) = handover {
        // The old fpmd stops accepting now; from here this one serves.
        if let Err(e) = h.ready() {
            warn!("cannot tell the fpmd this one replaces that it serves: {e}");
        }
        // The old process tells systemd MAINPID= (it is the main pid until
        // then).
        info!("took over from the previous fpmd (binary upgrade)");
    }
    let mut ctl_path = d.config.global.control_socket.clone();
    // After an upgrade the old fpmd still holds the socket: take its place.
    if upgraded_from_old(&ctl_path) {
        let _ = std::fs::remove_file(&ctl_path);
    }
    // The socket file as bound: removed at the end only if it is still
    // this one (a daemon started meanwhile may have bound its own there).
    let mut ctl_file = match socket::serve(&ctl_path, d.calls_tx.clone(), d.status_fn()) {
        Ok(()) => SocketFile::at(&ctl_path).ok(),
        Err(e) => {
            warn!("no control socket ({e}): `fpmd reload` and `fpmd stop` will not reach this daemon; signals still do");
            None
        }
    };
    d.rewatch();
    info!(
        php_fpm = "ready to handle connections",
        "fpmd {} ready to handle connections ({} pools)",
        env!("CARGO_PKG_VERSION"),
        d.pools.len()
    );
    d.sd.send(&[Notify::Ready, Notify::Status(d.serving())]);
    if let Some(ready) = detached {
        // The process that started fpmd exits 0 now.
        if let Err(e) = ready.notify() {
            warn!("cannot tell the starting process that fpmd serves: {e}");
        }
    }
    // Start-up code (configuration parsing, command line) is not needed
    // again: let the kernel take back fpmd's own code pages; the request
    // path faults its few pages back in. Less of fpmd counts in each pool.
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        crate::sys::pageout::release_own_startup_pages();
    });

    // Intents that arrived while a reload ran, in order.
    let mut queued: VecDeque<Intent> = VecDeque::new();
    // Handed over to a new fpmd: this one drains and exits quietly.
    let mut upgraded = false;
    let mut mode = loop {
        let intent = match queued.pop_front() {
            Some(i) => i,
            None => tokio::select! {
                i = intents.recv() => i.unwrap_or(Intent::FastStop),
                Some(()) = watch_rx.recv() => {
                    info!("a configuration file changed (watch = true)");
                    Intent::Reload
                }
                Some(call) = calls.recv() => match call.request {
                    Request::Reload => {
                        let answer = d.reload_coalescing(&mut intents, &mut queued).await;
                        let _ = call.reply.send(answer);
                        continue;
                    }
                    Request::Stop => {
                        let _ = call.reply.send(Answer::Ok("stopping: no new connections, in-flight requests finish".into()));
                        Intent::GracefulStop
                    }
                    Request::Status { pool } => {
                        // The socket's task answers these itself; kept for
                        // completeness.
                        let _ = call.reply.send(d.board.answer(pool.as_deref()));
                        continue;
                    }
                    Request::Upgrade => {
                        let answer = d.upgrade().await;
                        let done = matches!(answer, Answer::Ok(_));
                        let _ = call.reply.send(answer);
                        if done {
                            upgraded = true;
                            break StopMode::Graceful;
                        }
                        continue;
                    }
                },
            },
        };
        match intent {
            Intent::GracefulStop => break StopMode::Graceful,
            Intent::FastStop => break StopMode::Fast,
            Intent::ReopenLogs => {
                match d.log.reopen() {
                    Ok(()) => info!(php_fpm = "error log file re-opened", "log file reopened"),
                    Err(e) => error!("cannot reopen the log file: {e}"),
                }
                reopen_access_logs();
            }
            Intent::Reload => {
                d.reload_coalescing(&mut intents, &mut queued).await;
            }
        }
        if d.config.global.control_socket != ctl_path {
            match socket::serve(
                &d.config.global.control_socket,
                d.calls_tx.clone(),
                d.status_fn(),
            ) {
                Ok(()) => {
                    if let Some(f) = ctl_file.take() {
                        f.unlink();
                    }
                    ctl_path = d.config.global.control_socket.clone();
                    ctl_file = SocketFile::at(&ctl_path).ok();
                    info!("control socket moved to {}", ctl_path.display());
                }
                Err(e) => error!(
                    "cannot move the control socket to {}: {e}; it stays at {}",
                    d.config.global.control_socket.display(),
                    ctl_path.display()
                ),
            }
        }
    };
    d.board.set_phase(Phase::Stopping);
    if !upgraded {
        d.sd.send(&[Notify::Stopping, Notify::Status(stopping(mode).into())]);
    }
    let _ = shutdown_tx.send(true);
    let Daemon {
        pools,
        accepting,
        mut listeners,
        in_flight,
        sd,
        pid_file,
        removed,
        metrics,
        shutdown,
        ..
    } = d;
    // Nothing to scrape from a stopping daemon (and after an upgrade the
    // new fpmd waits for the address).
    if let Some(m) = metrics {
        m.stop().await;
    }
    if upgraded {
        // The sockets, their files, the control socket and the pid file are
        // the new fpmd's now.
        listeners.disown_files();
    } else if let Some(f) = &ctl_file {
        f.unlink();
    }
    let pid_file = if upgraded { None } else { pid_file };
    // The accept loops end at once; then the sockets close and their files
    // go, so that a web server connecting during the drain is refused at
    // once instead of waiting in a queue nobody accepts from. In a
    // graceful stop the connections the kernel has made are served first
    // (closing would reset them).
    let mut routes = Vec::new();
    for (key, a) in accepting {
        let route = a.route.borrow().clone();
        let _ = a.task.await;
        if let Some(route) = route {
            routes.push((key, route));
        }
    }
    if mode == StopMode::Graceful {
        serve_last(&mut listeners, &routes, &shutdown, &in_flight).await;
    }
    drop(listeners);
    drop(in_flight);
    if mode == StopMode::Graceful {
        info!(
            php_fpm = "Finishing ...",
            "graceful stop: no new connections; waiting for in-flight requests"
        );
        loop {
            tokio::select! {
                _ = in_flight_rx.recv() => break,
                i = intents.recv() => if matches!(i, Some(Intent::FastStop) | None) {
                    warn!(php_fpm = "Terminating ...", "fast stop requested during the graceful stop");
                    mode = StopMode::Fast;
                    sd.send(&[Notify::Status(stopping(mode).into())]);
                    break;
                },
            }
        }
    } else {
        info!(php_fpm = "Terminating ...", "fast stop");
    }
    let mut stopping = Vec::new();
    for (_, handle) in pools {
        stopping.push(tokio::spawn(handle.stop(mode, Some(STOP_GRACE))));
    }
    for s in stopping.into_iter().chain(removed) {
        let _ = s.await;
    }
    if let Some(p) = pid_file {
        remove_pid_file(&p);
    }
    // The access log lines not yet written (a disk that hangs does not
    // hold the exit long).
    let _ = tokio::time::timeout(STOP_GRACE, crate::observe::reopen::sync()).await;
    info!(php_fpm = "exiting, bye-bye!", "exiting");
    Ok(())
}

/// How long a TCP handshake under way when its socket begins to refuse new
/// connections has to complete: its final ACK is one round trip away.
const HANDSHAKE_SETTLE: Duration = Duration::from_millis(20);

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

/// Opens the access log of every pool of `config` (those open already stay
/// as they are). Errors: the first that cannot be opened, naming its pool
/// and path.
fn open_access_logs(config: &Config) -> Result<(), String> {
    for p in &config.pools {
        if let Some(path) = &p.access_log {
            crate::observe::reopen::open(path).map_err(|e| {
                format!(
                    "pool {}: cannot open access.log {}: {e}",
                    p.name,
                    path.display()
                )
            })?;
        }
    }
    Ok(())
}

/// Closes the access logs that no pool of `config` writes (once the
/// requests still holding them are done).
fn retain_access_logs(config: &Config) {
    let paths: Vec<&std::path::Path> = config
        .pools
        .iter()
        .filter_map(|p| p.access_log.as_deref())
        .collect();
    crate::observe::reopen::retain(&paths);
}

/// SIGUSR1: the writer thread reopens every access log (after it wrote
/// what was pending); the outcome is logged once it is done.
fn reopen_access_logs() {
    let done = crate::observe::reopen::reopen();
    tokio::spawn(async move {
        let Ok(done) = done.await else { return };
        if !done.reopened.is_empty() {
            info!("access logs reopened ({})", done.reopened.len());
        }
        for (path, e) in done.failed {
            error!(
                "cannot reopen the access log {}: {e}; lines go on to the old file",
                path.display()
            );
        }
    });
}

/// Whether a live control socket at `path` belongs to an fpmd this one
/// replaces (this process was started with `--upgrade-fd`).
fn upgraded_from_old(path: &std::path::Path) -> bool {
    std::env::args().any(|a| a == "--upgrade-fd") && path.exists()
}

fn children_of(config: &Config) -> usize {
    config
        .pools
        .iter()
        .map(|p| p.pm.max_children as usize)
        .sum()
}

impl Daemon {
    fn start_pool(&mut self, p: &PoolConfig) {
        let handle = pool::start_pool(
            Arc::new(p.clone()),
            self.spawner.clone(),
            self.runtime_dir.path(),
            self.config.global.emergency_restart,
        );
        self.pools.insert(p.name.clone(), handle);
    }

    /// Tells the metrics endpoint which pools there are now.
    fn publish_pools(&self) {
        self.pools_view
            .send_replace(self.pools.values().map(|h| h.pool.clone()).collect());
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

    /// Points `p`'s listen addresses (its `listen.address`, and its
    /// `pm.status_listen`) at its pool, starting the accept loop of an
    /// address that has none.
    fn route(&mut self, p: &PoolConfig) {
        for (listen, status_only) in p.listeners() {
            self.route_one(p, &listen, status_only);
        }
    }

    fn route_one(&mut self, p: &PoolConfig, listen: &crate::config::Listen, status_only: bool) {
        let key = ListenKey::new(&listen.address);
        let Some(handle) = self.pools.get(&p.name) else {
            return;
        };
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
        match Listener::register(&self.listeners, &key) {
            Ok(l) => {
                let what = if status_only {
                    " (status and ping only)"
                } else {
                    ""
                };
                info!(pool = %p.name, "listening on {key}{what}");
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
    async fn unroute(&mut self, key: &ListenKey) -> Option<Arc<Route>> {
        let a = self.accepting.remove(key)?;
        let route = a.route.send_replace(None);
        let _ = a.task.await;
        route
    }

    /// Ends the accept loops of `keys`, whose sockets are to close, and
    /// serves what waits in them ([`serve_last`]): they refuse new
    /// connections from now on.
    async fn close_routes(&mut self, keys: Vec<ListenKey>) {
        let mut closing = Vec::new();
        for key in keys {
            if let Some(route) = self.unroute(&key).await {
                closing.push((key, route));
            }
        }
        serve_last(
            &mut self.listeners,
            &closing,
            &self.shutdown,
            &self.in_flight,
        )
        .await;
    }

    /// Starts the fpmd binary now on disk on the same configuration and
    /// hands it the listening sockets; once it serves, this one stops
    /// accepting (the caller then drains and exits).
    async fn upgrade(&mut self) -> Answer {
        let Some(exe) = self.exe.clone() else {
            return Answer::Error("cannot tell which fpmd binary runs".into());
        };
        let listeners =
            match crate::daemon::upgrade::listeners_of(&self.listeners, &self.activation) {
                Ok(l) => l,
                Err(e) => {
                    return Answer::Error(format!("cannot hand over the listening sockets: {e}"))
                }
            };
        info!(
            "upgrade: starting {} on {}",
            exe.display(),
            self.config.file.display()
        );
        let config = self.config.file.clone();
        let args = self.config.options.to_args(self.config.global.daemonize);
        self.board.set_phase(Phase::Upgrading);
        let outcome = tokio::task::spawn_blocking(move || {
            crate::daemon::upgrade::start_new(&exe, &config, &args, listeners)
        })
        .await;
        if !matches!(outcome, Ok(crate::daemon::upgrade::Outcome::Ready(_))) {
            self.board.set_phase(Phase::Ready);
        }
        match outcome {
            Ok(crate::daemon::upgrade::Outcome::Ready(pid)) => {
                info!("upgrade: the new fpmd (pid {pid}) serves; this one stops accepting, drains and exits");
                self.sd.send(&[Notify::MainPid(pid)]);
                Answer::Ok(format!(
                    "upgraded: the new fpmd has pid {pid}; the old one ({}) drains and exits",
                    std::process::id()
                ))
            }
            Ok(crate::daemon::upgrade::Outcome::ConfigError(e)) => {
                error!("upgrade refused: the new fpmd does not accept the configuration: {e}; this one serves on");
                Answer::ConfigError(e)
            }
            Ok(crate::daemon::upgrade::Outcome::Failed(e)) => {
                error!("upgrade failed: {e}; this one serves on");
                Answer::Error(e)
            }
            Err(e) => Answer::Error(format!("upgrade: {e}")),
        }
    }

    /// (Re)creates the configuration watcher as `watch` says, on the
    /// configuration's current files.
    fn rewatch(&mut self) {
        self.watcher = None;
        if !self.config.global.watch {
            return;
        }
        match crate::daemon::config_watch::watch(&self.config.sources, self.watch_tx.clone()) {
            Ok(w) => self.watcher = Some(w),
            Err(e) => error!("watch = true, but the configuration cannot be watched: {e}"),
        }
    }

    /// The `STATUS=` line while serving.
    fn serving(&self) -> String {
        serving(self.pools.len(), children_of(&self.config))
    }

    /// Tells the board which pools serve now.
    fn post_pools(&self) {
        self.board
            .set_pools(self.pools.values().map(|h| h.pool.clone()));
    }

    /// How the control socket answers `status [POOL]`: from the board.
    fn status_fn(&self) -> socket::StatusFn {
        let board = self.board.clone();
        Arc::new(move |pool| board.answer(pool))
    }

    /// Reloads, then once more if more reload requests arrived meanwhile
    /// (they are coalesced into that one); other intents that arrived are
    /// queued in order. Returns the first reload's answer.
    async fn reload_coalescing(
        &mut self,
        intents: &mut mpsc::UnboundedReceiver<Intent>,
        queued: &mut VecDeque<Intent>,
    ) -> Answer {
        let answer = self.reload().await;
        loop {
            let mut again = false;
            while let Ok(i) = intents.try_recv() {
                match i {
                    Intent::Reload => again = true,
                    other => queued.push_back(other),
                }
            }
            if !again
                || queued
                    .iter()
                    .any(|i| matches!(i, Intent::GracefulStop | Intent::FastStop))
            {
                return answer;
            }
            info!("reload requests arrived during the reload: reloading once more");
            self.reload().await;
        }
    }

    /// One reload (see the module docs).
    async fn reload(&mut self) -> Answer {
        self.sd.send(&[Notify::Reloading]);
        self.board.set_phase(Phase::Reloading);
        info!(
            php_fpm = "Reloading in progress ...",
            "reloading {}",
            self.config.file.display()
        );
        let loaded =
            crate::config::load_with(&self.config.file, &self.config.options).map(|mut c| {
                self.activation.apply(&mut c);
                c
            });
        if let Ok(c) = &loaded {
            for n in &c.notices {
                info!("{n}");
            }
        }
        let answer = self.apply(loaded).await;
        self.post_pools();
        self.board.set_phase(Phase::Ready);
        // The set of files may have changed (a pool file added or removed).
        self.rewatch();
        self.publish_pools();
        self.remetrics().await;
        match &answer {
            Answer::Ok(summary) => info!(
                php_fpm = "ready to handle connections",
                "reload done: {}",
                summary.replace('\n', "; ")
            ),
            Answer::ConfigError(e) => {
                error!("reload refused, the running configuration stays: {e}")
            }
            Answer::Error(e) => error!("reload failed: {e}"),
        }
        self.sd
            .send(&[Notify::Ready, Notify::Status(self.serving())]);
        answer
    }

    async fn apply(&mut self, loaded: Result<Config, crate::config::ConfigError>) -> Answer {
        let new = match loaded {
            Ok(c) => c,
            Err(e) => return Answer::ConfigError(e.to_string()),
        };
        for w in &new.warnings {
            warn!("{w}");
        }
        let old_keys: Vec<ListenKey> = self
            .config
            .pools
            .iter()
            .flat_map(|p| p.listeners())
            .map(|(l, _)| ListenKey::new(&l.address))
            .collect();
        // Listeners and access logs first: nothing else changes if one
        // cannot be had.
        let obtained = match bind_all(&mut self.listeners, &new)
            .map_err(|e| e.to_string())
            .and_then(|o| open_access_logs(&new).map(|()| o))
        {
            Ok(o) => o,
            Err(e) => {
                self.listeners.retain(&old_keys);
                // Put the kept sockets' options back.
                let _ = bind_all(&mut self.listeners, &self.config);
                retain_access_logs(&self.config);
                return Answer::ConfigError(e);
            }
        };
        // Global settings that apply live.
        let g = &new.global;
        if g.log_level != self.config.global.log_level {
            crate::log::set_level(&g.log_level);
        }
        crate::log::set_format(g.log_format);
        crate::pool::warm::configure(g.warm_min_available);
        if g.error_log != self.config.global.error_log {
            if let Err(e) = self.log.retarget(&g.error_log) {
                error!(
                    "cannot switch the log to {:?}: {e}; it stays where it was",
                    g.error_log
                );
            }
        }
        if g.pid != self.config.global.pid {
            if let Some(p) = self.pid_file.take() {
                remove_pid_file(&p);
            }
            self.pid_file = write_pid_file(&new).unwrap_or_else(|e| {
                error!("{e}");
                None
            });
        }
        let old = std::mem::replace(&mut self.config, new);
        let new_names: Vec<&str> = self.config.pools.iter().map(|p| p.name.as_str()).collect();
        let mut summary = Vec::new();
        // Removed pools: no new connection, drain, stop.
        let removed: Vec<PoolConfig> = old
            .pools
            .iter()
            .filter(|p| !new_names.contains(&p.name.as_str()))
            .cloned()
            .collect();
        let closing = removed
            .iter()
            .flat_map(|p| p.listeners())
            .map(|(l, _)| ListenKey::new(&l.address))
            .filter(|key| !obtained.iter().any(|(k, _)| k == key))
            .collect();
        self.close_routes(closing).await;
        for p in &removed {
            if let Some(h) = self.pools.remove(&p.name) {
                info!(pool = %p.name, "removed by the reload: no new requests; it stops once its requests are done");
                self.removed
                    .push(tokio::spawn(h.stop(StopMode::Graceful, p.graceful_timeout)));
            }
            summary.push(format!("pool {}: removed", p.name));
        }
        // Added and kept pools.
        let mut changes = Vec::new();
        let pools: Vec<PoolConfig> = self.config.pools.clone();
        for p in &pools {
            match self.pools.get(&p.name) {
                None => {
                    self.start_pool(p);
                    summary.push(format!("pool {}: added", p.name));
                }
                Some(_) => {
                    let fields = old
                        .pool(&p.name)
                        .map(|o| crate::config::changed_fields(o, p))
                        .unwrap_or_default();
                    if fields.is_empty() {
                        summary.push(format!("pool {}: unchanged", p.name));
                    } else {
                        info!(pool = %p.name, "changed: {}", fields.join(", "));
                        changes.push((p.name.clone(), Arc::new(p.clone())));
                    }
                }
            }
        }
        let pools_now = &self.pools;
        let results =
            futures_util::future::join_all(changes.iter().map(|(name, config)| async move {
                match pools_now.get(name) {
                    Some(h) => (name.clone(), h.reconfigure(config.clone()).await),
                    None => (name.clone(), Err("the pool is gone".to_string())),
                }
            }))
            .await;
        let mut failed = Vec::new();
        for (name, r) in results {
            match r {
                Ok(Reconfigured::Retuned) => summary.push(format!("pool {name}: children kept")),
                Ok(Reconfigured::Respawned { from, to }) => summary.push(format!(
                    "pool {name}: new children (generation {from} → {to})"
                )),
                Err(e) => {
                    failed.push(format!("pool {name}: {e}"));
                    summary.push(format!(
                        "pool {name}: FAILED, its old children serve on: {e}"
                    ));
                    // The pool runs its old settings: keep them as the
                    // running configuration, so that the next reload of
                    // the same file tries the change again rather than
                    // finding it "unchanged".
                    if let (Some(i), Some(o)) = (
                        self.config.pools.iter().position(|p| p.name == name),
                        old.pool(&name),
                    ) {
                        self.config.pools[i] = o.clone();
                    }
                }
            }
        }
        // Routes: every address of the new configuration to its pool (a
        // rebound socket needs a new accept loop); then close what nothing
        // routes to.
        for (key, o) in &obtained {
            if *o == Obtained::Rebound {
                self.unroute(key).await;
            }
        }
        for p in &pools {
            self.route(p);
        }
        let keep: Vec<ListenKey> = obtained.iter().map(|(k, _)| k.clone()).collect();
        let stale: Vec<ListenKey> = self
            .accepting
            .keys()
            .filter(|k| !keep.contains(k))
            .cloned()
            .collect();
        self.close_routes(stale).await;
        for k in self.listeners.retain(&keep) {
            info!("no longer listening on {k}");
        }
        retain_access_logs(&self.config);
        if failed.is_empty() {
            Answer::Ok(summary.join("\n"))
        } else {
            Answer::Error(summary.join("\n"))
        }
    }
}

/// The `STATUS=` line while serving: "1 pool, up to 4 children".
fn serving(pools: usize, children: usize) -> String {
    let s = if pools == 1 { "" } else { "s" };
    format!("{pools} pool{s}, up to {children} children")
}

/// The `STATUS=` line of a stop.
fn stopping(mode: StopMode) -> &'static str {
    match mode {
        StopMode::Graceful => "graceful stop: waiting for in-flight requests",
        StopMode::Fast => "fast stop",
    }
}

/// Removes the pid file at `path` if it still holds this process's pid: a
/// daemon started meanwhile (`fpmd stop` that did not wait, a
/// `start-stop-daemon` without `--retry`) has written its own there, which
/// is the running daemon's and stays.
fn remove_pid_file(path: &Path) {
    let ours = std::fs::read_to_string(path)
        .is_ok_and(|t| t.trim().parse::<u32>().ok() == Some(std::process::id()));
    if ours {
        if let Err(e) = std::fs::remove_file(path) {
            warn!("cannot remove the pid file {}: {e}", path.display());
        }
    }
}

fn write_pid_file(config: &Config) -> std::io::Result<Option<PathBuf>> {
    let Some(path) = &config.global.pid else {
        return Ok(None);
    };
    std::fs::write(path, format!("{}\n", std::process::id())).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot write pid file {}: {e}", path.display()),
        )
    })?;
    Ok(Some(path.clone()))
}
