//! What fpmd tells about its pools: the status page (and, next to it, the
//! access log and the metrics endpoint), the control socket's status
//! document ([`board`]) and `fpmd status`, the view of it ([`top`]).
//!
//! Must not touch: dispatch or children (it formats samples the pools
//! give).

pub mod board;
pub mod status;
pub mod top;
