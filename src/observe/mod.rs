//! What fpmd tells about its pools: the status page and the metrics
//! endpoint (and, next to them, the access log).
//!
//! Must not touch: dispatch or children (it formats samples the pools
//! give).

pub mod metrics;
pub mod status;
