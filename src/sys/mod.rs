//! What fpmd reads of the kernel and of other processes, and the few
//! calls it makes on them outside process management: `/proc` reads
//! ([`procfs`]), the pages a process gives back ([`pageout`]), the
//! Landlock probe ([`landlock`]), a deadline that may not be set
//! ([`timer`]), a connected socket woken only for what it reads
//! ([`stream`]), and fpmd's own scheduling policy ([`sched`]). Each is a thin, stateless layer over a syscall or a
//! `/proc` file.
//!
//! Must not touch: fpmd's own state (pools, children, configuration).

pub mod landlock;
pub mod pageout;
pub mod procfs;
pub mod sched;
pub mod stream;
pub mod timer;
