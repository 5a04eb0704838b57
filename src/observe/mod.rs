//! What fpmd tells about its pools: the status page, php-fpm's access log
//! and the writer thread that writes and reopens the log files, and the
//! metrics endpoint.
//!
//! Must not touch: dispatch or children (it formats samples the pools
//! give, and lines of requests the proxy describes).

pub mod access_log;
pub mod metrics;
pub mod reopen;
pub mod status;
