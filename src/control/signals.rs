//! Control: Unix signals become intents, in one place; nothing else in
//! fpmd sees a signal number.
//!
//! Owns: signal handlers. Follows php-fpm: SIGUSR2 and SIGHUP reload,
//! SIGUSR1 reopens log files, SIGQUIT stops gracefully (drain, then exit),
//! SIGTERM and SIGINT stop fast.

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

/// What the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// SIGUSR2, SIGHUP.
    Reload,
    /// SIGUSR1.
    ReopenLogs,
    /// SIGQUIT: stop accepting, let in-flight requests finish, then exit.
    GracefulStop,
    /// SIGTERM, SIGINT: stop now.
    FastStop,
}

/// Installs the handlers and returns the stream of intents. Must run inside
/// the tokio runtime. Errors: a handler could not be installed.
pub fn intents() -> std::io::Result<mpsc::UnboundedReceiver<Intent>> {
    let (tx, rx) = mpsc::unbounded_channel();
    let table = [
        (SignalKind::user_defined2(), Intent::Reload),
        (SignalKind::hangup(), Intent::Reload),
        (SignalKind::user_defined1(), Intent::ReopenLogs),
        (SignalKind::quit(), Intent::GracefulStop),
        (SignalKind::terminate(), Intent::FastStop),
        (SignalKind::interrupt(), Intent::FastStop),
    ];
    for (kind, intent) in table {
        let mut s = signal(kind)?;
        let tx = tx.clone();
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                if tx.send(intent).is_err() {
                    return;
                }
            }
        });
    }
    Ok(rx)
}
