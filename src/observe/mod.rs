//! What fpmd tells about its pools: the status page, php-fpm's access log
//! and the writer thread that writes and reopens the log files, the
//! metrics endpoint, the control socket's status document ([`board`]) and
//! `fpmd status`, the view of it ([`top`]).
//!
//! Must not touch: dispatch or children (it formats samples the pools
//! give, and lines of requests the proxy describes).

pub mod access_log;
pub mod board;
pub mod metrics;
pub mod reopen;
pub mod sapi_status;
pub mod slowlog;
pub mod status;
pub mod top;
