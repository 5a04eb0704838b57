//! A php-cgi process from its spec to its reaping: the spec built from a
//! pool's configuration ([`spec`]), the confinement applied between fork and
//! exec ([`sandbox`]), the one fork/exec on the spawner thread ([`spawn`]),
//! the pool's cgroup ([`cgroup`]), what children write outside FastCGI
//! ([`output`]), the reaper of every exit ([`reap`]), the one way to
//! signal them ([`signal`]), and the php-cgi parents that fork children on
//! fpmd's order, a pool's own ([`fork_server`]) or shared by pools
//! ([`shared_parent`]).
//!
//! Must not touch: when to start or stop a child (the pool's supervisor
//! decides), FastCGI or connections.

pub mod cgroup;
pub mod fork_server;
pub mod output;
pub mod reap;
pub mod sandbox;
pub mod sapi;
pub mod shared_parent;
pub mod signal;
pub mod spawn;
pub mod spec;
