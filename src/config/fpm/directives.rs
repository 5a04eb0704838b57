//! Every directive php-fpm 8.2 reads (`ini_fpm_global_options` and
//! `ini_fpm_pool_options` in php-src `sapi/fpm/fpm/fpm_conf.c`, as Debian
//! builds it: with syslog, ACLs, systemd and AppArmor) and what fpmd does
//! with it: the fpmd key it becomes (with the value's kind), a default for
//! every pool, a notice (accepted, no effect, said so), or a refusal that
//! says what to do instead. fpmd's own keys may be written in a `.conf`
//! too (php-fpm would refuse such a file). Names compare ASCII
//! case-insensitively, as php-fpm's `strcasecmp`.

/// How a value is read (php-fpm's `fpm_conf_set_*` parser).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `fpm_conf_set_string`: text; `$pool` replaced; empty = unset.
    Str,
    /// Text where empty means empty (fpmd's `php_ini_scan_dir = ""`: none).
    Text,
    /// A string that is a path: relative to the prefix.
    Path,
    /// A string that is a listen address (a unix path without `/` is
    /// relative to the prefix, as `fpm_sockets_domain_from_address`).
    Listen,
    /// `chroot`: a path where a leading `$prefix` is the prefix.
    Chroot,
    /// `fpm_conf_set_integer`: `-?[0-9]*`.
    Int,
    /// `listen.backlog`: an integer; a negative one is the kernel's
    /// maximum (`net.core.somaxconn`), as `listen(2)` takes it.
    Backlog,
    /// `fpm_conf_set_boolean`.
    Bool,
    /// `fpm_conf_set_time`: seconds, or a number with `s`, `m`, `h`, `d`.
    Time,
    /// `fpm_conf_set_rlimit_core`: `unlimited` or an integer.
    Rlimit,
    /// `fpm_conf_set_pm`: `static`, `dynamic`, `ondemand`.
    Pm,
    /// `fpm_conf_set_log_level`.
    LogLevel,
    /// `error_log`: `syslog` is refused, anything else is a path.
    ErrorLog,
}

/// What fpmd does with a directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// Becomes the fpmd key (in `[global]` or the pool).
    To(&'static str, Kind),
    /// A global directive that php-fpm's children inherit from the master:
    /// the default of this key in every pool that sets none.
    PoolDefault(&'static str, Kind),
    /// Accepted; a notice says why it has no effect (the value is still
    /// checked as php-fpm checks it).
    Notice(Kind, &'static str),
    /// Refused with this advice.
    Refuse(&'static str),
    /// `prefix` (pool): the directory relative paths of the pool are
    /// relative to.
    Prefix,
    /// `process.max` (global): a bound checked against the pools'
    /// `pm.max_children` added up.
    ProcessMax,
}

use Action::*;
use Kind::*;

/// `[global]` directives.
pub(super) const GLOBAL: &[(&str, Action)] = &[
    ("pid", To("pid", Path)),
    ("error_log", To("error_log", ErrorLog)),
    ("syslog.ident", Notice(Str, "used only with error_log = syslog, which fpmd does not support")),
    ("syslog.facility", Notice(Str, "used only with error_log = syslog, which fpmd does not support")),
    ("log_buffering", Notice(Bool, "fpmd writes each line of a child's output whole, as php-fpm's log_buffering = yes does")),
    ("log_level", To("log_level", LogLevel)),
    ("log_limit", To("log_limit", Int)),
    ("emergency_restart_threshold", To("emergency_restart_threshold", Int)),
    ("emergency_restart_interval", To("emergency_restart_interval", Time)),
    ("process_control_timeout", To("process_control_timeout", Time)),
    ("process.max", ProcessMax),
    ("process.priority", PoolDefault("process.priority", Int)),
    ("daemonize", To("daemonize", Bool)),
    ("rlimit_files", PoolDefault("rlimit_files", Int)),
    ("rlimit_core", PoolDefault("rlimit_core", Rlimit)),
    ("events.mechanism", Notice(Str, "fpmd's event loop is epoll, whatever is asked")),
    ("systemd_interval", Notice(Time, "fpmd tells systemd its state when it changes, not on a timer")),
    // fpmd's own.
    ("control_socket", To("control_socket", Path)),
    ("log_format", To("log_format", Str)),
    ("watch", To("watch", Bool)),
    ("metrics.listen", To("metrics.listen", Listen)),
    ("php_ini", To("php_ini", Path)),
    ("php_ini_scan_dir", To("php_ini_scan_dir", Text)),
];

/// Pool directives.
pub(super) const POOL: &[(&str, Action)] = &[
    ("prefix", Prefix),
    ("user", To("user", Str)),
    ("group", To("group", Str)),
    ("listen", To("listen.address", Listen)),
    ("listen.backlog", To("listen.backlog", Backlog)),
    ("listen.acl_users", To("listen.acl_users", Str)),
    ("listen.acl_groups", To("listen.acl_groups", Str)),
    ("listen.owner", To("listen.owner", Str)),
    ("listen.group", To("listen.group", Str)),
    ("listen.mode", To("listen.mode", Str)),
    ("listen.allowed_clients", To("listen.allowed_clients", Str)),
    ("process.priority", To("process.priority", Int)),
    ("process.dumpable", To("process.dumpable", Bool)),
    ("pm", To("pm.mode", Pm)),
    ("pm.max_children", To("pm.max_children", Int)),
    ("pm.start_servers", To("pm.start_servers", Int)),
    ("pm.min_spare_servers", To("pm.min_spare_servers", Int)),
    ("pm.max_spare_servers", To("pm.max_spare_servers", Int)),
    ("pm.max_spawn_rate", To("pm.max_spawn_rate", Int)),
    ("pm.process_idle_timeout", To("pm.process_idle_timeout", Time)),
    ("pm.max_requests", To("pm.max_requests", Int)),
    ("pm.status_path", To("pm.status_path", Str)),
    ("pm.status_listen", To("pm.status_listen", Listen)),
    ("ping.path", To("ping.path", Str)),
    ("ping.response", To("ping.response", Str)),
    ("access.log", To("access.log", Path)),
    ("access.format", To("access.format", Str)),
    ("slowlog", To("slowlog", Path)),
    ("request_slowlog_timeout", To("request_slowlog_timeout", Time)),
    ("request_slowlog_trace_depth", Notice(Int, "fpmd's slow-log entries name the request, not a PHP backtrace (php-cgi cannot be traced as php-fpm traces its children)")),
    ("request_terminate_timeout", To("request_terminate_timeout", Time)),
    ("request_terminate_timeout_track_finished", To("request_terminate_timeout_track_finished", Bool)),
    ("rlimit_files", To("rlimit_files", Int)),
    ("rlimit_core", To("rlimit_core", Rlimit)),
    ("chroot", To("chroot", Chroot)),
    ("chdir", To("chdir", Path)),
    ("catch_workers_output", To("catch_workers_output", Bool)),
    ("decorate_workers_output", To("decorate_workers_output", Bool)),
    ("clear_env", To("clear_env", Bool)),
    ("security.limit_extensions", To("security.limit_extensions", Str)),
    ("apparmor_hat", Refuse("fpmd cannot change a child's AppArmor hat: confine fpmd with an AppArmor profile, or the pool with chroot, landlock.read and landlock.write")),
    // fpmd's own.
    ("php_cgi", To("php_cgi", Str)),
    ("pm.spawn", To("pm.spawn", Str)),
    ("pm.max_memory", To("pm.max_memory", Str)),
    ("request_queue_timeout", To("request_queue_timeout", Time)),
    ("graceful_timeout", To("graceful_timeout", Time)),
    ("no_new_privs", To("no_new_privs", Bool)),
    ("landlock.read", To("landlock.read", Path)),
    ("landlock.write", To("landlock.write", Path)),
    ("cgroup.memory_max", To("cgroup.memory_max", Str)),
    ("cgroup.pids_max", To("cgroup.pids_max", Int)),
    ("cgroup.cpu_weight", To("cgroup.cpu_weight", Int)),
    ("security.pcntl", To("security.pcntl", Bool)),
    ("fpm_sapi", To("fpm_sapi", Bool)),
    ("php_ini", To("php_ini", Path)),
    ("php_ini_scan_dir", To("php_ini_scan_dir", Text)),
];

/// The array directives (`name[key] = value`), php-fpm's exact names.
pub(super) const ARRAYS: &[&str] = &[
    "env",
    "php_value",
    "php_admin_value",
    "php_flag",
    "php_admin_flag",
    "access.suppress_path",
];

/// The directive called `name` (any case) in `table`.
pub(super) fn find(
    table: &'static [(&'static str, Action)],
    name: &str,
) -> Option<(&'static str, Action)> {
    table
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .copied()
}
