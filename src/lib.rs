//! fpmd: a FastCGI process manager for PHP that runs stock `php-cgi`
//! children behind nginx, Apache or any FastCGI client.
//!
//! Layers, each in its own module: [`fastcgi`] (protocol codec, no I/O),
//! [`config`] (validated pool configuration), [`spawn`], [`reap`] and
//! [`supervisor`] (processes), [`output`] (what children write outside
//! FastCGI), [`proxy`] and [`listen`] (connections: the strict FastCGI
//! path, and php-fpm's handling of the CGI variables in
//! [`proxy::request_info`]), [`control`] and [`daemon`] (signals, start and
//! stop), [`log`] (fpmd's own log).

pub mod config;
pub mod control;
pub mod daemon;
pub mod fastcgi;
pub mod listen;
pub mod log;
pub mod output;
pub mod peer;
pub mod proc_events;
pub mod proxy;
pub mod reap;
pub mod spawn;
pub mod supervisor;

/// Exit status for an invalid configuration (`EX_CONFIG` of sysexits.h).
pub const EXIT_CONFIG: u8 = 78;
