//! Confining a php-cgi child: `chroot` in a private mount namespace,
//! resource limits, priority, `no_new_privs`, Landlock.
//!
//! Owns: the plan (pure, from the pool's configuration: [`SandboxPlan`],
//! and the mount steps of a chroot, [`mount_steps`]), its preparation on
//! the spawner thread before the fork ([`prepare`]: every path a
//! `CString`, the Landlock ruleset an fd, the site's directory read) and
//! its application in the forked child ([`Prepared::apply`]). Must not
//! touch: credentials, `PR_SET_PDEATHSIG` (the spawner does them, see
//! [`crate::process::spawn`]), the decision of when to spawn.
//!
//! ## The order of `apply()` (between fork and exec)
//!
//! 1. `setrlimit(RLIMIT_NOFILE)`, `setrlimit(RLIMIT_CORE)` (php-fpm's
//!    `fpm_unix_init_child` order: limits first).
//! 2. With `chroot`: `unshare(CLONE_NEWNS)` → `/` made `MS_PRIVATE|MS_REC`
//!    → a tmpfs on the staging directory → the mount steps (directories,
//!    empty files and symlinks made in the tmpfs; the site's top-level
//!    entries bind-mounted read-write, `nosuid,nodev`, each attached
//!    (`move_mount`) from a detached copy of its mount made before the fork
//!    (`open_tree` on an `O_PATH|O_NOFOLLOW` fd opened relative to an fd of
//!    the site's directory: nothing of the site is looked up by path in
//!    the child, so an entry swapped for a symlink is not followed); PHP's runtime
//!    bind-mounted then remounted read-only, `nosuid`, `nodev` except for
//!    the device nodes) → `pivot_root` into the tmpfs, the old root
//!    detached → the tmpfs itself remounted read-only.
//! 3. `chdir(chdir)`, inside the new root. (`Command::current_dir` is not
//!    used: std runs it before `pre_exec`, so it would leave the working
//!    directory outside the new root.)
//! 4. (The spawner, between `apply()` and `apply_priority()`: joining the
//!    pool's cgroup goes here.)
//! 5. [`Prepared::apply_priority`]: `setpriority(PRIO_PROCESS)` (before the
//!    credential change: a negative nice value needs root, as in php-fpm).
//! 6. The spawner's `setgroups`/`setgid`/`setuid`, then
//!    [`Prepared::apply_unprivileged`]:
//! 7. `PR_SET_DUMPABLE` (after the credential change, which clears it, as
//!    php-fpm does; but see [`SandboxPlan::dumpable`]).
//! 8. `PR_SET_NO_NEW_PRIVS`.
//! 9. `landlock_restrict_self` on the ruleset fd prepared before the fork.
//!
//! Everything in `apply` is a raw system call on data prepared before the
//! fork: no allocation, no lock (async-signal-safe, as a fork of a
//! multi-threaded process requires). A failing step writes its name and
//! path to a pipe the spawner reads, so the spawn error says which step.

mod apply;
mod plan;
mod prepare;
#[cfg(test)]
mod tests;

pub use plan::*;
pub use prepare::*;
