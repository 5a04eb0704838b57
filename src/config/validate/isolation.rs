//! Where and how confined the children run: `chroot` and `chdir`,
//! `rlimit_*`, `process.*`, `no_new_privs`, `landlock.*` and the pool's
//! cgroup limits (`cgroup.*`).

use std::path::{Path, PathBuf};

use super::host::require_root;
use super::PoolCtx;
use crate::config::model::{CgroupLimits, Isolation, Landlock, ProcessManager, Spawn};
use crate::config::raw::{ByteSize, RawCgroup, RawPool};
use crate::config::source::normalize;
use crate::config::users::Ids;
use crate::config::ConfigError;

/// `cgroup.*`, checked as the kernel would take them (see
/// [`cgroup_limits`]), root-only, and `cgroup.pids_max` at least the
/// pool's own php-cgi count.
pub(super) fn cgroup(
    ctx: &PoolCtx<'_>,
    raw: &RawCgroup,
    pm: &ProcessManager,
    ids: Ids,
) -> Result<CgroupLimits, ConfigError> {
    let cgroup = cgroup_limits(raw).map_err(|(key, m)| ctx.err(&["cgroup", key], m))?;
    for (key, set) in [
        ("memory_max", cgroup.memory_max.is_some()),
        ("pids_max", cgroup.pids_max.is_some()),
        ("cpu_weight", cgroup.cpu_weight.is_some()),
    ] {
        if set {
            require_root(
                ctx,
                ids,
                &["cgroup", key],
                "the pool's cgroup is created and its limits written under /sys/fs/cgroup",
            )?;
        }
    }
    if let Some(n) = cgroup.pids_max {
        // The pool's own php-cgi count against the limit too.
        let prefork = pm.spawn == Spawn::Prefork;
        let own = pm.max_children.saturating_add(u32::from(prefork));
        if n < own {
            return Err(ctx.err(
                &["cgroup", "pids_max"],
                format!(
                    "{n} is fewer than the pool's own php-cgi processes (pm.max_children = {}{}): at least {own}",
                    pm.max_children,
                    if prefork { ", plus the pre-fork parent" } else { "" }
                ),
            ));
        }
    }
    Ok(cgroup)
}

/// `chroot`, then `chdir` inside it (php-fpm's `fpm_conf.c`: both must
/// start with `/`, and chroot + chdir must be a directory).
pub(super) fn root_and_dir(
    ctx: &PoolCtx<'_>,
    raw: &RawPool,
    ids: Ids,
) -> Result<(Option<PathBuf>, PathBuf), ConfigError> {
    let chroot = match raw.chroot.as_deref() {
        None | Some("") => None,
        Some(p) => Some(chroot(ctx, p, ids)?),
    };
    let chdir = PathBuf::from(raw.chdir.as_deref().unwrap_or("/"));
    if !chdir.is_absolute() {
        return Err(ctx.err(
            &["chdir"],
            format!("chdir must be an absolute path: {}", chdir.display()),
        ));
    }
    let chdir = normalize(&chdir);
    match &chroot {
        Some(root) => {
            let inside = crate::config::paths::host_path(root, &chdir);
            if !inside.is_dir() {
                return Err(ctx.err(
                    &["chdir"],
                    format!(
                        "chdir directory {} within the chroot {} ({}) does not exist or is not a directory",
                        chdir.display(),
                        root.display(),
                        inside.display()
                    ),
                ));
            }
        }
        None if !chdir.is_dir() => {
            return Err(ctx.err(
                &["chdir"],
                format!(
                    "chdir directory does not exist or is not a directory: {}",
                    chdir.display()
                ),
            ));
        }
        None => {}
    }
    Ok((chroot, chdir))
}

/// `chroot = p`: an absolute directory (not a symlink), not `/`, and fpmd
/// runs as root.
pub(super) fn chroot(ctx: &PoolCtx<'_>, p: &str, ids: Ids) -> Result<PathBuf, ConfigError> {
    let root = PathBuf::from(p);
    if !root.is_absolute() {
        return Err(ctx.err(&["chroot"], format!("chroot must be an absolute path: {p}")));
    }
    // The site's directory is opened with O_NOFOLLOW at every spawn
    // (see sandbox::open_site): a symlink, whose target can be
    // changed under fpmd, is refused here with a clear message.
    if let Ok(target) = std::fs::read_link(&root) {
        return Err(ctx.err(
            &["chroot"],
            format!(
                "chroot must be the site's directory itself, not a symlink: {p} -> {}",
                target.display()
            ),
        ));
    }
    if !root.is_dir() {
        return Err(ctx.err(
            &["chroot"],
            format!("chroot directory does not exist or is not a directory: {p}"),
        ));
    }
    let root = normalize(&root);
    if root == Path::new("/") {
        return Err(ctx.err(&["chroot"], "chroot = \"/\" is no chroot: remove it"));
    }
    if ids.euid != 0 {
        return Err(ctx.err(
            &["chroot"],
            "chroot needs fpmd to run as root (mount namespace and chroot(2) need CAP_SYS_ADMIN and CAP_SYS_CHROOT)",
        ));
    }
    Ok(root)
}

/// `rlimit_*`, `process.*`, `no_new_privs` and `landlock.*`, checked as
/// php-fpm checks its own (`process.priority` in -19 … 20) plus what the
/// kernel would refuse at spawn time.
pub(super) fn isolation(
    ctx: &PoolCtx<'_>,
    raw: &RawPool,
    chroot: Option<PathBuf>,
    ids: Ids,
) -> Result<Isolation, ConfigError> {
    let rlimit_files = match raw.rlimit_files {
        None => None,
        Some(0) => {
            return Err(ctx.err(
                &["rlimit_files"],
                "rlimit_files must be at least 1 (php-cgi could not open its own files)",
            ))
        }
        Some(n) => {
            // setrlimit(RLIMIT_NOFILE) above fs.nr_open fails even for root.
            let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok());
            if let Some(max) = nr_open.filter(|max| n > *max) {
                return Err(ctx.err(
                    &["rlimit_files"],
                    format!(
                        "rlimit_files = {n} is more than the kernel allows (fs.nr_open = {max})"
                    ),
                ));
            }
            Some(n)
        }
    };
    let rlimit_core = raw.rlimit_core.map(|r| r.0);
    let process_priority = match raw.process.priority {
        None => None,
        Some(n) if !(-19..=20).contains(&n) => {
            return Err(ctx.err(
                &["process", "priority"],
                format!("process.priority must be between -19 and 20, got {n}"),
            ))
        }
        Some(n) if n < 0 && ids.euid != 0 => {
            return Err(ctx.err(
                &["process", "priority"],
                format!("process.priority = {n} (a higher priority) needs fpmd to run as root"),
            ))
        }
        Some(n) => Some(n as i32),
    };
    let list = |key: &'static str,
                l: &Option<crate::config::raw::StrList>|
     -> Result<Vec<PathBuf>, ConfigError> {
        let mut out = Vec::new();
        for p in l.iter().flat_map(|l| l.0.iter()) {
            let path = PathBuf::from(p);
            if !path.is_absolute() {
                return Err(ctx.err(
                    &["landlock", key],
                    format!("landlock.{key} paths must be absolute: {p:?}"),
                ));
            }
            let path = normalize(&path);
            let host = match &chroot {
                Some(root) => crate::config::paths::host_path(root, &path),
                None => path.clone(),
            };
            if !host.exists() {
                return Err(ctx.err(
                    &["landlock", key],
                    format!("landlock.{key} path does not exist: {}", host.display()),
                ));
            }
            out.push(path);
        }
        Ok(out)
    };
    let landlock = match (&raw.landlock.read, &raw.landlock.write) {
        (None, None) => None,
        (read, write) => {
            let l = Landlock {
                read: list("read", read)?,
                write: list("write", write)?,
            };
            let key = if read.is_some() { "read" } else { "write" };
            crate::sys::landlock::landlock_supported()
                .map_err(|m| ctx.err(&["landlock", key], m))?;
            if raw.no_new_privs == Some(false) {
                return Err(ctx.err(
                    &["no_new_privs"],
                    "no_new_privs = false cannot go with landlock.*: an unprivileged process can only enforce a Landlock ruleset with no_new_privs",
                ));
            }
            Some(l)
        }
    };
    Ok(Isolation {
        chroot,
        rlimit_files,
        rlimit_core,
        process_priority,
        process_dumpable: raw.process.dumpable.unwrap_or(false),
        // As php-fpm: set-id programs (mail()'s sendmail) keep working.
        no_new_privs: raw.no_new_privs.unwrap_or(landlock.is_some()),
        landlock,
    })
}
/// `cgroup.*`: `memory_max` in bytes (PHP's shorthand; 0: no limit; at
/// least [`MIN_MEMORY_MAX`]), `pids_max` ≥ 1 (0: no
/// limit), `cpu_weight` 1..=10000 as cgroup v2's `cpu.weight`. Errors: the
/// key (after `cgroup.`) and the message.
/// The smallest `cgroup.memory_max`. One idle php-cgi with Debian's
/// extensions (PHP 8.2, 49 modules, opcache) charges about 8.5 MiB to its
/// memory cgroup (v1 `memory.usage_in_bytes` 8,904,704, max 9,158,656),
/// 8.9 MiB after three requests, 9.8 MiB as a pre-fork parent with one
/// child, with its binaries already in the page cache (cold, the pages it
/// maps are charged too): below this a pool's children are killed by the
/// limit as they start, in a loop, instead of serving.
pub const MIN_MEMORY_MAX: u64 = 32 << 20;
pub(super) fn cgroup_limits(
    raw: &crate::config::raw::RawCgroup,
) -> Result<crate::config::CgroupLimits, (&'static str, String)> {
    let memory_max = match raw.memory_max {
        None | Some(ByteSize(0)) => None,
        Some(ByteSize(n)) if n < MIN_MEMORY_MAX => {
            return Err((
                "memory_max",
                format!(
                    "{n} bytes is too small for php-cgi: at least 32M (0 for no limit); one idle php-cgi alone uses about 9M of its cgroup, so below that the pool's children are killed by the limit as they start"
                ),
            ))
        }
        Some(ByteSize(n)) => Some(n),
    };
    let pids_max = raw.pids_max.filter(|n| *n != 0);
    let cpu_weight = match raw.cpu_weight {
        None => None,
        Some(w @ 1..=10000) => Some(w),
        Some(w) => {
            return Err((
                "cpu_weight",
                format!("{w} is out of range: 1 to 10000 (as cgroup v2's cpu.weight; default 100)"),
            ))
        }
    };
    Ok(crate::config::CgroupLimits {
        memory_max,
        pids_max,
        cpu_weight,
    })
}
