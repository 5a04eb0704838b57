//! The pools' listening sockets.
//!
//! ```text
//! table.rs     ListenerTable: the one owner of every socket, keyed by ListenKey;
//!              obtain (keep and re-apply, or bind), adopt (inherited), retain (close + unlink)
//! bind.rs      bind with php-fpm's listen.* options; re-apply them to a kept socket
//! transfer.rs  the table's fds to another process (SCM_RIGHTS); systemd's LISTEN_FDS
//! activation.rs  which pool serves on each socket systemd passed (name, else address)
//! ```
//!
//! A socket lives in the table from its bind (or adoption) to its
//! [`ListenerTable::retain`] or the table's drop; the accept loops
//! (`crate::daemon::accept`, above both the sockets and the pools they
//! route to) hold registered clones of the sockets and stop without
//! closing them or removing their files.
//!
//! Owns: the listening sockets and their files. Must not touch: pools,
//! connections, FastCGI records (the proxy reads them) or processes.

pub mod activation;
mod bind;
pub mod table;
pub mod transfer;

pub use activation::{Activated, Activation, ActivationError};
pub(crate) use bind::{bind as bind_socket, SocketFile};
pub use bind::{effective_backlog, somaxconn, BindError};
pub use table::{AdoptError, Inherited, KeyError, ListenKey, ListenerTable, Obtained};
