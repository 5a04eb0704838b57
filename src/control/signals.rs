//! Control: Unix signals become intents, in one place; nothing else in
//! fpmd sees a signal number.
//!
//! Owns: signal handlers. Follows php-fpm: SIGUSR2 and SIGHUP reload,
//! SIGUSR1 reopens log files, SIGQUIT stops gracefully (drain, then exit),
//! SIGTERM and SIGINT stop fast.

use tokio::signal::unix::{signal, SignalKind};

use super::{Intent, Order, Orders};

/// Installs the handlers: every signal sends its [`Intent`] to `orders`,
/// as php-fpm acts on them. Must run inside the tokio runtime. Errors: a
/// handler could not be installed.
pub fn listen(orders: &Orders) -> std::io::Result<()> {
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
        let tx = orders.clone();
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                if tx.send(Order::new(intent)).is_err() {
                    return;
                }
            }
        });
    }
    Ok(())
}
