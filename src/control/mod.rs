//! The daemon's ports to the people and programs that operate it: Unix
//! signals ([`signals`]: SIGUSR2, SIGQUIT, … become intents), the control
//! socket that `fpmd reload|stop|status|upgrade` talk to ([`socket`]), and
//! systemd's notification socket ([`systemd`]: readiness, reloading,
//! stopping). Each turns an outside protocol into fpmd's own words and back.
//!
//! Must not touch: what an order does (the daemon does it), pools,
//! children or connections.

pub mod signals;
pub mod socket;
pub mod systemd;

use tokio::sync::{mpsc, oneshot};

/// What the operator asked for, whichever way: a Unix signal
/// ([`signals`]), a command on the control socket ([`socket`]), or a
/// changed configuration file (`watch = true`). One vocabulary for the
/// three; the daemon acts on each in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// SIGUSR2, SIGHUP, `fpmd reload`, a changed file.
    Reload,
    /// SIGUSR1.
    ReopenLogs,
    /// SIGQUIT, `fpmd stop`: stop accepting, let in-flight requests
    /// finish, then exit.
    GracefulStop,
    /// SIGTERM, SIGINT: stop now.
    FastStop,
    /// `fpmd upgrade`: hand the sockets to the binary now on disk.
    Upgrade,
}

/// An intent and, when it came from the control socket, where its answer
/// goes (a signal has nobody to answer).
#[derive(Debug)]
pub struct Order {
    pub intent: Intent,
    pub reply: Option<oneshot::Sender<socket::Answer>>,
}

impl Order {
    /// An order nobody waits an answer for.
    pub fn new(intent: Intent) -> Order {
        Order {
            intent,
            reply: None,
        }
    }

    /// Answers the order, if anybody asked (it may have hung up).
    pub fn answer(self, answer: socket::Answer) {
        if let Some(reply) = self.reply {
            let _ = reply.send(answer);
        }
    }
}

/// Where every port sends its orders: the daemon's one queue.
pub type Orders = mpsc::UnboundedSender<Order>;
