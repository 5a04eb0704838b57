//! Raw → model: one function per section (`[global]`, a pool), with the
//! defaults and php-fpm's checks, then the checks across pools (one name,
//! one listen address per pool). Every error names the file, the line and
//! the key.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::keys;
use super::model::{
    ini_list, Global, Isolation, Landlock, Listen, ListenAddress, LocalEndpoints, LogLevel,
    LogTarget, MinAvailable, PhpIni, PmMode, PoolConfig, ProcessManager, Spawn, ADDITIVE_INI,
};
use super::php::{arg_max, php_ini_reads, resolve_php_cgi};
use super::raw::{
    AllowedClients, ByteSize, Duration, EnvValue, IniScalar, IniTable, RawAddress, RawGlobal,
    RawPmMode, RawPool,
};
use super::source::{normalize, SourceFile};
use super::toml::dotted;
use super::users::{
    group_name_of, resolve_credentials, resolve_gid, resolve_uid, user_name, Host, Ids,
};
use super::ConfigError;

pub(super) fn validate_global(
    src: &SourceFile,
    raw: RawGlobal,
    ids: Ids,
    opts: &super::LoadOptions,
) -> Result<(Global, Vec<String>), ConfigError> {
    let err = |key: &str, message: String| ConfigError {
        file: src.path.clone(),
        line: src.find_line(
            &std::iter::once("global")
                .chain(key.split('.'))
                .collect::<Vec<_>>(),
        ),
        pool: None,
        key: Some(format!("global.{key}")),
        message,
    };
    let pid = match raw.pid {
        Some(p) if p.is_empty() => return Err(err("pid", "pid must not be empty".into())),
        Some(p) => Some(src.resolve(&p)),
        None => None,
    };
    let error_log = match raw.error_log.as_deref() {
        None | Some("stderr") => LogTarget::Stderr,
        Some("syslog") => {
            return Err(err(
                "error_log",
                "error_log = \"syslog\" is not supported yet".into(),
            ))
        }
        Some("") => {
            return Err(err(
                "error_log",
                "error_log must not be empty (use \"stderr\" or a file path)".into(),
            ))
        }
        Some(p) => {
            let p = src.resolve(p);
            // -O: the file is not used in the foreground.
            if !opts.force_stderr {
                log_dir(&p).map_err(|m| err("error_log", m))?;
            }
            LogTarget::File(p)
        }
    };
    let log_level = raw.log_level.unwrap_or(LogLevel::Notice);
    let includes = raw.include.map(|l| l.0).unwrap_or_default();
    if includes.iter().any(|p| p.is_empty()) {
        return Err(err("include", "include must not be empty".into()));
    }
    let emergency_restart = match (
        raw.emergency_restart_threshold,
        raw.emergency_restart_interval,
    ) {
        (Some(n), Some(d)) if n > 0 && !d.0.is_zero() => Some((n, d.0)),
        _ => None,
    };
    let process_control_timeout = nonzero(raw.process_control_timeout);
    let control_socket = match raw.control_socket.as_deref() {
        Some("") => {
            return Err(err(
                "control_socket",
                "control_socket must not be empty".into(),
            ))
        }
        Some(p) => src.resolve(p),
        // `crate::config::paths::default_path_as`: as root in /run/fpmd for the
        // packaged directory, else beside the pid file (-g's, else
        // `pid`'s), else beside the main file.
        None => {
            let given = opts.pid.as_deref().map(|p| opts.resolve(p));
            let pid_file = given.as_deref().or(pid.as_deref());
            crate::config::paths::default_path_as(&src.path, pid_file, ids.euid == 0)
        }
    };
    check_socket_path(&control_socket).map_err(|m| err("control_socket", m))?;
    let metrics_listen = match raw.metrics.listen {
        None => None,
        Some(RawAddress::Tcp(addr)) => Some(ListenAddress::Tcp(addr)),
        Some(RawAddress::Unix(p)) => {
            let path = src.resolve(&p);
            check_socket_path(&path).map_err(|m| err("metrics.listen", m))?;
            Some(ListenAddress::Unix(path))
        }
    };
    let php_ini = match (&opts.php_ini, raw.php_ini.as_deref()) {
        (Some(cli), _) => Some(super::source::absolutize(cli).map_err(|e| {
            ConfigError::file_only(cli, format!("cannot resolve php.ini path: {e}"))
        })?),
        (None, Some("")) | (None, None) => None,
        (None, Some(p)) => Some(src.resolve(p)),
    };
    if let Some(p) = &php_ini {
        if !p.exists() {
            let message = format!("php.ini file or directory does not exist: {}", p.display());
            return Err(match &opts.php_ini {
                Some(cli) => ConfigError::file_only(cli, message),
                None => err("php_ini", message),
            });
        }
    }
    let php_ini_scan_dir = raw.php_ini_scan_dir.map(|d| scan_dirs(src, &d));
    let warm_min_available = raw
        .warm_min_available
        .map_or(MinAvailable::DEFAULT, |m| m.0);
    Ok((
        Global {
            php_ini,
            php_ini_scan_dir,
            warm_min_available,
            pid,
            error_log,
            log_level,
            emergency_restart,
            process_control_timeout,
            control_socket,
            watch: raw.watch.unwrap_or(false),
            daemonize: raw.daemonize.unwrap_or(false),
            log_format: raw.log_format.unwrap_or_default(),
            metrics_listen,
        },
        includes,
    ))
}

/// A configured duration, `None` when unset or 0.
fn nonzero(d: Option<Duration>) -> Option<std::time::Duration> {
    d.map(|d| d.0).filter(|d| !d.is_zero())
}

/// A unix socket path fits in `sockaddr_un.sun_path` (108 bytes, including
/// the final NUL).
fn check_socket_path(path: &Path) -> Result<(), String> {
    let len = path.as_os_str().len();
    if len > 107 {
        return Err(format!(
            "unix socket path is too long ({len} bytes, at most 107): {}",
            path.display()
        ));
    }
    Ok(())
}

/// Context for errors in one pool.
struct PoolCtx<'a> {
    src: &'a SourceFile,
    name: &'a str,
}

impl PoolCtx<'_> {
    /// An error at the pool-relative key `key` (dotted; its segments are
    /// looked up for the line, falling back to the pool's header line).
    fn err(&self, key: &[&str], message: impl Into<String>) -> ConfigError {
        let mut path = vec![self.name];
        path.extend_from_slice(key);
        let line = self
            .src
            .find_line(&path)
            .or_else(|| self.src.find_line(&[self.name]));
        let segs: Vec<String> = key.iter().map(|s| s.to_string()).collect();
        ConfigError {
            file: self.src.path.clone(),
            line,
            pool: Some(self.name.to_string()),
            key: if key.is_empty() {
                None
            } else {
                Some(dotted(&segs))
            },
            message: message.into(),
        }
    }
}

pub(super) fn validate_pool(
    src: &SourceFile,
    name: &str,
    raw: RawPool,
    ids: Ids,
    global: &Global,
    options: &super::LoadOptions,
) -> Result<PoolConfig, ConfigError> {
    let ctx = PoolCtx { src, name };

    // Keys that are known but not implemented yet.
    for key in keys::not_yet_pool_keys() {
        let segs: Vec<&str> = key.split('.').collect();
        let path: Vec<&str> = std::iter::once(name).chain(segs.iter().copied()).collect();
        if src.has_key(&path) {
            return Err(ctx.err(&segs, format!("{key} is not supported yet")));
        }
    }

    // pm.*
    let max_children = match raw.pm.max_children {
        None => return Err(ctx.err(&["pm", "max_children"], "required key is missing")),
        Some(0) => {
            return Err(ctx.err(
                &["pm", "max_children"],
                "pm.max_children must be at least 1",
            ))
        }
        Some(n) => n,
    };
    let max_spawn_rate = match raw.pm.max_spawn_rate {
        Some(0) => {
            return Err(ctx.err(
                &["pm", "max_spawn_rate"],
                "pm.max_spawn_rate must be at least 1",
            ))
        }
        Some(n) => n,
        None => 32,
    };
    // Checks and defaults as php-fpm's fpm_conf.c.
    let mode = match raw.pm.mode.unwrap_or(RawPmMode::Static) {
        RawPmMode::Static => PmMode::Static,
        RawPmMode::Dynamic => {
            let min = match raw.pm.min_spare_servers {
                None => {
                    return Err(ctx.err(
                        &["pm", "min_spare_servers"],
                        "required with pm.mode = \"dynamic\"",
                    ))
                }
                Some(0) => {
                    return Err(ctx.err(
                        &["pm", "min_spare_servers"],
                        "pm.min_spare_servers must be at least 1",
                    ))
                }
                Some(n) => n,
            };
            let max = match raw.pm.max_spare_servers {
                None => {
                    return Err(ctx.err(
                        &["pm", "max_spare_servers"],
                        "required with pm.mode = \"dynamic\"",
                    ))
                }
                Some(0) => {
                    return Err(ctx.err(
                        &["pm", "max_spare_servers"],
                        "pm.max_spare_servers must be at least 1",
                    ))
                }
                Some(n) => n,
            };
            if max > max_children {
                return Err(ctx.err(&["pm", "max_spare_servers"],
                    format!("pm.max_spare_servers ({max}) must not be greater than pm.max_children ({max_children})")));
            }
            if min > max {
                return Err(ctx.err(&["pm", "min_spare_servers"],
                    format!("pm.min_spare_servers ({min}) must not be greater than pm.max_spare_servers ({max})")));
            }
            let start = raw.pm.start_servers.unwrap_or(min + (max - min) / 2);
            if start < min || start > max {
                return Err(ctx.err(&["pm", "start_servers"],
                    format!("pm.start_servers ({start}) must be between pm.min_spare_servers ({min}) and pm.max_spare_servers ({max})")));
            }
            PmMode::Dynamic {
                start_servers: start,
                min_spare_servers: min,
                max_spare_servers: max,
                max_spawn_rate,
            }
        }
        RawPmMode::Ondemand => {
            let idle = raw
                .pm
                .process_idle_timeout
                .map(|d| d.0)
                .unwrap_or(std::time::Duration::from_secs(10));
            if idle.is_zero() {
                return Err(ctx.err(
                    &["pm", "process_idle_timeout"],
                    "pm.process_idle_timeout must be more than 0",
                ));
            }
            PmMode::Ondemand {
                process_idle_timeout: idle,
                max_spawn_rate,
            }
        }
    };
    let pm = ProcessManager {
        mode,
        max_children,
        max_requests: raw.pm.max_requests.unwrap_or(0),
        spawn: raw.pm.spawn.unwrap_or(Spawn::Prefork),
        max_memory: match raw.pm.max_memory {
            None | Some(ByteSize(0)) => None,
            Some(ByteSize(n)) => Some(n),
        },
    };
    let cgroup = cgroup_limits(&raw.cgroup).map_err(|(key, m)| ctx.err(&["cgroup", key], m))?;
    for (key, set) in [
        ("memory_max", cgroup.memory_max.is_some()),
        ("pids_max", cgroup.pids_max.is_some()),
        ("cpu_weight", cgroup.cpu_weight.is_some()),
    ] {
        if set {
            require_root(
                &ctx,
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
    let request_terminate_timeout = nonzero(raw.request_terminate_timeout);
    let request_slowlog_timeout = nonzero(raw.request_slowlog_timeout);
    let request_queue_timeout = nonzero(raw.request_queue_timeout);
    let slowlog = raw.slowlog.as_deref().map(|p| src.resolve(p));
    if let Some(p) = &slowlog {
        log_dir(p).map_err(|m| ctx.err(&["slowlog"], m))?;
    }
    // An empty access.log is unset, as in php-fpm; the format is checked
    // even then (php-fpm checks it only with a log).
    let access_log = raw
        .access
        .log
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(|p| src.resolve(p));
    if let Some(p) = &access_log {
        log_dir(p).map_err(|m| ctx.err(&["access", "log"], m))?;
    }
    let access_suppress_paths = raw
        .access
        .suppress_path
        .as_ref()
        .map(|l| l.0.clone())
        .unwrap_or_default();
    if let Some(p) = access_suppress_paths.iter().find(|p| !p.starts_with('/')) {
        return Err(ctx.err(
            &["access", "suppress_path"],
            format!("access.suppress_path '{p}' must begin with '/' (php-fpm's rule)"),
        ));
    }
    let access_format = match raw.access.format.as_deref() {
        None => crate::config::access_format::Format::default(),
        Some(f) => crate::config::access_format::Format::parse(f).map_err(|e| {
            ctx.err(
                &["access", "format"],
                format!("wrong format for access.format '{f}': {e}"),
            )
        })?,
    };

    // user, group
    let user = resolve_credentials(
        raw.user.as_ref(),
        raw.group.as_ref(),
        ids,
        options.allow_to_run_as_root,
    )
    .map_err(|(key, msg)| ctx.err(&[key], msg))?;

    // php_cgi
    let path_env = std::env::var_os("PATH");
    let php_cgi = resolve_php_cgi(raw.php_cgi.as_deref(), &src.dir, path_env)
        .map_err(|m| ctx.err(&["php_cgi"], m))?;

    // chroot, then chdir inside it (php-fpm's fpm_conf.c: both must start
    // with '/', and chroot + chdir must be a directory).
    let chroot = match raw.chroot.as_deref() {
        None | Some("") => None,
        Some(p) => {
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
            Some(root)
        }
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
    let isolation = isolation(&ctx, &raw, chroot, ids)?;

    // listen.*
    let l = raw.listen;
    let address = match l.address {
        None => return Err(ctx.err(&["listen", "address"], "required key is missing")),
        Some(RawAddress::Tcp(addr)) => ListenAddress::Tcp(addr),
        Some(RawAddress::Unix(p)) => {
            let path = src.resolve(&p);
            check_socket_path(&path).map_err(|m| ctx.err(&["listen", "address"], m))?;
            ListenAddress::Unix(path)
        }
    };
    let is_unix = matches!(address, ListenAddress::Unix(_));
    let owner = match &l.owner {
        Some(o) => Some(resolve_uid(o).map_err(|m| ctx.err(&["listen", "owner"], m))?),
        None if is_unix => Some(user.uid),
        None => None,
    };
    let group = match &l.group {
        Some(g) => Some(resolve_gid(g).map_err(|m| ctx.err(&["listen", "group"], m))?),
        None if is_unix => Some(user.gid),
        None => None,
    };
    let backlog = match l.backlog {
        None => 511,
        Some(0) => return Err(ctx.err(&["listen", "backlog"], "listen.backlog must be at least 1")),
        Some(n) if n > i32::MAX as u32 => {
            return Err(ctx.err(
                &["listen", "backlog"],
                format!("listen.backlog must be at most {}", i32::MAX),
            ))
        }
        Some(n) => n,
    };
    let allowed_clients = match l.allowed_clients {
        Some(AllowedClients(list)) if list.is_empty() => {
            return Err(ctx.err(&["listen", "allowed_clients"], "listen.allowed_clients is empty (it would refuse every client); remove it to allow any"))
        }
        Some(AllowedClients(list)) => Some(list),
        None => None,
    };
    // listen.acl_* (php-fpm's fpm_unix_resolve_socket_premissions): names
    // or ids, separated by commas.
    let ids_of = |list: Option<super::raw::StrList>,
                  key: &str,
                  resolve: fn(&super::raw::IdOrName) -> Result<u32, String>|
     -> Result<Vec<u32>, ConfigError> {
        let mut out = Vec::new();
        for item in list.map(|l| l.0).unwrap_or_default() {
            for name in item.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let id = match name.parse::<u32>() {
                    Ok(n) => super::raw::IdOrName::Id(n),
                    Err(_) => super::raw::IdOrName::Name(name.to_string()),
                };
                out.push(resolve(&id).map_err(|m| ctx.err(&["listen", key], m))?);
            }
        }
        Ok(out)
    };
    let acl_users = ids_of(l.acl_users, "acl_users", resolve_uid)?;
    let acl_groups = ids_of(l.acl_groups, "acl_groups", resolve_gid)?;
    let (owner, group) = if acl_users.is_empty() && acl_groups.is_empty() {
        (owner, group)
    } else {
        if let Some(key) = [("owner", l.owner.is_some()), ("group", l.group.is_some())]
            .into_iter()
            .find_map(|(k, set)| set.then_some(k))
        {
            return Err(ctx.err(&["listen", key], format!("listen.{key} has no effect with listen.acl_users or listen.acl_groups (php-fpm ignores it then): remove one of them")));
        }
        if !is_unix {
            return Err(ctx.err(
                &[
                    "listen",
                    if acl_users.is_empty() {
                        "acl_groups"
                    } else {
                        "acl_users"
                    },
                ],
                "an ACL needs a unix socket",
            ));
        }
        (None, None)
    };
    let listen = Listen {
        address,
        owner,
        group,
        mode: l.mode.map_or(0o660, |m| m.0),
        backlog,
        allowed_clients,
        acl_users,
        acl_groups,
    };

    // env.*
    let mut env = BTreeMap::new();
    for (var, EnvValue(value)) in raw.env.unwrap_or_default() {
        if var.is_empty() || var.contains('=') || var.contains('\0') {
            return Err(ctx.err(
                &["env", &var],
                format!("invalid environment variable name '{var}'"),
            ));
        }
        if value.contains('\0') {
            return Err(ctx.err(&["env", &var], "environment value contains a NUL byte"));
        }
        env.insert(var, expand_env_value(&value));
    }

    // php_value, php_flag, php_admin_value, php_admin_flag
    let php_values = ini_values(&ctx, "php_value", raw.php_value, "php_flag", raw.php_flag)?;
    let php_admin_values = ini_values(
        &ctx,
        "php_admin_value",
        raw.php_admin_value,
        "php_admin_flag",
        raw.php_admin_flag,
    )?;
    let (php_values, php_admin_values) =
        merge_ini_values(php_values, php_admin_values, &options.php_defines);

    let status_listen = match raw.pm.status_listen {
        None => None,
        Some(RawAddress::Tcp(addr)) => Some(ListenAddress::Tcp(addr)),
        Some(RawAddress::Unix(p)) => {
            let path = src.resolve(&p);
            check_socket_path(&path).map_err(|m| ctx.err(&["pm", "status_listen"], m))?;
            Some(ListenAddress::Unix(path))
        }
    };
    let local = local_endpoints(raw.pm.status_path, raw.ping, status_listen)
        .map_err(|(key, msg)| ctx.err(&key, msg))?;
    let limit_extensions = limit_extensions(raw.security.limit_extensions)
        .map_err(|m| ctx.err(&["security", "limit_extensions"], m))?;
    let php_ini = resolve_php_ini(
        &ctx,
        (raw.php_ini.as_deref(), raw.php_ini_scan_dir.as_deref()),
        global,
        &php_cgi,
        &env,
        isolation.chroot.as_deref(),
    )?;

    let pool = PoolConfig {
        name: name.to_string(),
        file: src.path.clone(),
        user,
        php_cgi,
        listen,
        chdir,
        clear_env: raw.clear_env.unwrap_or(true),
        env,
        php_values,
        php_admin_values,
        pm,
        request_terminate_timeout,
        request_slowlog_timeout,
        slowlog,
        access_log,
        access_format,
        access_suppress_paths,
        request_queue_timeout,
        catch_workers_output: raw.catch_workers_output.unwrap_or(false),
        decorate_workers_output: raw.decorate_workers_output.unwrap_or(true),
        graceful_timeout: match raw.graceful_timeout {
            Some(d) => nonzero(Some(d)),
            None => global.process_control_timeout,
        },
        cgroup,
        pcntl: raw.security.pcntl.unwrap_or(false),
        no_php_ini: options.no_php_ini,
        limit_extensions,
        local,
        isolation,
        php_ini,
    };
    check_exec_size(&ctx, &pool, arg_max())?;
    Ok(pool)
}

/// A pool's plain and admin ini values with the command line's `-d`
/// (`defines`): an admin value wins over a plain one of the same name, and
/// both over `-d` (a later -d of one name wins over an earlier one), as
/// php-fpm layers them; except the [`ADDITIVE_INI`] names, whose values
/// from all three are joined into one list (kept as the admin value when
/// there is one), since php-fpm disables each of them on top of the
/// others.
fn merge_ini_values(
    plain: BTreeMap<String, String>,
    mut admin: BTreeMap<String, String>,
    defines: &[(String, String)],
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let joined: Vec<(&str, String)> = ADDITIVE_INI
        .iter()
        .filter_map(|name| {
            let lists: Vec<&str> = defines
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .chain(plain.get(*name).map(String::as_str))
                .chain(admin.get(*name).map(String::as_str))
                .collect();
            let mut names: Vec<&str> = Vec::new();
            for f in lists.iter().flat_map(|v| ini_list(v)) {
                if !names.contains(&f) {
                    names.push(f);
                }
            }
            (!lists.is_empty()).then(|| (*name, names.join(",")))
        })
        .collect();
    let mut plain: BTreeMap<String, String> = plain
        .into_iter()
        .filter(|(k, _)| !admin.contains_key(k))
        .collect();
    let own: Vec<String> = plain.keys().cloned().collect();
    for (name, value) in defines {
        if !own.contains(name) && !admin.contains_key(name) {
            plain.insert(name.clone(), value.clone());
        }
    }
    for (name, list) in joined {
        match admin.get_mut(name) {
            Some(v) => *v = list,
            None => {
                plain.insert(name.to_string(), list);
            }
        }
    }
    (plain, admin)
}

/// Linux's bound on one argument or environment string, its NUL included
/// (`MAX_ARG_STRLEN`: 32 pages of 4 KiB; execve(2) fails with `E2BIG`
/// beyond it, whatever the stack limit).
const MAX_ARG_STRLEN: usize = 32 * 4096;

/// The pool's php-cgi can be exec'd: no argument (`-d name=value` of a
/// `php_value`/`php_admin_value`) or environment string (`env.NAME`, or
/// fpmd's own variables with `clear_env = false`) is longer than
/// [`MAX_ARG_STRLEN`], and all of them (as [`crate::pool`] builds the
/// child's argv and environment) fit in `arg_max` bytes. Otherwise
/// execve(2) fails with `E2BIG` (`Argument list too long`) at every
/// spawn. The error is at the key of the string too long, or for the
/// total at the largest contributor.
fn check_exec_size(
    ctx: &PoolCtx<'_>,
    pool: &PoolConfig,
    arg_max: usize,
) -> Result<(), ConfigError> {
    // (key, what it is, bytes with its NUL)
    let mut items: Vec<(Vec<String>, String, usize)> = Vec::new();
    let seg = |a: &str, b: &str| vec![a.to_string(), b.to_string()];
    if !pool.clear_env {
        for (k, v) in std::env::vars_os() {
            if !pool.env.contains_key(&*k.to_string_lossy()) {
                let what = format!(
                    "fpmd's own environment variable {} (passed on by clear_env = false)",
                    k.to_string_lossy()
                );
                items.push((vec!["clear_env".into()], what, k.len() + v.len() + 2));
            }
        }
    }
    for (k, v) in &pool.env {
        items.push((seg("env", k), format!("env.{k}"), k.len() + v.len() + 2));
    }
    for (table, values) in [
        ("php_value", &pool.php_values),
        ("php_admin_value", &pool.php_admin_values),
    ] {
        for (k, v) in values {
            let what = format!("{table}.{k} (php-cgi's -d {k}=…)");
            items.push((seg(table, k), what, k.len() + v.len() + 2));
        }
    }
    fn key(segs: &[String]) -> Vec<&str> {
        segs.iter().map(String::as_str).collect()
    }
    for (segs, what, bytes) in &items {
        if *bytes > MAX_ARG_STRLEN {
            return Err(ctx.err(&key(segs), format!(
                "{what} is {bytes} bytes, more than Linux passes to a program in one string (MAX_ARG_STRLEN, {MAX_ARG_STRLEN} bytes): php-cgi could not be started (execve: Argument list too long)"
            )));
        }
    }
    // argv: the binary, "-d" before each value, "-n"; the environment:
    // the two PHP_FCGI_* variables fpmd sets; each string has a pointer.
    let fixed = pool.php_cgi.as_os_str().len() + 1 + 3 + 2 * 32;
    let strings = items.len() + pool.php_values.len() + pool.php_admin_values.len() + 4;
    let total = fixed
        + items.iter().map(|(_, _, b)| b).sum::<usize>()
        + 3 * (pool.php_values.len() + pool.php_admin_values.len())
        + (strings + 2) * std::mem::size_of::<usize>();
    if total > arg_max {
        let largest = items.iter().max_by_key(|(_, _, b)| *b);
        let (segs, what) = match largest {
            Some((segs, what, bytes)) => (
                key(segs),
                format!("; the largest is {what} ({bytes} bytes)"),
            ),
            None => (vec!["php_cgi"], String::new()),
        };
        return Err(ctx.err(&segs, format!(
            "php-cgi's arguments and environment together are {total} bytes, more than ARG_MAX ({arg_max} bytes: a quarter of the stack limit, at most 6 MiB): php-cgi could not be started (execve: Argument list too long){what}"
        )));
    }
    Ok(())
}

/// A log file's directory exists: fpmd creates the file when it opens it
/// (as php-fpm does), not the directory, so a missing one would fail the
/// start (or the reload) after `-t` said the configuration is good.
fn log_dir(path: &Path) -> Result<(), String> {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => Err(format!(
            "the directory of {} does not exist: create {}, or log elsewhere",
            path.display(),
            d.display()
        )),
        _ => Ok(()),
    }
}

/// `php_ini_scan_dir`: `:`-separated directories, each relative to the
/// file's directory unless absolute (empty: none).
fn scan_dirs(src: &SourceFile, value: &str) -> String {
    value
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| src.resolve(d).to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":")
}

/// A pool's [`PhpIni`]: its keys or the global defaults, checked (the file
/// or directory exists; a chroot pool's files are under `/etc/php`, the
/// part of the host's `/etc` its children see), with the files PHP reads.
fn resolve_php_ini(
    ctx: &PoolCtx<'_>,
    (raw_file, raw_scan): (Option<&str>, Option<&str>),
    global: &Global,
    php_cgi: &Path,
    env: &BTreeMap<String, String>,
    chroot: Option<&Path>,
) -> Result<PhpIni, ConfigError> {
    let file = match raw_file {
        Some("") => None,
        Some(p) => {
            let p = ctx.src.resolve(p);
            if !p.exists() {
                return Err(ctx.err(
                    &["php_ini"],
                    format!("php.ini file or directory does not exist: {}", p.display()),
                ));
            }
            Some(p)
        }
        None => global.php_ini.clone(),
    };
    let scan_dir = match raw_scan {
        Some(d) => Some(scan_dirs(ctx.src, d)),
        None => global.php_ini_scan_dir.clone(),
    };
    if scan_dir.is_some() && env.contains_key("PHP_INI_SCAN_DIR") {
        return Err(ctx.err(
            &["env", "PHP_INI_SCAN_DIR"],
            "set php_ini_scan_dir or env.PHP_INI_SCAN_DIR, not both (php_ini_scan_dir is the one fpmd checks and prints)",
        ));
    }
    if chroot.is_some() {
        let dirs = scan_dir
            .iter()
            .flat_map(|d| d.split(':'))
            .map(PathBuf::from);
        for p in file.iter().cloned().chain(dirs) {
            if !p.starts_with("/etc/php") {
                let key = if Some(&p) == file.as_ref() {
                    "php_ini"
                } else {
                    "php_ini_scan_dir"
                };
                return Err(ctx.err(
                    &[key],
                    format!("{} is outside /etc/php, the only part of the host's /etc a chroot pool's children see: move it under /etc/php", p.display()),
                ));
            }
        }
    }
    let reads = php_ini_reads(php_cgi, file.as_deref(), scan_dir.as_deref());
    Ok(PhpIni {
        file,
        scan_dir,
        reads,
    })
}

/// `rlimit_*`, `process.*`, `no_new_privs` and `landlock.*`, checked as
/// php-fpm checks its own (`process.priority` in -19 … 20) plus what the
/// kernel would refuse at spawn time.
fn isolation(
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
    let list =
        |key: &'static str, l: &Option<super::raw::StrList>| -> Result<Vec<PathBuf>, ConfigError> {
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

fn cgroup_limits(
    raw: &super::raw::RawCgroup,
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

/// `security.limit_extensions`: unset is php-fpm's default; each string
/// is split at spaces and tabs (php-fpm's `strtok(…, " \t")`), so
/// `".php .phar"` is two endings. Errors: an ending holding a NUL byte
/// (no path can contain one).
fn limit_extensions(raw: Option<super::raw::StrList>) -> Result<Vec<String>, String> {
    let Some(super::raw::StrList(list)) = raw else {
        return Ok(super::model::DEFAULT_LIMIT_EXTENSIONS
            .map(String::from)
            .to_vec());
    };
    let mut out: Vec<String> = Vec::new();
    for s in &list {
        for ext in s.split([' ', '\t']).filter(|e| !e.is_empty()) {
            if ext.contains('\0') {
                return Err(format!(
                    "the extension {:?} contains a NUL byte: no script path can end with it",
                    ext
                ));
            }
            if !out.iter().any(|e| e == ext) {
                out.push(ext.to_string());
            }
        }
    }
    Ok(out)
}

/// `pm.status_path`, `ping.path` and `ping.response`, checked as php-fpm
/// checks them (`fpm_conf_process_all_pools` in php-src
/// `sapi/fpm/fpm/fpm_conf.c`). Errors: the key and the message.
fn local_endpoints(
    status_path: Option<String>,
    ping: super::raw::RawPing,
    status_listen: Option<ListenAddress>,
) -> Result<LocalEndpoints, (Vec<&'static str>, String)> {
    let own_listener = status_listen.is_some();
    let check = |what: &str, p: &str| {
        if !p.starts_with('/') {
            return Err(format!("the {what} path '{p}' must start with a '/'"));
        }
        // "/" is allowed for the status page of its own listener.
        if p.len() < 2 && !(what == "status" && own_listener) {
            return Err(format!("the {what} path '{p}' is not long enough"));
        }
        if !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-_.~".contains(c))
        {
            return Err(format!(
                "the {what} path '{p}' must contain only the following characters '[alphanum]/_-.~'"
            ));
        }
        Ok(())
    };
    // An empty value is unset, as in php-fpm; with a status listener of
    // its own, the status page is at "/" unless set.
    let status_path = status_path
        .filter(|p| !p.is_empty())
        .or_else(|| own_listener.then(|| "/".to_string()));
    if let Some(p) = &status_path {
        check("status", p).map_err(|m| (vec!["pm", "status_path"], m))?;
    }
    let ping_path = ping.path.filter(|p| !p.is_empty());
    if let Some(p) = &ping_path {
        check("ping", p).map_err(|m| (vec!["ping", "path"], m))?;
    }
    let ping_response = match ping.response {
        Some(r) if r.is_empty() => {
            return Err((
                vec!["ping", "response"],
                "the ping response page '' is not long enough".into(),
            ))
        }
        Some(r) => r,
        None => "pong".into(),
    };
    if status_path.is_some() && status_path == ping_path {
        return Err((
            vec!["ping", "path"],
            "ping.path is the same as pm.status_path".into(),
        ));
    }
    Ok(LocalEndpoints {
        status_path,
        ping_path,
        ping_response,
        status_listen,
    })
}

/// `$NAME` (the whole value) → fpmd's `NAME` (empty when unset); anything
/// else is taken literally.
fn expand_env_value(value: &str) -> String {
    match value.strip_prefix('$') {
        Some(var)
            if !var.is_empty()
                && !var.starts_with(|c: char| c.is_ascii_digit())
                && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
        {
            std::env::var_os(var)
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default()
        }
        _ => value.to_string(),
    }
}

/// Normalizes a flag: booleans, 1/0 and on/off, yes/no, true/false (any case).
fn normalize_flag(v: &IniScalar) -> Option<&'static str> {
    match v {
        IniScalar::Bool(true) | IniScalar::Int(1) => Some("1"),
        IniScalar::Bool(false) | IniScalar::Int(0) => Some("0"),
        IniScalar::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
            "on" | "yes" | "true" | "1" => Some("1"),
            "off" | "no" | "false" | "0" => Some("0"),
            _ => None,
        },
        _ => None,
    }
}

fn normalize_value(v: &IniScalar) -> String {
    match v {
        IniScalar::Str(s) => s.clone(),
        IniScalar::Int(n) => n.to_string(),
        IniScalar::Float(x) => x.to_string(),
        IniScalar::Bool(b) => if *b { "1" } else { "0" }.to_string(),
    }
}

/// Merges a `*_value` and a `*_flag` table into normalized `name → value`.
fn ini_values(
    ctx: &PoolCtx<'_>,
    value_table: &str,
    values: Option<IniTable>,
    flag_table: &str,
    flags: Option<IniTable>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut origin: HashMap<String, String> = HashMap::new();
    for (table, entries, is_flag) in [(value_table, values, false), (flag_table, flags, true)] {
        for (segs, v) in entries.map(|t| t.0).unwrap_or_default() {
            let name = segs.join(".");
            let mut key: Vec<&str> = vec![table];
            key.extend(segs.iter().map(|s| s.as_str()));
            if name.is_empty()
                || name.contains(['=', '\0', '\n', '\r'])
                || name.chars().any(char::is_whitespace)
            {
                return Err(ctx.err(&key, format!("invalid ini setting name '{name}'")));
            }
            let value = if is_flag {
                match normalize_flag(&v) {
                    Some(f) => f.to_string(),
                    None => {
                        let shown = match &v {
                            IniScalar::Str(s) => format!("\"{s}\""),
                            other => normalize_value(other),
                        };
                        return Err(ctx.err(&key, format!("invalid flag value {shown} (expected on/off, yes/no, true/false or 1/0)")));
                    }
                }
            } else {
                normalize_value(&v)
            };
            if value.contains(['\0', '\n', '\r']) {
                return Err(ctx.err(
                    &key,
                    "an ini value must not contain a line break or NUL byte",
                ));
            }
            if let Some(first) = origin.get(&name) {
                return Err(ctx.err(&key, format!("'{name}' is already set in {first}")));
            }
            origin.insert(name.clone(), table.to_string());
            out.insert(name, value);
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Checks across pools
// ---------------------------------------------------------------------------

/// The files of one configuration, main file first, each with the raw
/// pools it defines in document order.
pub(super) type Files = Vec<(SourceFile, Vec<(String, RawPool)>)>;

/// Every pool name is defined once, in any file, and there is a pool.
pub(super) fn check_pool_names(files: &Files) -> Result<(), ConfigError> {
    let mut seen: HashMap<String, (PathBuf, Option<usize>)> = HashMap::new();
    for (src, pools) in files {
        for (name, _) in pools {
            let line = src.find_line(&[name]);
            if let Some((first_file, first_line)) = seen.get(name) {
                let at = location(first_file, *first_line);
                return Err(ConfigError {
                    file: src.path.clone(),
                    line,
                    pool: Some(name.clone()),
                    key: None,
                    message: format!("pool '{name}' is defined twice: here and in {at}"),
                });
            }
            seen.insert(name.clone(), (src.path.clone(), line));
        }
    }
    if seen.is_empty() {
        return Err(ConfigError::file_only(
            &files[0].0.path,
            "no pool defined: add a pool table such as [www] to this file or to a file matched by global.include",
        ));
    }
    Ok(())
}

/// `file:line`, or `file` when the line is not known.
fn location(file: &Path, line: Option<usize>) -> String {
    match line {
        Some(l) => format!("{}:{l}", file.display()),
        None => file.display().to_string(),
    }
}

/// How two listen addresses collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Collision {
    /// The same socket.
    Same,
    /// Different addresses that cannot both be bound: one TCP address is
    /// the unspecified address (`0.0.0.0`, `[::]`) of the other's family,
    /// on the same port, or one is `[::]` (bound dual-stack, as php-fpm
    /// binds it: it takes IPv4 clients too) and the other any IPv4 address
    /// on that port.
    Overlap,
}

/// Whether two listen addresses collide; unix paths are compared by
/// [`socket_identity`].
fn collision(a: &ListenAddress, b: &ListenAddress) -> Option<Collision> {
    match (a, b) {
        (ListenAddress::Unix(x), ListenAddress::Unix(y)) => {
            (socket_identity(x) == socket_identity(y)).then_some(Collision::Same)
        }
        (ListenAddress::Tcp(x), ListenAddress::Tcp(y)) => {
            if x == y {
                Some(Collision::Same)
            } else if x.port() == y.port()
                && ((x.is_ipv4() == y.is_ipv4()
                    && (x.ip().is_unspecified() || y.ip().is_unspecified()))
                    || (x.is_ipv6() && x.ip().is_unspecified() && y.is_ipv4())
                    || (y.is_ipv6() && y.ip().is_unspecified() && x.is_ipv4()))
            {
                Some(Collision::Overlap)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// A unix socket path as the kernel will see it: its directory with `..`
/// and symlinks resolved when it exists (so `pool.d/../run/x.sock` and
/// `run/x.sock` are one socket), else the path as written.
fn socket_identity(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

/// Every pool listens on addresses of its own (`listen.address`, and
/// `pm.status_listen` if set): two listeners on one address (or on
/// overlapping TCP addresses) are an error at the second one's key, naming
/// the first pool and where it is set; so is a pool on fpmd's control
/// socket. `metrics.listen` collides with neither a pool's listener nor the
/// control socket (an error at `global.metrics.listen`). `pools` are in load
/// order, each with the file that defined it; `main` is the main file.
pub(super) fn check_listen_addresses(
    main: &SourceFile,
    global: &Global,
    pools: &[(&SourceFile, &PoolConfig)],
) -> Result<(), ConfigError> {
    let control = ListenAddress::Unix(global.control_socket.clone());
    // Every listener: its pool, the key that sets it, its address.
    let mut all: Vec<(&SourceFile, &PoolConfig, [&str; 2], &ListenAddress)> = Vec::new();
    for (src, pool) in pools {
        all.push((src, pool, ["listen", "address"], &pool.listen.address));
        if let Some(a) = &pool.local.status_listen {
            all.push((src, pool, ["pm", "status_listen"], a));
        }
    }
    if let Some(metrics) = &global.metrics_listen {
        let err = |message: String| ConfigError {
            file: main.path.clone(),
            line: main.find_line(&["global", "metrics", "listen"]),
            pool: None,
            key: Some("global.metrics.listen".into()),
            message,
        };
        if collision(&control, metrics).is_some() {
            return Err(err(format!(
                "{metrics} is fpmd's control socket: the metrics endpoint needs an address of its own"
            )));
        }
        for (src, pool, key, address) in &all {
            if collision(metrics, address).is_some() {
                let at = location(&src.path, src.find_line(&[&pool.name, key[0], key[1]]));
                let what = if key[0] == "listen" {
                    "listen address"
                } else {
                    "status listen address (pm.status_listen)"
                };
                return Err(err(format!(
                    "{metrics} collides with {address}, the {what} of pool '{}' ({at}): the metrics endpoint needs an address of its own",
                    pool.name
                )));
            }
        }
    }
    for (i, (src, pool, key, address)) in all.iter().enumerate() {
        let err = |message: String| {
            PoolCtx {
                src,
                name: &pool.name,
            }
            .err(key, message)
        };
        if collision(&control, address).is_some() {
            let at = match main.find_line(&["global", "control_socket"]) {
                Some(l) => format!("global.control_socket, {}:{l}", main.path.display()),
                None => "the default of global.control_socket".to_string(),
            };
            return Err(err(format!(
                "{address} is fpmd's control socket ({at}): a pool cannot listen on it"
            )));
        }
        for (first_src, first, first_key, other) in &all[..i] {
            let Some(how) = collision(other, address) else {
                continue;
            };
            let at = location(
                &first_src.path,
                first_src.find_line(&[&first.name, first_key[0], first_key[1]]),
            );
            let (what, why) = match (first_key[0], key[0]) {
                ("listen", "listen") => {
                    ("listen address", "two pools cannot listen on one address")
                }
                ("listen", _) => (
                    "listen address",
                    "the status listener needs an address of its own",
                ),
                _ => (
                    "status listen address (pm.status_listen)",
                    "the status listener needs an address of its own",
                ),
            };
            let message = match how {
                Collision::Same => format!(
                    "{address} is already the {what} of pool '{}' ({at}): {why}",
                    first.name
                ),
                Collision::Overlap => format!(
                    "{address} overlaps {other}, the {what} of pool '{}' ({at}): all addresses and one of them on the same port cannot both be bound",
                    first.name
                ),
            };
            return Err(err(message));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// What fpmd may do here: root-only settings, the kernel's process limits
// ---------------------------------------------------------------------------

/// Refuses the pool key `key` (set in the pool) when fpmd does not run as
/// root, so that `fpmd -t` reports it rather than the start: for settings
/// only root can apply (`chroot`, `cgroup.*`, …). `why` says what needs
/// root, e.g. `"chroot(2) needs CAP_SYS_CHROOT"`. The error is at the key's
/// line: `[www] key 'chroot': chroot needs fpmd to run as root (it runs as
/// uid 1000): chroot(2) needs CAP_SYS_CHROOT`.
fn require_root(ctx: &PoolCtx<'_>, ids: Ids, key: &[&str], why: &str) -> Result<(), ConfigError> {
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
/// under `pm.spawn = "prefork"` the php-cgi parent that forks them.
fn pool_processes(pool: &PoolConfig) -> u64 {
    u64::from(pool.pm.max_children) + u64::from(pool.pm.spawn == Spawn::Prefork)
}

/// How `pool_processes` counts, for messages.
fn processes_what(pool: &PoolConfig) -> String {
    let n = pool_processes(pool);
    match pool.pm.spawn {
        Spawn::Prefork => format!(
            "{n} processes (pm.max_children = {} and the php-cgi parent of pm.spawn = \"prefork\")",
            pool.pm.max_children
        ),
        Spawn::Exec => format!("{n} processes (pm.max_children = {n})"),
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
pub(super) fn check_host_limits(
    main: &SourceFile,
    global: &Global,
    pools: &[(&SourceFile, &PoolConfig)],
    ids: Ids,
    host: &Host,
) -> Result<(), ConfigError> {
    let me = format!("fpmd runs as uid {}", ids.euid);
    let port_rule = |port: u16| -> Option<String> {
        (port != 0 && u32::from(port) < host.unprivileged_port_start && !host.cap_net_bind_service).then(|| format!(
            "port {port} is privileged: {me} without CAP_NET_BIND_SERVICE and net.ipv4.ip_unprivileged_port_start is {}, so bind() would fail with EACCES (Permission denied); use a port from {} up or a unix socket",
            host.unprivileged_port_start, host.unprivileged_port_start
        ))
    };
    if let Some(ListenAddress::Tcp(addr)) = &global.metrics_listen {
        if let Some(m) = port_rule(addr.port()) {
            return Err(ConfigError {
                file: main.path.clone(),
                line: main.find_line(&["global", "metrics", "listen"]),
                pool: None,
                key: Some("global.metrics.listen".into()),
                message: m,
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
        for (key, listen) in [
            (["listen", "address"], Some(&pool.listen.address)),
            (["pm", "status_listen"], pool.local.status_listen.as_ref()),
        ] {
            match listen {
                Some(ListenAddress::Tcp(addr)) => {
                    if let Some(m) = port_rule(addr.port()) {
                        return Err(ctx.err(&key, m));
                    }
                }
                Some(ListenAddress::Unix(path)) => {
                    check_socket_dir(path).map_err(|m| ctx.err(&key, m))?;
                    check_socket_file(&ctx, pool, path, ids, host)?
                }
                None => {}
            }
        }

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
            if total + n > limit {
                return Err(ctx.err(&max_children, format!(
                    "the pools together would run {} processes (this pool {}, the pools before it {total}), more than the kernel allows at all: {name} is {limit} ({file})",
                    total + n, processes_what(pool)
                )));
            }
        }
        total += n;
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
    }
    Ok(())
}

/// A unix socket's `listen.owner`, `listen.group` and directory, for a
/// process without `CAP_CHOWN` (see [`check_host_limits`]).
/// The directory a unix socket is to be created in exists (fpmd, as
/// php-fpm, creates the socket, not its directory: bind(2) would fail
/// with `ENOENT` at start). Errors: what to do, naming the directory.
fn check_socket_dir(path: &Path) -> Result<(), String> {
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

fn check_socket_file(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::parse_mode;
    use crate::config::testutil::*;

    /// `log_format`: "fpmd" (default) or "php-fpm"; anything else at its line.
    #[test]
    fn log_format_key() {
        use crate::config::LogFormat;
        let (_d, c) = load_ok(&pool("www", ""), &[]);
        assert_eq!(c.global.log_format, LogFormat::Fpmd);
        assert!(c.to_toml().contains("log_format = \"fpmd\"\n"));
        let main = format!("[global]\nlog_format = \"php-fpm\"\n{}", pool("www", ""));
        let (_d, c) = load_ok(&main, &[]);
        assert_eq!(c.global.log_format, LogFormat::PhpFpm);
        assert!(c.to_toml().contains("log_format = \"php-fpm\"\n"));
        let main = format!("[global]\nlog_format = \"json\"\n{}", pool("www", ""));
        let (_d, e) = load_err(&main, &[]);
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(2), Some("global.log_format")),
            "{e}"
        );
        assert!(
            e.message
                .contains("unknown variant `json`, expected `fpmd` or `php-fpm`"),
            "{e}"
        );
    }

    /// A unix socket whose directory does not exist (or is a file) cannot
    /// be bound: refused at its key.
    #[test]
    fn socket_directory_must_exist() {
        let cases = [
            (
                pool("www", "").replace("/tmp/www.sock", "/run/nothere/x.sock"),
                (5, "listen.address"),
                "cannot create the socket /run/nothere/x.sock: its directory /run/nothere does not exist (No such file or directory (os error 2)), so bind() would fail; create it (e.g. with systemd's RuntimeDirectory= or tmpfiles.d)",
            ),
            (
                pool("www", "pm.status_listen = \"/etc/passwd/s.sock\"\n"),
                (7, "pm.status_listen"),
                "cannot create the socket /etc/passwd/s.sock: /etc/passwd is not a directory",
            ),
        ];
        for (text, (line, key), message) in cases {
            let (dir, e) = load_err(&text, &[]);
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(line),
                Some("www"),
                Some(key),
                message,
            );
        }
    }

    /// An env value or ini value php-cgi cannot be exec'd with (one string
    /// over MAX_ARG_STRLEN, or all together over ARG_MAX) is refused at
    /// its key.
    #[test]
    fn exec_size_limits() {
        let big = "x".repeat(MAX_ARG_STRLEN);
        let (dir, e) = load_err(&pool("www", &format!("env.BIG = \"{big}\"\n")), &[]);
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(7), Some("env.BIG")),
            "{e}"
        );
        assert!(e.message.starts_with(&format!("env.BIG is {} bytes, more than Linux passes to a program in one string (MAX_ARG_STRLEN, 131072 bytes)", MAX_ARG_STRLEN + 5)), "{e}");
        drop(dir);
        let (_, e) = load_err(
            &pool("www", &format!("php_admin_value.x = \"{big}\"\n")),
            &[],
        );
        assert_eq!(e.key.as_deref(), Some("php_admin_value.x"), "{e}");
        // Just fits.
        let fits = "x".repeat(MAX_ARG_STRLEN - 5);
        load_ok(&pool("www", &format!("env.BIG = \"{fits}\"\n")), &[]);
        // Together too many: the largest named.
        let n = arg_max() / 100_000 + 1;
        let mut extra: String = (0..n)
            .map(|i| format!("env.V{i} = \"{}\"\n", "y".repeat(99_990)))
            .collect();
        extra.push_str(&format!("env.LARGEST = \"{}\"\n", "z".repeat(100_000)));
        let (_, e) = load_err(&pool("www", &extra), &[]);
        assert_eq!(e.key.as_deref(), Some("env.LARGEST"), "{e}");
        assert!(
            e.message
                .contains(&format!("more than ARG_MAX ({} bytes", arg_max())),
            "{e}"
        );
        assert!(
            e.message
                .ends_with("the largest is env.LARGEST (100009 bytes)"),
            "{e}"
        );
    }

    #[test]
    fn status_listen_needs_an_address_of_its_own() {
        let text = pool("www", "pm.status_listen = \"/tmp/www.sock\"\n");
        let (_dir, e) = load_err(&text, &[]);
        let m = e.to_string();
        assert!(
            m.contains("fpmd.toml:7: [www] key 'pm.status_listen'")
                && m.contains("is already the listen address of pool 'www'")
                && m.contains("the status listener needs an address of its own"),
            "{m}"
        );
        // Alone, it makes the status page "/" (php-fpm's default there).
        let (_dir, c) = load_ok(&pool("www", "pm.status_listen = \"127.0.0.1:9001\"\n"), &[]);
        let p = &c.pools[0];
        assert_eq!(p.local.status_path.as_deref(), Some("/"));
        assert_eq!(p.listeners().len(), 2);
        assert!(p.listeners()[1].1, "the second listener serves status only");
    }

    #[test]
    fn listen_address_errors() {
        let text = pool("www", "").replace("\"/tmp/www.sock\"", "\"www.sock\"");
        let (dir, e) = load_err(&text, &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(5),
            Some("www"),
            Some("listen.address"),
            "invalid listen address 'www.sock' (expected a unix socket path (containing '/'), \"IP:PORT\", \"[IPv6]:PORT\" or a port)",
        );
        let long = format!("/run/{}.sock", "x".repeat(120));
        let (dir, e) = load_err(&pool("www", "").replace("/tmp/www.sock", &long), &[]);
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(5), Some("listen.address")),
            "{e}"
        );
        assert!(e.message.starts_with("unix socket path is too long"), "{e}");
        drop(dir);
        // Missing: reported at the pool's header line.
        let (dir, e) = load_err(
            "\n[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\npm.max_children = 1\n",
            &[],
        );
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            Some("www"),
            Some("listen.address"),
            "required key is missing",
        );
    }

    #[test]
    fn listen_options() {
        let (_d, c) = load_ok(&pool("www", "listen.allowed_clients = \"127.0.0.1, ::1,10.0.0.1\"\nlisten.owner = \"0\"\nlisten.group = \"nogroup\"\n"), &[]);
        let l = &c.pools[0].listen;
        assert_eq!(l.allowed_clients.as_ref().unwrap().len(), 3);
        assert_eq!(l.owner, Some(0));
        assert_eq!(l.group, Some(nobody().1));

        for (extra, key, msg) in [
            ("listen.mode = \"0999\"", "listen.mode", "invalid mode \"0999\": expected an octal string such as \"0660\""),
            ("listen.mode = \"1777\"", "listen.mode", "invalid mode \"1777\": must be at most \"0777\""),
            ("listen.mode = 660", "listen.mode", "invalid type: integer `660`, expected an octal mode string such as \"0660\""),
            ("listen.backlog = 0", "listen.backlog", "listen.backlog must be at least 1"),
            ("listen.allowed_clients = [\"127.0.0.1\", \"nope\"]", "listen.allowed_clients", "invalid IP address 'nope'"),
            ("listen.allowed_clients = []", "listen.allowed_clients", "listen.allowed_clients is empty (it would refuse every client); remove it to allow any"),
            ("listen.owner = \"nosuchuser\"", "listen.owner", "unknown user 'nosuchuser'"),
            ("listen.group = \"nosuchgroup\"", "listen.group", "unknown group 'nosuchgroup'"),
        ] {
            let (dir, e) = load_err(&pool("www", &format!("{extra}\n")), &[]);
            assert_err(&dir, &e, "fpmd.toml", Some(7), Some("www"), Some(key), msg);
        }
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert_eq!(parse_mode("660"), Ok(0o660));
        assert_eq!(parse_mode("0o750"), Ok(0o750));
        assert_eq!(parse_mode("0777"), Ok(0o777));
        assert!(
            parse_mode("").is_err() && parse_mode("-660").is_err() && parse_mode("0o").is_err()
        );
    }

    #[test]
    fn env_expansion() {
        // PATH is set for any test run (set_var would race with other test threads).
        let path = std::env::var("PATH").expect("PATH is set");
        assert!(std::env::var_os("FPMD_CONFIG_TEST_SURELY_MISSING").is_none());
        let extra = "env.A = \"$PATH\"\nenv.B = \"$FPMD_CONFIG_TEST_SURELY_MISSING\"\nenv.C = \"$PATH/bin\"\nenv.D = \"plain\"\nenv.E = 42\nenv.F = \"$\"\n";
        let (_d, c) = load_ok(&pool("www", extra), &[]);
        let env = &c.pools[0].env;
        assert_eq!(env["A"], path);
        assert_eq!(
            env["B"], "",
            "a missing variable expands to an empty string"
        );
        assert_eq!(
            env["C"], "$PATH/bin",
            "only a value that is exactly $NAME is expanded"
        );
        assert_eq!(env["D"], "plain");
        assert_eq!(env["E"], "42");
        assert_eq!(env["F"], "$");
        let (dir, e) = load_err(&pool("www", "env.A = true\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("env.A"),
            "invalid type: boolean `true`, expected a string",
        );
    }

    #[test]
    fn php_values_and_flags() {
        let extra = r#"php_flag.a = true
php_flag.b = false
php_flag.c = "On"
php_flag.d = "off"
php_flag.e = "YES"
php_flag.f = "no"
php_flag.g = "True"
php_flag.h = "FALSE"
php_flag.i = "1"
php_flag.j = "0"
php_flag.k = 1
php_flag.l = 0
php_value.m = true
php_value.n = 128
php_value.o = 1.5
php_value.p = "E_ALL & ~E_NOTICE"
php_value.session.save_path = "/tmp/sessions"
php_value."date.timezone" = "UTC"
php_value.memory_limit = "64M"
php_admin_value.memory_limit = "128M"
php_admin_flag.display_errors = "off"
"#;
        let (_d, c) = load_ok(&pool("www", extra), &[]);
        let p = &c.pools[0];
        let flags: Vec<(&str, &str)> = "abcdefghijkl"
            .chars()
            .zip(["1", "0", "1", "0", "1", "0", "1", "0", "1", "0", "1", "0"])
            .map(|(k, v)| {
                (
                    p.php_values
                        .get_key_value(&k.to_string())
                        .unwrap()
                        .0
                        .as_str(),
                    v,
                )
            })
            .collect();
        for (k, v) in flags {
            assert_eq!(p.php_values[k], v, "php_flag.{k}");
        }
        assert_eq!(p.php_values["m"], "1");
        assert_eq!(p.php_values["n"], "128");
        assert_eq!(p.php_values["o"], "1.5");
        assert_eq!(p.php_values["p"], "E_ALL & ~E_NOTICE");
        assert_eq!(
            p.php_values["session.save_path"], "/tmp/sessions",
            "nested tables flatten into a dotted name"
        );
        assert_eq!(p.php_values["date.timezone"], "UTC");
        assert!(
            !p.php_values.contains_key("memory_limit"),
            "admin values win over plain ones"
        );
        assert_eq!(p.php_admin_values["memory_limit"], "128M");
        assert_eq!(p.php_admin_values["display_errors"], "0");

        let mut p = p.clone();
        p.pcntl = true;
        let args = p.ini_args();
        assert_eq!(
            args.len(),
            2 * (p.php_values.len() + p.php_admin_values.len())
        );
        assert!(args.chunks(2).all(|c| c[0] == "-d"));
        let settings: Vec<&str> = args.iter().skip(1).step_by(2).map(|s| s.as_str()).collect();
        assert_eq!(settings[0], "a=1");
        assert!(settings.contains(&"session.save_path=/tmp/sessions"));
        assert_eq!(
            &settings[settings.len() - 2..],
            ["display_errors=0", "memory_limit=128M"],
            "admin values last"
        );
        assert!(!settings.contains(&"memory_limit=64M"));
    }

    #[test]
    fn ini_args_admin_wins_even_if_plain_map_has_the_name() {
        let (_d, c) = load_ok(&pool("www", ""), &[]);
        let mut p = c.pools[0].clone();
        p.php_values.insert("memory_limit".into(), "64M".into());
        p.php_values.insert("a".into(), "b".into());
        p.php_admin_values
            .insert("memory_limit".into(), "128M".into());
        p.pcntl = true;
        assert_eq!(p.ini_args(), ["-d", "a=b", "-d", "memory_limit=128M"]);
    }

    #[test]
    fn pcntl_is_disabled_unless_allowed_and_the_pools_list_is_kept() {
        let (_d, c) = load_ok(
            &pool(
                "www",
                "php_admin_value.disable_functions = \"exec, system,pcntl_fork\"\n",
            ),
            &[],
        );
        let p = &c.pools[0];
        assert!(!p.pcntl);
        let args = p.ini_args();
        assert_eq!(args.len(), 2);
        let list = args[1]
            .strip_prefix("disable_functions=${disable_functions},")
            .unwrap();
        let names: Vec<&str> = list.split(',').collect();
        assert_eq!(&names[..3], ["exec", "system", "pcntl_fork"]);
        assert_eq!(names.iter().filter(|n| **n == "pcntl_fork").count(), 1);
        assert!(names.contains(&"pcntl_exec") && names.contains(&"pcntl_signal"));
        assert!(c.to_toml().contains("security.pcntl = false\n"));

        // A plain php_value is merged the same way.
        let (_d, c) = load_ok(
            &pool("www", "php_value.disable_functions = \"exec\"\n"),
            &[],
        );
        assert!(c.pools[0].ini_args()[1]
            .starts_with("disable_functions=${disable_functions},exec,pcntl_alarm,"));

        let (_d, c) = load_ok(
            &pool(
                "www",
                "security.pcntl = true\nphp_admin_value.disable_functions = \"exec\"\n",
            ),
            &[],
        );
        assert!(c.pools[0].pcntl);
        assert_eq!(
            c.pools[0].ini_args(),
            ["-d", "disable_functions=${disable_functions},exec"]
        );
        assert!(c.to_toml().contains("security.pcntl = true\n"));

        // pcntl allowed and no list of the pool's: php.ini's alone.
        let (_d, c) = load_ok(&pool("www", "security.pcntl = true\n"), &[]);
        assert!(c.pools[0].ini_args().is_empty());
    }

    /// php-fpm disables a pool's `disable_functions` and `disable_classes`
    /// on top of php.ini's; the pool's plain and admin values and the
    /// command line's -d are joined, never one chosen.
    #[test]
    fn additive_ini_values_are_joined_never_replaced() {
        let plain = BTreeMap::from([
            ("disable_functions".to_string(), "exec, system".to_string()),
            ("disable_classes".to_string(), "Phar".to_string()),
            ("memory_limit".to_string(), "64M".to_string()),
        ]);
        let admin = BTreeMap::from([
            ("disable_functions".to_string(), "system,popen".to_string()),
            ("memory_limit".to_string(), "128M".to_string()),
        ]);
        let defines = [
            ("disable_functions".to_string(), "proc_open".to_string()),
            ("disable_classes".to_string(), "SplFileObject".to_string()),
            ("memory_limit".to_string(), "8M".to_string()),
            ("html_errors".to_string(), "1".to_string()),
            ("html_errors".to_string(), "0".to_string()),
        ];
        let (plain, admin) = merge_ini_values(plain, admin, &defines);
        assert_eq!(admin["disable_functions"], "proc_open,exec,system,popen");
        assert_eq!(admin["memory_limit"], "128M", "admin wins");
        assert_eq!(plain["disable_classes"], "SplFileObject,Phar");
        assert_eq!(plain["html_errors"], "0", "the last -d wins");
        assert!(!plain.contains_key("disable_functions") && !plain.contains_key("memory_limit"));

        let mut p = crate::pool::tests::test_config();
        p.php_values = plain;
        p.php_admin_values = admin;
        let args = p.ini_args();
        assert!(args.contains(&"disable_classes=${disable_classes},SplFileObject,Phar".into()));
        assert!(args.iter().any(|a| a.starts_with(
            "disable_functions=${disable_functions},proc_open,exec,system,popen,pcntl_alarm,"
        )));
        p.no_php_ini = true;
        assert!(
            p.ini_args()
                .contains(&"disable_classes=SplFileObject,Phar".into()),
            "-n: no php.ini to keep"
        );
    }

    #[test]
    fn cgroup_limits() {
        let (_d, c) = load_ok(
            &pool(
                "www",
                "cgroup.memory_max = \"256M\"\ncgroup.pids_max = 50\ncgroup.cpu_weight = 200\n",
            ),
            &[],
        );
        let p = &c.pools[0];
        assert_eq!(
            p.cgroup,
            crate::config::CgroupLimits {
                memory_max: Some(256 << 20),
                pids_max: Some(50),
                cpu_weight: Some(200),
            }
        );
        let text = c.to_toml();
        assert!(
            text.contains("cgroup.memory_max = 268435456 # bytes\n"),
            "{text}"
        );
        assert!(text.contains("cgroup.pids_max = 50\n"), "{text}");
        assert!(text.contains("cgroup.cpu_weight = 200\n"), "{text}");
        // The rendering loads again to the same limits.
        let (_d, again) = load_ok(&text, &[]);
        assert_eq!(again.pools[0].cgroup, p.cgroup);

        // The smallest limit is accepted.
        let (_d, c) = load_ok(&pool("www", "cgroup.memory_max = \"32M\"\n"), &[]);
        assert_eq!(c.pools[0].cgroup.memory_max, Some(MIN_MEMORY_MAX));

        let (_d, c) = load_ok(
            &pool("www", "cgroup.memory_max = 0\ncgroup.pids_max = 0\n"),
            &[],
        );
        assert_eq!(c.pools[0].cgroup, crate::config::CgroupLimits::default());
        let text = c.to_toml();
        assert!(text.contains("# cgroup.memory_max: no limit\n"), "{text}");

        for (line, key, message) in [
            (
                "cgroup.cpu_weight = 0\n",
                "cgroup.cpu_weight",
                "0 is out of range: 1 to 10000 (as cgroup v2's cpu.weight; default 100)",
            ),
            (
                "cgroup.cpu_weight = 10001\n",
                "cgroup.cpu_weight",
                "10001 is out of range: 1 to 10000 (as cgroup v2's cpu.weight; default 100)",
            ),
            (
                "cgroup.memory_max = \"512K\"\n",
                "cgroup.memory_max",
                "524288 bytes is too small for php-cgi: at least 32M (0 for no limit); one idle php-cgi alone uses about 9M of its cgroup, so below that the pool's children are killed by the limit as they start",
            ),
            // The trial's value: passed `fpmd -t`, then the pool never
            // started (php-cgi killed by the limit in a loop).
            (
                "cgroup.memory_max = \"2M\"\n",
                "cgroup.memory_max",
                "2097152 bytes is too small for php-cgi: at least 32M (0 for no limit); one idle php-cgi alone uses about 9M of its cgroup, so below that the pool's children are killed by the limit as they start",
            ),
            (
                "cgroup.memory_max = 33554431\n",
                "cgroup.memory_max",
                "33554431 bytes is too small for php-cgi: at least 32M (0 for no limit); one idle php-cgi alone uses about 9M of its cgroup, so below that the pool's children are killed by the limit as they start",
            ),
        ] {
            let (dir, e) = load_err(&pool("www", line), &[]);
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(7),
                Some("www"),
                Some(key),
                message,
            );
        }
        let (dir, e) = load_err(&pool("www", "cgroup.pids_max = 4\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("cgroup.pids_max"),
            "4 is fewer than the pool's own php-cgi processes (pm.max_children = 5, plus the pre-fork parent): at least 6",
        );
        let (_dir, e) = load_err(&pool("www", "cgroup.pids_max = -1\n"), &[]);
        assert_eq!(e.key.as_deref(), Some("cgroup.pids_max"), "{e}");
        assert_eq!(e.line, Some(7), "{e}");
        let (_dir, e) = load_err(&pool("www", "cgroup.memory = 1\n"), &[]);
        assert_eq!(e.line, Some(7), "{e}");
        assert!(e.to_string().contains("cgroup.memory"), "{e}");
    }

    #[test]
    fn php_value_errors() {
        for (extra, key, msg) in [
            (
                "php_flag.display_errors = \"maybe\"",
                "php_flag.display_errors",
                "invalid flag value \"maybe\" (expected on/off, yes/no, true/false or 1/0)",
            ),
            (
                "php_admin_flag.x = 2",
                "php_admin_flag.x",
                "invalid flag value 2 (expected on/off, yes/no, true/false or 1/0)",
            ),
            (
                "php_value.x = [1, 2]",
                "php_value.x",
                "invalid type: sequence, expected a string, number or boolean",
            ),
            (
                "php_value.x = \"a\\nb = c\"",
                "php_value.x",
                "an ini value must not contain a line break or NUL byte",
            ),
            (
                "php_value.\"a=b\" = \"c\"",
                "php_value.\"a=b\"",
                "invalid ini setting name 'a=b'",
            ),
        ] {
            let (dir, e) = load_err(&pool("www", &format!("{extra}\n")), &[]);
            assert_err(&dir, &e, "fpmd.toml", Some(7), Some("www"), Some(key), msg);
        }
        let (dir, e) = load_err(
            &pool(
                "www",
                "php_value.log_errors = \"1\"\nphp_flag.log_errors = true\n",
            ),
            &[],
        );
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(8),
            Some("www"),
            Some("php_flag.log_errors"),
            "'log_errors' is already set in php_value",
        );
    }

    #[test]
    fn max_children_zero() {
        let www = "[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/run/www.sock\"\n\n\npm.max_children = 0\n";
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", www)]);
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(8),
            Some("www"),
            Some("pm.max_children"),
            "pm.max_children must be at least 1",
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}:8: [www] key 'pm.max_children': pm.max_children must be at least 1",
                dir.path().join("pool.d/www.toml").display()
            )
        );
        let (dir, e) = load_err(
            "[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/x/y.sock\"\n",
            &[],
        );
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(1),
            Some("www"),
            Some("pm.max_children"),
            "required key is missing",
        );
    }

    #[test]
    fn pm_modes_checked_as_php_fpm_does() {
        // pool(): [www] on line 1, pm.max_children = 5, extra lines from 7.
        let (dir, e) = load_err(&pool("www", "pm.mode = \"dynamic\"\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(1),
            Some("www"),
            Some("pm.min_spare_servers"),
            "required with pm.mode = \"dynamic\"",
        );
        let (dir, e) = load_err(
            &pool(
                "www",
                "pm.mode = \"dynamic\"\npm.min_spare_servers = 1\npm.max_spare_servers = 10\n",
            ),
            &[],
        );
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(9),
            Some("www"),
            Some("pm.max_spare_servers"),
            "pm.max_spare_servers (10) must not be greater than pm.max_children (5)",
        );
        let (dir, e) = load_err(&pool("www", "pm.mode = \"dynamic\"\npm.min_spare_servers = 3\npm.max_spare_servers = 4\npm.start_servers = 2\n"), &[]);
        assert_err(&dir, &e, "fpmd.toml", Some(10), Some("www"), Some("pm.start_servers"),
            "pm.start_servers (2) must be between pm.min_spare_servers (3) and pm.max_spare_servers (4)");
        let (_dir, c) = load_ok(
            &pool(
                "www",
                "pm.mode = \"dynamic\"\npm.min_spare_servers = 1\npm.max_spare_servers = 3\n",
            ),
            &[],
        );
        assert_eq!(
            c.pools[0].pm.mode,
            PmMode::Dynamic {
                start_servers: 2,
                min_spare_servers: 1,
                max_spare_servers: 3,
                max_spawn_rate: 32
            }
        );
        let (_dir, c) = load_ok("[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/tmp/www.sock\"\n\n[www.pm]\nmode = \"ondemand\"\nmax_children = 8\n", &[]);
        assert_eq!(
            c.pools[0].pm.mode,
            PmMode::Ondemand {
                process_idle_timeout: std::time::Duration::from_secs(10),
                max_spawn_rate: 32
            }
        );
        let (dir, e) = load_err(
            &pool(
                "www",
                "pm.mode = \"ondemand\"\npm.process_idle_timeout = 0\n",
            ),
            &[],
        );
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(8),
            Some("www"),
            Some("pm.process_idle_timeout"),
            "pm.process_idle_timeout must be more than 0",
        );
    }

    #[test]
    fn security_limit_extensions() {
        // Unset: php-fpm 8.2's compiled-in default.
        let (_dir, c) = load_ok(&pool("www", ""), &[]);
        assert_eq!(c.pools[0].limit_extensions, [".php", ".phar"]);
        assert!(c
            .to_toml()
            .contains("security.limit_extensions = [\".php\", \".phar\"]\n"));
        // A list; each string split at spaces and tabs as php-fpm does.
        let (_dir, c) = load_ok(
            &pool(
                "www",
                "security.limit_extensions = [\".php\", \".php7 .phtml\"]\n",
            ),
            &[],
        );
        assert_eq!(c.pools[0].limit_extensions, [".php", ".php7", ".phtml"]);
        let (_dir, c) = load_ok(
            &pool("www", "security.limit_extensions = \".php\\t.inc\"\n"),
            &[],
        );
        assert_eq!(c.pools[0].limit_extensions, [".php", ".inc"]);
        // Empty: no limit, as php-fpm's empty value; -t says so.
        let (_dir, c) = load_ok(&pool("www", "security.limit_extensions = []\n"), &[]);
        assert!(c.pools[0].limit_extensions.is_empty());
        assert!(c
            .to_toml()
            .contains("security.limit_extensions = [] # any file may run as a script\n"));
        let (dir, e) = load_err(
            &pool("www", "security.limit_extensions = [\".php\\u0000\"]\n"),
            &[],
        );
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("security.limit_extensions"),
            "the extension \".php\\0\" contains a NUL byte: no script path can end with it",
        );
        let (dir, e) = load_err(&pool("www", "security.limit_extensions = 1\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("security.limit_extensions"),
            "invalid type: integer `1`, expected a string or an array of strings",
        );
    }

    #[test]
    fn workers_output_keys() {
        // php-fpm's defaults: not caught; decorated when caught.
        let (_dir, c) = load_ok(&pool("www", ""), &[]);
        assert!(!c.pools[0].catch_workers_output);
        assert!(c.pools[0].decorate_workers_output);
        let text = c.to_toml();
        assert!(
            text.contains("catch_workers_output = false\ndecorate_workers_output = true\n"),
            "{text}"
        );

        let (_dir, c) = load_ok(
            &pool(
                "www",
                "catch_workers_output = true\ndecorate_workers_output = false\n",
            ),
            &[],
        );
        assert!(c.pools[0].catch_workers_output);
        assert!(!c.pools[0].decorate_workers_output);
        assert!(c
            .to_toml()
            .contains("catch_workers_output = true\ndecorate_workers_output = false\n"));

        // php-fpm's ini spelling of a boolean is not TOML's.
        let (dir, e) = load_err(&pool("www", "catch_workers_output = \"yes\"\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("catch_workers_output"),
            "invalid type: string \"yes\", expected a boolean",
        );
        let (dir, e) = load_err(&pool("www", "decorate_workers_output = 1\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("decorate_workers_output"),
            "invalid type: integer `1`, expected a boolean",
        );
        let (dir, e) = load_err(&pool("www", "catch_worker_output = true\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("catch_worker_output"),
            "unknown key (did you mean 'catch_workers_output'?)",
        );
    }

    /// A log file in a directory that does not exist: `-t` says so, with
    /// file, line and key, instead of a start that fails later.
    #[test]
    fn log_files_in_missing_directories_are_errors() {
        for (extra, key) in [
            ("access.log = \"nolog/www.access.log\"\n", "access.log"),
            ("slowlog = \"nolog/www.slow\"\n", "slowlog"),
        ] {
            let (dir, e) = load_err(&pool("www", extra), &[]);
            let missing = dir.path().join("nolog");
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(7),
                Some("www"),
                Some(key),
                &format!(
                    "the directory of {}/{} does not exist: create {}, or log elsewhere",
                    missing.display(),
                    extra.split('/').nth(1).unwrap().trim_end_matches("\"\n"),
                    missing.display()
                ),
            );
        }
        let (dir, e) = load_err(
            &format!(
                "[global]\nerror_log = \"nolog/fpmd.log\"\n{}",
                pool("www", "")
            ),
            &[],
        );
        assert_eq!(e.key.as_deref(), Some("global.error_log"), "{e}");
        assert_eq!(e.line, Some(2), "{e}");
        assert_eq!(e.file, dir.path().join("fpmd.toml"));
    }

    #[test]
    fn access_log_and_format() {
        let (dir, c) = load_ok(
            &pool(
                "www",
                "access.log = \"logs/www.access.log\"\naccess.format = \"%{mili}d %r\"\n",
            ),
            &[("logs/.keep", "")],
        );
        let p = &c.pools[0];
        assert_eq!(
            p.access_log.as_deref(),
            Some(dir.path().join("logs/www.access.log").as_path()),
            "relative to the pool's file"
        );
        assert_eq!(p.access_format.as_str(), "%{mili}d %r");
        let (_dir, c) = load_ok(&pool("www", "access.log = \"\"\n"), &[]);
        assert_eq!(c.pools[0].access_log, None, "empty: no access log");
        assert_eq!(c.pools[0].access_format.as_str(), "%R - %u %t \"%m %r\" %s");
        let (dir, e) = load_err(&pool("www", "access.format = \"%R %{x\"\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("access.format"),
            "wrong format for access.format '%R %{x': missing closing embrace in the access.format",
        );
    }

    #[test]
    fn timeouts_slowlog_and_max_memory() {
        let (_dir, c) = load_ok(&pool(
            "www",
            "request_terminate_timeout = \"2s\"\nrequest_slowlog_timeout = 1\nslowlog = \"slow.log\"\nrequest_queue_timeout = \"250ms\"\npm.max_memory = \"64M\"\n",
        ), &[]);
        let p = &c.pools[0];
        assert_eq!(
            p.request_terminate_timeout,
            Some(std::time::Duration::from_secs(2))
        );
        assert_eq!(
            p.request_slowlog_timeout,
            Some(std::time::Duration::from_secs(1))
        );
        assert_eq!(
            p.request_queue_timeout,
            Some(std::time::Duration::from_millis(250))
        );
        assert!(p.slowlog.as_ref().unwrap().is_absolute());
        assert!(p.slowlog.as_ref().unwrap().ends_with("slow.log"));
        assert_eq!(p.pm.max_memory, Some(64 << 20));
        let (_dir, c) = load_ok(
            &pool("www", "request_terminate_timeout = 0\npm.max_memory = 0\n"),
            &[],
        );
        assert_eq!(c.pools[0].request_terminate_timeout, None);
        assert_eq!(c.pools[0].pm.max_memory, None);
        assert_eq!(ByteSize::parse("512k"), Some(512 << 10));
        assert_eq!(ByteSize::parse("1G"), Some(1 << 30));
        assert_eq!(ByteSize::parse("100"), Some(100));
        assert_eq!(ByteSize::parse("64MB"), None);
        assert_eq!(ByteSize::parse("M"), None);
    }

    #[test]
    fn duplicate_pool() {
        let (dir, e) = load_err(
            INCLUDE_MAIN,
            &[
                ("pool.d/a.toml", &pool("www", "")),
                ("pool.d/b.toml", &format!("\n{}", pool("www", ""))),
            ],
        );
        let first = dir.path().join("pool.d/a.toml");
        assert_err(
            &dir,
            &e,
            "pool.d/b.toml",
            Some(2),
            Some("www"),
            None,
            &format!(
                "pool 'www' is defined twice: here and in {}:1",
                first.display()
            ),
        );
        // Main file and an included file.
        let (dir, e) = load_err(
            &format!("{INCLUDE_MAIN}{}", pool("www", "")),
            &[("pool.d/www.toml", &pool("www", ""))],
        );
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(1),
            Some("www"),
            None,
            &format!(
                "pool 'www' is defined twice: here and in {}:3",
                dir.path().join("fpmd.toml").display()
            ),
        );
        // Within one file, TOML itself refuses it.
        let (dir, e) = load_err(&format!("{}{}", pool("www", ""), pool("www", "")), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            None,
            None,
            "syntax error at column 1: invalid table header; duplicate key `www` in document root",
        );
    }

    #[test]
    fn two_pools_on_one_listen_address() {
        // In two files: the error is at the second pool's listen.address.
        let sock = |name: &str, extra: &str| {
            pool(name, extra).replace(&format!("/tmp/{name}.sock"), "/tmp/x.sock")
        };
        let (dir, e) = load_err(
            INCLUDE_MAIN,
            &[
                ("pool.d/a.toml", &sock("a", "")),
                ("pool.d/b.toml", &format!("\n{}", sock("b", ""))),
            ],
        );
        assert_err(
            &dir,
            &e,
            "pool.d/b.toml",
            Some(6),
            Some("b"),
            Some("listen.address"),
            &format!(
                "/tmp/x.sock is already the listen address of pool 'a' ({}:5): two pools cannot listen on one address",
                dir.path().join("pool.d/a.toml").display()
            ),
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}:6: [b] key 'listen.address': /tmp/x.sock is already the listen address of pool 'a' ({}:5): two pools cannot listen on one address",
                dir.path().join("pool.d/b.toml").display(),
                dir.path().join("pool.d/a.toml").display()
            )
        );
        // In one file.
        let (dir, e) = load_err(&format!("{}\n{}", sock("a", ""), sock("b", "")), &[]);
        assert_eq!(
            (e.line, e.pool.as_deref(), e.key.as_deref()),
            (Some(12), Some("b"), Some("listen.address")),
            "{e}"
        );
        assert!(
            e.message.contains(&format!(
                "pool 'a' ({}:5)",
                dir.path().join("fpmd.toml").display()
            )),
            "{e}"
        );
        // One socket through two relative spellings (its directory exists).
        let (dir, e) = load_err(
            &format!(
                "{INCLUDE_MAIN}{}",
                pool("a", "").replace("/tmp/a.sock", "run/x.sock")
            ),
            &[
                ("run/.keep", ""),
                (
                    "pool.d/b.toml",
                    &pool("b", "").replace("/tmp/b.sock", "../run/x.sock"),
                ),
            ],
        );
        assert_err(
            &dir,
            &e,
            "pool.d/b.toml",
            Some(5),
            Some("b"),
            Some("listen.address"),
            &format!(
                "{} is already the listen address of pool 'a' ({}:7): two pools cannot listen on one address",
                dir.path().join("pool.d/../run/x.sock").display(),
                dir.path().join("fpmd.toml").display()
            ),
        );
        // TCP: a bare port is 0.0.0.0:PORT.
        let tcp =
            |name: &str, addr: &str| pool(name, "").replace(&format!("\"/tmp/{name}.sock\""), addr);
        let (dir, e) = load_err(
            &format!("{INCLUDE_MAIN}{}", tcp("a", "9000")),
            &[("pool.d/b.toml", &tcp("b", "\"0.0.0.0:9000\""))],
        );
        assert_err(
            &dir,
            &e,
            "pool.d/b.toml",
            Some(5),
            Some("b"),
            Some("listen.address"),
            &format!(
                "0.0.0.0:9000 is already the listen address of pool 'a' ({}:7): two pools cannot listen on one address",
                dir.path().join("fpmd.toml").display()
            ),
        );
        // Overlapping TCP addresses.
        let (dir, e) = load_err(
            &format!("{INCLUDE_MAIN}{}", tcp("a", "\"127.0.0.1:9000\"")),
            &[("pool.d/b.toml", &tcp("b", "9000"))],
        );
        assert_err(
            &dir,
            &e,
            "pool.d/b.toml",
            Some(5),
            Some("b"),
            Some("listen.address"),
            &format!(
                "0.0.0.0:9000 overlaps 127.0.0.1:9000, the listen address of pool 'a' ({}:7): all addresses and one of them on the same port cannot both be bound",
                dir.path().join("fpmd.toml").display()
            ),
        );
        // `[::]` takes IPv4 clients too (dual-stack, as php-fpm binds it):
        // it overlaps an IPv4 address on the same port.
        let (dir, e) = load_err(
            &format!("{INCLUDE_MAIN}{}", tcp("a", "\"127.0.0.1:9000\"")),
            &[("pool.d/b.toml", &tcp("b", "\"[::]:9000\""))],
        );
        assert_err(
            &dir,
            &e,
            "pool.d/b.toml",
            Some(5),
            Some("b"),
            Some("listen.address"),
            &format!(
                "[::]:9000 overlaps 127.0.0.1:9000, the listen address of pool 'a' ({}:7): all addresses and one of them on the same port cannot both be bound",
                dir.path().join("fpmd.toml").display()
            ),
        );
        // Different addresses are fine, a unix socket and TCP never collide.
        let (_dir, c) = load_ok(
            &format!(
                "{}\n{}\n{}\n{}",
                tcp("a", "\"127.0.0.1:9000\""),
                tcp("b", "\"127.0.0.2:9000\""),
                tcp("c", "\"[::1]:9000\""),
                tcp("d", "\"127.0.0.1:9001\"")
            ),
            &[],
        );
        assert_eq!(c.pools.len(), 4);
    }

    #[test]
    fn listen_collisions() {
        let tcp = |s: &str| ListenAddress::Tcp(s.parse().unwrap());
        let unix = |s: &str| ListenAddress::Unix(s.into());
        for (a, b, expected) in [
            ("127.0.0.1:9000", "127.0.0.1:9000", Some(Collision::Same)),
            ("0.0.0.0:9000", "127.0.0.1:9000", Some(Collision::Overlap)),
            ("127.0.0.1:9000", "0.0.0.0:9000", Some(Collision::Overlap)),
            ("0.0.0.0:9000", "0.0.0.0:9000", Some(Collision::Same)),
            ("[::]:9000", "[::1]:9000", Some(Collision::Overlap)),
            ("[::1]:9000", "[::]:9000", Some(Collision::Overlap)),
            ("[::1]:9000", "[::1]:9000", Some(Collision::Same)),
            ("0.0.0.0:9000", "[::]:9000", Some(Collision::Overlap)),
            ("[::]:9000", "0.0.0.0:9000", Some(Collision::Overlap)),
            ("[::]:9000", "127.0.0.1:9000", Some(Collision::Overlap)),
            ("127.0.0.1:9000", "[::]:9000", Some(Collision::Overlap)),
            ("[::]:9000", "127.0.0.1:9001", None),
            ("[::1]:9000", "0.0.0.0:9000", None),
            ("127.0.0.1:9000", "[::1]:9000", None),
            ("127.0.0.1:9000", "127.0.0.2:9000", None),
            ("0.0.0.0:9000", "0.0.0.0:9001", None),
            ("0.0.0.0:9000", "127.0.0.1:9001", None),
        ] {
            assert_eq!(collision(&tcp(a), &tcp(b)), expected, "{a} {b}");
        }
        assert_eq!(
            collision(&unix("/tmp/a.sock"), &unix("/tmp/a.sock")),
            Some(Collision::Same)
        );
        assert_eq!(collision(&unix("/tmp/a.sock"), &unix("/tmp/b.sock")), None);
        assert_eq!(
            collision(&unix("/tmp/../tmp/a.sock"), &unix("/tmp/a.sock")),
            Some(Collision::Same)
        );
        assert_eq!(
            collision(&unix("/0.0.0.0:9000"), &tcp("0.0.0.0:9000")),
            None
        );
    }

    /// Each `(line, key, message)`: `line` in `[global]` is an error at
    /// line 2, `key`, with `message`.
    fn assert_global_errors(rows: &[(&str, &str, String)]) {
        for (line, key, msg) in rows {
            let (dir, e) = load_err(&format!("[global]\n{line}\n{}", pool("www", "")), &[]);
            assert_err(&dir, &e, "fpmd.toml", Some(2), None, Some(key), msg);
        }
    }

    #[test]
    fn metrics_listen() {
        let global = |line: &str| format!("[global]\n{line}\n{}", pool("www", ""));
        // Unset: no endpoint.
        let (_d, c) = load_ok(&pool("www", ""), &[]);
        assert_eq!(c.global.metrics_listen, None);
        assert!(c
            .to_toml()
            .contains("# metrics.listen: not set (no metrics endpoint)\n"));
        // TCP, a bare port (all IPv4 addresses), IPv6, a unix path
        // relative to the main file; as a dotted key or a table.
        for (text, want) in [
            ("metrics.listen = \"127.0.0.1:9253\"", "127.0.0.1:9253"),
            ("metrics.listen = 9253", "0.0.0.0:9253"),
            ("metrics.listen = \"[::1]:9253\"", "[::1]:9253"),
            (
                "[global.metrics]\nlisten = \"127.0.0.1:9253\"",
                "127.0.0.1:9253",
            ),
        ] {
            let (_d, c) = load_ok(&global(text), &[]);
            let want = ListenAddress::Tcp(want.parse().unwrap());
            assert_eq!(c.global.metrics_listen.as_ref(), Some(&want), "{text}");
        }
        let (dir, c) = load_ok(&global("metrics.listen = \"run/metrics.sock\""), &[]);
        let want = ListenAddress::Unix(dir.path().join("run/metrics.sock"));
        assert_eq!(c.global.metrics_listen.as_ref(), Some(&want));
        // `-t` prints it, and its output loads to the same.
        let text = c.to_toml();
        assert!(
            text.contains(&format!(
                "metrics.listen = \"{}\"\n",
                dir.path().join("run/metrics.sock").display()
            )),
            "{text}"
        );
        let again = write(dir.path(), "again/fpmd.toml", &text);
        assert_eq!(super::super::load(&again).unwrap().global, c.global);
        // Errors, at the key.
        assert_global_errors(&[
            ("metrics.listen = \"nope\"", "global.metrics.listen", "invalid listen address 'nope' (expected a unix socket path (containing '/'), \"IP:PORT\", \"[IPv6]:PORT\" or a port)".to_string()),
            ("metrics.listen = 0", "global.metrics.listen", "invalid port '0' (expected 1-65535)".to_string()),
            ("metrics.lisen = 9253", "global.metrics.lisen", "unknown key (did you mean 'global.metrics.listen'?)".to_string()),
            ("metrics = 9253", "global.metrics", "unknown key (did you mean 'global.metrics.listen'?)".to_string()),
            (&format!("metrics.listen = \"/run/{}.sock\"", "x".repeat(120)), "global.metrics.listen", format!("unix socket path is too long (130 bytes, at most 107): /run/{}.sock", "x".repeat(120))),
        ]);
        // Never a pool's address (nor one that overlaps it), nor the
        // control socket.
        let on_tcp = pool("www", "").replace("\"/tmp/www.sock\"", "\"127.0.0.1:9000\"");
        for (line, pool_text, msg) in [
            ("metrics.listen = \"/tmp/www.sock\"", pool("www", ""), "/tmp/www.sock collides with /tmp/www.sock, the listen address of pool 'www' ({main}:7): the metrics endpoint needs an address of its own"),
            ("metrics.listen = 9000", on_tcp, "0.0.0.0:9000 collides with 127.0.0.1:9000, the listen address of pool 'www' ({main}:7): the metrics endpoint needs an address of its own"),
            ("control_socket = \"/run/m.sock\"\nmetrics.listen = \"/run/m.sock\"", pool("www", ""), "/run/m.sock is fpmd's control socket: the metrics endpoint needs an address of its own"),
        ] {
            let (dir, e) = load_err(&format!("[global]\n{line}\n{pool_text}"), &[]);
            let main = dir.path().join("fpmd.toml");
            let line_of = 1 + line.lines().count();
            let msg = msg.replace("{main}", &main.display().to_string());
            assert_err(&dir, &e, "fpmd.toml", Some(line_of), None, Some("global.metrics.listen"), &msg);
        }
    }

    #[test]
    fn reload_keys() {
        use std::time::Duration as D;
        // Defaults: no bound, the control socket by fpmd's user, no watch.
        let dir = tempfile::tempdir().unwrap();
        let main = write(dir.path(), "fpmd.toml", &pool("www", ""));
        let (uid, gid) = nobody();
        let as_root = super::super::load_as(&main, Ids { euid: 0, egid: 0 }).unwrap();
        assert_eq!(as_root.global.process_control_timeout, None);
        assert_eq!(
            as_root.global.control_socket,
            crate::config::paths::default_path_as(&main, None, true)
        );
        assert!(!as_root.global.watch);
        assert_eq!(as_root.pools[0].graceful_timeout, None);
        let text = pool("www", "").replace("user = \"nobody\"\ngroup = \"nogroup\"\n", "");
        let main = write(dir.path(), "user/fpmd.toml", &text);
        let as_user = super::super::load_as(
            &main,
            Ids {
                euid: uid,
                egid: gid,
            },
        )
        .unwrap();
        assert_eq!(
            as_user.global.control_socket,
            dir.path().join("user/fpmd.sock")
        );

        // Set: process_control_timeout is the default of graceful_timeout;
        // a pool's own value wins, 0 included.
        let main = "[global]\nprocess_control_timeout = \"10s\"\ncontrol_socket = \"ctl/fpmd.sock\"\nwatch = true\ninclude = \"pool.d/*.toml\"\n";
        let (dir, c) = load_ok(
            main,
            &[
                ("pool.d/a.toml", &pool("a", "")),
                ("pool.d/b.toml", &pool("b", "graceful_timeout = \"1m\"\n")),
                ("pool.d/c.toml", &pool("c", "graceful_timeout = 0\n")),
            ],
        );
        assert_eq!(c.global.process_control_timeout, Some(D::from_secs(10)));
        assert_eq!(c.global.control_socket, dir.path().join("ctl/fpmd.sock"));
        assert!(c.global.watch);
        let graceful: Vec<_> = c.pools.iter().map(|p| p.graceful_timeout).collect();
        assert_eq!(
            graceful,
            [Some(D::from_secs(10)), Some(D::from_secs(60)), None]
        );
        let (_dir, c) = load_ok(
            &pool("www", "graceful_timeout = 30\n").replacen(
                "[www]",
                "[global]\nprocess_control_timeout = 0\n\n[www]",
                1,
            ),
            &[],
        );
        assert_eq!(c.global.process_control_timeout, None, "0 is none");
        assert_eq!(c.pools[0].graceful_timeout, Some(D::from_secs(30)));

        // Printed by -t, and read back to the same values.
        let (dir, c) = load_ok(
            main,
            &[
                ("pool.d/a.toml", &pool("a", "")),
                ("pool.d/b.toml", &pool("b", "graceful_timeout = \"1m\"\n")),
                ("pool.d/c.toml", &pool("c", "graceful_timeout = 0\n")),
            ],
        );
        let text = c.to_toml();
        for line in [
            "process_control_timeout = \"10s\" # default of graceful_timeout\n".to_string(),
            format!(
                "control_socket = \"{}\"\n",
                dir.path().join("ctl/fpmd.sock").display()
            ),
            "watch = true\n".to_string(),
            "graceful_timeout = \"10s\" # as global.process_control_timeout\n".to_string(),
            "graceful_timeout = \"1m\"\n".to_string(),
            "graceful_timeout = 0 # none, not global.process_control_timeout\n".to_string(),
        ] {
            assert!(text.contains(&line), "{line:?} not in\n{text}");
        }
        let again = write(dir.path(), "again/fpmd.toml", &text);
        let c2 = super::super::load(&again).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(c2.global, c.global);
        let graceful2: Vec<_> = c2.pools.iter().map(|p| p.graceful_timeout).collect();
        assert_eq!(
            graceful2,
            [Some(D::from_secs(10)), Some(D::from_secs(60)), None]
        );
        let (_dir, c) = load_ok(&pool("www", ""), &[]);
        let text = c.to_toml();
        assert!(
            text.contains("# process_control_timeout: none\n")
                && text.contains("watch = false\n")
                && text.contains("# graceful_timeout: none\n"),
            "{text}"
        );

        // Errors.
        let global = |line: &str| format!("[global]\n{line}\n{}", pool("www", ""));
        assert_global_errors(&[
            ("watch = \"yes\"", "global.watch", "invalid type: string \"yes\", expected a boolean".to_string()),
            ("process_control_timeout = \"soon\"", "global.process_control_timeout", "invalid duration \"soon\": expected number at 0 (expected e.g. \"30s\", \"5m\", \"1h\", \"250ms\")".to_string()),
            ("control_socket = \"\"", "global.control_socket", "control_socket must not be empty".to_string()),
            ("control_socket = 1", "global.control_socket", "invalid type: integer `1`, expected a string".to_string()),
            (&format!("control_socket = \"/run/{}.sock\"", "x".repeat(120)), "global.control_socket", format!("unix socket path is too long (130 bytes, at most 107): /run/{}.sock", "x".repeat(120))),
        ]);
        let (dir, e) = load_err(&pool("www", "graceful_timeout = -1\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("graceful_timeout"),
            "invalid duration -1: must not be negative",
        );
        let (dir, e) = load_err(&pool("www", "graceful_timout = 1\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("graceful_timout"),
            "unknown key (did you mean 'graceful_timeout'?)",
        );
        let (dir, e) = load_err("[global]\ncontrol_sockets = \"x.sock\"\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            None,
            Some("global.control_sockets"),
            "unknown key (did you mean 'global.control_socket'?)",
        );

        // A pool on the control socket.
        let (dir, e) = load_err(&global("control_socket = \"/tmp/www.sock\""), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("listen.address"),
            &format!(
                "/tmp/www.sock is fpmd's control socket (global.control_socket, {}:2): a pool cannot listen on it",
                dir.path().join("fpmd.toml").display()
            ),
        );
        let dir = tempfile::tempdir().unwrap();
        let default =
            crate::config::paths::default_path_as(&dir.path().join("fpmd.toml"), None, true);
        let main = write(
            dir.path(),
            "fpmd.toml",
            &pool("www", "").replace("/tmp/www.sock", &default.to_string_lossy()),
        );
        let e = super::super::load_as(&main, Ids { euid: 0, egid: 0 }).unwrap_err();
        assert_eq!(
            e.message,
            format!("{} is fpmd's control socket (the default of global.control_socket): a pool cannot listen on it", default.display())
        );
    }

    #[test]
    fn no_pool() {
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/notes.txt", "")]);
        assert_err(&dir, &e, "fpmd.toml", None, None, None, "no pool defined: add a pool table such as [www] to this file or to a file matched by global.include");
        assert!(e.to_string().ends_with("fpmd.toml: no pool defined: add a pool table such as [www] to this file or to a file matched by global.include"));
        let (dir, e) = load_err("", &[]);
        assert_eq!(e.file, dir.path().join("fpmd.toml"));
    }

    #[test]
    fn isolation_keys() {
        let dir = tempfile::tempdir().unwrap();
        let site = dir.path().join("site");
        std::fs::create_dir_all(site.join("pub")).unwrap();
        let site_s = site.display().to_string();
        let link = dir.path().join("site-link");
        std::os::unix::fs::symlink(&site, &link).unwrap();
        let link_s = link.display().to_string();
        let as_root = |extra: &str| {
            let main = write(dir.path(), "fpmd.toml", &pool("www", extra));
            super::super::load_as(&main, Ids { euid: 0, egid: 0 })
        };
        // Defaults: nothing set, no_new_privs off (as php-fpm).
        let c = as_root("").unwrap();
        assert_eq!(c.pools[0].isolation, Isolation::default());
        assert!(!c.pools[0].isolation.no_new_privs);
        let text = c.to_toml();
        assert!(text.contains("# chroot: none\nchdir = \"/\"\n"), "{text}");
        assert!(
            text.contains("process.dumpable = false\nno_new_privs = false\n"),
            "{text}"
        );
        assert!(
            as_root("no_new_privs = true\n").unwrap().pools[0]
                .isolation
                .no_new_privs
        );

        // Everything set, and rendered so that it loads back the same.
        let c = as_root(&format!(
            "chroot = {site_s:?}\nchdir = \"/pub\"\nrlimit_files = 4096\nrlimit_core = \"unlimited\"\nprocess.priority = -5\nprocess.dumpable = true\nlandlock.read = [\"/pub\"]\nlandlock.write = \"/pub\"\n"
        ))
        .unwrap();
        let iso = &c.pools[0].isolation;
        assert_eq!(iso.chroot.as_deref(), Some(site.as_path()));
        assert_eq!(c.pools[0].chdir, PathBuf::from("/pub"));
        assert_eq!(iso.rlimit_files, Some(4096));
        assert_eq!(iso.rlimit_core, Some(u64::MAX));
        assert_eq!(iso.process_priority, Some(-5));
        assert!(iso.process_dumpable);
        assert_eq!(
            iso.landlock,
            Some(Landlock {
                read: vec!["/pub".into()],
                write: vec!["/pub".into()]
            })
        );
        let text = c.to_toml();
        for line in [
            format!("chroot = {site_s:?}\nchdir = \"/pub\" # inside the chroot\n"),
            "rlimit_files = 4096\nrlimit_core = \"unlimited\"\nprocess.priority = -5\nprocess.dumpable = true\nno_new_privs = true\nlandlock.read = [\"/pub\"]\nlandlock.write = [\"/pub\"]\n".into(),
        ] {
            assert!(text.contains(&line), "{line}\nnot in\n{text}");
        }
        assert_eq!(
            as_root("rlimit_core = 1048576\n").unwrap().pools[0]
                .isolation
                .rlimit_core,
            Some(1 << 20)
        );

        // Errors name file, line and key.
        let missing = dir.path().join("missing").display().to_string();
        for (extra, key, msg) in [
            ("chroot = \"site\"".to_string(), "chroot", "chroot must be an absolute path: site".to_string()),
            (format!("chroot = {missing:?}"), "chroot", format!("chroot directory does not exist or is not a directory: {missing}")),
            ("chroot = \"/\"".into(), "chroot", "chroot = \"/\" is no chroot: remove it".into()),
            (format!("chroot = {link_s:?}"), "chroot", format!("chroot must be the site's directory itself, not a symlink: {link_s} -> {site_s}")),
            (format!("chroot = {site_s:?}\nchdir = \"/nope\""), "chdir", format!("chdir directory /nope within the chroot {site_s} ({site_s}/nope) does not exist or is not a directory")),
            ("rlimit_files = 0".into(), "rlimit_files", "rlimit_files must be at least 1 (php-cgi could not open its own files)".into()),
            ("rlimit_files = 4000000000".into(), "rlimit_files", format!("rlimit_files = 4000000000 is more than the kernel allows (fs.nr_open = {})", std::fs::read_to_string("/proc/sys/fs/nr_open").unwrap().trim())),
            ("rlimit_core = \"lots\"".into(), "rlimit_core", "invalid value: string \"lots\", expected a number or \"unlimited\"".into()),
            ("process.priority = 21".into(), "process.priority", "process.priority must be between -19 and 20, got 21".into()),
            ("process.priority = -20".into(), "process.priority", "process.priority must be between -19 and 20, got -20".into()),
            ("landlock.read = [\"relative\"]".into(), "landlock.read", "landlock.read paths must be absolute: \"relative\"".into()),
            (format!("landlock.write = [{missing:?}]"), "landlock.write", format!("landlock.write path does not exist: {missing}")),
            (format!("chroot = {site_s:?}\nlandlock.read = [\"/other\"]"), "landlock.read", format!("landlock.read path does not exist: {site_s}/other")),
            ("no_new_privs = false\nlandlock.read = [\"/usr\"]".into(), "no_new_privs", "no_new_privs = false cannot go with landlock.*: an unprivileged process can only enforce a Landlock ruleset with no_new_privs".into()),
        ] {
            let e = as_root(&format!("{extra}\n")).expect_err(&extra);
            assert_eq!(e.key.as_deref(), Some(key), "{e}");
            assert_eq!(e.message, msg, "{e}");
            assert_eq!(e.pool.as_deref(), Some("www"), "{e}");
            let text = std::fs::read_to_string(&e.file).unwrap();
            let first = key.split('.').next_back().unwrap();
            let line = text.lines().nth(e.line.unwrap() - 1).unwrap();
            assert!(line.contains(first), "{e}: line {line:?}");
        }

        // Not root: chroot and a higher priority are refused.
        let (uid, gid) = nobody();
        let as_user = |extra: &str| {
            let main = write(dir.path(), "user.toml", &pool("www", extra));
            super::super::load_as(
                &main,
                Ids {
                    euid: uid,
                    egid: gid,
                },
            )
        };
        let e = as_user(&format!("chroot = {site_s:?}\n")).unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("chroot"), Some(7)));
        assert_eq!(e.message, "chroot needs fpmd to run as root (mount namespace and chroot(2) need CAP_SYS_ADMIN and CAP_SYS_CHROOT)");
        let e = as_user("process.priority = -1\n").unwrap_err();
        assert_eq!(
            e.message,
            "process.priority = -1 (a higher priority) needs fpmd to run as root"
        );
        assert_eq!(
            as_user("process.priority = 10\n").unwrap().pools[0]
                .isolation
                .process_priority,
            Some(10)
        );
    }

    /// Loads `main` (+ `files`) in a fresh directory as a process with
    /// `ids` on a machine described by `host`.
    fn load_on(
        main: &str,
        files: &[(&str, &str)],
        ids: Ids,
        host: &Host,
    ) -> (tempfile::TempDir, Result<super::super::Config, ConfigError>) {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            write(dir.path(), rel, text);
        }
        let main = write(dir.path(), "fpmd.toml", main);
        let r = super::super::load_from(
            &super::super::FileSystem,
            &main,
            ids,
            host,
            &super::super::LoadOptions::default(),
        );
        (dir, r)
    }

    fn big_host() -> Host {
        Host {
            cap_chown: true,
            cap_net_bind_service: true,
            groups: vec![0],
            unprivileged_port_start: 1024,
            nproc: None,
            pid_max: Some(32768),
            threads_max: Some(192_730),
            hard_limits: None,
        }
    }

    const ROOT: Ids = Ids { euid: 0, egid: 0 };

    #[test]
    fn max_children_beyond_pid_max_is_refused() {
        let host = big_host();
        let with = |n: &str, extra: &str| {
            pool("www", extra).replace("pm.max_children = 5", &format!("pm.max_children = {n}"))
        };
        let (dir, r) = load_on(&with("100000", ""), &[], ROOT, &host);
        assert_err(
            &dir,
            &r.unwrap_err(),
            "fpmd.toml",
            Some(6),
            Some("www"),
            Some("pm.max_children"),
            "the pool would run 100001 processes (pm.max_children = 100000 and the php-cgi parent of pm.spawn = \"prefork\"), more than the kernel allows at all: kernel.pid_max is 32768 (/proc/sys/kernel/pid_max)",
        );
        // At the limit: exec runs max_children processes, prefork one more.
        assert!(
            load_on(&with("32768", "pm.spawn = \"exec\"\n"), &[], ROOT, &host)
                .1
                .is_ok()
        );
        let (_d, r) = load_on(&with("32768", ""), &[], ROOT, &host);
        assert!(r
            .unwrap_err()
            .message
            .starts_with("the pool would run 32769 processes"));
        // threads-max, when it is the lower one.
        let low_threads = Host {
            threads_max: Some(100),
            ..big_host()
        };
        let (_d, r) = load_on(&with("100", ""), &[], ROOT, &low_threads);
        assert!(r
            .unwrap_err()
            .message
            .ends_with("kernel.threads-max is 100 (/proc/sys/kernel/threads-max)"));
        // The sum over pools: refused at the pool that crosses it.
        let two = format!(
            "{}\n{}",
            with("20000", ""),
            with("20000", "")
                .replace("[www]", "[two]")
                .replace("www.sock", "two.sock")
        );
        let (dir, r) = load_on(&two, &[], ROOT, &host);
        assert_err(
            &dir,
            &r.unwrap_err(),
            "fpmd.toml",
            Some(13),
            Some("two"),
            Some("pm.max_children"),
            "the pools together would run 40002 processes (this pool 20001 processes (pm.max_children = 20000 and the php-cgi parent of pm.spawn = \"prefork\"), the pools before it 20001), more than the kernel allows at all: kernel.pid_max is 32768 (/proc/sys/kernel/pid_max)",
        );
        // Unknown limits (no /proc) refuse nothing.
        let none = Host {
            pid_max: None,
            threads_max: None,
            ..big_host()
        };
        assert!(load_on(&with("100000", ""), &[], ROOT, &none).1.is_ok());
    }

    #[test]
    fn rlimits_above_a_hard_limit_fpmd_cannot_raise_are_refused() {
        let capped = Host {
            hard_limits: Some((Some(20_000), Some(0))),
            ..big_host()
        };
        let (dir, r) = load_on(&pool("www", "rlimit_files = 65536\n"), &[], ROOT, &capped);
        assert_err(
            &dir,
            &r.unwrap_err(),
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("rlimit_files"),
            "rlimit_files = 65536 is above fpmd's hard RLIMIT_NOFILE (20000), which fpmd runs as uid 0 without CAP_SYS_RESOURCE cannot raise: every php-cgi would fail before exec (setrlimit: EPERM); lower it, or raise fpmd's own limit (systemd: LimitNOFILE=)",
        );
        let (_d, r) = load_on(
            &pool("www", "rlimit_core = \"unlimited\"\n"),
            &[],
            ROOT,
            &capped,
        );
        assert!(r
            .unwrap_err()
            .message
            .starts_with("rlimit_core = unlimited is above fpmd's hard RLIMIT_CORE (0)"));
        for ok in ["rlimit_files = 20000\n", "rlimit_core = 0\n"] {
            assert!(
                load_on(&pool("www", ok), &[], ROOT, &capped).1.is_ok(),
                "{ok}"
            );
        }
        // With CAP_SYS_RESOURCE (no hard limits recorded) any value up to
        // fs.nr_open goes.
        assert!(load_on(
            &pool("www", "rlimit_files = 65536\n"),
            &[],
            ROOT,
            &big_host()
        )
        .1
        .is_ok());
    }

    #[test]
    fn max_children_beyond_rlimit_nproc_is_refused() {
        let host = Host {
            nproc: Some(10),
            ..big_host()
        };
        let with = |name: &str, user: &str, n: u32| {
            pool(name, "")
                .replace("pm.max_children = 5", &format!("pm.max_children = {n}"))
                .replace("user = \"nobody\"", &format!("user = \"{user}\""))
                .replace(
                    "group = \"nogroup\"",
                    &format!(
                        "group = \"{}\"",
                        if user == "nobody" { "nogroup" } else { user }
                    ),
                )
        };
        let nobody_pool = |n: u32| {
            pool("www", "").replace("pm.max_children = 5", &format!("pm.max_children = {n}"))
        };
        assert!(
            load_on(&nobody_pool(9), &[], ROOT, &host).1.is_ok(),
            "9 children + their parent = 10"
        );
        let (dir, r) = load_on(&nobody_pool(10), &[], ROOT, &host);
        assert_err(
            &dir,
            &r.unwrap_err(),
            "fpmd.toml",
            Some(6),
            Some("www"),
            Some("pm.max_children"),
            &format!("the pool would run 11 processes (pm.max_children = 10 and the php-cgi parent of pm.spawn = \"prefork\") as user 'nobody' (uid {}), more than the soft RLIMIT_NPROC of 10 processes per user the children inherit from fpmd (ulimit -u; systemd: LimitNPROC=): the kernel would refuse the forks; lower pm.max_children or raise the limit", nobody().0),
        );
        // Two pools of one user count together; of two users, apart.
        let same = format!("{}\n{}", with("a", "nobody", 5), with("b", "nobody", 5));
        let (_d, r) = load_on(&same, &[], ROOT, &host);
        let e = r.unwrap_err();
        assert_eq!((e.pool.as_deref(), e.line), (Some("b"), Some(13)), "{e}");
        assert!(e.message.contains("and 6 more of that user"), "{e}");
        let apart = format!("{}\n{}", with("a", "nobody", 4), with("b", "www-data", 4));
        assert!(load_on(&apart, &[], ROOT, &host).1.is_ok());
        // Not root: the pool runs as fpmd's user, and fpmd counts too.
        let (uid, gid) = nobody();
        let me = Ids {
            euid: uid,
            egid: gid,
        };
        let me_host = Host {
            cap_chown: false,
            cap_net_bind_service: false,
            groups: vec![gid],
            ..host
        };
        assert!(load_on(&nobody_pool(8), &[], me, &me_host).1.is_ok());
        let (_d, r) = load_on(&nobody_pool(9), &[], me, &me_host);
        let e = r.unwrap_err();
        assert!(
            e.message.contains("and 1 more of that user (fpmd itself"),
            "{e}"
        );
    }

    #[test]
    fn non_root_cannot_use_root_only_settings() {
        let (uid, gid) = nobody();
        let me = Ids {
            euid: uid,
            egid: gid,
        };
        let host = Host {
            cap_chown: false,
            cap_net_bind_service: false,
            groups: vec![gid],
            ..big_host()
        };
        let sock = |dir: &tempfile::TempDir| dir.path().join("run/www.sock").display().to_string();
        // The sockets' directory exists.
        const RUN: &[(&str, &str)] = &[("run/.keep", "")];
        let at = |extra: &str| pool("www", extra).replace("/tmp/www.sock", "run/www.sock");
        // fpmd's own user and group are fine, given or by default.
        let own = at("listen.owner = \"nobody\"\nlisten.group = \"nogroup\"\n");
        assert!(load_on(&own, RUN, me, &host).1.is_ok());
        assert!(load_on(&at(""), RUN, me, &host).1.is_ok());

        let (dir, r) = load_on(&at("listen.owner = \"www-data\"\n"), RUN, me, &host);
        let e = r.unwrap_err();
        let www = nix::unistd::User::from_name("www-data")
            .unwrap()
            .unwrap()
            .uid
            .as_raw();
        assert_err(&dir, &e, "fpmd.toml", Some(7), Some("www"), Some("listen.owner"), &format!(
            "cannot give the socket {} to listen.owner 'www-data' (uid {www}): fpmd runs as uid {uid} without CAP_CHOWN, so chown() would fail with EPERM (Operation not permitted); remove listen.owner or set it to fpmd's own user 'nobody'",
            sock(&dir)
        ));
        let (dir, r) = load_on(&at("listen.group = \"www-data\"\n"), RUN, me, &host);
        let e = r.unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(7), Some("listen.group")),
            "{e}"
        );
        assert!(
            e.message.starts_with(&format!(
                "cannot give the socket {} to listen.group 'www-data'",
                sock(&dir)
            )) && e.message.contains("EPERM"),
            "{e}"
        );

        // cgroup limits need root.
        let (dir, r) = load_on(&at("cgroup.pids_max = 50\n"), RUN, me, &host);
        assert_err(&dir, &r.unwrap_err(), "fpmd.toml", Some(7), Some("www"), Some("cgroup.pids_max"),
            &format!("cgroup.pids_max needs fpmd to run as root (it runs as uid {uid}): the pool's cgroup is created and its limits written under /sys/fs/cgroup"));

        // Privileged ports: below ip_unprivileged_port_start, for every listener.
        let tcp = |addr: &str, extra: &str| {
            pool("www", extra).replace("\"/tmp/www.sock\"", &format!("\"{addr}\""))
        };
        let (dir, r) = load_on(&tcp("127.0.0.1:80", ""), &[], me, &host);
        assert_err(&dir, &r.unwrap_err(), "fpmd.toml", Some(5), Some("www"), Some("listen.address"),
            &format!("port 80 is privileged: fpmd runs as uid {uid} without CAP_NET_BIND_SERVICE and net.ipv4.ip_unprivileged_port_start is 1024, so bind() would fail with EACCES (Permission denied); use a port from 1024 up or a unix socket"));
        assert!(load_on(&tcp("127.0.0.1:1024", ""), &[], me, &host)
            .1
            .is_ok());
        let low_start = Host {
            unprivileged_port_start: 80,
            ..host.clone()
        };
        assert!(
            load_on(&tcp("127.0.0.1:80", ""), &[], me, &low_start)
                .1
                .is_ok(),
            "the sysctl, not 1024"
        );
        let (_d, r) = load_on(
            &tcp("127.0.0.1:9000", "pm.status_listen = \"443\"\n"),
            &[],
            me,
            &host,
        );
        let e = r.unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(7), Some("pm.status_listen")),
            "{e}"
        );
        let metrics = format!(
            "[global]\nmetrics.listen = \"127.0.0.1:99\"\n{}",
            tcp("127.0.0.1:9000", "")
        );
        let (_d, r) = load_on(&metrics, &[], me, &host);
        let e = r.unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref(), e.pool.as_deref()),
            (Some(2), Some("global.metrics.listen"), None),
            "{e}"
        );

        // Root (or the capabilities) may do all of it.
        let all = at("listen.owner = \"www-data\"\nlisten.group = \"www-data\"\n");
        assert!(load_on(&all, RUN, ROOT, &big_host()).1.is_ok());
        assert!(load_on(&tcp("127.0.0.1:80", ""), &[], ROOT, &big_host())
            .1
            .is_ok());
    }

    #[test]
    fn require_root_names_the_key_and_why() {
        let src = SourceFile::parse(
            Path::new("/x/fpmd.toml"),
            "[www]\nuser = \"nobody\"\nchroot = \"/srv/www\"\n".into(),
        )
        .unwrap();
        let ctx = PoolCtx {
            src: &src,
            name: "www",
        };
        assert!(require_root(&ctx, ROOT, &["chroot"], "chroot(2) needs CAP_SYS_CHROOT").is_ok());
        let e = require_root(
            &ctx,
            Ids {
                euid: 1000,
                egid: 1000,
            },
            &["chroot"],
            "chroot(2) needs CAP_SYS_CHROOT",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/x/fpmd.toml:3: [www] key 'chroot': chroot needs fpmd to run as root (it runs as uid 1000): chroot(2) needs CAP_SYS_CHROOT"
        );
    }

    #[test]
    fn host_facts() {
        // Pretend ids: root may do all, anyone else nothing.
        let h = Host::of(Ids {
            euid: 4_000_000,
            egid: 4_000_001,
        });
        assert_eq!(
            (h.cap_chown, h.cap_net_bind_service, h.groups.as_slice()),
            (false, false, &[4_000_001][..])
        );
        let h = Host::of(Ids {
            euid: 0,
            egid: 4_000_001,
        });
        assert!(h.cap_chown && h.cap_net_bind_service);
        // The kernel's figures are the files'.
        let file = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
        };
        assert_eq!(h.pid_max, file("/proc/sys/kernel/pid_max"));
        assert_eq!(h.threads_max, file("/proc/sys/kernel/threads-max"));
        let start = file("/proc/sys/net/ipv4/ip_unprivileged_port_start").unwrap_or(1024);
        assert_eq!(u64::from(h.unprivileged_port_start), start);
        // The running process: its own groups.
        let me = Host::of(Ids::current());
        assert_eq!(me.groups[0], nix::unistd::getegid().as_raw());
    }
}
