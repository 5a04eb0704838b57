//! Configuration: owns reading, parsing and validating fpmd's TOML files
//! (the main file and the pool files it includes) into the validated types
//! below, which are the only configuration types the rest of the daemon uses.
//!
//! The module is pure except for reading the configuration files (and
//! globbing `global.include`), resolving users and groups through the system
//! user database, checking that each pool's php-cgi binary exists and is
//! executable, checking that `chdir` is a directory, and reading fpmd's own
//! environment (`$VAR` in `env.*`, `PATH` for a bare `php_cgi`). It must not
//! touch sockets or processes: it never binds, connects, forks or signals.
//!
//! Pipeline: file text → `toml_edit` document (syntax errors, unknown keys,
//! lines of keys) → serde raw structs (`deny_unknown_fields`, type errors,
//! via `serde_path_to_error` for the key) → validation → [`Config`].
//! Every error is a [`ConfigError`] naming the file, the line and the dotted
//! key, e.g. `pool.d/www.toml:7: [www] key 'pm.max_childre': unknown key (did
//! you mean 'pm.max_children'?)`.
//!
//! Decisions not dictated by php-fpm, written down here:
//! - relative paths (`pid`, `error_log`, `include`, a unix `listen.address`,
//!   a `php_cgi` containing `/`) are relative to the directory of the file
//!   that contains them, and are stored absolute;
//! - a bare port in `listen.address` binds all IPv4 addresses (`0.0.0.0`),
//!   as php-fpm does;
//! - `php_value.session.save_path` (unquoted, so a nested TOML table) means
//!   the same as `php_value."session.save_path"`: nested tables under the
//!   `php_*` tables are flattened with dots into the ini name;
//! - an `env.*` value is taken from fpmd's environment only when it is
//!   exactly `$NAME` (php-fpm's `env[X] = $Y`); `"$HOME/bin"` stays literal;
//! - when fpmd does not run as root it cannot change user: `user`/`group`
//!   may then only name fpmd's own user/group (php-fpm ignores them with a
//!   notice; fpmd refuses, so that the printed configuration is the truth);
//! - pool names may contain only ASCII letters, digits, `.`, `_` and `-`
//!   (they appear in logs, socket names and on the `fpmd status` command
//!   line); a name with a dot must be quoted in TOML: `["example.com"]`.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsString};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::unistd::{Gid, Group, Uid, User};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml_edit::{ImDocument, Item, TableLike};

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// A configuration error, located as precisely as possible.
///
/// Displays as `FILE[:LINE]: [[POOL] ][key 'KEY': ]MESSAGE`, e.g.
/// `pool.d/www.toml:8: [www] key 'pm.max_children': pm.max_children must be at least 1`
/// or `fpmd.toml:4: key 'global.include': invalid glob pattern …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_error(self))]
pub struct ConfigError {
    /// The file the error is in (as given, or as found by `global.include`).
    pub file: PathBuf,
    /// 1-based line of the offending key or value, when there is one.
    pub line: Option<usize>,
    /// The pool the error is in (its table name), for errors inside a pool.
    pub pool: Option<String>,
    /// The dotted key: pool-relative for pool keys (`pm.max_children`),
    /// `global.X` for global keys.
    pub key: Option<String>,
    /// What is wrong, in lower case.
    pub message: String,
}

fn render_error(e: &ConfigError) -> String {
    let mut s = e.file.display().to_string();
    if let Some(line) = e.line {
        s.push_str(&format!(":{line}"));
    }
    s.push_str(": ");
    if let Some(pool) = &e.pool {
        s.push_str(&format!("[{pool}] "));
    }
    if let Some(key) = &e.key {
        s.push_str(&format!("key '{key}': "));
    }
    s.push_str(&e.message);
    s
}

impl ConfigError {
    fn file_only(file: &Path, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            line: None,
            pool: None,
            key: None,
            message: message.into(),
        }
    }
}

// ---------------------------------------------------------------------------
// Validated types
// ---------------------------------------------------------------------------

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The main configuration file, as given to [`load`].
    pub file: PathBuf,
    /// The `[global]` table.
    pub global: Global,
    /// Every pool: those of the main file first, then those of the included
    /// files (sorted by file name), each file's pools in document order.
    pub pools: Vec<PoolConfig>,
}

/// The `[global]` table of the main file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    /// `pid`: absolute path of the pid file (a relative value is relative to
    /// the main file's directory). Default: none (no pid file written).
    /// php-fpm: `pid`.
    pub pid: Option<PathBuf>,
    /// `error_log`: `"stderr"` (default) or a file path (relative to the main
    /// file's directory). php-fpm: `error_log` (`syslog` is not supported yet).
    pub error_log: LogTarget,
    /// `log_level`: `alert`, `error`, `warning`, `notice` (default), `debug`.
    /// php-fpm: `log_level`.
    pub log_level: LogLevel,
    /// `emergency_restart_threshold` + `emergency_restart_interval`: when
    /// this many children of one pool die unexpectedly within the interval,
    /// that pool's children are all restarted (php-fpm restarts the whole
    /// master; fpmd only the affected pool). `None`: off (either is 0).
    pub emergency_restart: Option<(u32, std::time::Duration)>,
}

/// Where fpmd writes its own log.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LogTarget {
    /// Standard error (`error_log = "stderr"`, the default).
    Stderr,
    /// An absolute file path.
    File(PathBuf),
}

/// fpmd's log level, php-fpm's names. Ordered from least to most verbose:
/// `Alert < Error < Warning < Notice < Debug`, so a message of level `l` is
/// logged when `l <= configured`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Alert,
    Error,
    Warning,
    Notice,
    Debug,
}

impl LogLevel {
    /// The configuration name (`"notice"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Alert => "alert",
            LogLevel::Error => "error",
            LogLevel::Warning => "warning",
            LogLevel::Notice => "notice",
            LogLevel::Debug => "debug",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validated pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// The pool's name: its table name (`[www]` → `www`).
    pub name: String,
    /// The file that defined the pool.
    pub file: PathBuf,
    /// `user`, `group`: who the children run as. php-fpm: `user`, `group`.
    pub user: Credentials,
    /// `php_cgi`: absolute path of the php-cgi binary. Default: `php-cgi`
    /// looked up on `PATH`. (fpmd-specific: php-fpm has no such key.)
    pub php_cgi: PathBuf,
    /// `listen.*`.
    pub listen: Listen,
    /// `chdir`: absolute directory the children start in. Default `/`.
    /// php-fpm: `chdir`.
    pub chdir: PathBuf,
    /// `clear_env`: start children with an empty environment (plus `env`).
    /// Default `true`. php-fpm: `clear_env`.
    pub clear_env: bool,
    /// `env.NAME = "value"`, after `$VAR` expansion. php-fpm: `env[NAME]`.
    pub env: BTreeMap<String, String>,
    /// `php_value.*` and `php_flag.*`, normalized to strings (flags and
    /// booleans to `"1"`/`"0"`); names also set as admin values are left
    /// out (admin values win). php-fpm: `php_value[…]`, `php_flag[…]`.
    pub php_values: BTreeMap<String, String>,
    /// `php_admin_value.*` and `php_admin_flag.*`, normalized likewise.
    /// php-fpm: `php_admin_value[…]`, `php_admin_flag[…]`.
    pub php_admin_values: BTreeMap<String, String>,
    /// `pm.*`.
    pub pm: ProcessManager,
    /// `request_terminate_timeout`: a request running longer is ended by
    /// fpmd (504 to the web server, the child is SIGTERMed then SIGKILLed);
    /// `None` when unset or 0. php-fpm: same.
    pub request_terminate_timeout: Option<std::time::Duration>,
    /// `request_slowlog_timeout`: a request running longer gets one entry
    /// in `slowlog` while it still runs; `None` when unset or 0.
    pub request_slowlog_timeout: Option<std::time::Duration>,
    /// `slowlog`: file of slow-request entries (relative to the pool's
    /// file); `None`: entries go to fpmd's own log.
    pub slowlog: Option<PathBuf>,
    /// `request_queue_timeout` (fpmd only): a request that waited longer
    /// for a child is answered 503 with `Retry-After`; `None`: it waits.
    pub request_queue_timeout: Option<std::time::Duration>,
    /// `catch_workers_output`: what children write to their own stdout and
    /// stderr goes to fpmd's log (`said into stdout` / `said into
    /// stderr`, rate-limited per child). Default `false`, as php-fpm: the
    /// children's output is thrown away, except what a php-cgi writes on
    /// stderr while it starts (see `crate::output`). php-fpm: same.
    pub catch_workers_output: bool,
    /// `decorate_workers_output`: with `catch_workers_output`, a line is
    /// logged as `[pool www] child 1234 said into stderr: "text"`
    /// (`true`, the default) or as the child's text alone (`false`, no
    /// time stamp either). php-fpm: same.
    pub decorate_workers_output: bool,
}

impl PoolConfig {
    /// The php-cgi arguments carrying the pool's ini values:
    /// `["-d", "name=value", …]`, plain values first, then admin values
    /// (admin values win on the same name; see [`PoolConfig::php_values`]).
    pub fn ini_args(&self) -> Vec<String> {
        let mut args =
            Vec::with_capacity(2 * (self.php_values.len() + self.php_admin_values.len()));
        let plain = self
            .php_values
            .iter()
            .filter(|(name, _)| !self.php_admin_values.contains_key(*name));
        for (name, value) in plain.chain(self.php_admin_values.iter()) {
            args.push("-d".to_string());
            args.push(format!("{name}={value}"));
        }
        args
    }
}

/// The identity pool children run as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// User name (the number as a string when the uid has no passwd entry).
    pub user_name: String,
    pub uid: u32,
    pub gid: u32,
    /// Group name (the number as a string when the gid has no group entry).
    pub group_name: String,
    /// Supplementary groups (`getgrouplist(user, gid)`, so `gid` included),
    /// what `initgroups` would set. Only applied when fpmd runs as root.
    pub groups: Vec<u32>,
}

/// The pool's listening socket (`listen.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// `listen.address` (required): unix socket path, `"IP:PORT"`,
    /// `"[IPv6]:PORT"` or a bare port (all IPv4 addresses). php-fpm: `listen`.
    pub address: ListenAddress,
    /// `listen.owner`: uid owning a unix socket. Default: the pool's user for
    /// a unix socket; `None` for TCP unless set (then ignored, as php-fpm).
    pub owner: Option<u32>,
    /// `listen.group`: gid of a unix socket. Default: the pool's group for a
    /// unix socket; `None` for TCP unless set (then ignored).
    pub group: Option<u32>,
    /// `listen.mode`: permission bits of a unix socket, from an octal string
    /// (`"0660"`). Default `0o660`. Ignored for TCP.
    pub mode: u32,
    /// `listen.backlog`: `listen(2)` backlog, ≥ 1. Default 511 (php-fpm's).
    pub backlog: u32,
    /// `listen.allowed_clients`: client addresses allowed on a TCP socket;
    /// `None` (default) allows any. Ignored for unix sockets, as php-fpm.
    pub allowed_clients: Option<Vec<IpAddr>>,
}

/// Where a pool listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenAddress {
    /// An absolute unix socket path.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::Unix(path) => write!(f, "{}", path.display()),
            ListenAddress::Tcp(addr) => write!(f, "{addr}"),
        }
    }
}

/// The process manager (`pm.*`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcessManager {
    /// `pm.mode`: only `"static"` (default) for now. php-fpm: `pm`.
    pub mode: PmMode,
    /// `pm.max_children` (required, ≥ 1): number of children. php-fpm: same.
    pub max_children: u32,
    /// `pm.max_requests`: requests a child serves before it is recycled;
    /// 0 (default) = never. php-fpm: same.
    pub max_requests: u32,
    /// `pm.spawn` (fpmd only): how children are started, see [`Spawn`].
    pub spawn: Spawn,
    /// `pm.max_memory` (fpmd only), in bytes: a child whose resident
    /// memory (RSS) exceeds it after a request is retired before it gets
    /// another one. `None`: no limit. Written as PHP's shorthand
    /// (`"64M"`, `"1G"`, `"512K"`, 1024-based) or a number of bytes.
    pub max_memory: Option<u64>,
}

/// `pm.spawn`: how a pool's children are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Spawn {
    /// One php-cgi parent per pool generation forks the children
    /// (`PHP_FCGI_CHILDREN`): they share its opcache and its pages, as
    /// php-fpm's children share the master's. The default.
    Prefork,
    /// Every child is its own exec'd php-cgi (private opcache, ~2.5× the
    /// memory of a forked child).
    Exec,
}

impl Spawn {
    pub fn as_str(self) -> &'static str {
        match self {
            Spawn::Prefork => "prefork",
            Spawn::Exec => "exec",
        }
    }
}

/// Process manager strategy. `dynamic` and `ondemand` come later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PmMode {
    /// A fixed number of children (`pm.max_children`).
    Static,
    /// php-fpm's `pm = dynamic`: `start_servers` at start; a request that
    /// finds no idle child makes fpmd spawn at once (up to `max_children`,
    /// at most `max_spawn_rate` at a time); idle children are kept between
    /// `min_spare_servers` and `max_spare_servers` (the least recently used
    /// is retired first, one per second).
    Dynamic {
        start_servers: u32,
        min_spare_servers: u32,
        max_spare_servers: u32,
        max_spawn_rate: u32,
    },
    /// php-fpm's `pm = ondemand`: no child at start; spawned per queued
    /// request; a child idle longer than `process_idle_timeout` is retired.
    Ondemand {
        process_idle_timeout: std::time::Duration,
        max_spawn_rate: u32,
    },
}

impl PmMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PmMode::Static => "static",
            PmMode::Dynamic { .. } => "dynamic",
            PmMode::Ondemand { .. } => "ondemand",
        }
    }
}

/// A size in bytes: PHP's ini shorthand (`"64M"`, `"1G"`, `"512K"`,
/// 1024-based, case-insensitive) or a non-negative integer of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    fn parse(s: &str) -> Option<u64> {
        let s = s.trim();
        let (digits, shift) = match s.char_indices().last()? {
            (i, 'k' | 'K') => (&s[..i], 10),
            (i, 'm' | 'M') => (&s[..i], 20),
            (i, 'g' | 'G') => (&s[..i], 30),
            _ => (s, 0),
        };
        digits.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"64M\", \"1G\", \"512K\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ByteSize, E> {
                ByteSize::parse(s).map(ByteSize).ok_or_else(|| {
                    E::custom(format!(
                        "invalid size \"{s}\" (expected e.g. \"64M\", \"1G\", \"512K\")"
                    ))
                })
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ByteSize, E> {
                u64::try_from(n)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size {n}: must not be negative")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration in the configuration: a string (`"30s"`, `"5m"`, `"1h"`,
/// `"250ms"`, anything `humantime` parses) or a non-negative number of
/// seconds (`30`, `0.25`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub std::time::Duration);

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"30s\", \"5m\", \"250ms\" or a number of seconds")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Duration, E> {
                humantime::parse_duration(s.trim())
                    .map(Duration)
                    .map_err(|e| E::custom(format!("invalid duration \"{s}\": {e} (expected e.g. \"30s\", \"5m\", \"1h\", \"250ms\")")))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Duration, E> {
                Ok(Duration(std::time::Duration::from_secs(n)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Duration, E> {
                if n < 0 {
                    return Err(E::custom(format!(
                        "invalid duration {n}: must not be negative"
                    )));
                }
                self.visit_u64(n as u64)
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<Duration, E> {
                if !x.is_finite() || x < 0.0 {
                    return Err(E::custom(format!(
                        "invalid duration {x}: must be a finite, non-negative number of seconds"
                    )));
                }
                std::time::Duration::try_from_secs_f64(x)
                    .map(Duration)
                    .map_err(|e| E::custom(format!("invalid duration {x}: {e}")))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------

/// Load, parse and validate the main configuration file at `path` and every
/// file its `global.include` matches.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let ids = Ids {
        euid: nix::unistd::geteuid().as_raw(),
        egid: nix::unistd::getegid().as_raw(),
    };
    load_as(path, ids)
}

/// `./fpmd.toml` if it exists, else `/etc/fpmd/fpmd.toml` if it exists.
pub fn find_default_config() -> Option<PathBuf> {
    ["fpmd.toml", "/etc/fpmd/fpmd.toml"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

impl Config {
    /// The pool called `name`.
    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// The effective configuration as TOML: every key with its resolved
    /// value or default (what `fpmd -t` prints). Loading the output again
    /// gives the same pools (all in one file).
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "# fpmd effective configuration, loaded from {}\n\n",
            self.file.display()
        ));
        out.push_str("[global]\n");
        match &self.global.pid {
            Some(pid) => out.push_str(&format!("pid = {}\n", toml_str(&pid.to_string_lossy()))),
            None => out.push_str("# pid: not set (no pid file)\n"),
        }
        let error_log = match &self.global.error_log {
            LogTarget::Stderr => "stderr".to_string(),
            LogTarget::File(p) => p.to_string_lossy().into_owned(),
        };
        out.push_str(&format!("error_log = {}\n", toml_str(&error_log)));
        out.push_str(&format!(
            "log_level = {}\n",
            toml_str(self.global.log_level.as_str())
        ));
        match self.global.emergency_restart {
            Some((n, d)) => out.push_str(&format!(
                "emergency_restart_threshold = {n}\nemergency_restart_interval = {}\n",
                toml_str(&humantime::format_duration(d).to_string())
            )),
            None => out.push_str("# emergency_restart_threshold: off\n"),
        }
        for pool in &self.pools {
            out.push('\n');
            pool.write_toml(&mut out);
        }
        out
    }
}

impl PoolConfig {
    fn write_toml(&self, out: &mut String) {
        let c = &self.user;
        out.push_str(&format!(
            "# pool {}, defined in {}\n",
            self.name,
            self.file.display()
        ));
        out.push_str(&format!("[{}]\n", toml_key(&self.name)));
        out.push_str(&format!(
            "user = {} # uid {}\n",
            toml_str(&c.user_name),
            c.uid
        ));
        let groups: Vec<String> = c.groups.iter().map(|g| g.to_string()).collect();
        out.push_str(&format!(
            "group = {} # gid {}, supplementary groups {}\n",
            toml_str(&c.group_name),
            c.gid,
            if groups.is_empty() {
                "none".to_string()
            } else {
                groups.join(",")
            }
        ));
        out.push_str(&format!(
            "php_cgi = {}\n",
            toml_str(&self.php_cgi.to_string_lossy())
        ));
        let l = &self.listen;
        out.push_str(&format!(
            "listen.address = {}\n",
            toml_str(&l.address.to_string())
        ));
        let tcp_note = if matches!(l.address, ListenAddress::Tcp(_)) {
            " # ignored for TCP"
        } else {
            ""
        };
        if let Some(owner) = l.owner {
            out.push_str(&format!("listen.owner = {owner}{tcp_note}\n"));
        }
        if let Some(group) = l.group {
            out.push_str(&format!("listen.group = {group}{tcp_note}\n"));
        }
        out.push_str(&format!("listen.mode = \"{:04o}\"{tcp_note}\n", l.mode));
        out.push_str(&format!("listen.backlog = {}\n", l.backlog));
        match &l.allowed_clients {
            Some(list) => {
                let items: Vec<String> = list.iter().map(|ip| toml_str(&ip.to_string())).collect();
                let note = if matches!(l.address, ListenAddress::Unix(_)) {
                    " # ignored for unix sockets"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "listen.allowed_clients = [{}]{note}\n",
                    items.join(", ")
                ));
            }
            None => out.push_str("# listen.allowed_clients: any\n"),
        }
        out.push_str(&format!(
            "chdir = {}\n",
            toml_str(&self.chdir.to_string_lossy())
        ));
        out.push_str(&format!("clear_env = {}\n", self.clear_env));
        out.push_str(&format!("pm.mode = {}\n", toml_str(self.pm.mode.as_str())));
        match self.pm.mode {
            PmMode::Static => {}
            PmMode::Dynamic {
                start_servers,
                min_spare_servers,
                max_spare_servers,
                max_spawn_rate,
            } => {
                out.push_str(&format!("pm.start_servers = {start_servers}\npm.min_spare_servers = {min_spare_servers}\n"));
                out.push_str(&format!("pm.max_spare_servers = {max_spare_servers}\npm.max_spawn_rate = {max_spawn_rate}\n"));
            }
            PmMode::Ondemand {
                process_idle_timeout,
                max_spawn_rate,
            } => {
                out.push_str(&format!(
                    "pm.process_idle_timeout = {}\n",
                    toml_str(&humantime::format_duration(process_idle_timeout).to_string())
                ));
                out.push_str(&format!("pm.max_spawn_rate = {max_spawn_rate}\n"));
            }
        }
        out.push_str(&format!("pm.max_children = {}\n", self.pm.max_children));
        out.push_str(&format!("pm.max_requests = {}\n", self.pm.max_requests));
        out.push_str(&format!(
            "pm.spawn = {}\n",
            toml_str(self.pm.spawn.as_str())
        ));
        match self.pm.max_memory {
            Some(n) => out.push_str(&format!("pm.max_memory = {n} # bytes\n")),
            None => out.push_str("# pm.max_memory: no limit\n"),
        }
        let dur = |name: &str, d: Option<std::time::Duration>, out: &mut String| match d {
            Some(d) => out.push_str(&format!(
                "{name} = {}\n",
                toml_str(&humantime::format_duration(d).to_string())
            )),
            None => out.push_str(&format!("# {name}: off\n")),
        };
        dur(
            "request_terminate_timeout",
            self.request_terminate_timeout,
            out,
        );
        dur("request_slowlog_timeout", self.request_slowlog_timeout, out);
        dur("request_queue_timeout", self.request_queue_timeout, out);
        out.push_str(&format!(
            "catch_workers_output = {}\n",
            self.catch_workers_output
        ));
        out.push_str(&format!(
            "decorate_workers_output = {}\n",
            self.decorate_workers_output
        ));
        match &self.slowlog {
            Some(p) => out.push_str(&format!(
                "slowlog = {}\n",
                toml_str(&p.display().to_string())
            )),
            None => out.push_str("# slowlog: entries go to fpmd's log\n"),
        }
        for (name, value) in &self.env {
            out.push_str(&format!("env.{} = {}\n", toml_key(name), toml_str(value)));
        }
        for (name, value) in &self.php_values {
            out.push_str(&format!(
                "php_value.{} = {}\n",
                toml_key(name),
                toml_str(value)
            ));
        }
        for (name, value) in &self.php_admin_values {
            out.push_str(&format!(
                "php_admin_value.{} = {}\n",
                toml_key(name),
                toml_str(value)
            ));
        }
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn toml_key(s: &str) -> String {
    toml_edit::Key::new(s).to_string()
}

// ---------------------------------------------------------------------------
// Known keys
// ---------------------------------------------------------------------------

const GLOBAL_KEYS: &[&str] = &[
    "pid",
    "error_log",
    "log_level",
    "include",
    "emergency_restart_threshold",
    "emergency_restart_interval",
];

/// Keys design.md lists that this version parses (so they type-check and are
/// not "unknown") but rejects when set.
const UNSUPPORTED_POOL_KEYS: &[&str] = &[
    "chroot",
    "pm.status_path",
    "ping.path",
    "ping.response",
    "access.log",
    "access.format",
    "security.limit_extensions",
];

const SUPPORTED_POOL_KEYS: &[&str] = &[
    "user",
    "group",
    "php_cgi",
    "listen.address",
    "listen.owner",
    "listen.group",
    "listen.mode",
    "listen.backlog",
    "listen.allowed_clients",
    "chdir",
    "clear_env",
    "pm.mode",
    "pm.max_children",
    "pm.max_requests",
    "pm.spawn",
    "pm.max_memory",
    "pm.start_servers",
    "pm.min_spare_servers",
    "pm.max_spare_servers",
    "pm.max_spawn_rate",
    "pm.process_idle_timeout",
    "request_terminate_timeout",
    "request_slowlog_timeout",
    "slowlog",
    "request_queue_timeout",
    "catch_workers_output",
    "decorate_workers_output",
];

/// Pool tables whose keys are free (`env.NAME`, `php_value.NAME`, …).
const POOL_MAPS: &[&str] = &[
    "env",
    "php_value",
    "php_flag",
    "php_admin_value",
    "php_admin_flag",
];

fn is_pool_leaf(key: &str) -> bool {
    SUPPORTED_POOL_KEYS.contains(&key) || UNSUPPORTED_POOL_KEYS.contains(&key)
}

fn is_pool_prefix(key: &str) -> bool {
    SUPPORTED_POOL_KEYS
        .iter()
        .chain(UNSUPPORTED_POOL_KEYS)
        .any(|k| k.len() > key.len() && k.starts_with(key) && k.as_bytes()[key.len()] == b'.')
}

/// The closest candidate to `unknown`, when it is close enough.
fn closest<'a>(unknown: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = unknown.to_ascii_lowercase();
    let mut best: Option<(&str, f64)> = None;
    for cand in candidates {
        let score = strsim::normalized_damerau_levenshtein(&lower, cand);
        if !matches!(best, Some((_, s)) if s >= score) {
            best = Some((cand, score));
        }
    }
    // Jaro-Winkler over-rewards the shared namespace (`listen.acl_users` vs
    // `listen.address`); an edit distance of at most ~30% of the length does not.
    best.filter(|&(_, s)| s >= 0.7).map(|(c, _)| c)
}

fn suggest_pool_key(unknown: &str) -> Option<String> {
    match unknown {
        "listen" => return Some("listen.address".into()),
        "pm" => return Some("pm.mode".into()),
        _ => {}
    }
    let mut candidates: Vec<String> = SUPPORTED_POOL_KEYS
        .iter()
        .chain(UNSUPPORTED_POOL_KEYS)
        .map(|s| s.to_string())
        .collect();
    if let Some((_, rest)) = unknown.split_once('.') {
        candidates.extend(POOL_MAPS.iter().map(|m| format!("{m}.{rest}")));
    }
    closest(unknown, candidates.iter().map(|s| s.as_str())).map(str::to_string)
}

/// Joins key segments into a dotted key, quoting segments that are not bare.
fn dotted(segs: &[String]) -> String {
    segs.iter()
        .map(|s| toml_key(s))
        .collect::<Vec<_>>()
        .join(".")
}

// ---------------------------------------------------------------------------
// Source files
// ---------------------------------------------------------------------------

struct SourceFile {
    /// The path as given or globbed (used in messages).
    path: PathBuf,
    /// Absolute directory of the file (relative paths are resolved against it).
    dir: PathBuf,
    doc: ImDocument<String>,
}

impl SourceFile {
    fn read(path: &Path) -> Result<SourceFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::file_only(path, format!("cannot read configuration file: {e}"))
        })?;
        let parent = path.parent().unwrap_or(Path::new(""));
        let dir = absolutize(parent)
            .map_err(|e| ConfigError::file_only(path, format!("cannot resolve directory: {e}")))?;
        let doc = ImDocument::parse(text.clone()).map_err(|e| {
            let (line, col) = match e.span() {
                Some(span) => {
                    let (l, c) = line_col(&text, span.start);
                    (Some(l), Some(c))
                }
                None => (None, None),
            };
            let msg = e.message().trim().replace('\n', "; ");
            ConfigError {
                file: path.to_path_buf(),
                line,
                pool: None,
                key: None,
                message: match col {
                    Some(c) => format!("syntax error at column {c}: {msg}{}", php_fpm_hint(&text)),
                    None => format!("syntax error: {msg}{}", php_fpm_hint(&text)),
                },
            }
        })?;
        Ok(SourceFile {
            path: path.to_path_buf(),
            dir,
            doc,
        })
    }

    fn text(&self) -> &str {
        self.doc.raw()
    }

    fn line_at(&self, offset: usize) -> usize {
        line_col(self.text(), offset).0
    }

    /// Line of the key at `segs` (from the document root), if present.
    fn find_line(&self, segs: &[&str]) -> Option<usize> {
        let mut table: &dyn TableLike = self.doc.as_table();
        for (i, seg) in segs.iter().enumerate() {
            let (key, item) = table.get_key_value(seg)?;
            if i + 1 == segs.len() {
                return key
                    .span()
                    .or_else(|| item.span())
                    .map(|s| self.line_at(s.start));
            }
            table = item.as_table_like()?;
        }
        None
    }

    fn resolve(&self, p: &str) -> PathBuf {
        normalize(&self.dir.join(p))
    }
}

/// For a file that does not parse: the first line written in php-fpm's ini
/// syntax rather than fpmd's TOML, with how to write it (empty if none).
fn php_fpm_hint(text: &str) -> String {
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let key = t.split(['=', '[', ' ', '\t']).next().unwrap_or("");
        let hint = if t.starts_with(';') {
            Some("comments start with '#' in TOML, not ';'".to_string())
        } else if (key == "pm" || key == "listen") && t[key.len()..].trim_start().starts_with('=') {
            let new = if key == "pm" {
                "pm.mode"
            } else {
                "listen.address"
            };
            Some(format!("php-fpm's bare '{key}' is written '{new}' in fpmd"))
        } else if [
            "php_value",
            "php_flag",
            "php_admin_value",
            "php_admin_flag",
            "env",
        ]
        .contains(&key)
            && t[key.len()..].starts_with('[')
        {
            Some(format!("php-fpm's '{key}[name]' is written '{key}.name' in fpmd (quote a name with dots: {key}.\"session.save_path\")"))
        } else {
            None
        };
        if let Some(h) = hint {
            return format!(
                " (line {} looks like php-fpm syntax: {h}; values are TOML: strings in quotes)",
                i + 1
            );
        }
    }
    String::new()
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    (line, offset - line_start + 1)
}

fn absolutize(p: &Path) -> std::io::Result<PathBuf> {
    if p.is_absolute() {
        Ok(normalize(p))
    } else {
        Ok(normalize(&std::env::current_dir()?.join(p)))
    }
}

/// Drops `.` components (lexically; `..` is kept, symlinks are not resolved).
fn normalize(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

// ---------------------------------------------------------------------------
// Structure check on the document: [global] placement, pool tables, pool
// names, unknown keys (with the line of the key and a suggestion).
// ---------------------------------------------------------------------------

/// Checks the shape of a file; returns the names of the pools it defines.
fn check_structure(src: &SourceFile, is_main: bool) -> Result<Vec<String>, ConfigError> {
    let root = src.doc.as_table();
    let mut pools = Vec::new();
    for (name, item) in root.iter() {
        let line = src.find_line(&[name]);
        let err = |pool: Option<&str>, key: Option<String>, message: String| ConfigError {
            file: src.path.clone(),
            line,
            pool: pool.map(str::to_string),
            key,
            message,
        };
        if name == "global" {
            if !is_main {
                return Err(err(
                    None,
                    None,
                    "[global] is only allowed in the main configuration file".into(),
                ));
            }
            let Some(table) = item.as_table_like() else {
                return Err(err(
                    None,
                    Some("global".into()),
                    "global must be a table: [global]".into(),
                ));
            };
            for (k, sub) in table.iter() {
                if GLOBAL_KEYS.contains(&k) {
                    continue;
                }
                let (segs, key_line) =
                    first_leaf(src, vec!["global".to_string(), k.to_string()], sub);
                let candidates: Vec<String> =
                    GLOBAL_KEYS.iter().map(|g| format!("global.{g}")).collect();
                let full = dotted(&segs);
                let message = match closest(&full, candidates.iter().map(|s| s.as_str())) {
                    Some(s) => format!("unknown key (did you mean '{s}'?)"),
                    None => format!("unknown key (global keys are: {})", GLOBAL_KEYS.join(", ")),
                };
                return Err(ConfigError {
                    file: src.path.clone(),
                    line: key_line,
                    pool: None,
                    key: Some(full),
                    message,
                });
            }
            continue;
        }
        match item {
            Item::ArrayOfTables(_) => {
                return Err(err(
                    Some(name),
                    None,
                    format!(
                        "a pool must be a table [{0}], not an array of tables [[{0}]]",
                        toml_key(name)
                    ),
                ))
            }
            Item::Table(_) | Item::Value(toml_edit::Value::InlineTable(_)) => {}
            _ => {
                let message = if is_main && GLOBAL_KEYS.contains(&name) {
                    format!("unknown top-level key (did you mean 'global.{name}'? global keys go in the [global] table)")
                } else {
                    "a top-level key must be inside a pool table such as [www] (or [global] in the main file)".to_string()
                };
                return Err(err(None, Some(name.to_string()), message));
            }
        }
        validate_pool_name(name).map_err(|m| err(None, None, m))?;
        let table = item.as_table_like().expect("checked above");
        check_pool_keys(src, name, table, &mut Vec::new())?;
        pools.push(name.to_string());
    }
    Ok(pools)
}

fn validate_pool_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a pool name must not be empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "invalid pool name {}: character {c:?} is not allowed (use letters, digits, '.', '_' and '-')",
            toml_key(name)
        ));
    }
    Ok(())
}

/// Follows the first entry of nested tables down to a leaf; returns its full
/// key segments and the line of its key.
fn first_leaf(
    src: &SourceFile,
    mut segs: Vec<String>,
    mut item: &Item,
) -> (Vec<String>, Option<usize>) {
    while let Some((k, sub)) = item.as_table_like().and_then(|t| t.iter().next()) {
        segs.push(k.to_string());
        item = sub;
    }
    let refs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
    let line = src.find_line(&refs);
    (segs, line)
}

fn check_pool_keys(
    src: &SourceFile,
    pool: &str,
    table: &dyn TableLike,
    prefix: &mut Vec<String>,
) -> Result<(), ConfigError> {
    for (k, item) in table.iter() {
        prefix.push(k.to_string());
        let key = prefix.join(".");
        let known = is_pool_leaf(&key) || (prefix.len() == 1 && POOL_MAPS.contains(&k));
        if !known {
            if is_pool_prefix(&key) && item.is_table_like() {
                check_pool_keys(src, pool, item.as_table_like().expect("table-like"), prefix)?;
            } else {
                let mut path = vec![pool.to_string()];
                path.extend(prefix.iter().cloned());
                let (segs, line) = first_leaf(src, path, item);
                let rel = dotted(&segs[1..]);
                let looks_like_pool = prefix.len() == 1
                    && item.as_table_like().is_some_and(|t| {
                        t.iter().any(|(k2, _)| {
                            is_pool_leaf(k2) || is_pool_prefix(k2) || POOL_MAPS.contains(&k2)
                        })
                    });
                let message = if looks_like_pool {
                    format!(
                        "unknown key (a pool name that contains a dot must be quoted: [\"{pool}.{k}\"])"
                    )
                } else {
                    match suggest_pool_key(&segs[1..].join(".")) {
                        Some(s) => format!("unknown key (did you mean '{s}'?)"),
                        None => "unknown key".to_string(),
                    }
                };
                return Err(ConfigError {
                    file: src.path.clone(),
                    line,
                    pool: Some(pool.to_string()),
                    key: Some(rel),
                    message,
                });
            }
        }
        prefix.pop();
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Raw (deserialized, unvalidated) structures
// ---------------------------------------------------------------------------

struct RawFile {
    global: Option<RawGlobal>,
    pools: Vec<(String, RawPool)>,
}

impl<'de> Deserialize<'de> for RawFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawFile;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a [global] table and pool tables")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawFile, A::Error> {
                let mut file = RawFile {
                    global: None,
                    pools: Vec::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    if key == "global" {
                        file.global = Some(map.next_value()?);
                    } else {
                        let pool: RawPool = map.next_value()?;
                        file.pools.push((key, pool));
                    }
                }
                Ok(file)
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawGlobal {
    pid: Option<String>,
    error_log: Option<String>,
    log_level: Option<LogLevel>,
    include: Option<StrList>,
    emergency_restart_threshold: Option<u32>,
    emergency_restart_interval: Option<Duration>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPool {
    user: Option<IdOrName>,
    group: Option<IdOrName>,
    php_cgi: Option<String>,
    #[serde(default)]
    listen: RawListen,
    chdir: Option<String>,
    clear_env: Option<bool>,
    env: Option<BTreeMap<String, EnvValue>>,
    php_value: Option<IniTable>,
    php_flag: Option<IniTable>,
    php_admin_value: Option<IniTable>,
    php_admin_flag: Option<IniTable>,
    #[serde(default)]
    pm: RawPm,
    request_terminate_timeout: Option<Duration>,
    request_slowlog_timeout: Option<Duration>,
    slowlog: Option<String>,
    request_queue_timeout: Option<Duration>,
    catch_workers_output: Option<bool>,
    decorate_workers_output: Option<bool>,
    // Known but not supported yet:
    chroot: Option<String>,
    #[serde(default)]
    ping: RawPing,
    #[serde(default)]
    access: RawAccess,
    #[serde(default)]
    security: RawSecurity,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawListen {
    address: Option<RawAddress>,
    owner: Option<IdOrName>,
    group: Option<IdOrName>,
    mode: Option<Mode>,
    backlog: Option<u32>,
    allowed_clients: Option<AllowedClients>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPm {
    mode: Option<RawPmMode>,
    max_children: Option<u32>,
    max_requests: Option<u32>,
    spawn: Option<Spawn>,
    max_memory: Option<ByteSize>,
    start_servers: Option<u32>,
    min_spare_servers: Option<u32>,
    max_spare_servers: Option<u32>,
    max_spawn_rate: Option<u32>,
    process_idle_timeout: Option<Duration>,
    status_path: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPing {
    path: Option<String>,
    response: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAccess {
    log: Option<String>,
    format: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSecurity {
    limit_extensions: Option<StrList>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RawPmMode {
    Static,
    Dynamic,
    Ondemand,
}

/// A string, or an array of strings.
struct StrList(Vec<String>);

impl<'de> Deserialize<'de> for StrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<StrList, E> {
                Ok(StrList(vec![s.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StrList, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    v.push(s);
                }
                Ok(StrList(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A user or group: a name, or a numeric id (as an integer or a string of digits).
#[derive(Debug, Clone, PartialEq, Eq)]
enum IdOrName {
    Id(u32),
    Name(String),
}

impl fmt::Display for IdOrName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdOrName::Id(id) => write!(f, "{id}"),
            IdOrName::Name(n) => f.write_str(n),
        }
    }
}

impl<'de> Deserialize<'de> for IdOrName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IdOrName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name or a numeric id")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<IdOrName, E> {
                if s.is_empty() {
                    return Err(E::custom("empty name"));
                }
                if s.bytes().all(|b| b.is_ascii_digit()) {
                    return s
                        .parse()
                        .map(IdOrName::Id)
                        .map_err(|_| E::custom(format!("id {s} is out of range")));
                }
                Ok(IdOrName::Name(s.to_string()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<IdOrName, E> {
                u32::try_from(n)
                    .map(IdOrName::Id)
                    .map_err(|_| E::custom(format!("id {n} is out of range")))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<IdOrName, E> {
                u32::try_from(n)
                    .map(IdOrName::Id)
                    .map_err(|_| E::custom(format!("id {n} is out of range")))
            }
        }
        d.deserialize_any(V)
    }
}

/// `listen.address` as written: a unix path (unresolved) or a TCP address.
enum RawAddress {
    Unix(String),
    Tcp(SocketAddr),
}

fn parse_port(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("invalid port '{s}' (expected 1-65535)")),
        Ok(p) => Ok(p),
    }
}

fn parse_listen_address(s: &str) -> Result<RawAddress, String> {
    const FORMS: &str =
        "expected a unix socket path (containing '/'), \"IP:PORT\", \"[IPv6]:PORT\" or a port";
    if s.is_empty() {
        return Err(format!("empty listen address ({FORMS})"));
    }
    if s.contains('/') {
        return Ok(RawAddress::Unix(s.to_string()));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let port = parse_port(s)?;
        return Ok(RawAddress::Tcp(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port,
        )));
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return Err(format!(
                "invalid listen address '{s}': port 0 is not allowed"
            ));
        }
        return Ok(RawAddress::Tcp(addr));
    }
    if let Some((host, port)) = s.rsplit_once(':') {
        let ip = match host {
            "*" => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            "localhost" => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            _ => None,
        };
        if let Some(ip) = ip {
            let port =
                parse_port(port).map_err(|e| format!("invalid listen address '{s}': {e}"))?;
            return Ok(RawAddress::Tcp(SocketAddr::new(ip, port)));
        }
    }
    Err(format!("invalid listen address '{s}' ({FORMS})"))
}

impl<'de> Deserialize<'de> for RawAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawAddress;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a unix socket path, \"IP:PORT\", \"[IPv6]:PORT\" or a port number")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawAddress, E> {
                parse_listen_address(s).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<RawAddress, E> {
                self.visit_str(&n.to_string())
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<RawAddress, E> {
                self.visit_str(&n.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

/// `listen.mode`: an octal string ≤ 0777.
struct Mode(u32);

fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(format!(
            "invalid mode \"{s}\": expected an octal string such as \"0660\""
        ));
    }
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("invalid mode \"{s}\": must be at most \"0777\"")),
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Mode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an octal mode string such as \"0660\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Mode, E> {
                parse_mode(s).map(Mode).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// `listen.allowed_clients`: an array of IP strings or one comma-separated string.
struct AllowedClients(Vec<IpAddr>);

fn parse_ip<E: de::Error>(s: &str) -> Result<IpAddr, E> {
    s.trim()
        .parse()
        .map_err(|_| E::custom(format!("invalid IP address '{}'", s.trim())))
}

impl<'de> Deserialize<'de> for AllowedClients {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AllowedClients;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of IP addresses or a comma-separated string of them")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<AllowedClients, E> {
                s.split(',')
                    .filter(|p| !p.trim().is_empty())
                    .map(parse_ip)
                    .collect::<Result<_, _>>()
                    .map(AllowedClients)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AllowedClients, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    v.push(parse_ip(&s)?);
                }
                Ok(AllowedClients(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// An `env.*` value: a string (or a number, taken as written).
struct EnvValue(String);

impl<'de> Deserialize<'de> for EnvValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = EnvValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<EnvValue, E> {
                Ok(EnvValue(s.to_string()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<EnvValue, E> {
                Ok(EnvValue(n.to_string()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<EnvValue, E> {
                Ok(EnvValue(n.to_string()))
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<EnvValue, E> {
                Ok(EnvValue(x.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A scalar ini value as written in TOML.
#[derive(Debug, Clone, PartialEq)]
enum IniScalar {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

enum IniNode {
    Scalar(IniScalar),
    Table(Vec<(String, IniNode)>),
}

/// TOML's private datetime wrapper key (toml 0.8 deserializes a datetime
/// as a one-entry map with this key).
const TOML_DATETIME_KEY: &str = "$__toml_private_datetime";

impl<'de> Deserialize<'de> for IniNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IniNode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(IniScalar::Str(s.to_string())))
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(IniScalar::Bool(b)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(IniScalar::Int(n)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(match i64::try_from(n) {
                    Ok(i) => IniScalar::Int(i),
                    Err(_) => IniScalar::Str(n.to_string()),
                }))
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(IniScalar::Float(x)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IniNode, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == TOML_DATETIME_KEY {
                        let s: String = map.next_value()?;
                        return Ok(IniNode::Scalar(IniScalar::Str(s)));
                    }
                    entries.push((key, map.next_value()?));
                }
                Ok(IniNode::Table(entries))
            }
        }
        d.deserialize_any(V)
    }
}

/// A `php_*` table, flattened: (key segments, value); the ini name is the
/// segments joined with dots.
struct IniTable(Vec<(Vec<String>, IniScalar)>);

impl<'de> Deserialize<'de> for IniTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        fn flatten(
            prefix: &mut Vec<String>,
            node: IniNode,
            out: &mut Vec<(Vec<String>, IniScalar)>,
        ) {
            match node {
                IniNode::Scalar(v) => out.push((prefix.clone(), v)),
                IniNode::Table(entries) => {
                    for (k, sub) in entries {
                        prefix.push(k);
                        flatten(prefix, sub, out);
                        prefix.pop();
                    }
                }
            }
        }
        let mut entries = Vec::new();
        match IniNode::deserialize(d)? {
            IniNode::Scalar(_) => {
                return Err(de::Error::custom(
                    "expected a table of ini settings, e.g. php_value.memory_limit = \"128M\"",
                ))
            }
            node => flatten(&mut Vec::new(), node, &mut entries),
        }
        Ok(IniTable(entries))
    }
}

// ---------------------------------------------------------------------------
// Loading and validation
// ---------------------------------------------------------------------------

/// The effective and real ids of the fpmd process (parameters so that tests
/// can exercise the non-root rules).
#[derive(Debug, Clone, Copy)]
struct Ids {
    euid: u32,
    egid: u32,
}

fn load_as(path: &Path, ids: Ids) -> Result<Config, ConfigError> {
    let main = SourceFile::read(path)?;
    check_structure(&main, true)?;
    let raw_main = deserialize_file(&main)?;
    let (global, includes) = validate_global(&main, raw_main.global.unwrap_or_default())?;

    let mut files = vec![(main, raw_main.pools)];
    for inc in find_includes(&files[0].0, &includes)? {
        let src = SourceFile::read(&inc)?;
        check_structure(&src, false)?;
        let raw = deserialize_file(&src)?;
        files.push((src, raw.pools));
    }

    // Duplicate pools, in any files.
    let mut seen: HashMap<String, (PathBuf, Option<usize>)> = HashMap::new();
    for (src, pools) in &files {
        for (name, _) in pools {
            let line = src.find_line(&[name]);
            if let Some((first_file, first_line)) = seen.get(name) {
                let at = match first_line {
                    Some(l) => format!("{}:{l}", first_file.display()),
                    None => first_file.display().to_string(),
                };
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

    let mut pools = Vec::new();
    for (src, raw_pools) in files.iter_mut() {
        for (name, raw) in std::mem::take(raw_pools) {
            pools.push(validate_pool(src, &name, raw, ids)?);
        }
    }
    Ok(Config {
        file: path.to_path_buf(),
        global,
        pools,
    })
}

fn deserialize_file(src: &SourceFile) -> Result<RawFile, ConfigError> {
    let de = toml::Deserializer::new(src.text());
    serde_path_to_error::deserialize::<_, RawFile>(de).map_err(|e| {
        let mut segs: Vec<String> = Vec::new();
        for seg in e.path().iter() {
            if let serde_path_to_error::Segment::Map { key } = seg {
                segs.push(key.clone());
            }
        }
        let inner = e.into_inner();
        let refs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
        let line = inner
            .span()
            .map(|s| src.line_at(s.start))
            .or_else(|| src.find_line(&refs))
            .or_else(|| refs.first().and_then(|f| src.find_line(&[f])));
        let message = inner.message().trim().replace('\n', "; ");
        let (pool, key) = match segs.split_first() {
            Some((first, rest)) if first == "global" => {
                (None, Some(dotted(&segs)).filter(|_| !rest.is_empty()))
            }
            Some((first, rest)) => (
                Some(first.clone()),
                Some(dotted(rest)).filter(|_| !rest.is_empty()),
            ),
            None => (None, None),
        };
        ConfigError {
            file: src.path.clone(),
            line,
            pool,
            key,
            message,
        }
    })
}

fn validate_global(src: &SourceFile, raw: RawGlobal) -> Result<(Global, Vec<String>), ConfigError> {
    let err = |key: &str, message: String| ConfigError {
        file: src.path.clone(),
        line: src.find_line(&["global", key]),
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
        Some(p) => LogTarget::File(src.resolve(p)),
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
    Ok((
        Global {
            pid,
            error_log,
            log_level,
            emergency_restart,
        },
        includes,
    ))
}

/// The files matched by the include patterns, relative to the main file's
/// directory, sorted by name within each pattern, without duplicates and
/// without the main file itself.
fn find_includes(main: &SourceFile, patterns: &[String]) -> Result<Vec<PathBuf>, ConfigError> {
    let err = |message: String| ConfigError {
        file: main.path.clone(),
        line: main.find_line(&["global", "include"]),
        pool: None,
        key: Some("global.include".into()),
        message,
    };
    let main_canon = std::fs::canonicalize(&main.path).ok();
    let display_dir = main.path.parent().unwrap_or(Path::new(""));
    let mut out: Vec<PathBuf> = Vec::new();
    let mut canon_seen = Vec::new();
    for pat in patterns {
        let full = if Path::new(pat).is_absolute() || display_dir.as_os_str().is_empty() {
            pat.clone()
        } else {
            let dir = glob::Pattern::escape(&display_dir.to_string_lossy());
            format!("{}/{pat}", dir.trim_end_matches('/'))
        };
        let paths =
            glob::glob(&full).map_err(|e| err(format!("invalid glob pattern \"{pat}\": {e}")))?;
        let mut matched = Vec::new();
        for entry in paths {
            let p = entry
                .map_err(|e| err(format!("cannot read {}: {}", e.path().display(), e.error())))?;
            if p.is_file() {
                matched.push(p);
            }
        }
        matched.sort();
        for p in matched {
            let canon = std::fs::canonicalize(&p).ok();
            if canon.is_some() && (canon == main_canon || canon_seen.contains(&canon)) {
                continue;
            }
            canon_seen.push(canon);
            out.push(p);
        }
    }
    Ok(out)
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

fn validate_pool(
    src: &SourceFile,
    name: &str,
    raw: RawPool,
    ids: Ids,
) -> Result<PoolConfig, ConfigError> {
    let ctx = PoolCtx { src, name };

    // Keys that are known but not implemented yet.
    let unsupported: [(&str, bool); 7] = [
        ("chroot", raw.chroot.is_some()),
        ("pm.status_path", raw.pm.status_path.is_some()),
        ("ping.path", raw.ping.path.is_some()),
        ("ping.response", raw.ping.response.is_some()),
        ("access.log", raw.access.log.is_some()),
        ("access.format", raw.access.format.is_some()),
        (
            "security.limit_extensions",
            raw.security.limit_extensions.is_some(),
        ),
    ];
    debug_assert_eq!(unsupported.len(), UNSUPPORTED_POOL_KEYS.len());
    if let Some((key, _)) = unsupported.iter().find(|(_, set)| *set) {
        let segs: Vec<&str> = key.split('.').collect();
        return Err(ctx.err(&segs, format!("{key} is not supported yet")));
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
    let nonzero = |d: Option<Duration>| d.map(|d| d.0).filter(|d| !d.is_zero());
    let request_terminate_timeout = nonzero(raw.request_terminate_timeout);
    let request_slowlog_timeout = nonzero(raw.request_slowlog_timeout);
    let request_queue_timeout = nonzero(raw.request_queue_timeout);
    let slowlog = raw.slowlog.as_deref().map(|p| src.resolve(p));

    // user, group
    let user = resolve_credentials(raw.user.as_ref(), raw.group.as_ref(), ids)
        .map_err(|(key, msg)| ctx.err(&[key], msg))?;

    // php_cgi
    let path_env = std::env::var_os("PATH");
    let php_cgi = resolve_php_cgi(raw.php_cgi.as_deref(), &src.dir, path_env)
        .map_err(|m| ctx.err(&["php_cgi"], m))?;

    // listen.*
    let l = raw.listen;
    let address = match l.address {
        None => return Err(ctx.err(&["listen", "address"], "required key is missing")),
        Some(RawAddress::Tcp(addr)) => ListenAddress::Tcp(addr),
        Some(RawAddress::Unix(p)) => {
            let path = src.resolve(&p);
            // sockaddr_un.sun_path is 108 bytes, including the final NUL.
            let len = path.as_os_str().len();
            if len > 107 {
                return Err(ctx.err(
                    &["listen", "address"],
                    format!(
                        "unix socket path is too long ({len} bytes, at most 107): {}",
                        path.display()
                    ),
                ));
            }
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
    let listen = Listen {
        address,
        owner,
        group,
        mode: l.mode.map_or(0o660, |m| m.0),
        backlog,
        allowed_clients,
    };

    // chdir
    let chdir = PathBuf::from(raw.chdir.as_deref().unwrap_or("/"));
    if !chdir.is_absolute() {
        return Err(ctx.err(
            &["chdir"],
            format!("chdir must be an absolute path: {}", chdir.display()),
        ));
    }
    if !chdir.is_dir() {
        return Err(ctx.err(
            &["chdir"],
            format!(
                "chdir directory does not exist or is not a directory: {}",
                chdir.display()
            ),
        ));
    }
    let chdir = normalize(&chdir);

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
    let php_values = php_values
        .into_iter()
        .filter(|(k, _)| !php_admin_values.contains_key(k))
        .collect();

    Ok(PoolConfig {
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
        request_queue_timeout,
        catch_workers_output: raw.catch_workers_output.unwrap_or(false),
        decorate_workers_output: raw.decorate_workers_output.unwrap_or(true),
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

fn lookup_user(u: &IdOrName) -> Result<(Option<User>, u32), String> {
    match u {
        IdOrName::Name(n) => match User::from_name(n) {
            Ok(Some(user)) => {
                let uid = user.uid.as_raw();
                Ok((Some(user), uid))
            }
            Ok(None) => Err(format!("unknown user '{n}'")),
            Err(e) => Err(format!("cannot look up user '{n}': {e}")),
        },
        IdOrName::Id(id) => Ok((User::from_uid(Uid::from_raw(*id)).ok().flatten(), *id)),
    }
}

fn lookup_group(g: &IdOrName) -> Result<(String, u32), String> {
    match g {
        IdOrName::Name(n) => match Group::from_name(n) {
            Ok(Some(group)) => Ok((group.name, group.gid.as_raw())),
            Ok(None) => Err(format!("unknown group '{n}'")),
            Err(e) => Err(format!("cannot look up group '{n}': {e}")),
        },
        IdOrName::Id(id) => Ok((group_name(*id), *id)),
    }
}

fn group_name(gid: u32) -> String {
    match Group::from_gid(Gid::from_raw(gid)) {
        Ok(Some(g)) => g.name,
        _ => gid.to_string(),
    }
}

fn resolve_uid(u: &IdOrName) -> Result<u32, String> {
    lookup_user(u).map(|(_, uid)| uid)
}

fn resolve_gid(g: &IdOrName) -> Result<u32, String> {
    lookup_group(g).map(|(_, gid)| gid)
}

/// The children's `user` or `group` (`key`, with `label` uid/gid): never id
/// 0 (as php-fpm without -R), and only fpmd's own id when fpmd is not root
/// (`hint` says what to do then).
fn check_pool_id(
    key: &'static str,
    label: &str,
    name: &str,
    id: u32,
    root: bool,
    own: u32,
    hint: &str,
) -> Result<(), (&'static str, String)> {
    if root && id == 0 {
        return Err((
            key,
            format!(
                "{key} '{name}' ({label} 0) is not allowed: pool children must not run as root"
            ),
        ));
    }
    if !root && id != own {
        return Err((
            key,
            format!("cannot run the pool as {key} '{name}' ({label} {id}): fpmd is not running as root (it runs as {label} {own}); {hint}"),
        ));
    }
    Ok(())
}

/// Resolves `user`/`group` into credentials; on error returns the key
/// (`"user"` or `"group"`) and the message.
fn resolve_credentials(
    user: Option<&IdOrName>,
    group: Option<&IdOrName>,
    ids: Ids,
) -> Result<Credentials, (&'static str, String)> {
    let root = ids.euid == 0;
    let (entry, uid) = match user {
        Some(u) => lookup_user(u).map_err(|m| ("user", m))?,
        None if root => return Err(("user", "user is required when fpmd runs as root".into())),
        None => (
            User::from_uid(Uid::from_raw(ids.euid)).ok().flatten(),
            ids.euid,
        ),
    };
    let user_name = entry
        .as_ref()
        .map_or_else(|| uid.to_string(), |u| u.name.clone());
    check_pool_id(
        "user",
        "uid",
        &user_name,
        uid,
        root,
        ids.euid,
        "remove 'user' to run the pool as fpmd's own user",
    )?;
    let (group_name, gid) = match group {
        Some(g) => lookup_group(g).map_err(|m| ("group", m))?,
        None => {
            let gid = if root {
                entry.as_ref().map(|u| u.gid.as_raw())
            } else {
                Some(ids.egid)
            };
            match gid {
                Some(gid) => (self::group_name(gid), gid),
                None => {
                    return Err((
                        "user",
                        format!("user {uid} has no passwd entry, so 'group' must be set"),
                    ))
                }
            }
        }
    };
    check_pool_id(
        "group",
        "gid",
        &group_name,
        gid,
        root,
        ids.egid,
        "remove 'group'",
    )?;
    let mut groups: Vec<u32> = match entry
        .as_ref()
        .and_then(|u| CString::new(u.name.as_bytes()).ok())
    {
        Some(cname) => nix::unistd::getgrouplist(&cname, Gid::from_raw(gid))
            .map(|gs| gs.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_else(|_| vec![gid]),
        None => vec![gid],
    };
    let mut seen = Vec::new();
    groups.retain(|g| {
        let new = !seen.contains(g);
        seen.push(*g);
        new
    });
    Ok(Credentials {
        user_name,
        uid,
        gid,
        group_name,
        groups,
    })
}

fn is_executable_file(p: &Path) -> Result<(), String> {
    match std::fs::metadata(p) {
        Err(_) => Err(format!("php-cgi binary not found: {}", p.display())),
        Ok(m) if !m.is_file() => Err(format!(
            "php-cgi binary not found: {} is not a regular file",
            p.display()
        )),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Err(format!(
            "php-cgi binary not found: {} is not executable",
            p.display()
        )),
        Ok(_) => Ok(()),
    }
}

/// `php_cgi`: a path (containing `/`, relative to the file's directory) or a
/// bare name looked up on `path_env` (default `/usr/local/bin:/usr/bin:/bin`).
fn resolve_php_cgi(
    value: Option<&str>,
    dir: &Path,
    path_env: Option<OsString>,
) -> Result<PathBuf, String> {
    let name = value.unwrap_or("php-cgi");
    if name.is_empty() {
        return Err("php_cgi must not be empty".into());
    }
    if name.contains('/') {
        let p = normalize(&dir.join(name));
        is_executable_file(&p)?;
        return Ok(p);
    }
    let path_env = path_env.unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for d in std::env::split_paths(&path_env) {
        if d.as_os_str().is_empty() {
            continue;
        }
        let candidate = match absolutize(&d) {
            Ok(d) => d.join(name),
            Err(_) => continue,
        };
        if is_executable_file(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "php-cgi binary not found: '{name}' is not in PATH ({})",
        path_env.to_string_lossy()
    ))
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;
    use tempfile::TempDir;

    fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A valid pool body (8 lines after the header), with `extra` appended.
    fn pool(name: &str, extra: &str) -> String {
        format!(
            "[{name}]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/run/fpmd/{name}.sock\"\npm.max_children = 5\n{extra}"
        )
    }

    /// Loads `main` (as fpmd.toml) plus `files` in a fresh directory.
    fn try_load(main: &str, files: &[(&str, &str)]) -> (TempDir, Result<Config, ConfigError>) {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            write(dir.path(), rel, text);
        }
        let main = write(dir.path(), "fpmd.toml", main);
        let r = load(&main);
        (dir, r)
    }

    fn load_ok(main: &str, files: &[(&str, &str)]) -> (TempDir, Config) {
        let (dir, r) = try_load(main, files);
        (dir, r.unwrap_or_else(|e| panic!("unexpected error: {e}")))
    }

    fn load_err(main: &str, files: &[(&str, &str)]) -> (TempDir, ConfigError) {
        let (dir, r) = try_load(main, files);
        match r {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => (dir, e),
        }
    }

    /// Checks file (relative to the temp dir), line, pool, key and message.
    fn assert_err(
        dir: &TempDir,
        e: &ConfigError,
        file: &str,
        line: Option<usize>,
        pool: Option<&str>,
        key: Option<&str>,
        msg: &str,
    ) {
        assert_eq!(e.file, dir.path().join(file), "file of {e}");
        assert_eq!(e.line, line, "line of {e}");
        assert_eq!(e.pool.as_deref(), pool, "pool of {e}");
        assert_eq!(e.key.as_deref(), key, "key of {e}");
        assert_eq!(e.message, msg, "message of {e}");
    }

    const INCLUDE_MAIN: &str = "[global]\ninclude = \"pool.d/*.toml\"\n";

    fn nobody() -> (u32, u32) {
        let u = User::from_name("nobody").unwrap().unwrap();
        let g = Group::from_name("nogroup").unwrap().unwrap();
        (u.uid.as_raw(), g.gid.as_raw())
    }

    #[test]
    fn full_config_with_includes() {
        let main = r#"# fpmd.toml
[global]
pid = "run/fpmd.pid"
error_log = "log/fpmd.log"
log_level = "debug"
include = "pool.d/*.toml"

[main]
user = "nobody"
group = "nogroup"
php_cgi = "/bin/sh"
listen.address = "127.0.0.1:9000"
pm.max_children = 2
"#;
        let b = r#"[bbb]
user = "nobody"
group = "nogroup"
php_cgi = "/bin/true"
listen.address = "/run/fpmd/bbb.sock"
listen.owner = "nobody"
listen.group = 0
listen.mode = "0600"
listen.backlog = 128
pm.mode = "static"
pm.max_children = 4
pm.max_requests = 500
chdir = "/tmp"
clear_env = false
env.PATH = "/usr/bin:/bin"
php_admin_value.memory_limit = "128M"
php_value."session.save_path" = "/var/lib/php/sessions"
php_admin_flag.log_errors = true
"#;
        let a = "[aaa]\nuser = 65534\ngroup = \"65534\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"[::1]:9001\"\nlisten.allowed_clients = [\"127.0.0.1\", \"::1\"]\npm.max_children = 1\n";
        let (dir, c) = load_ok(
            main,
            &[
                ("pool.d/b.toml", b),
                ("pool.d/a.toml", a),
                ("pool.d/notes.txt", "not toml"),
            ],
        );
        let d = dir.path();
        let (uid, gid) = nobody();
        assert_eq!(c.file, d.join("fpmd.toml"));
        assert_eq!(
            c.global,
            Global {
                pid: Some(d.join("run/fpmd.pid")),
                error_log: LogTarget::File(d.join("log/fpmd.log")),
                log_level: LogLevel::Debug,
                emergency_restart: None
            }
        );
        let names: Vec<&str> = c.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["main", "aaa", "bbb"],
            "main file first, then includes sorted by name"
        );
        assert_eq!(c.pools[0].file, d.join("fpmd.toml"));
        assert_eq!(c.pools[1].file, d.join("pool.d/a.toml"));
        assert_eq!(c.pools[2].file, d.join("pool.d/b.toml"));

        let main_pool = c.pool("main").unwrap();
        assert_eq!(
            main_pool.listen.address,
            ListenAddress::Tcp("127.0.0.1:9000".parse().unwrap())
        );
        assert_eq!(main_pool.listen.owner, None, "no owner default for TCP");

        let aaa = c.pool("aaa").unwrap();
        assert_eq!(aaa.user.uid, uid);
        assert_eq!(aaa.user.user_name, "nobody");
        assert_eq!(aaa.user.gid, gid);
        assert_eq!(aaa.user.group_name, "nogroup");
        assert_eq!(
            aaa.listen.address,
            ListenAddress::Tcp(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 9001))
        );
        assert_eq!(
            aaa.listen.allowed_clients,
            Some(vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()])
        );

        let bbb = c.pool("bbb").unwrap();
        let expected = PoolConfig {
            name: "bbb".into(),
            file: d.join("pool.d/b.toml"),
            user: Credentials {
                user_name: "nobody".into(),
                uid,
                gid,
                group_name: "nogroup".into(),
                groups: bbb.user.groups.clone(),
            },
            php_cgi: PathBuf::from("/bin/true"),
            listen: Listen {
                address: ListenAddress::Unix("/run/fpmd/bbb.sock".into()),
                owner: Some(uid),
                group: Some(0),
                mode: 0o600,
                backlog: 128,
                allowed_clients: None,
            },
            chdir: "/tmp".into(),
            clear_env: false,
            env: [("PATH".to_string(), "/usr/bin:/bin".to_string())].into(),
            php_values: [(
                "session.save_path".to_string(),
                "/var/lib/php/sessions".to_string(),
            )]
            .into(),
            php_admin_values: [
                ("log_errors".to_string(), "1".to_string()),
                ("memory_limit".to_string(), "128M".to_string()),
            ]
            .into(),
            pm: ProcessManager {
                mode: PmMode::Static,
                max_children: 4,
                max_requests: 500,
                spawn: Spawn::Prefork,
                max_memory: None,
            },
            request_terminate_timeout: None,
            request_slowlog_timeout: None,
            slowlog: None,
            request_queue_timeout: None,
            catch_workers_output: false,
            decorate_workers_output: true,
        };
        assert_eq!(bbb, &expected);
        assert!(bbb.user.groups.contains(&gid));
    }

    #[test]
    fn defaults() {
        let (dir, c) = load_ok("[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"www.d/www.sock\"\npm.max_children = 3\n", &[]);
        let (uid, gid) = nobody();
        assert_eq!(
            c.global,
            Global {
                pid: None,
                error_log: LogTarget::Stderr,
                log_level: LogLevel::Notice,
                emergency_restart: None
            }
        );
        let p = &c.pools[0];
        assert_eq!(
            p.user.gid, gid,
            "group defaults to the user's primary group"
        );
        assert_eq!(p.user.group_name, "nogroup");
        assert_eq!(p.user.groups, vec![gid]);
        assert_eq!(
            p.listen.address,
            ListenAddress::Unix(dir.path().join("www.d/www.sock")),
            "relative to the file's directory"
        );
        assert_eq!(p.listen.owner, Some(uid));
        assert_eq!(p.listen.group, Some(gid));
        assert_eq!(p.listen.mode, 0o660);
        assert_eq!(p.listen.backlog, 511);
        assert_eq!(p.listen.allowed_clients, None);
        assert_eq!(p.chdir, PathBuf::from("/"));
        assert!(p.clear_env);
        assert!(p.env.is_empty() && p.php_values.is_empty() && p.php_admin_values.is_empty());
        assert_eq!(
            p.pm,
            ProcessManager {
                mode: PmMode::Static,
                max_children: 3,
                max_requests: 0,
                spawn: Spawn::Prefork,
                max_memory: None
            }
        );
        assert!(p.ini_args().is_empty());
    }

    #[test]
    fn php_cgi_default_is_looked_up_on_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = write(dir.path(), "bin/php-cgi", "#!/bin/sh\n");
        write(dir.path(), "other/php-cgi", "not executable");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([
            dir.path().join("nope"),
            dir.path().join("other"),
            dir.path().join("bin"),
        ])
        .unwrap();
        assert_eq!(
            resolve_php_cgi(None, Path::new("/"), Some(path.clone())),
            Ok(bin.clone())
        );
        assert_eq!(
            resolve_php_cgi(Some("php-cgi"), Path::new("/"), Some(path.clone())),
            Ok(bin.clone())
        );
        // A path with a '/' is relative to the file's directory.
        assert_eq!(
            resolve_php_cgi(Some("./bin/php-cgi"), dir.path(), None),
            Ok(bin)
        );
        let e = resolve_php_cgi(Some("php-cgi9.9"), Path::new("/"), Some(path)).unwrap_err();
        assert!(
            e.starts_with("php-cgi binary not found: 'php-cgi9.9' is not in PATH"),
            "{e}"
        );
        let e = resolve_php_cgi(Some("other/php-cgi"), dir.path(), None).unwrap_err();
        assert!(
            e.starts_with("php-cgi binary not found: ") && e.ends_with("is not executable"),
            "{e}"
        );
        let e = resolve_php_cgi(Some("/tmp"), dir.path(), None).unwrap_err();
        assert_eq!(e, "php-cgi binary not found: /tmp is not a regular file");
    }

    #[test]
    fn listen_address_forms() {
        let tcp = |s: &str| match parse_listen_address(s) {
            Ok(RawAddress::Tcp(a)) => a,
            Ok(RawAddress::Unix(p)) => panic!("{s}: unix {p}"),
            Err(e) => panic!("{s}: {e}"),
        };
        assert_eq!(tcp("127.0.0.1:9000"), "127.0.0.1:9000".parse().unwrap());
        assert_eq!(tcp("[::1]:9000"), "[::1]:9000".parse().unwrap());
        assert_eq!(tcp("[::]:9000"), "[::]:9000".parse().unwrap());
        assert_eq!(
            tcp("9000"),
            "0.0.0.0:9000".parse().unwrap(),
            "a bare port binds all IPv4 addresses"
        );
        assert_eq!(tcp("*:9000"), "0.0.0.0:9000".parse().unwrap());
        assert_eq!(tcp("localhost:9000"), "127.0.0.1:9000".parse().unwrap());
        assert!(
            matches!(parse_listen_address("/run/fpmd/www.sock"), Ok(RawAddress::Unix(p)) if p == "/run/fpmd/www.sock")
        );
        assert!(matches!(
            parse_listen_address("./www.sock"),
            Ok(RawAddress::Unix(_))
        ));
        for bad in [
            "",
            "www.sock",
            "::1:9000",
            "127.0.0.1:0",
            "0",
            "70000",
            "127.0.0.1:x",
            "example.com:80",
            "localhost:",
        ] {
            assert!(
                parse_listen_address(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert_eq!(
            ListenAddress::Tcp("[::1]:9000".parse().unwrap()).to_string(),
            "[::1]:9000"
        );
        assert_eq!(
            ListenAddress::Tcp("127.0.0.1:9000".parse().unwrap()).to_string(),
            "127.0.0.1:9000"
        );
        assert_eq!(
            ListenAddress::Unix("/run/x.sock".into()).to_string(),
            "/run/x.sock"
        );

        // Through files: every form, including an integer and a relative path.
        let cases: &[(&str, ListenAddress)] = &[
            ("9000", ListenAddress::Tcp("0.0.0.0:9000".parse().unwrap())),
            (
                "\"9001\"",
                ListenAddress::Tcp("0.0.0.0:9001".parse().unwrap()),
            ),
            (
                "\"10.1.2.3:9002\"",
                ListenAddress::Tcp("10.1.2.3:9002".parse().unwrap()),
            ),
            (
                "\"[::1]:9003\"",
                ListenAddress::Tcp("[::1]:9003".parse().unwrap()),
            ),
            (
                "\"/run/fpmd/www.sock\"",
                ListenAddress::Unix("/run/fpmd/www.sock".into()),
            ),
        ];
        for (value, expected) in cases {
            let text = format!("[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\nlisten.address = {value}\npm.max_children = 1\n");
            let (_dir, c) = load_ok(&text, &[]);
            assert_eq!(&c.pools[0].listen.address, expected, "{value}");
        }
        let (dir, c) = load_ok(
            &pool("www", "").replace("/run/fpmd/www.sock", "./sock/../www.sock"),
            &[],
        );
        assert_eq!(
            c.pools[0].listen.address,
            ListenAddress::Unix(dir.path().join("sock/../www.sock"))
        );
    }

    #[test]
    fn listen_address_errors() {
        let text = pool("www", "").replace("\"/run/fpmd/www.sock\"", "\"www.sock\"");
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
        let (dir, e) = load_err(&pool("www", "").replace("/run/fpmd/www.sock", &long), &[]);
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
        assert_eq!(p.ini_args(), ["-d", "a=b", "-d", "memory_limit=128M"]);
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

    #[derive(Deserialize)]
    struct D {
        d: Duration,
    }

    fn dur(v: &str) -> Result<std::time::Duration, String> {
        toml::from_str::<D>(&format!("d = {v}"))
            .map(|d| d.d.0)
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn durations() {
        use std::time::Duration as D;
        assert_eq!(dur("\"30s\""), Ok(D::from_secs(30)));
        assert_eq!(dur("\"5m\""), Ok(D::from_secs(300)));
        assert_eq!(dur("\"1h\""), Ok(D::from_secs(3600)));
        assert_eq!(dur("\"250ms\""), Ok(D::from_millis(250)));
        assert_eq!(dur("\"1m 30s\""), Ok(D::from_secs(90)));
        assert_eq!(dur("30"), Ok(D::from_secs(30)));
        assert_eq!(dur("0"), Ok(D::ZERO));
        assert_eq!(dur("0.25"), Ok(D::from_millis(250)));
        assert_eq!(
            dur("-1"),
            Err("invalid duration -1: must not be negative".into())
        );
        assert!(dur("-0.5").unwrap_err().contains("non-negative"));
        assert!(dur("nan").is_err() && dur("inf").is_err());
        assert!(dur("\"10 parsecs\"")
            .unwrap_err()
            .starts_with("invalid duration \"10 parsecs\""));
        assert!(dur("\"\"").is_err());
        assert!(dur("true")
            .unwrap_err()
            .starts_with("invalid type: boolean `true`"));
        assert_eq!(Duration(D::from_secs(90)).to_string(), "1m 30s");
    }

    // ----- errors with file, line and key -----

    #[test]
    fn unknown_nested_key_with_suggestion() {
        let www = "[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/run/www.sock\"\n\npm.max_childre = 5\n";
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", www)]);
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(7),
            Some("www"),
            Some("pm.max_childre"),
            "unknown key (did you mean 'pm.max_children'?)",
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}:7: [www] key 'pm.max_childre': unknown key (did you mean 'pm.max_children'?)",
                dir.path().join("pool.d/www.toml").display()
            )
        );
    }

    #[test]
    fn unknown_keys_elsewhere() {
        let cases: &[(&str, usize, &str, &str)] = &[
            (
                "listn.address = \"/x/y.sock\"",
                7,
                "listn.address",
                "unknown key (did you mean 'listen.address'?)",
            ),
            (
                "usr = \"nobody\"",
                7,
                "usr",
                "unknown key (did you mean 'user'?)",
            ),
            (
                "max_children = 5",
                7,
                "max_children",
                "unknown key (did you mean 'pm.max_children'?)",
            ),
            (
                "php_admin_values.memory_limit = \"1G\"",
                7,
                "php_admin_values.memory_limit",
                "unknown key (did you mean 'php_admin_value.memory_limit'?)",
            ),
            (
                "listen.acl_users = \"x\"",
                7,
                "listen.acl_users",
                "unknown key",
            ),
            (
                "completely_unrelated = 1",
                7,
                "completely_unrelated",
                "unknown key",
            ),
        ];
        for (extra, line, key, msg) in cases {
            let (dir, e) = load_err(&pool("www", &format!("{extra}\n")), &[]);
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(*line),
                Some("www"),
                Some(key),
                msg,
            );
        }
        // Without pm.* and listen.* in the fixture (TOML forbids defining those tables twice).
        let base = "[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\n";
        let cases: &[(&str, usize, &str, &str)] = &[
            (
                "listen = \"/run/x.sock\"",
                4,
                "listen",
                "unknown key (did you mean 'listen.address'?)",
            ),
            (
                "pm = \"static\"",
                4,
                "pm",
                "unknown key (did you mean 'pm.mode'?)",
            ),
            (
                "\n[www.pm]\nmax_childre = 5",
                6,
                "pm.max_childre",
                "unknown key (did you mean 'pm.max_children'?)",
            ),
            (
                "pm = { mode = \"static\", max_chidren = 3 }",
                4,
                "pm.max_chidren",
                "unknown key (did you mean 'pm.max_children'?)",
            ),
        ];
        for (extra, line, key, msg) in cases {
            let (dir, e) = load_err(&format!("{base}{extra}\n"), &[]);
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(*line),
                Some("www"),
                Some(key),
                msg,
            );
        }
        // Global keys.
        let (dir, e) = load_err("[global]\nlog_levl = \"debug\"\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            None,
            Some("global.log_levl"),
            "unknown key (did you mean 'global.log_level'?)",
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}:2: key 'global.log_levl': unknown key (did you mean 'global.log_level'?)",
                e.file.display()
            )
        );
        let (dir, e) = load_err("[global]\ndaemonize = false\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            None,
            Some("global.daemonize"),
            "unknown key (global keys are: pid, error_log, log_level, include, emergency_restart_threshold, emergency_restart_interval)",
        );
        let (dir, e) = load_err("pid = \"/run/fpmd.pid\"\n", &[]);
        assert_err(&dir, &e, "fpmd.toml", Some(1), None, Some("pid"), "unknown top-level key (did you mean 'global.pid'? global keys go in the [global] table)");
        // A dotted pool name that was not quoted.
        let (dir, e) = load_err(&pool("example.com", ""), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            Some("example"),
            Some("com.user"),
            "unknown key (a pool name that contains a dot must be quoted: [\"example.com\"])",
        );
        let (_d, c) = load_ok(
            &pool("\"example.com\"", "")
                .replace("/run/fpmd/\"example.com\".sock", "/run/fpmd/example.sock"),
            &[],
        );
        assert_eq!(c.pools[0].name, "example.com");
    }

    #[test]
    fn wrong_type() {
        let www = "[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/run/www.sock\"\n\n\npm.max_children = \"five\"\n";
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", www)]);
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(8),
            Some("www"),
            Some("pm.max_children"),
            "invalid type: string \"five\", expected u32",
        );
        for (extra, key, msg) in [
            ("clear_env = \"yes\"", "clear_env", "invalid type: string \"yes\", expected a boolean"),
            ("pm.max_requests = -1", "pm.max_requests", "invalid value: integer `-1`, expected u32"),
            ("request_terminate_timeout = \"10 parsecs\"", "request_terminate_timeout", "invalid duration \"10 parsecs\": unknown time unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations) (expected e.g. \"30s\", \"5m\", \"1h\", \"250ms\")"),
            ("pm.mode = \"fixed\"", "pm.mode", "unknown variant `fixed`, expected one of `static`, `dynamic`, `ondemand`"),
            ("user = -3", "user", "id -3 is out of range"),
        ] {
            let text = pool("www", &format!("{extra}\n"));
            // A key already in the fixture is replaced so that TOML does not see a duplicate.
            let text = if extra.starts_with("user") { text.replacen("user = \"nobody\"\n", "", 1) } else { text };
            let line = if extra.starts_with("user") { 6 } else { 7 };
            let (dir, e) = load_err(&text, &[]);
            assert_err(&dir, &e, "fpmd.toml", Some(line), Some("www"), Some(key), msg);
        }
        let (dir, e) = load_err("[global]\nlog_level = \"verbose\"\n", &[]);
        assert_err(&dir, &e, "fpmd.toml", Some(2), None, Some("global.log_level"), "unknown variant `verbose`, expected one of `alert`, `error`, `warning`, `notice`, `debug`");
        let (dir, e) = load_err("[global]\ninclude = 3\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            None,
            Some("global.include"),
            "invalid type: integer `3`, expected a string or an array of strings",
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
        let (_dir, c) = load_ok("[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/run/fpmd/www.sock\"\n\n[www.pm]\nmode = \"ondemand\"\nmax_children = 8\n", &[]);
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
    fn php_fpm_syntax_gets_a_hint() {
        assert!(php_fpm_hint("[www]\npm = dynamic\n").contains(
            "line 2 looks like php-fpm syntax: php-fpm's bare 'pm' is written 'pm.mode'"
        ));
        assert!(php_fpm_hint("listen = /run/x.sock").contains("'listen.address'"));
        assert!(
            php_fpm_hint("php_admin_value[memory_limit] = 128M").contains("'php_admin_value.name'")
        );
        assert!(php_fpm_hint("; a comment").contains("'#'"));
        assert_eq!(
            php_fpm_hint("[www]\npm.mode = \"static\"\nlisten.address = \"9000\"\n"),
            ""
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
    fn unsupported_yet_keys() {
        for (key, value) in [
            ("chroot", "\"/srv/www\""),
            ("pm.status_path", "\"/status\""),
            ("ping.path", "\"/ping\""),
            ("ping.response", "\"pong\""),
            ("access.log", "\"/var/log/access.log\""),
            ("access.format", "\"%R - %u\""),
            ("security.limit_extensions", "[\".php\"]"),
        ] {
            let (dir, e) = load_err(&pool("www", &format!("{key} = {value}\n")), &[]);
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(7),
                Some("www"),
                Some(key),
                &format!("{key} is not supported yet"),
            );
        }
        // They still type-check first.
        let (dir, e) = load_err(&pool("www", "pm.process_idle_timeout = true\n"), &[]);
        assert_err(&dir, &e, "fpmd.toml", Some(7), Some("www"), Some("pm.process_idle_timeout"), "invalid type: boolean `true`, expected a duration such as \"30s\", \"5m\", \"250ms\" or a number of seconds");
        let (dir, e) = load_err(&pool("www", "pm.start_servers = \"two\"\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("pm.start_servers"),
            "invalid type: string \"two\", expected u32",
        );
        let (dir, e) = load_err("[global]\nerror_log = \"syslog\"\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            None,
            Some("global.error_log"),
            "error_log = \"syslog\" is not supported yet",
        );
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
    fn no_pool() {
        let (dir, e) = load_err(INCLUDE_MAIN, &[]);
        assert_err(&dir, &e, "fpmd.toml", None, None, None, "no pool defined: add a pool table such as [www] to this file or to a file matched by global.include");
        assert!(e.to_string().ends_with("fpmd.toml: no pool defined: add a pool table such as [www] to this file or to a file matched by global.include"));
        let (dir, e) = load_err("", &[]);
        assert_eq!(e.file, dir.path().join("fpmd.toml"));
    }

    #[test]
    fn syntax_error() {
        let (dir, e) = load_err(
            INCLUDE_MAIN,
            &[(
                "pool.d/www.toml",
                "[www]\nuser = \"nobody\"\nlisten.address = /run/x.sock\n",
            )],
        );
        assert_eq!(e.file, dir.path().join("pool.d/www.toml"));
        assert_eq!(
            (e.line, e.key.as_deref(), e.pool.as_deref()),
            (Some(3), None, None)
        );
        assert!(e.message.starts_with("syntax error at column 18: "), "{e}");
        assert!(!e.message.contains('\n'));
        let (dir, e) = load_err("[www\n", &[]);
        assert_eq!(
            (e.file.clone(), e.line),
            (dir.path().join("fpmd.toml"), Some(1))
        );
    }

    #[test]
    fn unknown_user_and_group() {
        let www = "[www]\nphp_cgi = \"/bin/sh\"\nuser = \"nosuchuser\"\nlisten.address = \"/run/www.sock\"\npm.max_children = 1\n";
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", www)]);
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(3),
            Some("www"),
            Some("user"),
            "unknown user 'nosuchuser'",
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}:3: [www] key 'user': unknown user 'nosuchuser'",
                dir.path().join("pool.d/www.toml").display()
            )
        );
        let (dir, e) = load_err(&pool("www", "").replace("nogroup", "nosuchgroup"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(3),
            Some("www"),
            Some("group"),
            "unknown group 'nosuchgroup'",
        );
    }

    #[test]
    fn root_rules() {
        // fpmd runs as root in the test environment; the rules are exercised directly too.
        let root = Ids { euid: 0, egid: 0 };
        assert_eq!(
            resolve_credentials(None, None, root),
            Err((
                "user",
                "user is required when fpmd runs as root".to_string()
            ))
        );
        assert_eq!(
            resolve_credentials(Some(&IdOrName::Name("root".into())), None, root),
            Err((
                "user",
                "user 'root' (uid 0) is not allowed: pool children must not run as root"
                    .to_string()
            ))
        );
        assert_eq!(
            resolve_credentials(
                Some(&IdOrName::Name("nobody".into())),
                Some(&IdOrName::Id(0)),
                root
            )
            .unwrap_err()
            .0,
            "group"
        );
        // A uid without a passwd entry needs a group.
        assert_eq!(
            resolve_credentials(Some(&IdOrName::Id(4_000_000)), None, root)
                .unwrap_err()
                .0,
            "user"
        );
        let c = resolve_credentials(
            Some(&IdOrName::Id(4_000_000)),
            Some(&IdOrName::Id(4_000_000)),
            root,
        )
        .unwrap();
        assert_eq!(
            (
                c.user_name.as_str(),
                c.group_name.as_str(),
                c.groups.as_slice()
            ),
            ("4000000", "4000000", &[4_000_000][..])
        );

        if nix::unistd::geteuid().is_root() {
            let (dir, e) = load_err("\n[www]\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/x/y.sock\"\npm.max_children = 1\n", &[]);
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(2),
                Some("www"),
                Some("user"),
                "user is required when fpmd runs as root",
            );
            let (dir, e) = load_err(&pool("www", "").replace("\"nobody\"", "\"root\""), &[]);
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(2),
                Some("www"),
                Some("user"),
                "user 'root' (uid 0) is not allowed: pool children must not run as root",
            );
        }
    }

    #[test]
    fn non_root_rules() {
        let (uid, gid) = nobody();
        let ids = Ids {
            euid: uid,
            egid: gid,
        };
        let c = resolve_credentials(None, None, ids).unwrap();
        assert_eq!(
            (c.user_name.as_str(), c.uid, c.gid, c.group_name.as_str()),
            ("nobody", uid, gid, "nogroup")
        );
        assert!(resolve_credentials(
            Some(&IdOrName::Name("nobody".into())),
            Some(&IdOrName::Name("nogroup".into())),
            ids
        )
        .is_ok());
        let (key, msg) =
            resolve_credentials(Some(&IdOrName::Name("daemon".into())), None, ids).unwrap_err();
        assert_eq!(key, "user");
        assert!(
            msg.starts_with("cannot run the pool as user 'daemon'"),
            "{msg}"
        );
        let (key, _) =
            resolve_credentials(None, Some(&IdOrName::Name("root".into())), ids).unwrap_err();
        assert_eq!(key, "group");
    }

    #[test]
    fn missing_php_cgi() {
        let www = "[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nlisten.address = \"/run/www.sock\"\npm.max_children = 1\nphp_cgi = \"/nonexistent/php-cgi\"\n";
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", www)]);
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(6),
            Some("www"),
            Some("php_cgi"),
            "php-cgi binary not found: /nonexistent/php-cgi",
        );
    }

    #[test]
    fn global_in_included_file_and_bad_shapes() {
        let (dir, e) = load_err(
            INCLUDE_MAIN,
            &[(
                "pool.d/www.toml",
                &format!("{}\n[global]\nlog_level = \"debug\"\n", pool("www", "")),
            )],
        );
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(8),
            None,
            None,
            "[global] is only allowed in the main configuration file",
        );
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", "user = \"nobody\"\n")]);
        assert_err(&dir, &e, "pool.d/www.toml", Some(1), None, Some("user"), "a top-level key must be inside a pool table such as [www] (or [global] in the main file)");
        let (dir, e) = load_err("[[www]]\nuser = \"nobody\"\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(1),
            Some("www"),
            None,
            "a pool must be a table [www], not an array of tables [[www]]",
        );
        let (dir, e) = load_err("[\"my pool\"]\nuser = \"nobody\"\n", &[]);
        assert_err(&dir, &e, "fpmd.toml", Some(1), None, None, "invalid pool name \"my pool\": character ' ' is not allowed (use letters, digits, '.', '_' and '-')");
        let (dir, e) = load_err("[global]\ninclude = \"pool.d/[*.toml\"\n", &[]);
        assert_eq!(
            (e.file.clone(), e.line, e.key.as_deref()),
            (
                dir.path().join("fpmd.toml"),
                Some(2),
                Some("global.include")
            )
        );
        assert!(
            e.message
                .starts_with("invalid glob pattern \"pool.d/[*.toml\": "),
            "{e}"
        );
        let (dir, e) = load_err(&pool("www", "chdir = \"srv\"\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("chdir"),
            "chdir must be an absolute path: srv",
        );
        let (dir, e) = load_err(&pool("www", "chdir = \"/nonexistent/dir\"\n"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some("chdir"),
            "chdir directory does not exist or is not a directory: /nonexistent/dir",
        );
    }

    #[test]
    fn include_forms() {
        // An array of patterns, an absolute pattern, a self-match and duplicates.
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a/one.toml", &pool("one", ""));
        write(dir.path(), "b/two.toml", &pool("two", ""));
        let abs = format!("{}/b/*.toml", dir.path().display());
        let main = write(
            dir.path(),
            "fpmd.toml",
            &format!(
                "[global]\ninclude = [\"a/*.toml\", {}, \"*.toml\", \"a/one.toml\"]\n",
                toml_str(&abs)
            ),
        );
        let c = load(&main).unwrap();
        let names: Vec<&str> = c.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["one", "two"]);
        assert!(load(&dir.path().join("missing.toml"))
            .unwrap_err()
            .message
            .starts_with("cannot read configuration file: "));
    }

    #[test]
    fn to_toml_round_trips() {
        let main =
            "[global]\npid = \"fpmd.pid\"\nlog_level = \"warning\"\ninclude = \"pool.d/*.toml\"\n";
        let extra = "listen.allowed_clients = \"127.0.0.1\"\nenv.\"odd name\" = \"quote \\\" and backslash \\\\\"\nphp_value.\"session.save_path\" = \"/tmp\"\nphp_flag.display_errors = \"on\"\nphp_admin_value.memory_limit = \"1G\"\npm.max_requests = 9\n";
        let (dir, c) = load_ok(
            main,
            &[
                ("pool.d/a.toml", &pool("a", extra)),
                (
                    "pool.d/b.toml",
                    &pool("b", "").replace("\"/run/fpmd/b.sock\"", "9000"),
                ),
            ],
        );
        let text = c.to_toml();
        assert!(
            text.contains(&format!(
                "# pool a, defined in {}\n[a]\n",
                dir.path().join("pool.d/a.toml").display()
            )),
            "{text}"
        );
        assert!(
            text.contains("listen.mode = \"0660\"\n") && text.contains("pm.mode = \"static\"\n"),
            "{text}"
        );
        let again = write(dir.path(), "effective/fpmd.toml", &text);
        let c2 = load(&again).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(c2.global, c.global);
        assert_eq!(c2.pools.len(), c.pools.len());
        for (p1, p2) in c.pools.iter().zip(&c2.pools) {
            assert_eq!(
                PoolConfig {
                    file: p2.file.clone(),
                    ..p1.clone()
                },
                *p2
            );
        }
        assert_eq!(
            c2.to_toml()
                .replace(&again.display().to_string(), "X")
                .lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>(),
            text.replace(&c.file.display().to_string(), "X")
                .lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn find_default_config_returns_an_existing_file() {
        if let Some(p) = find_default_config() {
            assert!(p.is_file());
        }
    }

    #[test]
    fn error_display_shapes() {
        let e = ConfigError {
            file: "fpmd.toml".into(),
            line: Some(4),
            pool: None,
            key: Some("global.include".into()),
            message: "x".into(),
        };
        assert_eq!(e.to_string(), "fpmd.toml:4: key 'global.include': x");
        let e = ConfigError {
            file: "fpmd.toml".into(),
            line: None,
            pool: None,
            key: None,
            message: "no pool defined".into(),
        };
        assert_eq!(e.to_string(), "fpmd.toml: no pool defined");
        let e = ConfigError {
            file: "pool.d/www.toml".into(),
            line: Some(1),
            pool: Some("www".into()),
            key: None,
            message: "m".into(),
        };
        assert_eq!(e.to_string(), "pool.d/www.toml:1: [www] m");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

            #[test]
            fn mode_round_trips(m in 0u32..=0o777) {
                prop_assert_eq!(parse_mode(&format!("{m:04o}")), Ok(m));
                prop_assert_eq!(parse_mode(&format!("{m:o}")), Ok(m));
            }

            #[test]
            fn integer_seconds(n in 0u32..10_000_000) {
                prop_assert_eq!(dur(&n.to_string()), Ok(std::time::Duration::from_secs(n.into())));
                prop_assert_eq!(dur(&format!("\"{n}s\"")), Ok(std::time::Duration::from_secs(n.into())));
            }

            #[test]
            fn tcp_addresses(a in any::<[u8; 4]>(), port in 1u16..) {
                let ip = Ipv4Addr::from(a);
                let ok = matches!(parse_listen_address(&format!("{ip}:{port}")), Ok(RawAddress::Tcp(s)) if s == SocketAddr::new(ip.into(), port));
                prop_assert!(ok);
                let ok = matches!(parse_listen_address(&port.to_string()), Ok(RawAddress::Tcp(s)) if s == SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port));
                prop_assert!(ok);
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

            /// Any ini name/value and env name/value survive to_toml → load.
            #[test]
            fn to_toml_escapes(name in "[a-z_][a-z0-9_.]{0,12}[a-z0-9_]", value in "[^\\x00\\n\\r]{0,20}", env_name in "[A-Za-z_ .-]{1,10}", env_value in "[^\\x00$]{0,20}") {
                let extra = format!(
                    "php_value.{} = {}\nenv.{} = {}\n",
                    toml_key(&name), toml_str(&value), toml_key(&env_name), toml_str(&env_value)
                );
                let (dir, c) = load_ok(&pool("www", &extra), &[]);
                prop_assert_eq!(&c.pools[0].php_values[&name], &value);
                let again = write(dir.path(), "again/fpmd.toml", &c.to_toml());
                let c2 = load(&again).unwrap();
                prop_assert_eq!(&c2.pools[0].php_values, &c.pools[0].php_values);
                prop_assert_eq!(&c2.pools[0].env, &c.pools[0].env);
            }
        }
    }
}
