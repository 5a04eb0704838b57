//! The one registry of configuration keys: every key fpmd knows, where it
//! lives (`[global]` or a pool), and whether it is supported, known but not
//! supported yet (php-fpm keys that fpmd refuses rather than ignore), or a
//! table of free names (`env.NAME`, `php_value.NAME`). The unknown-key check
//! of a document, the suggestions for a misspelt key and the refusal of
//! keys not supported yet all read this table, so that adding a key is one
//! line here (plus its field in `raw.rs` and its validation).

use toml_edit::{Item, TableLike};

use super::render::{dotted, toml_key};
use super::source::SourceFile;
use super::ConfigError;

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
    global("metrics.listen"),
    global("php_ini"),
    global("php_ini_scan_dir"),
    global("warm_min_available"),
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

fn is_global_key(key: &str) -> bool {
    global_keys().any(|k| k == key)
}

/// `key` is a table of known global keys (`metrics`).
fn is_global_prefix(key: &str) -> bool {
    global_keys()
        .any(|k| k.len() > key.len() && k.starts_with(key) && k.as_bytes()[key.len()] == b'.')
}

/// The first key of a `[global]` table (`global.` + `prefix`) that is not
/// in the registry: its segments from `global` on and its item.
fn unknown_global_key<'t>(
    table: &'t dyn TableLike,
    prefix: &[String],
) -> Option<(Vec<String>, &'t Item)> {
    for (k, sub) in table.iter() {
        let mut segs = prefix.to_vec();
        segs.push(k.to_string());
        let key = segs[1..].join(".");
        if is_global_key(&key) {
            continue;
        }
        match sub.as_table_like() {
            Some(t) if is_global_prefix(&key) => {
                if let Some(found) = unknown_global_key(t, &segs) {
                    return Some(found);
                }
            }
            _ => return Some((segs, sub)),
        }
    }
    None
}

/// Pool keys that are known but not supported yet.
pub(super) fn not_yet_pool_keys() -> impl Iterator<Item = &'static str> {
    names(Scope::Pool, Status::NotYet)
}

/// The pool tables of free names (`env`, `php_value`, …).
pub(super) fn pool_maps() -> impl Iterator<Item = &'static str> {
    names(Scope::Pool, Status::Map)
}

fn is_pool_map(key: &str) -> bool {
    pool_maps().any(|k| k == key)
}

/// Pool keys with a value of their own (supported or not yet).
fn pool_leaves() -> impl Iterator<Item = &'static str> {
    KEYS.iter()
        .filter(|k| k.scope == Scope::Pool && k.status != Status::Map)
        .map(|k| k.name)
}

fn is_pool_leaf(key: &str) -> bool {
    pool_leaves().any(|k| k == key)
}

/// `key` is a table of known pool keys (`listen`, `pm`, `ping`, …).
fn is_pool_prefix(key: &str) -> bool {
    pool_leaves()
        .any(|k| k.len() > key.len() && k.starts_with(key) && k.as_bytes()[key.len()] == b'.')
}

/// The closest candidate to `unknown`, when it is close enough.
pub(super) fn closest<'a>(
    unknown: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
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

/// The known pool key closest to `unknown` (pool-relative, dotted).
fn suggest_pool_key(unknown: &str) -> Option<String> {
    if let Some((_, new)) = PHP_FPM_RENAMES.iter().find(|(old, _)| *old == unknown) {
        return Some(new.to_string());
    }
    let mut candidates: Vec<String> = pool_leaves().map(str::to_string).collect();
    if let Some((_, rest)) = unknown.split_once('.') {
        candidates.extend(pool_maps().map(|m| format!("{m}.{rest}")));
    }
    closest(unknown, candidates.iter().map(|s| s.as_str())).map(str::to_string)
}

/// The known global key closest to `unknown` (`global.X`).
fn suggest_global_key(unknown: &str) -> Option<String> {
    let candidates: Vec<String> = global_keys().map(|g| format!("global.{g}")).collect();
    // A table of keys given a value (`metrics = 9253`): its key.
    let table = format!("{unknown}.");
    if let Some(key) = candidates.iter().find(|c| c.starts_with(&table)) {
        return Some(key.clone());
    }
    closest(unknown, candidates.iter().map(|s| s.as_str())).map(str::to_string)
}

/// Checks the shape of a file; returns the names of the pools it defines.
pub(super) fn check_structure(src: &SourceFile, is_main: bool) -> Result<Vec<String>, ConfigError> {
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
            if let Some((segs, sub)) = unknown_global_key(table, &["global".to_string()]) {
                let (segs, key_line) = first_leaf(src, segs, sub);
                let full = dotted(&segs);
                let message = match suggest_global_key(&full) {
                    Some(s) => format!("unknown key (did you mean '{s}'?)"),
                    None => format!(
                        "unknown key (global keys are: {})",
                        global_keys().collect::<Vec<_>>().join(", ")
                    ),
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
                // Named as the pool only when it could be one: `[[""]]`
                // showed as the pool `[]`.
                return Err(err(
                    validate_pool_name(name).is_ok().then_some(name),
                    None,
                    format!(
                        "a pool must be a table [{0}], not an array of tables [[{0}]]",
                        toml_key(name)
                    ),
                ));
            }
            Item::Table(_) | Item::Value(toml_edit::Value::InlineTable(_)) => {}
            _ => {
                let message = if is_main && is_global_key(name) {
                    format!("unknown top-level key (did you mean 'global.{name}'? global keys go in the [global] table)")
                } else {
                    "a top-level key must be inside a pool table such as [www] (or [global] in the main file)".to_string()
                };
                // As TOML spells it, as every other key in a message: an
                // empty or spaced name is quoted (`key '""'`, not `key ''`).
                return Err(err(None, Some(toml_key(name)), message));
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
        let known = is_pool_leaf(&key) || (prefix.len() == 1 && is_pool_map(k));
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
                            is_pool_leaf(k2) || is_pool_prefix(k2) || is_pool_map(k2)
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
            "unknown key (global keys are: pid, error_log, log_level, include, emergency_restart_threshold, emergency_restart_interval, process_control_timeout, control_socket, watch, daemonize, log_format, metrics.listen, php_ini, php_ini_scan_dir, warm_min_available)",
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
