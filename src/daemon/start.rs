//! The daemon's start: bind every listener before anything is spawned
//! ([`prepare`]), then set up the process machinery (subreaper, SIGCHLD,
//! spawner, runtime directory), open the logs, write the pid file, start
//! every pool and its routes, open the control socket, and say "ready"
//! (to the log, systemd, an upgrading or a detaching parent).
//!
//! Owns: the order of the start, and what the running daemon holds
//! ([`Daemon`]) coming into being. As php-fpm: an access log that cannot be
//! opened, or a pid file that cannot be written, stops the start.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::routes::Routes;
use super::{accept, Daemon, DaemonError};
use crate::config::Config;
use crate::control::socket;
use crate::control::systemd::{Notifier, Notify};
use crate::control::Orders;
use crate::listen::{self, Activation, BindError, ListenKey, ListenerTable, Obtained, SocketFile};
use crate::log::LogWriter;
use crate::observe::board::Board;
use crate::process::reap::Reaper;
use crate::process::spawn::Spawner;

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
    listeners.retain(&listen_keys(&config));
    Ok(Prepared {
        config,
        listeners,
        activation,
    })
}

/// Every listen address of `config` (each pool's `listen.address` and
/// `pm.status_listen`).
pub(super) fn listen_keys(config: &Config) -> Vec<ListenKey> {
    config
        .pools
        .iter()
        .flat_map(|p| p.listeners())
        .map(|(l, _)| ListenKey::new(&l.address))
        .collect()
}

/// `obtain` for every pool of `config`, refusing two pools on one address.
pub(super) fn bind_all(
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

/// Opens (creating them, 0600) the access log and the slowlog of every
/// pool of `config`, as php-fpm opens both at start (those open already
/// stay as they are). Errors: the first that cannot be opened, naming its
/// pool, key and path.
pub(super) fn open_pool_logs(config: &Config) -> Result<(), String> {
    for p in &config.pools {
        let files = [("access.log", &p.access_log), ("slowlog", &p.slowlog)];
        for (key, path) in files {
            let Some(path) = path else { continue };
            crate::observe::reopen::open(path).map_err(|e| {
                format!("pool {}: cannot open {key} {}: {e}", p.name, path.display())
            })?;
        }
    }
    Ok(())
}

/// Writes this process's pid to `pid` (php-fpm's `pid`), if set. Returns
/// the path written. Errors: the file cannot be written (the message names
/// it).
pub(super) fn write_pid_file(config: &Config) -> std::io::Result<Option<PathBuf>> {
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

/// The sum of `pm.max_children` over the pools of `config`.
pub(super) fn children_of(config: &Config) -> usize {
    config
        .pools
        .iter()
        .map(|p| p.pm.max_children as usize)
        .sum()
}

/// Whether a live control socket at `path` belongs to an fpmd this one
/// replaces (this process was started with `--upgrade-fd`).
fn upgraded_from_old(path: &std::path::Path) -> bool {
    std::env::args().any(|a| a == "--upgrade-fd") && path.exists()
}

/// Orphans of fpmd's children (a pre-fork parent's children, processes a
/// script started) are reparented to fpmd and reaped here, not left as
/// zombies elsewhere. Errors: `prctl` refused.
fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Sets up the process machinery and everything the daemon holds, starts
/// every pool and route, and serves the control socket; the daemon serves
/// once this returns (see [`super::run`] for `orders`, `handover` and
/// `detached`). Errors: what stops php-fpm's start too (the runtime
/// directory, an access log or the pid file cannot be had) and the child
/// machinery (SIGCHLD, the spawner) failing.
pub(super) async fn start(
    prepared: Prepared,
    orders: Orders,
    log: LogWriter,
) -> Result<(Daemon, watch::Sender<bool>, mpsc::Receiver<()>), DaemonError> {
    let Prepared {
        mut config,
        listeners,
        activation,
    } = prepared;
    super::to_run(&mut config);
    let pid = std::process::id();
    info!(
        php_fpm = %format_args!("fpm is running, pid {pid}"),
        "fpmd {} running, pid {pid}",
        env!("CARGO_PKG_VERSION")
    );
    let config_file = std::path::absolute(&config.file).unwrap_or_else(|_| config.file.clone());
    if let Err(e) = become_subreaper() {
        warn!("cannot become the subreaper of fpmd's children ({e}): what a pre-fork parent or a script leaves behind is reaped by init");
    }
    // The SIGCHLD stream exists before the first fork.
    let sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
        .map_err(DaemonError::Sigchld)?;
    let reaper = Reaper::new();
    tokio::spawn(reaper.clone().run(sigchld));
    let spawner = Spawner::start(reaper).map_err(DaemonError::Spawner)?;
    // 0700: only fpmd reaches the children's sockets (php-cgi never opens
    // the path: its socket is its fd 0) and the pools' private /tmp (bind
    // mounted by the child while still root).
    let runtime_dir = {
        use std::os::unix::fs::PermissionsExt;
        tempfile::Builder::new()
            .prefix("fpmd.")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(DaemonError::RuntimeDir)?
    };
    let sapi_dir = install_sapi();
    // As php-fpm: an access log that cannot be opened stops the start.
    open_pool_logs(&config).map_err(DaemonError::PoolLog)?;
    if let Some(path) = &config.global.unused_error_log {
        // php-fpm opens its error_log whatever -O says (fpm_stdio.c).
        use std::os::unix::fs::OpenOptionsExt;
        if let Err(e) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
        {
            warn!(
                "cannot create error_log {} (-O logs to stderr): {e}",
                path.display()
            );
        }
    }
    let pid_file = write_pid_file(&config).map_err(DaemonError::PidFile)?;
    let (nofile, cap) = accept::raise_nofile(children_of(&config));
    debug!("RLIMIT_NOFILE {nofile}: at most {cap} web server connections");
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (in_flight_tx, in_flight_rx) = mpsc::channel::<()>(1);
    let mut d = Daemon {
        config,
        listeners,
        activation,
        pools: BTreeMap::new(),
        routes: Routes::new(shutdown_rx, in_flight_tx),
        spawner,
        runtime_dir,
        sapi_dir,
        status_sockets: Default::default(),
        sd: Notifier::from_env(),
        log,
        pid_file,
        removed: Vec::new(),
        watcher: None,
        control_path: PathBuf::new(),
        control_file: None,
        orders,
        exe: std::env::current_exe().ok(),
        pools_view: watch::channel(Vec::new()).0,
        metrics: None,
        board: Board::new(config_file),
    };
    crate::pool::warm::configure(d.config.global.warm_min_available);
    crate::pool::warm::configure_timeout(d.config.global.warm_timeout);
    crate::sys::sched::apply(d.config.global.sched_batch);
    tokio::spawn(crate::pool::warm::monitor());
    tokio::spawn(crate::sys::pageout::trim_heap_periodically());
    // What a SIGKILLed fpmd's scripts left in their cgroups goes now.
    if let Some(layout) = crate::process::cgroup::Layout::system() {
        layout.sweep_stale();
    }
    let pools = d.config.pools.clone();
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
    Ok((d, shutdown_tx, in_flight_rx))
}

/// Installs `sapi.php` (see [`crate::process::sapi`]) and the fork server
/// (see [`crate::process::fork_server`]) in a directory of its own (mode
/// 0755 in `$TMPDIR`, removed when fpmd exits) for the children to run;
/// without it (the directory cannot be made) the pools run php-cgi as it
/// is and exec every child, and fpmd says so.
fn install_sapi() -> Option<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let made = tempfile::Builder::new()
        .prefix("fpmd-sapi.")
        .permissions(std::fs::Permissions::from_mode(0o755))
        .tempdir()
        .and_then(|dir| crate::process::sapi::install(dir.path()).map(|i| (dir, i)));
    match made {
        Ok((dir, i)) => {
            if let Err(e) = crate::process::fork_server::install(dir.path()) {
                warn!("cannot install fpmd's fork server in {} ({e}): pools with pm.spawn = \"prefork\" exec each child", dir.path().display());
            }
            if !i.for_everyone {
                warn!("{} cannot be reached by every user (a directory above it is not searchable by others): fastcgi_finish_request(), the requests' memory and CPU figures and pm.spawn = \"prefork\" only for pools that run as fpmd's own user", i.path.display());
            }
            Some(dir)
        }
        Err(e) => {
            warn!("cannot install fpmd's SAPI file in $TMPDIR ({e}): no fastcgi_finish_request(), no memory or CPU figures per request, and pools with pm.spawn = \"prefork\" exec each child");
            None
        }
    }
}

impl Daemon {
    /// Binds the control socket where the configuration says. After an
    /// upgrade the old fpmd still holds it: this one takes its place.
    pub(super) fn open_control_socket(&mut self) {
        let path = self.config.global.control_socket.clone();
        if upgraded_from_old(&path) {
            let _ = std::fs::remove_file(&path);
        }
        // The socket file as bound: removed at the end only if it is
        // still this one (a daemon started meanwhile may have bound its
        // own there).
        match socket::serve(&path, self.orders.clone(), self.status_fn()) {
            Ok(()) => self.control_file = SocketFile::at(&path).ok(),
            Err(e) => {
                warn!("no control socket ({e}): `fpmd reload` and `fpmd stop` will not reach this daemon; signals still do")
            }
        }
        self.control_path = path;
    }

    /// An upgrade: tells the fpmd this one replaces (`handover`) that this
    /// one serves; it stops accepting now.
    pub(super) fn take_over(&self, handover: Option<super::upgrade::Handover>) {
        let Some(h) = handover else { return };
        if let Err(e) = h.ready() {
            warn!("cannot tell the fpmd this one replaces that it serves: {e}");
        }
        // The old process tells systemd MAINPID= (it is the main pid until
        // then).
        info!("took over from the previous fpmd (binary upgrade)");
    }

    /// Says "ready": to the log, to systemd and to the process that
    /// started this one when it detached (`detached`).
    pub(super) fn ready(&self, detached: Option<super::detach::Ready>) {
        info!(
            php_fpm = "ready to handle connections",
            "fpmd {} ready to handle connections ({} pool{})",
            env!("CARGO_PKG_VERSION"),
            self.pools.len(),
            if self.pools.len() == 1 { "" } else { "s" }
        );
        self.sd
            .send(&[Notify::Ready, Notify::Status(self.serving())]);
        if let Some(ready) = detached {
            // The process that started fpmd exits 0 now.
            if let Err(e) = ready.notify() {
                warn!("cannot tell the starting process that fpmd serves: {e}");
            }
        }
        // Start-up code (configuration parsing, command line) is not needed
        // again: let the kernel take back fpmd's own code pages; the request
        // path faults its few pages back in. Less of fpmd counts in each
        // pool.
        tokio::spawn(async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            crate::sys::pageout::release_own_startup_pages();
        });
    }

    /// The `STATUS=` line while serving.
    pub(super) fn serving(&self) -> String {
        serving(self.pools.len(), children_of(&self.config))
    }

    /// How the control socket answers `status [POOL]`: from the board.
    pub(super) fn status_fn(&self) -> socket::StatusFn {
        let board = self.board.clone();
        Arc::new(move |pool| board.answer(pool))
    }
}

/// The `STATUS=` line while serving: "1 pool, up to 4 children".
fn serving(pools: usize, children: usize) -> String {
    let s = if pools == 1 { "" } else { "s" };
    format!("{pools} pool{s}, up to {children} children")
}
