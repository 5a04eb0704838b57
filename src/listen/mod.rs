//! The pools' listening sockets.
//!
//! ```text
//! table.rs     ListenerTable: the one owner of every socket, keyed by ListenKey;
//!              obtain (keep and re-apply, or bind), adopt (inherited), retain (close + unlink)
//! bind.rs      bind with php-fpm's listen.* options; re-apply them to a kept socket
//! accept.rs    accept loop per address: routes each connection to the pool its Route names
//! transfer.rs  the table's fds to another process (SCM_RIGHTS); systemd's LISTEN_FDS
//! activation.rs  which pool serves on each socket systemd passed (name, else address)
//! ```
//!
//! A socket lives in the table from its bind (or adoption) to its
//! [`ListenerTable::retain`] or the table's drop; accept loops hold
//! registered clones and stop when their route says `None`, without
//! closing the socket or removing its file.
//!
//! Owns: the listening sockets, their files and the connection cap. Must
//! not touch: FastCGI records (the proxy reads them) or processes.

pub mod accept;
pub mod activation;
mod bind;
pub mod table;
pub mod transfer;

pub use accept::{accept_loop, raise_nofile, serve_queued, Listener, Route, RouteWatch};
pub use activation::{Activated, Activation, ActivationError};
pub(crate) use bind::{bind as bind_socket, SocketFile};
pub use bind::{effective_backlog, somaxconn, BindError};
pub use table::{AdoptError, Inherited, KeyError, ListenKey, ListenerTable, Obtained};
