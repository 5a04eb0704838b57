//! fpmd: a FastCGI process manager for PHP that runs stock `php-cgi`
//! children behind nginx, Apache or any FastCGI client.
//!
//! Layers, each in its own module: [`fastcgi`] (protocol codec, no I/O),
//! [`config`] (validated pool configuration), [`spawn`], [`reap`] and
//! [`pool`] (the slot table, generations, the supervisor), [`output`] (what
//! children write outside FastCGI), [`proxy`] and [`listen`] (connections:
//! the listener table, and the strict FastCGI
//! path, and php-fpm's handling of the CGI variables in
//! [`proxy::request_info`]), [`control`] and [`daemon`] (signals, start and
//! stop), [`systemd`] (readiness and status for systemd), [`log`] (fpmd's
//! own log), [`ctl`] (the control socket) and [`observe`] (the status page,
//! php-fpm's access log and the thread that writes and reopens log files,
//! the metrics endpoint, the control socket's status document and the
//! `fpmd status` view).

pub mod cgroup;
pub mod config;
pub mod control;
pub mod ctl;
pub mod daemon;
pub mod detach;
pub mod fastcgi;
pub mod listen;
pub mod log;
pub mod observe;
pub mod output;
pub mod pool;
pub mod proc_events;
pub mod proxy;
pub mod reap;
pub mod sandbox;
pub mod spawn;
pub mod sys;
pub mod systemd;
pub mod upgrade;
pub mod watch;

/// Exit status for an invalid configuration (`EX_CONFIG` of sysexits.h).
pub const EXIT_CONFIG: u8 = 78;
