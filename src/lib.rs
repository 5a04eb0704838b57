//! fpmd: a FastCGI process manager for PHP that runs stock `php-cgi`
//! children behind nginx, Apache or any FastCGI client.
//!
//! # The map
//!
//! One folder per layer, bottom up. A module imports only from its own
//! layer's neighbours and the layers below it, and no import closes a
//! cycle: `tests/layers.rs` reads this table and every `crate::` path in
//! `src/`, and fails naming the file, the line and the two modules of an
//! import that breaks the order.
//!
//! | layer | module | what it holds |
//! | --- | --- | --- |
//! | 1 | [`fastcgi`] | FastCGI records, name-value pairs and CGI response heads as bytes: decoding, encoding, validation; no I/O |
//! | 1 | [`sys`] | what fpmd reads of the kernel and of other processes: `/proc`, page-out, the Landlock probe, a deadline that may not be set, a socket woken only for what it reads, fpmd's scheduling policy |
//! | 1 | [`control`] | the daemon's ports to its operators: Unix signals become intents, the control socket of `fpmd reload\|stop\|status`, systemd's notifications |
//! | 2 | [`config`] | the configuration: fpmd's TOML and php-fpm's `.conf` read, validated into one model, diffed for a reload, printed by `-t` |
//! | 3 | [`log`] | fpmd's own log (its formats, levels, reopening) and the escaping of text a client or a child controls |
//! | 3 | [`listen`] | the listening sockets: the table keyed by address, bind with `listen.*`, the hand-over to a new binary, systemd's sockets |
//! | 4 | [`process`] | a php-cgi from its spec to its reaping: sandbox, spawn, the pool's cgroup, the children's output, the reaper, the fork server of php-cgi parents |
//! | 5 | [`pool`] | one pool: the slot table and its queue, generations, the supervisor that runs its process manager |
//! | 6 | [`observe`] | what fpmd shows of itself: the access log, the status page, metrics, `fpmd status`, the writer thread of log files |
//! | 7 | [`proxy`] | the FastCGI path: a web server's connection, each request to a child and the answer back, under the pool's limits |
//! | 8 | [`daemon`] | the daemon's life: start, the accept loops, reload, binary upgrade, stop |
//! | 9 | [`cli`] | the command line `main.rs` parses (php-fpm's flags, fpmd's commands) |
//!
//! # A request
//!
//! A web server connects to a socket of [`listen`]'s table; the accept
//! loop of that address ([`daemon::accept`]) checks `allowed_clients` and
//! hands the connection to [`proxy::serve_connection`] for the pool its
//! route names. [`proxy`] reads the records ([`fastcgi`]), resolves the
//! script as php-fpm would ([`proxy::request_info`]), answers the status
//! page and ping itself ([`observe`]), or takes a child from the pool's
//! slot table ([`pool::Pool::acquire`]), writes the request to it over the
//! child's kept connection, pumps the answer back under the request's timers
//! ([`proxy::exchange`]), judges the outcome ([`proxy::verdict`]), gives the
//! child back, and writes the access log line ([`observe::access_log`]).
//!
//! # A reload
//!
//! A signal, `fpmd reload` or a changed file (`watch = true`) becomes an
//! order on the daemon's one queue ([`control::Order`]); the daemon
//! ([`daemon`]'s reload) loads and validates the files ([`config`]), diffs
//! them against the running configuration ([`config::Config::diff`]), binds
//! or re-applies the listening sockets that changed ([`listen`]), and tells
//! each pool what changed: a new pool starts, a removed one drains, a
//! changed one retunes in place or starts a new generation of children
//! ([`pool`], through [`process`]) that takes the new requests while the
//! old one finishes its own. Nothing changes when the new configuration does not validate.

pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod fastcgi;
pub mod listen;
pub mod log;
pub mod observe;
pub mod pool;
pub mod process;
pub mod proxy;
pub mod sys;

pub use config::EXIT_CONFIG;
