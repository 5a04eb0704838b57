//! The one registry of configuration keys: every key fpmd knows, where it
//! lives (`[global]` or a pool), and whether it is supported, known but not
//! supported yet (php-fpm keys that fpmd refuses rather than ignore), or a
//! table of free names (`env.NAME`, `php_value.NAME`). The unknown-key check
//! of a document, the suggestions for a misspelt key and the refusal of
//! keys not supported yet all read this table, so that adding a key is one
//! line here (plus its field in `raw.rs` and its validation).

/// Where a key lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// In `[global]` of the main file (`global.KEY`).
    Global,
    /// In a pool table (`[www] KEY`).
    Pool,
}

/// What fpmd does with a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    /// Parsed, validated and applied.
    Supported,
    /// A php-fpm key fpmd does not implement yet: type-checked, then
    /// refused when set ("not supported yet"), so that a configuration
    /// never silently means something else.
    NotYet,
    /// A table whose keys are free names (`env.NAME`, `php_value.NAME`).
    Map,
}

/// One known key: its dotted name (relative to `[global]` or the pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Key {
    pub(super) name: &'static str,
    pub(super) scope: Scope,
    pub(super) status: Status,
}

impl Key {
    const fn new(name: &'static str, scope: Scope, status: Status) -> Key {
        Key {
            name,
            scope,
            status,
        }
    }
}

const fn global(name: &'static str) -> Key {
    Key::new(name, Scope::Global, Status::Supported)
}

const fn supported(name: &'static str) -> Key {
    Key::new(name, Scope::Pool, Status::Supported)
}

/// A known php-fpm key fpmd does not implement yet: refused with "not
/// supported yet" (none at present; kept for the php-fpm ini front-end).
#[allow(dead_code)]
const fn not_yet(name: &'static str) -> Key {
    Key::new(name, Scope::Pool, Status::NotYet)
}

const fn map(name: &'static str) -> Key {
    Key::new(name, Scope::Pool, Status::Map)
}

/// Every key, in the order messages list them.
pub(super) const KEYS: &[Key] = &[
    global("pid"),
    global("error_log"),
    global("log_level"),
    global("include"),
    global("emergency_restart_threshold"),
    global("emergency_restart_interval"),
    global("process_control_timeout"),
    global("control_socket"),
    global("watch"),
    global("daemonize"),
    global("log_format"),
    global("log_limit"),
    global("metrics.listen"),
    global("php_ini"),
    global("php_ini_scan_dir"),
    global("warm_min_available"),
    global("warm_timeout"),
    global("sched_batch"),
    supported("user"),
    supported("group"),
    supported("php_cgi"),
    supported("listen.address"),
    supported("listen.owner"),
    supported("listen.group"),
    supported("listen.mode"),
    supported("listen.backlog"),
    supported("listen.allowed_clients"),
    supported("listen.acl_users"),
    supported("listen.acl_groups"),
    supported("chdir"),
    supported("clear_env"),
    supported("pm.mode"),
    supported("pm.max_children"),
    supported("pm.max_requests"),
    supported("pm.spawn"),
    supported("pm.max_memory"),
    supported("pm.start_servers"),
    supported("pm.min_spare_servers"),
    supported("pm.max_spare_servers"),
    supported("pm.max_spawn_rate"),
    supported("pm.process_idle_timeout"),
    supported("request_terminate_timeout"),
    supported("request_slowlog_timeout"),
    supported("slowlog"),
    supported("request_queue_timeout"),
    supported("catch_workers_output"),
    supported("decorate_workers_output"),
    supported("fpm_sapi"),
    supported("request_terminate_timeout_track_finished"),
    supported("graceful_timeout"),
    supported("chroot"),
    supported("rlimit_files"),
    supported("rlimit_core"),
    supported("process.priority"),
    supported("process.dumpable"),
    supported("no_new_privs"),
    supported("landlock.read"),
    supported("landlock.write"),
    supported("pm.status_path"),
    supported("pm.status_listen"),
    supported("ping.path"),
    supported("ping.response"),
    supported("access.log"),
    supported("access.format"),
    supported("access.suppress_path"),
    supported("security.pcntl"),
    supported("cgroup.memory_max"),
    supported("cgroup.pids_max"),
    supported("cgroup.cpu_weight"),
    supported("security.limit_extensions"),
    supported("php_ini"),
    supported("php_ini_scan_dir"),
    map("env"),
    map("php_value"),
    map("php_flag"),
    map("php_admin_value"),
    map("php_admin_flag"),
];

/// A key of the registry as documentation sees it ([`registry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryKey {
    /// Dotted, relative to `[global]` or the pool (`pm.max_children`); for
    /// a table of free names, the table (`env`).
    pub name: &'static str,
    /// In `[global]` (else in a pool).
    pub global: bool,
    /// A table of free names (`env.NAME`, `php_value.NAME`).
    pub map: bool,
}

/// Every key the parser knows, in registry order: what the man page
/// `fpmd.toml(5)` must describe (its test, `src/man_pages.rs`, compares).
pub fn registry() -> impl Iterator<Item = RegistryKey> {
    KEYS.iter().map(|k| RegistryKey {
        name: k.name,
        global: k.scope == Scope::Global,
        map: k.status == Status::Map,
    })
}

/// php-fpm's bare directives that fpmd writes as a dotted key.
pub(super) const PHP_FPM_RENAMES: &[(&str, &str)] =
    &[("listen", "listen.address"), ("pm", "pm.mode")];

fn names(scope: Scope, status: Status) -> impl Iterator<Item = &'static str> {
    KEYS.iter()
        .filter(move |k| k.scope == scope && k.status == status)
        .map(|k| k.name)
}

/// The `[global]` keys, in registry order.
pub(super) fn global_keys() -> impl Iterator<Item = &'static str> {
    names(Scope::Global, Status::Supported)
}

pub(super) fn is_global_key(key: &str) -> bool {
    global_keys().any(|k| k == key)
}

/// `key` is a table of known global keys (`metrics`).
pub(super) fn is_global_prefix(key: &str) -> bool {
    global_keys()
        .any(|k| k.len() > key.len() && k.starts_with(key) && k.as_bytes()[key.len()] == b'.')
}

/// Pool keys that are known but not supported yet.
pub(super) fn not_yet_pool_keys() -> impl Iterator<Item = &'static str> {
    names(Scope::Pool, Status::NotYet)
}

/// The pool tables of free names (`env`, `php_value`, …).
pub(super) fn pool_maps() -> impl Iterator<Item = &'static str> {
    names(Scope::Pool, Status::Map)
}

pub(super) fn is_pool_map(key: &str) -> bool {
    pool_maps().any(|k| k == key)
}

/// Pool keys with a value of their own (supported or not yet).
pub(super) fn pool_leaves() -> impl Iterator<Item = &'static str> {
    KEYS.iter()
        .filter(|k| k.scope == Scope::Pool && k.status != Status::Map)
        .map(|k| k.name)
}

pub(super) fn is_pool_leaf(key: &str) -> bool {
    pool_leaves().any(|k| k == key)
}

/// `key` is a table of known pool keys (`listen`, `pm`, `ping`, …).
pub(super) fn is_pool_prefix(key: &str) -> bool {
    pool_leaves()
        .any(|k| k.len() > key.len() && k.starts_with(key) && k.as_bytes()[key.len()] == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testutil::*;

    /// Every key of the registry is a field of the raw structs (serde
    /// never calls it unknown), in `[global]` or in a pool.
    #[test]
    fn registry_matches_the_raw_structs() {
        for k in KEYS {
            let key = match k.status {
                Status::Map => format!("{}.X", k.name),
                _ => k.name.to_string(),
            };
            let text = match k.scope {
                Scope::Global => format!("[global]\n{key} = []\n{}", pool("www", "")),
                Scope::Pool => format!("[www]\n{key} = []\n"),
            };
            let (_dir, r) = try_load(&text, &[]);
            if let Err(e) = r {
                assert!(
                    !e.message.contains("unknown"),
                    "{key} ({:?}) is not known to serde: {e}",
                    k.scope
                );
            }
        }
        let mut names: Vec<_> = KEYS
            .iter()
            .map(|k| (k.scope == Scope::Global, k.name))
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), KEYS.len(), "a key is listed twice");
    }

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
                "listen.acl_user = \"x\"",
                7,
                "listen.acl_user",
                "unknown key (did you mean 'listen.acl_users'?)",
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
        let (dir, e) = load_err("[global]\ndaemonise = false\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            None,
            Some("global.daemonise"),
            "unknown key (did you mean 'global.daemonize'?)",
        );
        let (dir, e) = load_err("[global]\nnothing_like_it = false\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            None,
            Some("global.nothing_like_it"),
            "unknown key (global keys are: pid, error_log, log_level, include, emergency_restart_threshold, emergency_restart_interval, process_control_timeout, control_socket, watch, daemonize, log_format, log_limit, metrics.listen, php_ini, php_ini_scan_dir, warm_min_available, warm_timeout, sched_batch)",
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
            &pool("\"example.com\"", "").replace("/tmp/\"example.com\".sock", "/tmp/example.sock"),
            &[],
        );
        assert_eq!(c.pools[0].name, "example.com");
    }

    #[test]
    fn unsupported_yet_keys() {
        // Every php-fpm key fpmd knows is supported now; the php-fpm ini
        // front-end (issue 11) may add some again.
        let cases: [(&str, &str); 0] = [];
        assert_eq!(
            cases.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            not_yet_pool_keys().collect::<Vec<_>>(),
            "every key of the registry not supported yet is tested"
        );
        for (key, value) in cases {
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
        // Found by the config fuzz target: `"" = ""` was reported as `key ''`.
        for (text, key) in [("\"\" = \"\"\n", "\"\""), ("\"a b\" = 1\n", "\"a b\"")] {
            let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", text)]);
            assert_err(&dir, &e, "pool.d/www.toml", Some(1), None, Some(key), "a top-level key must be inside a pool table such as [www] (or [global] in the main file)");
        }
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
        // Found by the config fuzz target: `[[""]]` was the pool `[]`.
        let (dir, e) = load_err("[[\"\"]]\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(1),
            None,
            None,
            "a pool must be a table [\"\"], not an array of tables [[\"\"]]",
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
}
