//! The daemon's stop, as php-fpm's: graceful (SIGQUIT, `fpmd stop`: no
//! new connections, in-flight requests finish, then the children go) or
//! fast (SIGTERM, SIGINT: the children go now), and the quiet stop of an
//! fpmd that handed its sockets to a new binary (an upgrade).
//!
//! Owns: the order of the stop (routes, sockets, drain, pools, pid file,
//! last log lines). Must not touch: how a pool stops its children.

use std::path::Path;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use super::Daemon;
use crate::control::socket::Answer;
use crate::control::systemd::Notify;
use crate::control::{Intent, Order};
use crate::observe::board::Phase;
use crate::pool::StopMode;

/// How long a stopping pool's children get after SIGTERM before SIGKILL
/// (every request has finished by then in a graceful stop).
const STOP_GRACE: Duration = Duration::from_secs(3);

/// The `STATUS=` line of a stop.
fn stopping(mode: StopMode) -> &'static str {
    match mode {
        StopMode::Graceful => "graceful stop: waiting for in-flight requests",
        StopMode::Fast => "fast stop",
    }
}

/// Stops the daemon `d` in `mode` (`upgraded`: it handed its sockets, the
/// control socket and the pid file to a new fpmd, which serves now).
/// `shutdown` ends every accept loop; `in_flight` hears when the last
/// connection task is done; `orders` may still bring a fast stop during a
/// graceful one. Returns once every child is reaped.
pub(super) async fn stop(
    d: Daemon,
    mut mode: StopMode,
    upgraded: bool,
    shutdown: watch::Sender<bool>,
    mut in_flight: mpsc::Receiver<()>,
    orders: &mut mpsc::UnboundedReceiver<Order>,
) {
    d.board.set_phase(Phase::Stopping);
    if !upgraded {
        d.sd.send(&[Notify::Stopping, Notify::Status(stopping(mode).into())]);
    }
    let _ = shutdown.send(true);
    let Daemon {
        pools,
        routes,
        mut listeners,
        sd,
        pid_file,
        removed,
        metrics,
        control_file,
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
    } else if let Some(f) = &control_file {
        f.unlink();
    }
    let pid_file = if upgraded { None } else { pid_file };
    // The accept loops end at once; then the sockets close and their files
    // go, so that a web server connecting during the drain is refused at
    // once instead of waiting in a queue nobody accepts from. In a
    // graceful stop the connections the kernel has made are served first
    // (closing would reset them).
    let in_flight_tx = routes.end(&mut listeners, mode == StopMode::Graceful).await;
    drop(listeners);
    drop(in_flight_tx);
    if mode == StopMode::Graceful {
        info!(
            php_fpm = "Finishing ...",
            "graceful stop: no new connections; waiting for in-flight requests"
        );
        if drain(&mut in_flight, orders).await == StopMode::Fast {
            warn!(
                php_fpm = "Terminating ...",
                "fast stop requested during the graceful stop"
            );
            mode = StopMode::Fast;
            sd.send(&[Notify::Status(stopping(mode).into())]);
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
}

/// Waits for the in-flight requests to finish (`in_flight` closes), or for
/// a fast stop among `orders` (returns [`StopMode::Fast`] then). Another
/// graceful stop is answered that the stop is under way; any other order
/// that fpmd is stopping.
async fn drain(
    in_flight: &mut mpsc::Receiver<()>,
    orders: &mut mpsc::UnboundedReceiver<Order>,
) -> StopMode {
    loop {
        tokio::select! {
            _ = in_flight.recv() => return StopMode::Graceful,
            o = orders.recv() => match o {
                None => return StopMode::Fast,
                Some(o) => match o.intent {
                    Intent::FastStop => return StopMode::Fast,
                    Intent::GracefulStop => o.answer(Answer::Ok(
                        "stopping: no new connections, in-flight requests finish".into(),
                    )),
                    _ => o.answer(Answer::Error("fpmd is stopping".into())),
                },
            },
        }
    }
}

/// Removes the pid file at `path` if it still holds this process's pid: a
/// daemon started meanwhile (`fpmd stop` that did not wait, a
/// `start-stop-daemon` without `--retry`) has written its own there, which
/// is the running daemon's and stays.
pub(super) fn remove_pid_file(path: &Path) {
    let ours = std::fs::read_to_string(path)
        .is_ok_and(|t| t.trim().parse::<u32>().ok() == Some(std::process::id()));
    if ours {
        if let Err(e) = std::fs::remove_file(path) {
            warn!("cannot remove the pid file {}: {e}", path.display());
        }
    }
}
