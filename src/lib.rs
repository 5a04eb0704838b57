//! fpmd: a FastCGI process manager for PHP that runs stock `php-cgi`
//! children behind nginx, Apache or any FastCGI client.
//!
//! Layers, each in its own module: [`fastcgi`] (protocol codec, no I/O),
//! [`config`] (validated pool configuration), [`spawn`], [`reap`] and
//! [`supervisor`] (processes), [`dispatcher`] and [`listener`]
//! (connections), [`control`] and [`daemon`] (signals, start and stop),
//! [`request_info`] (what php-fpm makes of SCRIPT_FILENAME and friends, and
//! what php-cgi must be sent to make the same of them).

pub mod config;
pub mod control;
pub mod daemon;
pub mod dispatcher;
pub mod fastcgi;
pub mod listener;
pub mod log;
pub mod peer;
pub mod reap;
pub mod request_info;
pub mod spawn;
pub mod supervisor;

/// Exit status for an invalid configuration (`EX_CONFIG` of sysexits.h).
pub const EXIT_CONFIG: u8 = 78;
