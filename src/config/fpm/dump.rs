//! `-tt` of a php-fpm configuration: the effective configuration as
//! php-fpm 8.2 dumps it (`fpm_conf_dump` in php-src
//! `sapi/fpm/fpm/fpm_conf.c`), one NOTICE line per setting, `\tkey =
//! value` under `[global]` and `[POOL]`, in php-fpm's order, so that a
//! script or test reading php-fpm's dump reads fpmd's. The values are
//! fpmd's effective ones (what it will run with), written as php-fpm
//! writes its own: `undefined` for a string not set, `yes`/`no`, seconds
//! with an `s`, and an ini value made of PHP's `E_*` constants evaluated
//! (`E_ALL` is `32767`), as php-fpm's ini scanner evaluates it. Settings
//! php-fpm has and fpmd does not (`syslog.*`, `events.mechanism`,
//! `listen.setfib`) show what fpmd does instead, or php-fpm's value for
//! "not used".

use crate::config::{Config, ListenAddress, LogLevel, PmMode, PoolConfig};

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
    let address = match &p.listen.address {
        ListenAddress::Unix(path) => path.display().to_string(),
        ListenAddress::Tcp(a) => a.to_string(),
    };
    kv(out, "listen", address);
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
        kv(out, &format!("php_value[{k}]"), ini_value(v));
    }
    for (k, v) in &p.php_admin_values {
        kv(out, &format!("php_admin_value[{k}]"), ini_value(v));
    }
    out.push(" ".into());
}

/// An ini value as PHP's ini scanner reads it unquoted: an expression of
/// `E_*` constants and integers with `|`, `&`, `^`, `~`, `!` and
/// parentheses is evaluated (`E_ALL & ~E_NOTICE` is `32759`); anything
/// else is as written.
pub fn ini_value(v: &str) -> String {
    let mut p = Expr {
        s: v.as_bytes(),
        at: 0,
    };
    match p.or() {
        Some(n) if p.done() && v.contains("E_") => n.to_string(),
        _ => v.to_string(),
    }
}

/// PHP 8.2's error level constants (`Zend/zend_errors.h`).
const E_CONSTANTS: &[(&str, i64)] = &[
    ("E_ERROR", 1),
    ("E_WARNING", 2),
    ("E_PARSE", 4),
    ("E_NOTICE", 8),
    ("E_CORE_ERROR", 16),
    ("E_CORE_WARNING", 32),
    ("E_COMPILE_ERROR", 64),
    ("E_COMPILE_WARNING", 128),
    ("E_USER_ERROR", 256),
    ("E_USER_WARNING", 512),
    ("E_USER_NOTICE", 1024),
    ("E_STRICT", 2048),
    ("E_RECOVERABLE_ERROR", 4096),
    ("E_DEPRECATED", 8192),
    ("E_USER_DEPRECATED", 16384),
    ("E_ALL", 32767),
];

/// A recursive-descent reader of the ini scanner's bitwise expressions
/// (`zend_ini_parser.y`: `|` below `^` below `&`, unary `~` and `!`).
struct Expr<'a> {
    s: &'a [u8],
    at: usize,
}

impl Expr<'_> {
    fn skip(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.skip();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn done(&mut self) -> bool {
        self.skip();
        self.at == self.s.len()
    }
    fn or(&mut self) -> Option<i64> {
        let mut v = self.xor()?;
        while self.eat(b'|') {
            v |= self.xor()?;
        }
        Some(v)
    }
    fn xor(&mut self) -> Option<i64> {
        let mut v = self.and()?;
        while self.eat(b'^') {
            v ^= self.and()?;
        }
        Some(v)
    }
    fn and(&mut self) -> Option<i64> {
        let mut v = self.unary()?;
        while self.eat(b'&') {
            v &= self.unary()?;
        }
        Some(v)
    }
    fn unary(&mut self) -> Option<i64> {
        if self.eat(b'~') {
            return Some(!self.unary()?);
        }
        if self.eat(b'!') {
            return Some(i64::from(self.unary()? == 0));
        }
        if self.eat(b'(') {
            let v = self.or()?;
            return self.eat(b')').then_some(v);
        }
        self.skip();
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            self.at += 1;
        }
        let word = std::str::from_utf8(&self.s[start..self.at]).ok()?;
        if let Ok(n) = word.parse::<i64>() {
            return Some(n);
        }
        E_CONSTANTS
            .iter()
            .find(|(n, _)| *n == word)
            .map(|&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_level_expressions_are_evaluated_as_php_reads_them() {
        assert_eq!(ini_value("E_ALL"), "32767");
        assert_eq!(ini_value("E_ALL & ~E_NOTICE"), "32759");
        assert_eq!(ini_value("E_ALL & ~E_DEPRECATED & ~E_STRICT"), "22527");
        assert_eq!(ini_value("(E_ERROR | E_WARNING)"), "3");
        assert_eq!(ini_value("Europe/London"), "Europe/London");
        assert_eq!(ini_value("1"), "1");
        assert_eq!(ini_value("E_BOGUS"), "E_BOGUS");
        assert_eq!(ini_value("eval"), "eval");
    }
}
