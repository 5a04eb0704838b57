//! The daemon's life: bind every pool's listener, start the supervisors and
//! accept loops, act on intents, drain and stop.
//!
//! Owns: the order of start and stop, the pid file and the private runtime
//! directory of the children's sockets. Must not touch: FastCGI records or
//! single children (the proxy and supervisors do).

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};

use crate::config::Config;
use crate::control::Intent;
use crate::listen::{self, BindError, ListenKey, Listener, ListenerTable, Route};
use crate::log::LogWriter;
use crate::pool::{self, StopMode};
use crate::reap::Reaper;
use crate::spawn::Spawner;
use crate::systemd::{Notifier, Notify};

/// How long a stopping pool's children get after SIGTERM before SIGKILL
/// (every request has finished by then in a graceful stop).
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// A configuration whose listeners are all bound: nothing has been spawned
/// yet, so a failure up to here leaves nothing running.
pub struct Prepared {
    config: Config,
    listeners: ListenerTable,
}

/// Binds every pool's listening socket. Errors: the first address that
/// cannot be bound (in use, permission); sockets bound before it are closed
/// (and their files removed).
pub fn prepare(config: Config) -> Result<Prepared, BindError> {
    let mut listeners = ListenerTable::new();
    for (i, pool) in config.pools.iter().enumerate() {
        if let Some(other) = config.pools[..i]
            .iter()
            .find(|p| p.listen.address == pool.listen.address)
        {
            return Err(BindError::InUse {
                address: pool.listen.address.to_string(),
                detail: format!(
                    ": pools '{}' and '{}' both listen on it",
                    other.name, pool.name
                ),
            });
        }
        listeners.obtain(&pool.name, &pool.listen)?;
    }
    Ok(Prepared { config, listeners })
}

/// Runs until a stop intent; returns once every child is reaped. Must run
/// inside a tokio runtime with I/O, time and signals enabled.
pub async fn run(
    prepared: Prepared,
    mut intents: mpsc::UnboundedReceiver<Intent>,
    log: LogWriter,
) -> anyhow::Result<()> {
    let Prepared { config, listeners } = prepared;
    let sd = Notifier::from_env();
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
    if config
        .pools
        .iter()
        .any(|p| p.pm.spawn == crate::config::Spawn::Prefork)
    {
        if let Err(e) = crate::proc_events::start() {
            info!(
                "no process events ({e}): the exit status of pre-forked children will not be known"
            );
        }
    }
    let runtime_dir = tempfile::Builder::new().prefix("fpmd.").tempdir()?;
    let pid_file = write_pid_file(&config)?;

    let children: usize = config
        .pools
        .iter()
        .map(|p| p.pm.max_children as usize)
        .sum();
    let (nofile, cap) = listen::raise_nofile(children);
    debug!("RLIMIT_NOFILE {nofile}: at most {cap} web server connections");
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (in_flight_tx, mut in_flight_rx) = mpsc::channel::<()>(1);
    let mut pools = Vec::new();
    // One route per pool: a reload will point it elsewhere; dropping it
    // (or sending None) stops the address's accept loop.
    let mut routes = Vec::new();
    let mut accepting = Vec::new();
    for pool_config in &config.pools {
        let handle = pool::start_pool(
            Arc::new(pool_config.clone()),
            spawner.clone(),
            runtime_dir.path(),
            config.global.emergency_restart,
        );
        let key = ListenKey::new(&pool_config.listen.address);
        let (route, route_rx) = watch::channel(Some(Arc::new(Route::to_pool(handle.pool.clone()))));
        match Listener::register(&listeners, &key) {
            Ok(l) => {
                info!(pool = %pool_config.name, "listening on {key}");
                accepting.push(tokio::spawn(listen::accept_loop(
                    l,
                    route_rx,
                    shutdown_rx.clone(),
                    in_flight_tx.clone(),
                )));
            }
            Err(e) => {
                warn!(pool = %pool_config.name, "cannot register {key} with the event loop: {e}")
            }
        }
        routes.push(route);
        pools.push(handle);
    }
    for handle in &mut pools {
        handle.started().await;
    }
    info!(
        "fpmd {} ready to handle connections ({} pools)",
        env!("CARGO_PKG_VERSION"),
        pools.len()
    );
    sd.send(&[
        Notify::Ready,
        Notify::Status(serving(pools.len(), children)),
    ]);
    // Start-up code (configuration parsing, command line) is not needed
    // again: let the kernel take back fpmd's own code pages; the request
    // path faults its few pages back in. Less of fpmd counts in each pool.
    tokio::spawn(async {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        release_startup_pages();
    });

    let mut mode = loop {
        match intents.recv().await {
            Some(Intent::GracefulStop) => break StopMode::Graceful,
            Some(Intent::FastStop) | None => break StopMode::Fast,
            Some(Intent::ReopenLogs) => match log.reopen() {
                Ok(()) => info!("log file reopened"),
                Err(e) => error!("cannot reopen the log file: {e}"),
            },
            // Reload: sd.send(&[Notify::Reloading]), then Ready + Status(serving(..)) once it serves.
            Some(Intent::Reload) => warn!("reload is not supported by this version of fpmd yet; restart it to apply a new configuration"),
        }
    };
    sd.send(&[Notify::Stopping, Notify::Status(stopping(mode).into())]);
    let _ = shutdown_tx.send(true);
    drop(in_flight_tx);
    // The accept loops end at once; then the sockets close and their files
    // go, so that a web server connecting during the drain is refused at
    // once instead of waiting in a queue nobody accepts from.
    for a in accepting {
        let _ = a.await;
    }
    drop(routes);
    drop(listeners);
    if mode == StopMode::Graceful {
        info!("graceful stop: no new connections; waiting for in-flight requests");
        loop {
            tokio::select! {
                _ = in_flight_rx.recv() => break,
                i = intents.recv() => if matches!(i, Some(Intent::FastStop) | None) {
                    warn!("fast stop requested during the graceful stop");
                    mode = StopMode::Fast;
                    sd.send(&[Notify::Status(stopping(mode).into())]);
                    break;
                },
            }
        }
    } else {
        info!("fast stop");
    }
    let mut stopping = Vec::new();
    for handle in pools {
        stopping.push(tokio::spawn(handle.stop(mode, Some(STOP_GRACE))));
    }
    for s in stopping {
        let _ = s.await;
    }
    if let Some(p) = pid_file {
        let _ = std::fs::remove_file(p);
    }
    info!("exiting");
    Ok(())
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

/// `MADV_PAGEOUT` over the mappings of fpmd's own executable (Linux ≥ 5.4;
/// a no-op elsewhere). Clean file pages only: nothing is lost, a page that
/// is used again is read back from the page cache.
fn release_startup_pages() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if perms.contains('w') || !line.ends_with(exe.to_string_lossy().as_ref()) {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        // SAFETY: advice on a read-only mapping of our own executable; the
        // kernel keeps the mapping and refaults pages on use.
        // MADV_RANDOM also turns off fault-around for these mappings, so a
        // page of code that runs again brings back that page only, not the
        // 64 KiB around it.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_RANDOM);
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT);
        }
    }
}
