//! `-tt` of a php-fpm configuration: the effective configuration as
//! php-fpm 8.2 dumps it (`fpm_conf_dump` in php-src
//! `sapi/fpm/fpm/fpm_conf.c`), one NOTICE line per setting, `\tkey =
//! value` under `[global]` and `[POOL]`, in php-fpm's order, so that a
//! script or test reading php-fpm's dump reads fpmd's. The values are
//! fpmd's effective ones (what it will run with), written as php-fpm
//! writes its own: `undefined` for a string not set, `yes`/`no`, seconds
//! with an `s`; ini values as the reader stored them (its scanner,
//! `scan.rs`, evaluates PHP's constants as php-fpm's does: `E_ALL` is
//! `32767`). Settings
//! php-fpm has and fpmd does not (`syslog.*`, `events.mechanism`,
//! `listen.setfib`) show what fpmd does instead, or php-fpm's value for
//! "not used".

use crate::config::{Config, LogLevel, PmMode, PoolConfig};

/// php-fpm's `STR2STR` of an unset string.
fn undefined() -> String {
    "undefined".to_string()
}

/// A path setting, `undefined` when unset.
fn path(p: Option<&std::path::Path>) -> String {
    p.map_or_else(undefined, |p| p.display().to_string())
}

/// A time setting in whole seconds, 0 when unset.
fn secs(d: Option<std::time::Duration>) -> u64 {
    d.map_or(0, |d| d.as_secs())
}

/// php-fpm's `BOOL2STR`.
fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The dump's lines, each without php-fpm's `[TIME] NOTICE: ` (the
/// caller writes them as NOTICE lines).
pub fn php_fpm_dump(config: &Config) -> Vec<String> {
    let g = &config.global;
    let mut out = vec!["[global]".to_string()];
    let kv = |out: &mut Vec<String>, k: &str, v: String| out.push(format!("\t{k} = {v}"));
    kv(&mut out, "pid", path(g.pid.as_deref()));
    let error_log = match (&g.error_log, &g.unused_error_log) {
        (crate::config::LogTarget::File(p), _) | (_, Some(p)) => p.display().to_string(),
        _ => "/proc/self/fd/2".to_string(),
    };
    kv(&mut out, "error_log", error_log);
    kv(&mut out, "syslog.ident", "php-fpm".into());
    kv(&mut out, "syslog.facility", "24".into());
    kv(&mut out, "log_buffering", "yes".into());
    let level = match g.log_level {
        LogLevel::Alert => "ALERT",
        LogLevel::Error => "ERROR",
        LogLevel::Warning => "WARNING",
        LogLevel::Notice => "NOTICE",
        LogLevel::Debug => "DEBUG",
    };
    kv(&mut out, "log_level", level.into());
    kv(&mut out, "log_limit", g.log_limit.to_string());
    let (threshold, interval) = g
        .emergency_restart
        .map_or((0, 0), |(n, d)| (n, d.as_secs()));
    kv(
        &mut out,
        "emergency_restart_interval",
        format!("{interval}s"),
    );
    kv(
        &mut out,
        "emergency_restart_threshold",
        threshold.to_string(),
    );
    kv(
        &mut out,
        "process_control_timeout",
        format!("{}s", secs(g.process_control_timeout)),
    );
    let max: u32 = config.pools.iter().map(|p| p.pm.max_children).sum();
    kv(&mut out, "process.max", max.to_string());
    kv(&mut out, "process.priority", "undefined".into());
    kv(&mut out, "daemonize", yes(g.daemonize).into());
    kv(&mut out, "rlimit_files", "0".into());
    kv(&mut out, "rlimit_core", "0".into());
    kv(&mut out, "events.mechanism", "epoll".into());
    kv(&mut out, "systemd_interval", "0s".into());
    out.push(" ".into());
    for p in &config.pools {
        pool_dump(&mut out, p);
    }
    out
}

fn pool_dump(out: &mut Vec<String>, p: &PoolConfig) {
    let kv = |out: &mut Vec<String>, k: &str, v: String| out.push(format!("\t{k} = {v}"));
    let iso = &p.isolation;
    out.push(format!("[{}]", p.name));
    kv(out, "prefix", undefined());
    kv(out, "user", p.user.user_name.clone());
    kv(out, "group", p.user.group_name.clone());
    kv(out, "listen", p.listen.address.to_string());
    kv(out, "listen.backlog", p.listen.backlog.to_string());
    let ids = |v: &[u32]| {
        if v.is_empty() {
            undefined()
        } else {
            v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        }
    };
    kv(out, "listen.acl_users", ids(&p.listen.acl_users));
    kv(out, "listen.acl_groups", ids(&p.listen.acl_groups));
    let id = |v: Option<u32>| v.map_or_else(undefined, |v| v.to_string());
    kv(out, "listen.owner", id(p.listen.owner));
    kv(out, "listen.group", id(p.listen.group));
    kv(out, "listen.mode", format!("{:04o}", p.listen.mode));
    let clients = p
        .listen
        .allowed_clients
        .as_ref()
        .map_or_else(undefined, |c| {
            c.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        });
    kv(out, "listen.allowed_clients", clients);
    kv(
        out,
        "process.priority",
        iso.process_priority
            .map_or_else(undefined, |n| n.to_string()),
    );
    kv(out, "process.dumpable", yes(iso.process_dumpable).into());
    kv(out, "pm", p.pm.mode.as_str().into());
    kv(out, "pm.max_children", p.pm.max_children.to_string());
    let (start, min_spare, max_spare, rate, idle) = match p.pm.mode {
        PmMode::Static => (0, 0, 0, 32, 10),
        PmMode::Dynamic {
            start_servers,
            min_spare_servers,
            max_spare_servers,
            max_spawn_rate,
        } => (
            start_servers,
            min_spare_servers,
            max_spare_servers,
            max_spawn_rate,
            10,
        ),
        PmMode::Ondemand {
            process_idle_timeout,
            max_spawn_rate,
        } => (0, 0, 0, max_spawn_rate, process_idle_timeout.as_secs()),
    };
    kv(out, "pm.start_servers", start.to_string());
    kv(out, "pm.min_spare_servers", min_spare.to_string());
    kv(out, "pm.max_spare_servers", max_spare.to_string());
    kv(out, "pm.max_spawn_rate", rate.to_string());
    kv(out, "pm.process_idle_timeout", idle.to_string());
    kv(out, "pm.max_requests", p.pm.max_requests.to_string());
    kv(
        out,
        "pm.status_path",
        p.local.status_path.clone().unwrap_or_else(undefined),
    );
    kv(out, "pm.status_listen", undefined());
    kv(
        out,
        "ping.path",
        p.local.ping_path.clone().unwrap_or_else(undefined),
    );
    kv(out, "ping.response", p.local.ping_response.clone());
    kv(out, "access.log", path(p.access_log.as_deref()));
    kv(out, "access.format", p.access_format.to_string());
    for s in &p.access_suppress_paths {
        kv(out, "access.suppress_path[]", s.clone());
    }
    kv(out, "slowlog", path(p.slowlog.as_deref()));
    kv(
        out,
        "request_slowlog_timeout",
        format!("{}s", secs(p.request_slowlog_timeout)),
    );
    kv(out, "request_slowlog_trace_depth", "20".into());
    kv(
        out,
        "request_terminate_timeout",
        format!("{}s", secs(p.request_terminate_timeout)),
    );
    kv(
        out,
        "request_terminate_timeout_track_finished",
        yes(p.track_finished).into(),
    );
    kv(
        out,
        "rlimit_files",
        iso.rlimit_files.unwrap_or(0).to_string(),
    );
    kv(out, "rlimit_core", iso.rlimit_core.unwrap_or(0).to_string());
    kv(out, "chroot", path(iso.chroot.as_deref()));
    kv(out, "chdir", p.chdir.display().to_string());
    kv(
        out,
        "catch_workers_output",
        yes(p.catch_workers_output).into(),
    );
    kv(
        out,
        "decorate_workers_output",
        yes(p.decorate_workers_output).into(),
    );
    kv(out, "clear_env", yes(p.clear_env).into());
    kv(
        out,
        "security.limit_extensions",
        p.limit_extensions.join(" "),
    );
    for (k, v) in &p.env {
        kv(out, &format!("env[{k}]"), v.clone());
    }
    for (k, v) in &p.php_values {
        kv(out, &format!("php_value[{k}]"), v.clone());
    }
    for (k, v) in &p.php_admin_values {
        kv(out, &format!("php_admin_value[{k}]"), v.clone());
    }
    out.push(" ".into());
}
