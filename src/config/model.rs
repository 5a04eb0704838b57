//! The validated configuration: the only configuration types the rest of
//! the daemon uses. Built by `validate.rs`, printed by `render.rs`,
//! compared by `diff.rs`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use serde::Deserialize;

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The main configuration file, as given to [`load`](super::load).
    pub file: PathBuf,
    /// The `[global]` table.
    pub global: Global,
    /// Every pool: those of the main file first, then those of the included
    /// files (sorted by file name), each file's pools in document order.
    /// Shared: the daemon hands each pool the same `Arc` it keeps here, so
    /// a running pool's settings are held once (a reload replaces them).
    pub pools: Vec<std::sync::Arc<PoolConfig>>,
    /// Where the configuration came from (for `watch`).
    pub sources: Sources,
    /// Where each key was set (for `fpmd -t`).
    pub origins: Origins,
    /// The command line's options it was loaded with (a reload loads the
    /// files again with the same).
    pub options: super::LoadOptions,
    /// What is not an error but may be a mistake, one message each (file,
    /// line, key): an include pattern that matches nothing. Printed by
    /// `fpmd -t`, logged at start and reload.
    pub warnings: Vec<String>,
    /// Notices and warnings about php-fpm files (directives accepted
    /// without effect, constants), each `FILE:LINE: LEVEL: text`: logged
    /// at start and on reload, printed by `fpmd -t`.
    pub notices: Vec<String>,
}

/// Where each key that a file sets was set: per table (`""` for
/// `[global]`, else the pool's name) the key, dotted without quotes
/// (`listen.address`, `env.FOO`, `php_value.session.save_path`; a
/// `php_flag.X` as `php_value.X`, a `php_admin_flag.X` as
/// `php_admin_value.X`, as they are printed), and the file and 1-based
/// line that set it (a php-fpm pool may be set in several files). A key not
/// in it has its default. `fpmd -t` prints it beside each value
/// ([`Config::to_toml_with_origins`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origins(pub BTreeMap<String, BTreeMap<String, (PathBuf, usize)>>);

impl Origins {
    /// The line of `key` (as above) in the file that set it, if one did.
    pub fn line(&self, table: &str, key: &str) -> Option<usize> {
        self.at(table, key).map(|(_, l)| l)
    }

    /// The file and line that set `key` (as above) in `table`.
    pub fn at(&self, table: &str, key: &str) -> Option<(&std::path::Path, usize)> {
        self.0.get(table)?.get(key).map(|(f, l)| (f.as_path(), *l))
    }
}

/// The files a configuration was read from, and the include globs that
/// would find more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    /// The main file, then every included file, as read.
    pub files: Vec<PathBuf>,
    /// `global.include` patterns as globs over the file system.
    pub include_globs: Vec<String>,
}

impl Config {
    /// The pool called `name`.
    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.name == name).map(|p| &**p)
    }
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
    /// The `error_log` file that `-O` (log to stderr) put aside: fpmd
    /// creates it at start (0600, empty if new) and writes nothing to it,
    /// as php-fpm opens its `error_log` whatever `-O` says. `None` without
    /// `-O` or without a file.
    pub unused_error_log: Option<PathBuf>,
    /// `log_level`: `alert`, `error`, `warning`, `notice` (default), `debug`.
    /// php-fpm: `log_level`.
    pub log_level: LogLevel,
    /// `emergency_restart_threshold` + `emergency_restart_interval`: when
    /// this many children of one pool die unexpectedly within the interval,
    /// that pool's children are all restarted (php-fpm restarts the whole
    /// master; fpmd only the affected pool). `None`: off (either is 0).
    pub emergency_restart: Option<(u32, std::time::Duration)>,
    /// `process_control_timeout` (php-fpm's global): php-fpm's master
    /// waits this long for its children to react to a reload or stop before
    /// it signals them harder. In fpmd it is the default of
    /// [`PoolConfig::graceful_timeout`] for pools that set none. `None`
    /// when unset or 0 (php-fpm's 0 means not waiting at all; fpmd then
    /// waits for every request).
    pub process_control_timeout: Option<std::time::Duration>,
    /// `control_socket` (fpmd only): absolute path of the unix socket that
    /// `fpmd reload`, `fpmd stop` and `fpmd status` talk to (a relative
    /// value is relative to the main file's directory). Default
    /// ([`crate::config::paths::default_path_as`]): as root `/run/fpmd/fpmd.sock`
    /// for `/etc/fpmd/fpmd.toml` and `/run/fpmd/STEM-HASH.sock` for any
    /// other main file, else `fpmd.sock` beside the main file.
    pub control_socket: PathBuf,
    /// `watch` (fpmd only): reload when a configuration file changes.
    /// Default `false`.
    pub watch: bool,
    /// `daemonize`: detach from the terminal at start, as php-fpm does
    /// (fork, `setsid`, stdio to `/dev/null`; the starting process exits 0
    /// once the daemon serves). Default `false`, unlike php-fpm's `yes`:
    /// systemd (`Type=notify`) and containers want the process they start
    /// to be the daemon. The command line's `-D`/`-F` override it. Read
    /// at start only. php-fpm: `daemonize`.
    pub daemonize: bool,
    /// `log_format` (fpmd only): `"fpmd"` (default) or `"php-fpm"`
    /// ([`LogFormat`]); applies live on reload.
    pub log_format: LogFormat,
    /// `log_limit`: the longest line fpmd writes of a child's output
    /// (`catch_workers_output`), in bytes with its prefix (time stamp,
    /// level, `[pool www] child 1234 said into stderr: "`) and its
    /// newline, as php-fpm counts it (`zlog.c` `zlog_limit`); a longer
    /// line of the child's is continued on the next log line. At least
    /// 512 ([`MIN_LOG_LIMIT`]), default 1024. Applies live on reload.
    /// php-fpm: `log_limit`.
    pub log_limit: usize,
    /// `metrics.listen` (fpmd only): where fpmd serves `GET /metrics`
    /// (OpenMetrics text over HTTP/1.1, see [`crate::observe::metrics`]):
    /// `"IP:PORT"`, `"[IPv6]:PORT"`, a bare port ([`ListenAddress::Port`]) or a
    /// unix socket path (relative to the main file's directory). Never a
    /// pool's listen address nor the control socket. `None` (default): no
    /// metrics endpoint.
    pub metrics_listen: Option<ListenAddress>,
    /// `php_ini` (fpmd only; php-fpm's `-c`): the default of every pool's
    /// [`PhpIni::file`]; the command line's `-c PATH` wins over it.
    pub php_ini: Option<PathBuf>,
    /// `php_ini_scan_dir` (fpmd only): the default of every pool's
    /// [`PhpIni::scan_dir`].
    pub php_ini_scan_dir: Option<String>,
    /// `warm_min_available` (fpmd only): ondemand pools under `pm.spawn =
    /// "prefork"` keep a warm php-cgi parent while the system's
    /// `MemAvailable` (`/proc/meminfo`) stays above this; see
    /// [`crate::pool::warm`]. Default [`MinAvailable::DEFAULT`] (25% of
    /// `MemTotal`); `"100%"`: never (php-fpm's ondemand: no process while
    /// idle); `0`: always. Applies live on reload.
    pub warm_min_available: MinAvailable,
    /// `warm_timeout` (fpmd only): how long an ondemand pool under
    /// `pm.spawn = "prefork"` keeps its loaded php-cgi parent, with no
    /// children, after its last child went away, so that the next request
    /// forks a child (~2 ms) instead of exec'ing php-cgi (~40 ms); see
    /// [`crate::pool::warm::timeout`]. Default [`DEFAULT_WARM_TIMEOUT`] (10
    /// minutes); `0`: no warm parent at all (php-fpm's ondemand: no process
    /// once idle). Applies live on reload.
    pub warm_timeout: std::time::Duration,
    /// `sched_batch` (fpmd only): fpmd's event loop runs under
    /// `SCHED_BATCH` (default `true`), so that its wake-ups (a child's
    /// output, a web server's request) wait for the PHP process on the
    /// CPU to block or use up its slice instead of preempting it; `false`:
    /// `SCHED_OTHER`. php-cgi children get `SCHED_OTHER` either way. See
    /// [`crate::sys::sched`]. Applies live on reload.
    pub sched_batch: bool,
}

/// `warm_timeout`'s default: 10 minutes.
pub const DEFAULT_WARM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// An amount of available memory: a share of `MemTotal` or bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MinAvailable {
    /// Percent of `MemTotal`, 0–100 (`"25%"`).
    Percent(u8),
    /// Bytes (`"512M"`, PHP's shorthand, or a number).
    Bytes(u64),
}

impl MinAvailable {
    /// `warm_min_available`'s default: a quarter of the machine's memory.
    pub const DEFAULT: MinAvailable = MinAvailable::Percent(25);
}

impl std::fmt::Display for MinAvailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MinAvailable::Percent(p) => write!(f, "{p}%"),
            MinAvailable::Bytes(b) => write!(f, "{b}"),
        }
    }
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

/// `log_limit`'s default (php-fpm's `ZLOG_DEFAULT_LIMIT`), in bytes.
pub const DEFAULT_LOG_LIMIT: usize = 1024;

/// The smallest `log_limit` (php-fpm's `ZLOG_MIN_LIMIT`), in bytes: a
/// smaller one is refused, as php-fpm refuses it (`log_limit must be
/// greater than 512`).
pub const MIN_LOG_LIMIT: usize = 512;

/// `log_format`: how fpmd's log lines look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
pub enum LogFormat {
    /// `"fpmd"` (default): `2026-12-01T09:52:00.123456Z WARNING message
    /// pool=www pid=1234` (see [`crate::log`]).
    #[default]
    #[serde(rename = "fpmd")]
    Fpmd,
    /// `"php-fpm"`: php-fpm's own lines (`zlog.c`), `[01-Dec-2026
    /// 09:52:00] WARNING: [pool www] child 1234 exited …`, with
    /// php-fpm's wording for its lifecycle events, for tools that read
    /// php-fpm's log.
    #[serde(rename = "php-fpm")]
    PhpFpm,
}

impl LogFormat {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Fpmd => "fpmd",
            LogFormat::PhpFpm => "php-fpm",
        }
    }
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

/// php-fpm 8.2's default `security.limit_extensions` (php-src
/// `sapi/fpm/fpm/fpm_conf.c`: `".php .phar"`).
pub const DEFAULT_LIMIT_EXTENSIONS: [&str; 2] = [".php", ".phar"];

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
    /// `access.log`: the pool's access log, one line per request (relative
    /// to the pool's file); `None` (unset or empty): no access log.
    /// php-fpm: same.
    pub access_log: Option<PathBuf>,
    /// `access.format`: the access log's line, parsed; default php-fpm's
    /// `%R - %u %t "%m %r" %s`. php-fpm: same (see
    /// [`crate::observe::access_log`] for the specifiers).
    pub access_format: crate::config::access_format::Format,
    /// `access.suppress_path` (php-fpm 8.2's `access.suppress_path[]`):
    /// request URIs whose successful plain requests are not logged. As
    /// php-fpm's `fpm_access_log_suppress`: a `GET` or `HEAD` without a
    /// query string or a body, answered 2xx, whose URI (`%r`) is exactly
    /// one of them. Each starts with `/`. Default: none.
    pub access_suppress_paths: Vec<String>,
    /// `request_queue_timeout` (fpmd only): a request that waited longer
    /// for a child is answered 503 with `Retry-After`; `None`: it waits.
    pub request_queue_timeout: Option<std::time::Duration>,
    /// `catch_workers_output`: what children write to their own stdout and
    /// stderr goes to fpmd's log (`said into stdout` / `said into
    /// stderr`, rate-limited per child). Default `false`, as php-fpm: the
    /// children's output is thrown away, except what a php-cgi writes on
    /// stderr while it starts (see `crate::process::output`). php-fpm: same.
    pub catch_workers_output: bool,
    /// `decorate_workers_output`: with `catch_workers_output`, a line is
    /// logged as `[pool www] child 1234 said into stderr: "text"`
    /// (`true`, the default) or as the child's text alone (`false`, no
    /// time stamp either). php-fpm: same.
    pub decorate_workers_output: bool,
    /// `fpm_sapi` (fpmd only): the children run fpmd's part of php-fpm's
    /// SAPI before each script (`fastcgi_finish_request()`,
    /// `fpm_get_status()`, `fastcgi.error_header`, the request's peak
    /// memory and CPU for `%M`, `%C` and the status page; see
    /// `crate::process::sapi`). Default `true`; `false`: php-cgi as it is.
    pub fpm_sapi: bool,
    /// `request_terminate_timeout_track_finished`: `request_terminate_timeout`
    /// still counts after the script called `fastcgi_finish_request()`.
    /// Default `false`, as php-fpm (`fpm_request.c`: a finished request is
    /// not checked unless this is set).
    pub track_finished: bool,
    /// `graceful_timeout` (fpmd only): during a reload, the pool's old
    /// children still busy this long after it began are killed. Default:
    /// [`Global::process_control_timeout`]; `None` (unset everywhere, or
    /// 0 here): they finish their requests however long they take.
    pub graceful_timeout: Option<std::time::Duration>,
    /// `cgroup.memory_max`, `cgroup.pids_max`, `cgroup.cpu_weight` (fpmd
    /// only): limits of the pool's cgroup (see [`crate::process::cgroup`]), applied
    /// live on reload. Default: none (the pool still gets a cgroup when
    /// fpmd runs as root and cgroups are mounted).
    pub cgroup: CgroupLimits,
    /// `security.pcntl` (fpmd only): leave PHP's `pcntl_*` functions
    /// enabled for web requests. Default `false`: they are appended to
    /// `disable_functions`, since php-fpm (as Debian builds it) has no
    /// pcntl while php-cgi has (see [`PoolConfig::ini_args`]).
    pub pcntl: bool,
    /// The command line's `-n`: the children read no php.ini (`php-cgi
    /// -n`, first of [`PoolConfig::ini_args`]). Default `false`.
    pub no_php_ini: bool,
    /// `security.limit_extensions`: the endings a script's path must have
    /// to run. php-fpm's rule (`fpm_php_limit_extensions` in php-src
    /// `sapi/fpm/fpm/fpm_php.c`): the resolved script path (after
    /// `cgi.fix_pathinfo`'s walk) is longer than one of them and ends with
    /// it, compared byte for byte (case-sensitive); any other script is
    /// answered `403 Access denied.` by fpmd before a child sees it.
    /// Default `[".php", ".phar"]`, php-fpm 8.2's compiled-in default
    /// (`fpm_conf.c`); empty: any file may run, as php-fpm with an empty
    /// value. Each string of the list is split at spaces and tabs, as
    /// php-fpm splits its value.
    pub limit_extensions: Vec<String>,
    /// What fpmd answers itself, without a child: the status page and
    /// ping.
    pub local: LocalEndpoints,
    /// How the children are confined: `chroot`, resource limits,
    /// priority, `no_new_privs`, Landlock (see [`crate::process::sandbox`]).
    pub isolation: Isolation,
    /// Which php.ini and scan directory the children read.
    pub php_ini: PhpIni,
}

/// The PHP configuration files of a pool's children (php-cgi reads
/// `/etc/php/8.2/cgi/php.ini` and `cgi/conf.d` on Debian, not php-fpm's
/// `fpm/`, unless told).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhpIni {
    /// `php_ini`: an absolute php.ini file, or a directory php-cgi looks
    /// for `php-cgi.ini` then `php.ini` in, passed as `-c PATH` (php-fpm's
    /// `-c`). `None`: php-cgi's compiled-in search. Default: the command
    /// line's `-c`, else `global.php_ini`.
    pub file: Option<PathBuf>,
    /// `php_ini_scan_dir`: `PHP_INI_SCAN_DIR` of the children (directories
    /// separated by `:`, whose `*.ini` php-cgi reads after php.ini, in
    /// name order); `Some("")`: none; `None`: php-cgi's compiled-in
    /// directory (or what fpmd's environment passes on without
    /// `clear_env`). Default: `global.php_ini_scan_dir`. Set by fpmd
    /// after `env.*`, whatever `clear_env` says.
    pub scan_dir: Option<String>,
    /// The files PHP reads, in order: the php.ini, then every `*.ini` of
    /// the scan directories, as found on the file system when the
    /// configuration was loaded. `None`: fpmd cannot tell (php-cgi's
    /// compiled-in paths of a binary it does not recognise). One list per
    /// load for all the pools that read the same files (most read
    /// Debian's ~30): see [`crate::config::php`]'s `ReadsCache`.
    pub reads: Option<std::sync::Arc<[PathBuf]>>,
    /// The `open_basedir` those files set (the last assignment outside a
    /// `[PATH=…]`/`[HOST=…]` section, quotes removed), when not empty:
    /// `sapi.php` and the pool's status socket are added to it (see
    /// [`crate::process::sapi::ini_args`]).
    pub open_basedir: Option<String>,
}

/// A pool's confinement keys. Every one of them is applied in the child
/// between fork and exec, so a change needs a new generation of children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Isolation {
    /// `chroot`: absolute host directory (the site's directory) that
    /// becomes `/` for the children, in a private mount namespace with
    /// PHP's runtime mounted read-only (see [`crate::process::sandbox`]); `chdir`
    /// is then inside it. Needs fpmd to run as root. php-fpm: `chroot`.
    pub chroot: Option<PathBuf>,
    /// `rlimit_files`: `RLIMIT_NOFILE` (soft and hard) of the children, in
    /// file descriptors; `None`: inherited. php-fpm: same.
    pub rlimit_files: Option<u64>,
    /// `rlimit_core`: `RLIMIT_CORE` (soft and hard) in bytes;
    /// `Some(u64::MAX)` is `"unlimited"`; `None`: inherited. php-fpm: same.
    pub rlimit_core: Option<u64>,
    /// `process.priority`: the children's nice value (-19 … 20,
    /// `setpriority(PRIO_PROCESS)`); `None`: inherited. php-fpm: same.
    pub process_priority: Option<i32>,
    /// `process.dumpable`: `prctl(PR_SET_DUMPABLE, 1)` in the child.
    /// Default `false`. php-fpm: same (see `crate::process::sandbox` for what
    /// `execve` does to the flag).
    pub process_dumpable: bool,
    /// `no_new_privs` (fpmd only): `prctl(PR_SET_NO_NEW_PRIVS, 1)`, so
    /// that no setuid or setgid binary nor file capability raises a
    /// script's privileges. Default `false`, as php-fpm (which has no such
    /// key): PHP's `mail()` runs the MTA's `sendmail`, which needs its
    /// setgid helper (Postfix's `postdrop`) or is setuid (exim4). `true`
    /// when `landlock.*` is set, which needs it.
    pub no_new_privs: bool,
    /// `landlock.read`, `landlock.write` (fpmd only): with either set, the
    /// children may read (`read`) or read and write (`write`) only below
    /// these paths (inside the chroot when there is one), plus PHP's
    /// runtime (read-only); `None`: no Landlock ruleset.
    pub landlock: Option<Landlock>,
}

/// A pool's Landlock paths: absolute, as the children see them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Landlock {
    /// `landlock.read`: read and execute below these paths.
    pub read: Vec<PathBuf>,
    /// `landlock.write`: read, write, create, remove below these paths.
    pub write: Vec<PathBuf>,
}

/// The pool's status page and ping, answered by fpmd (php-fpm answers
/// them from a child, so they go dark when every child is busy).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalEndpoints {
    /// `pm.status_path`: the `SCRIPT_NAME` of the status page (php-fpm's
    /// rules: starts with `/`, at least 2 characters, only
    /// `[alphanum]/_-.~`). `None`: no status page.
    pub status_path: Option<String>,
    /// `ping.path`: the `SCRIPT_NAME` of the ping page, same rules.
    pub ping_path: Option<String>,
    /// `ping.response`: the ping page's body. Default `pong`, as php-fpm.
    pub ping_response: String,
    /// `pm.status_listen`: a listener of its own that serves only the
    /// status page and ping (php-fpm 8's shared status pool), with the
    /// pool's `listen.owner`, `group`, `mode`, `backlog` and
    /// `allowed_clients`. Setting it without `pm.status_path` makes the
    /// status path `/`, as php-fpm does.
    pub status_listen: Option<ListenAddress>,
}

impl PoolConfig {
    /// The pool's listeners: its `listen.address` (`false`) and its
    /// `pm.status_listen` (`true`: status and ping only), with the pool's
    /// listen settings.
    pub fn listeners(&self) -> Vec<(Listen, bool)> {
        let mut v = vec![(self.listen.clone(), false)];
        if let Some(a) = &self.local.status_listen {
            v.push((
                Listen {
                    address: a.clone(),
                    ..self.listen.clone()
                },
                true,
            ));
        }
        v
    }

    /// The php-cgi arguments carrying the pool's ini values: `["-n"]` with
    /// [`PoolConfig::no_php_ini`] (php-cgi then reads no php.ini and no
    /// scan directory), else `["-c", php_ini]` when the pool names one;
    /// then `["-d", "name=value", …]` (which win over any php.ini), plain
    /// values first, then admin values
    /// (admin values win on the same name; see [`PoolConfig::php_values`]).
    ///
    /// [`ADDITIVE_INI`] values never replace what the php.ini files set:
    /// they are passed as `name=${name},list`, which PHP's ini parser
    /// expands to the value read from php.ini and the scan directory
    /// (`zend_ini_get_var`: an earlier directive of that name), so the
    /// children disable both lists, as php-fpm does (`fpm_php.c` disables
    /// a pool's `disable_functions` on top of php.ini's). Without
    /// `security.pcntl`, [`PCNTL_FUNCTIONS`] are added to
    /// `disable_functions` the same way.
    pub fn ini_args(&self) -> Vec<String> {
        let mut args =
            Vec::with_capacity(2 * (self.php_values.len() + self.php_admin_values.len() + 2));
        if self.no_php_ini {
            args.push("-n".to_string());
        } else if let Some(ini) = &self.php_ini.file {
            args.push("-c".to_string());
            args.push(ini.to_string_lossy().into_owned());
        }
        let plain = self
            .php_values
            .iter()
            .filter(|(name, _)| !self.php_admin_values.contains_key(*name));
        let mut additive: Vec<(&str, Vec<&str>)> = Vec::new();
        for (name, value) in plain.chain(self.php_admin_values.iter()) {
            if ADDITIVE_INI.contains(&name.as_str()) {
                additive.push((name, ini_list(value).collect()));
                continue;
            }
            args.push("-d".to_string());
            args.push(format!("{name}={value}"));
        }
        if !self.pcntl {
            match additive.iter_mut().find(|(n, _)| *n == "disable_functions") {
                Some((_, list)) => list.extend(PCNTL_FUNCTIONS),
                None => additive.push(("disable_functions", PCNTL_FUNCTIONS.to_vec())),
            }
        }
        for (name, list) in additive {
            let mut seen: Vec<&str> = Vec::with_capacity(list.len());
            for f in list {
                if !seen.contains(&f) {
                    seen.push(f);
                }
            }
            // Under -n there is no php.ini value to keep.
            let read = if self.no_php_ini {
                String::new()
            } else {
                format!("${{{name}}},")
            };
            args.push("-d".to_string());
            args.push(format!("{name}={read}{}", seen.join(",")));
        }
        args
    }
}

/// The ini values whose pool settings add to php.ini's instead of
/// replacing it: php-fpm disables a pool's `disable_functions` and
/// `disable_classes` on top of what php.ini disabled at start
/// (`fpm_php_apply_defines_ex` in php-src `sapi/fpm/fpm/fpm_php.c`), so a
/// pool can only disable more. fpmd keeps that (see
/// [`PoolConfig::ini_args`]), and the pool's `php_value`, `php_admin_value`
/// and the command line's `-d` of one of these names are joined, never one
/// chosen over another.
pub const ADDITIVE_INI: &[&str] = &["disable_functions", "disable_classes"];

/// The names of an ini list value (`disable_functions`): split at commas
/// and spaces, as PHP splits it (`zend_disable_functions` in php-src
/// `Zend/zend_API.c`), empty names dropped.
pub fn ini_list(value: &str) -> impl Iterator<Item = &str> {
    value.split([',', ' ']).filter(|f| !f.is_empty())
}

/// PHP's `pcntl` functions (php-src 8.2 `ext/pcntl/pcntl.stub.php`),
/// disabled for web requests unless `security.pcntl = true`: Debian's
/// php-fpm is built without pcntl, its php-cgi with it, so a script moved
/// from php-fpm to fpmd would otherwise gain `pcntl_fork`, `pcntl_exec`
/// and the signal functions.
pub const PCNTL_FUNCTIONS: &[&str] = &[
    "pcntl_alarm",
    "pcntl_async_signals",
    "pcntl_errno",
    "pcntl_exec",
    "pcntl_fork",
    "pcntl_forkx",
    "pcntl_get_last_error",
    "pcntl_getpriority",
    "pcntl_rfork",
    "pcntl_setpriority",
    "pcntl_signal",
    "pcntl_signal_dispatch",
    "pcntl_signal_get_handler",
    "pcntl_sigprocmask",
    "pcntl_sigtimedwait",
    "pcntl_sigwaitinfo",
    "pcntl_strerror",
    "pcntl_unshare",
    "pcntl_wait",
    "pcntl_waitpid",
    "pcntl_wexitstatus",
    "pcntl_wifcontinued",
    "pcntl_wifexited",
    "pcntl_wifsignaled",
    "pcntl_wifstopped",
    "pcntl_wstopsig",
    "pcntl_wtermsig",
];

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
    /// The user's home directory (passwd's `pw_dir`) when fpmd runs as
    /// root and `user` names an account: the children get `USER` and
    /// `HOME` from it, as php-fpm's (`fpm_env_init_child`, over `env[…]`).
    /// `None`: neither is set.
    pub home: Option<std::path::PathBuf>,
}

/// The pool's listening socket (`listen.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// `listen.address` (required): unix socket path, `"IP:PORT"`,
    /// `"[IPv6]:PORT"` or a bare port ([`ListenAddress::Port`]). php-fpm:
    /// `listen`.
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
    /// `listen.acl_users`, `listen.acl_groups`: uids and gids given read
    /// and write on a unix socket by a POSIX ACL (php-fpm's, built with
    /// ACL support as Debian and RHEL build it). With either, the socket
    /// keeps fpmd's owner and group (`listen.owner`/`listen.group` may not
    /// be set, as php-fpm ignores them then). Empty: no ACL.
    pub acl_users: Vec<u32>,
    pub acl_groups: Vec<u32>,
}

/// Where a pool listens. Ordered (unix paths, then TCP addresses) so that
/// it can key a map of sockets.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ListenAddress {
    /// An absolute unix socket path.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
    /// A bare port (`listen = 9000`), php-fpm's implicit address: `[::]`
    /// (every IPv6 address and, as IPv4-mapped ones, every IPv4 address),
    /// and where that cannot be bound (no IPv6, or the port taken there)
    /// `0.0.0.0`, with php-fpm's NOTICE `Failed implicitly binding to ::,
    /// retrying with 0.0.0.0` (`fpm_socket_af_inet_listening_socket` in
    /// `sapi/fpm/fpm/fpm_sockets.c`). Shown as the port alone, as written.
    Port(u16),
}

impl ListenAddress {
    /// The TCP address bound first: `[::]:PORT` for a bare port. `None` for
    /// a unix socket.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            ListenAddress::Unix(_) => None,
            ListenAddress::Tcp(addr) => Some(*addr),
            ListenAddress::Port(port) => Some(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), *port)),
        }
    }

    /// Whether a socket bound to `bound` (as `getsockname` gives it) is
    /// this address's: the same address, or for a bare port `[::]:PORT` or
    /// `0.0.0.0:PORT` (what php-fpm, systemd's `ListenStream=PORT` or a
    /// fallback bound).
    pub fn is_bound_as(&self, bound: &ListenAddress) -> bool {
        match (self, bound) {
            (ListenAddress::Port(port), ListenAddress::Tcp(addr)) => {
                addr.port() == *port && addr.ip().is_unspecified()
            }
            _ => self == bound,
        }
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::Unix(path) => write!(f, "{}", path.display()),
            ListenAddress::Tcp(addr) => write!(f, "{addr}"),
            ListenAddress::Port(port) => write!(f, "{port}"),
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

/// The largest order a shared php-cgi parent reads, in bytes
/// (`pm.spawn = "shared"`: `order_buf` of `src/process/fork_server.c`):
/// it carries the pool's environment, groups, working directory and
/// process title to each child.
pub const SHARED_ORDER_MAX: usize = 1 << 17;

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
    /// One php-cgi parent for every pool with the same php-cgi, php.ini,
    /// ini values and `LD_PRELOAD` (php-fpm's model: one master forks every
    /// pool's children): it runs as fpmd's user, and each child it forks
    /// takes its pool's user, cgroup, limits, working directory, Landlock
    /// and environment before it serves
    /// ([`crate::process::shared_parent`]). Its opcache is shared between
    /// those pools, with `opcache.validate_root` and
    /// `opcache.validate_permission` on. Not with `chroot`.
    Shared,
}

impl Spawn {
    pub fn as_str(self) -> &'static str {
        match self {
            Spawn::Prefork => "prefork",
            Spawn::Exec => "exec",
            Spawn::Shared => "shared",
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

/// A pool's cgroup limits, as configured (`cgroup.*`; applied by
/// [`crate::process::cgroup`]); `None`: no limit (the
/// kernel's default is written, so that removing a key lifts the limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CgroupLimits {
    /// `cgroup.memory_max`, bytes.
    pub memory_max: Option<u64>,
    /// `cgroup.pids_max`, processes (threads count too: it is the kernel's
    /// `pids` controller).
    pub pids_max: Option<u32>,
    /// `cgroup.cpu_weight`, 1..=10000 (v2 `cpu.weight`; default 100).
    pub cpu_weight: Option<u32>,
}
