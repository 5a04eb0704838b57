//! What fpmd tells about its pools: the status page (and, next to it, the
//! access log and the metrics endpoint).
//!
//! Must not touch: dispatch or children (it formats samples the pools
//! give).

pub mod status;
