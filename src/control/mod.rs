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
