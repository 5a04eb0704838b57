//! What fpmd may do here: the settings only root can apply, the kernel's
//! limits on processes and threads, and the directories of unix sockets.

use std::collections::HashMap;
use std::path::Path;

use super::PoolCtx;
use crate::config::model::{Global, ListenAddress, PoolConfig, Spawn};
use crate::config::source::SourceFile;
use crate::config::toml::dotted;
use crate::config::users::{group_name_of, user_name, Host, Ids};
use crate::config::ConfigError;

/// Refuses the pool key `key` (set in the pool) when fpmd does not run as
/// root, so that `fpmd -t` reports it rather than the start: for settings
/// only root can apply (`chroot`, `cgroup.*`, …). `why` says what needs
/// root, e.g. `"chroot(2) needs CAP_SYS_CHROOT"`. The error is at the key's
/// line: `[www] key 'chroot': chroot needs fpmd to run as root (it runs as
/// uid 1000): chroot(2) needs CAP_SYS_CHROOT`.
pub(super) fn require_root(
    ctx: &PoolCtx<'_>,
    ids: Ids,
    key: &[&str],
    why: &str,
) -> Result<(), ConfigError> {
    if ids.euid == 0 {
        return Ok(());
    }
    let segs: Vec<String> = key.iter().map(|s| s.to_string()).collect();
    Err(ctx.err(
        key,
        format!(
            "{} needs fpmd to run as root (it runs as uid {}): {why}",
            dotted(&segs),
            ids.euid
        ),
    ))
}
/// The processes one generation of `pool` runs at most: its children, and
/// under `pm.spawn = "prefork"` the php-cgi parent that forks them (a
/// shared parent, `pm.spawn = "shared"`, is no pool's).
pub(super) fn pool_processes(pool: &PoolConfig) -> u64 {
    u64::from(pool.pm.max_children) + u64::from(pool.pm.spawn == Spawn::Prefork)
}
/// How `pool_processes` counts, for messages.
pub(super) fn processes_what(pool: &PoolConfig) -> String {
    let n = pool_processes(pool);
    match pool.pm.spawn {
        Spawn::Prefork => format!(
            "{n} processes (pm.max_children = {} and the php-cgi parent of pm.spawn = \"prefork\")",
            pool.pm.max_children
        ),
        Spawn::Exec | Spawn::Shared => format!("{n} processes (pm.max_children = {n})"),
    }
}
/// The checks that depend on what fpmd may do on this machine, after every
/// pool validated (`pools` in load order, each with its file):
///
/// - without `CAP_CHOWN` (fpmd not root), a unix socket's `listen.owner`
///   must be fpmd's own user and `listen.group` one of fpmd's groups
///   (chown(2) fails with `EPERM` otherwise), and the socket's directory,
///   if it exists, must be writable by fpmd (bind(2): `EACCES`);
/// - without `CAP_NET_BIND_SERVICE`, no TCP port below
///   `net.ipv4.ip_unprivileged_port_start` (bind(2): `EACCES`), for pools
///   and `global.metrics.listen`;
/// - the sanity limits on `pm.max_children`: one generation of the pools
///   together never needs more processes than the kernel can have
///   (`kernel.pid_max`, `kernel.threads-max`), nor, per user the children
///   run as, more than the soft `RLIMIT_NPROC` they inherit from fpmd
///   (fpmd itself counted when it runs as that user). php-fpm checks
///   neither: its pool forks until fork(2) fails.
///
/// Each error is at the offending key of the pool that crosses the limit.
pub(in crate::config) fn check_host_limits(
    main: &SourceFile,
    global: &Global,
    pools: &[(&SourceFile, &PoolConfig)],
    ids: Ids,
    host: &Host,
) -> Result<(), ConfigError> {
    let me = format!("fpmd runs as uid {}", ids.euid);
    if let Some(addr) = global.metrics_listen.as_ref().and_then(ListenAddress::tcp) {
        if let Some(m) = privileged_port(addr.port(), host, &me) {
            return Err(ConfigError {
                file: main.path.clone(),
                line: main.find_line(&["global", "metrics", "listen"]),
                pool: None,
                key: Some("global.metrics.listen".into()),
                message: m,
                php_fpm: None,
            });
        }
    }
    let mut total = 0u64;
    let mut per_user: HashMap<u32, u64> = HashMap::new();
    for (src, pool) in pools {
        let ctx = PoolCtx {
            src,
            name: &pool.name,
        };
        check_listeners(&ctx, pool, ids, host, &me)?;
        check_rlimits(&ctx, pool, host, &me)?;
        check_processes(&ctx, pool, ids, host, &mut total, &mut per_user)?;
    }
    Ok(())
}

/// Why fpmd cannot bind TCP `port` (`None`: it can): below
/// `net.ipv4.ip_unprivileged_port_start` without `CAP_NET_BIND_SERVICE`.
/// `me` says which uid fpmd runs as.
fn privileged_port(port: u16, host: &Host, me: &str) -> Option<String> {
    (port != 0 && u32::from(port) < host.unprivileged_port_start && !host.cap_net_bind_service).then(|| format!(
        "port {port} is privileged: {me} without CAP_NET_BIND_SERVICE and net.ipv4.ip_unprivileged_port_start is {}, so bind() would fail with EACCES (Permission denied); use a port from {} up or a unix socket",
        host.unprivileged_port_start, host.unprivileged_port_start
    ))
}

/// A pool's `listen.address` and `pm.status_listen`: a TCP port fpmd may
/// bind ([`privileged_port`]), a unix socket's directory and owner
/// ([`check_socket_dir`], [`check_socket_file`]).
fn check_listeners(
    ctx: &PoolCtx<'_>,
    pool: &PoolConfig,
    ids: Ids,
    host: &Host,
    me: &str,
) -> Result<(), ConfigError> {
    for (key, listen) in [
        (["listen", "address"], Some(&pool.listen.address)),
        (["pm", "status_listen"], pool.local.status_listen.as_ref()),
    ] {
        match listen {
            Some(ListenAddress::Unix(path)) => {
                check_socket_dir(path).map_err(|m| ctx.err(&key, m))?;
                check_socket_file(ctx, pool, path, ids, host)?
            }
            Some(tcp) => {
                let port = tcp.tcp().map_or(0, |a| a.port());
                if let Some(m) = privileged_port(port, host, me) {
                    return Err(ctx.err(&key, m));
                }
            }
            None => {}
        }
    }
    Ok(())
}

/// A pool's `rlimit_files` and `rlimit_core` are within fpmd's hard limits,
/// which it cannot raise without `CAP_SYS_RESOURCE`.
fn check_rlimits(
    ctx: &PoolCtx<'_>,
    pool: &PoolConfig,
    host: &Host,
    me: &str,
) -> Result<(), ConfigError> {
    if let Some((nofile, core)) = host.hard_limits {
        let iso = &pool.isolation;
        for (key, wanted, hard, what) in [
            ("rlimit_files", iso.rlimit_files, nofile, "RLIMIT_NOFILE"),
            ("rlimit_core", iso.rlimit_core, core, "RLIMIT_CORE"),
        ] {
            let (Some(wanted), Some(hard)) = (wanted, hard) else {
                continue;
            };
            if wanted > hard {
                let wanted = if wanted == u64::MAX {
                    "unlimited".to_string()
                } else {
                    wanted.to_string()
                };
                return Err(ctx.err(&[key], format!(
                    "{key} = {wanted} is above fpmd's hard {what} ({hard}), which {me} without CAP_SYS_RESOURCE cannot raise: every php-cgi would fail before exec (setrlimit: EPERM); lower it, or raise fpmd's own limit (systemd: Limit{}=)",
                    if key == "rlimit_files" { "NOFILE" } else { "CORE" }
                )));
            }
        }
    }
    Ok(())
}

/// A pool's processes fit the kernel's `pid_max` and `threads-max`, alone
/// and with the pools before it (`total`, counted on), and the soft
/// `RLIMIT_NPROC` of its user (`per_user`: the processes of each uid so
/// far, fpmd itself counted when it runs as that user).
fn check_processes(
    ctx: &PoolCtx<'_>,
    pool: &PoolConfig,
    ids: Ids,
    host: &Host,
    total: &mut u64,
    per_user: &mut HashMap<u32, u64>,
) -> Result<(), ConfigError> {
    let max_children = ["pm", "max_children"];
    let n = pool_processes(pool);
    let system = [
        ("kernel.pid_max", host.pid_max),
        ("kernel.threads-max", host.threads_max),
    ];
    for (name, limit) in system {
        let Some(limit) = limit else { continue };
        let file = format!("/proc/sys/kernel/{}", name.trim_start_matches("kernel."));
        if n > limit {
            return Err(ctx.err(&max_children, format!(
                "the pool would run {}, more than the kernel allows at all: {name} is {limit} ({file})",
                processes_what(pool)
            )));
        }
        if *total + n > limit {
            return Err(ctx.err(&max_children, format!(
                "the pools together would run {} processes (this pool {}, the pools before it {total}), more than the kernel allows at all: {name} is {limit} ({file})",
                *total + n, processes_what(pool)
            )));
        }
    }
    *total += n;
    let uid = pool.user.uid;
    let before = *per_user
        .entry(uid)
        .or_insert(u64::from(uid == ids.euid && ids.euid != 0));
    if let Some(limit) = host.nproc {
        if before + n > limit {
            let others = if before == 0 {
                String::new()
            } else {
                format!(" and {before} more of that user (fpmd itself when it runs as that user, and the pools before this one)")
            };
            return Err(ctx.err(&max_children, format!(
                "the pool would run {}{others} as user '{}' (uid {uid}), more than the soft RLIMIT_NPROC of {limit} processes per user the children inherit from fpmd (ulimit -u; systemd: LimitNPROC=): the kernel would refuse the forks; lower pm.max_children or raise the limit",
                processes_what(pool), pool.user.user_name
            )));
        }
    }
    per_user.insert(uid, before + n);
    Ok(())
}

/// A unix socket's `listen.owner`, `listen.group` and directory, for a
/// process without `CAP_CHOWN` (see [`check_host_limits`]).
/// The directory a unix socket is to be created in exists (fpmd, as
/// php-fpm, creates the socket, not its directory: bind(2) would fail
/// with `ENOENT` at start). Errors: what to do, naming the directory.
pub(super) fn check_socket_dir(path: &Path) -> Result<(), String> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "cannot create the socket {}: {} is not a directory",
            path.display(),
            dir.display()
        )),
        Err(e) => Err(format!(
            "cannot create the socket {}: its directory {} does not exist ({e}), so bind() would fail; create it (e.g. with systemd's RuntimeDirectory= or tmpfiles.d)",
            path.display(),
            dir.display()
        )),
    }
}
pub(super) fn check_socket_file(
    ctx: &PoolCtx<'_>,
    pool: &PoolConfig,
    path: &Path,
    ids: Ids,
    host: &Host,
) -> Result<(), ConfigError> {
    if host.cap_chown {
        return Ok(());
    }
    let me = format!("fpmd runs as uid {} without CAP_CHOWN", ids.euid);
    if let Some(owner) = pool.listen.owner.filter(|&o| o != ids.euid) {
        return Err(ctx.err(&["listen", "owner"], format!(
            "cannot give the socket {} to listen.owner '{}' (uid {owner}): {me}, so chown() would fail with EPERM (Operation not permitted); remove listen.owner or set it to fpmd's own user '{}'",
            path.display(), user_name(owner), user_name(ids.euid)
        )));
    }
    if let Some(group) = pool.listen.group.filter(|g| !host.groups.contains(g)) {
        return Err(ctx.err(&["listen", "group"], format!(
            "cannot give the socket {} to listen.group '{}' (gid {group}): {me} and is not a member of that group, so chown() would fail with EPERM (Operation not permitted); use one of fpmd's own groups or remove listen.group",
            path.display(), group_name_of(group)
        )));
    }
    if ids == Ids::current() && ids.euid != 0 {
        if let Some(dir) = path.parent().filter(|d| d.is_dir()) {
            use nix::unistd::AccessFlags;
            if let Err(errno) = nix::unistd::eaccess(dir, AccessFlags::W_OK | AccessFlags::X_OK) {
                return Err(ctx.err(&["listen", "address"], format!(
                    "cannot create the socket {}: fpmd runs as uid {} and may not write to {}, so bind() would fail with {errno}",
                    path.display(), ids.euid, dir.display()
                )));
            }
        }
    }
    Ok(())
}
