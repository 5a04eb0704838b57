//! Configuration: owns reading, parsing and validating fpmd's TOML files
//! (the main file and the pool files it includes) into the validated types
//! below, which are the only configuration types the rest of the daemon uses.
//!
//! The module is pure except for reading the configuration files (and
//! globbing `global.include`), resolving users and groups through the system
//! user database, checking that each pool's php-cgi binary exists and is
//! executable, checking that `chdir` is a directory, resolving the
//! directory of each unix socket (to find two pools on one socket), and
//! reading fpmd's own environment (`$VAR` in `env.*`, `PATH` for a bare
//! `php_cgi`), and reading what fpmd may do here (its capabilities and
//! groups, `RLIMIT_NPROC`, `kernel.pid_max`, `kernel.threads-max`,
//! `net.ipv4.ip_unprivileged_port_start`; `users::Host`). It must not
//! touch sockets or processes: it never binds, connects, forks or signals.
//!
//! Pipeline: file text → `toml_edit` document (`source.rs`: syntax errors,
//! lines of keys) → the check of its keys against the one key registry
//! (`keys.rs`: unknown keys, suggestions) → serde raw structs (`raw.rs`:
//! `deny_unknown_fields`, type errors, via `serde_path_to_error` for the
//! key) → validation (`validate.rs`, with `users.rs` for users, groups and
//! php-cgi; then the checks across pools) → [`Config`] (`model.rs`).
//! `render.rs` prints it back for `fpmd -t`; `diff.rs` compares two of them
//! for a reload ([`Config::diff`]).
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
//! - what cannot work on this machine is refused here, not at start:
//!   `pm.max_children` beyond `kernel.pid_max`/`threads-max` (all pools
//!   together) or the soft `RLIMIT_NPROC` (the pools of one user), and,
//!   without the capability, a `listen.owner`/`listen.group` fpmd cannot
//!   chown to or a privileged port (`validate::check_host_limits`);
//! - two pools never share a listen address, nor overlapping TCP addresses
//!   (`0.0.0.0:9000` and `127.0.0.1:9000`): validation refuses it, naming
//!   both pools, so `fpmd -t` finds it and not only the bind;
//! - pool names may contain only ASCII letters, digits, `.`, `_` and `-`
//!   (they appear in logs, socket names and on the `fpmd status` command
//!   line); a name with a dot must be quoted in TOML: `["example.com"]`.

use std::path::{Path, PathBuf};

mod diff;
mod fpm;
mod keys;
mod model;
mod raw;
mod render;
mod source;
mod users;
mod validate;

#[cfg(test)]
mod testutil;

pub use diff::{
    changed_fields, pool_change, Change, ConfigDiff, GlobalChanges, ListenChange, ListenerChanges,
    PoolChange,
};
pub use model::{
    Config, Credentials, Global, Isolation, Landlock, Listen, ListenAddress, LocalEndpoints,
    LogLevel, LogTarget, Origins, PhpIni, PmMode, PoolConfig, ProcessManager, Sources, Spawn,
    DEFAULT_LIMIT_EXTENSIONS,
};
pub use raw::{ByteSize, Duration};

use source::SourceFile;
use users::Ids;

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
// Public entry points
// ---------------------------------------------------------------------------

/// Load, parse and validate the main configuration file at `path` and every
/// file its `global.include` matches, with the default [`LoadOptions`].
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with_options(path, &LoadOptions::default())
}

/// What the command line adds to a configuration file (kept in
/// [`Config::options`], so that a reload reads the files the same way).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// php-fpm's `-p`/`--prefix`: the directory a php-fpm configuration's
    /// relative paths (and `include` patterns) are relative to. `None`:
    /// the main file's directory. Unused for TOML files, whose relative
    /// paths are relative to the file that holds them.
    pub prefix: Option<PathBuf>,
    /// php-fpm's `-c`: the php.ini file or directory every pool's php-cgi
    /// gets as `-c`, unless the pool sets `php_ini` (it wins over
    /// `global.php_ini`). `None`: `global.php_ini`, else php-cgi's own.
    pub php_ini: Option<PathBuf>,
}

impl LoadOptions {
    /// The command-line arguments that give these options to another fpmd
    /// (a binary upgrade's): `-c PHP_INI` (and `-p PREFIX` once the command
    /// line has it).
    pub fn args(&self) -> Vec<std::ffi::OsString> {
        let mut out = Vec::new();
        if let Some(ini) = &self.php_ini {
            out.push("-c".into());
            out.push(ini.clone().into_os_string());
        }
        out
    }
}

/// Which files a path names on fpmd's command line: `-c PATH` is the
/// configuration when PATH ends in `.toml` or `.conf`, else (a php.ini
/// file, or a directory) php-fpm's `-c`, the php.ini of the children.
pub fn is_config_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml" || e == "conf")
}

/// [`load`] with `opts`. A main file ending in `.conf` is php-fpm's
/// configuration (its includes too), read with php-fpm's rules (see
/// `fpm/mod.rs`); any other is fpmd's TOML.
pub fn load_with_options(path: &Path, opts: &LoadOptions) -> Result<Config, ConfigError> {
    let ids = Ids::current();
    load_with(&FileSystem, path, opts, ids, &users::Host::of(ids))
}

/// The TOML document the php-fpm configuration at `path` translates to,
/// not validated (for finding `control_socket` in a configuration a
/// reload is about to refuse). Errors: reading or translating the files.
pub fn translate(path: &Path, opts: &LoadOptions) -> Result<String, ConfigError> {
    Ok(fpm::translate(&FileSystem, path, opts)?.text)
}

/// `fpmd convert`: the php-fpm configuration at `path` as one TOML document
/// (the global table and every pool), each value's php-fpm file, line and
/// directive in a comment. It is converted only when it loads: loading the
/// output gives the same configuration (`fpmd -t` prints the same values).
/// Errors: those of [`load_with_options`]; a file that is not a `.conf`.
pub fn convert(path: &Path, opts: &LoadOptions) -> Result<String, ConfigError> {
    if !fpm::is_fpm_conf(path) {
        return Err(ConfigError::file_only(
            path,
            "fpmd convert reads php-fpm's configuration: a file ending in .conf",
        ));
    }
    load_with_options(path, opts)?;
    Ok(fpm::translate(&FileSystem, path, opts)?.annotated())
}

/// [`load`] on files held in memory instead of the file system: `main` is
/// the main file's path, `files` maps every path (main file included) to
/// its bytes; `global.include` globs are matched against the paths of
/// `files`. Everything else (users, php-cgi, `chdir`, the directories of
/// unix sockets, fpmd's environment) is checked against the running system,
/// as [`load`] does. Errors as [`load`]: a path not in `files` is "cannot
/// read configuration file", bytes that are not UTF-8 likewise. This is the
/// configuration fuzz target's entry point (`fuzz/fuzz_targets/config.rs`).
pub fn load_from_memory(
    main: &Path,
    files: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
) -> Result<Config, ConfigError> {
    let ids = Ids::current();
    load_with(
        &Memory(files),
        main,
        &LoadOptions::default(),
        ids,
        &users::Host::of(ids),
    )
}

/// Where the configuration's files come from: the file system ([`load`]) or
/// memory ([`load_from_memory`]).
trait Reader {
    /// The text of the file at `path`. Errors: "cannot read configuration
    /// file: …" (missing, unreadable, not UTF-8).
    fn read_text(&self, path: &Path) -> Result<String, ConfigError>;
    /// The file at `path`, parsed as TOML.
    fn read(&self, path: &Path) -> Result<SourceFile, ConfigError> {
        SourceFile::parse(path, self.read_text(path)?)
    }
    /// The files (not directories) whose paths match the glob `pattern`, in
    /// any order; an error is a message naming what could not be read.
    fn glob(&self, pattern: &glob::Pattern) -> Result<Vec<PathBuf>, String>;
    /// The path with symlinks resolved, if it exists.
    fn canonicalize(&self, path: &Path) -> Option<PathBuf>;
}

struct FileSystem;

impl Reader for FileSystem {
    fn read_text(&self, path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|e| {
            ConfigError::file_only(path, format!("cannot read configuration file: {e}"))
        })
    }

    fn glob(&self, pattern: &glob::Pattern) -> Result<Vec<PathBuf>, String> {
        let paths = glob::glob(pattern.as_str()).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for entry in paths {
            let p =
                entry.map_err(|e| format!("cannot read {}: {}", e.path().display(), e.error()))?;
            if p.is_file() {
                out.push(p);
            }
        }
        Ok(out)
    }

    fn canonicalize(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }
}

struct Memory<'a>(&'a std::collections::BTreeMap<PathBuf, Vec<u8>>);

impl Reader for Memory<'_> {
    fn read_text(&self, path: &Path) -> Result<String, ConfigError> {
        let cannot = |e: &dyn std::fmt::Display| {
            ConfigError::file_only(path, format!("cannot read configuration file: {e}"))
        };
        let bytes = self
            .0
            .get(path)
            .ok_or_else(|| cannot(&std::io::Error::from(std::io::ErrorKind::NotFound)))?;
        String::from_utf8(bytes.clone()).map_err(|_| cannot(&"stream did not contain valid UTF-8"))
    }

    fn glob(&self, pattern: &glob::Pattern) -> Result<Vec<PathBuf>, String> {
        // As glob::glob walks directories: '*' never crosses a '/'.
        let options = glob::MatchOptions {
            require_literal_separator: true,
            ..glob::MatchOptions::new()
        };
        Ok(self
            .0
            .keys()
            .filter(|p| pattern.matches_path_with(p, options))
            .cloned()
            .collect())
    }

    fn canonicalize(&self, path: &Path) -> Option<PathBuf> {
        self.0.contains_key(path).then(|| path.to_path_buf())
    }
}

/// `./fpmd.toml` if it exists, else `/etc/fpmd/fpmd.toml` if it exists.
pub fn find_default_config() -> Option<PathBuf> {
    ["fpmd.toml", "/etc/fpmd/fpmd.toml"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

#[cfg(test)]
fn load_as(path: &Path, ids: Ids) -> Result<Config, ConfigError> {
    load_with(
        &FileSystem,
        path,
        &LoadOptions::default(),
        ids,
        &users::Host::of(ids),
    )
}

/// The whole pipeline; `ids` and `host` say what fpmd may do here (tests
/// pretend).
fn load_with(
    reader: &dyn Reader,
    path: &Path,
    opts: &LoadOptions,
    ids: Ids,
    host: &users::Host,
) -> Result<Config, ConfigError> {
    if fpm::is_fpm_conf(path) {
        let t = fpm::translate(reader, path, opts)?;
        let mut config = SourceFile::parse(path, t.text.clone())
            .and_then(|main| load_document(reader, main, opts, ids, host))
            .map_err(|e| t.map_error(e))?;
        t.fix_up(&mut config);
        return Ok(config);
    }
    load_document(reader, reader.read(path)?, opts, ids, host)
}

/// The pipeline from the main file's document on.
fn load_document(
    reader: &dyn Reader,
    main: SourceFile,
    opts: &LoadOptions,
    ids: Ids,
    host: &users::Host,
) -> Result<Config, ConfigError> {
    let path = main.path.clone();
    let path = path.as_path();
    keys::check_structure(&main, true)?;
    let raw_main = raw::deserialize_file(&main)?;
    let (global, includes) =
        validate::validate_global(&main, raw_main.global.unwrap_or_default(), ids, opts)?;

    let mut files = vec![(main, raw_main.pools)];
    for inc in find_includes(reader, &files[0].0, &includes)? {
        let src = reader.read(&inc)?;
        keys::check_structure(&src, false)?;
        let raw = raw::deserialize_file(&src)?;
        files.push((src, raw.pools));
    }

    validate::check_pool_names(&files)?;

    let mut pools = Vec::new();
    let mut origin = Vec::new();
    for (i, (src, raw_pools)) in files.iter_mut().enumerate() {
        for (name, raw) in std::mem::take(raw_pools) {
            pools.push(validate::validate_pool(src, &name, raw, ids, &global)?);
            origin.push(i);
        }
    }
    let located: Vec<_> = origin.iter().map(|&i| &files[i].0).zip(&pools).collect();
    validate::check_listen_addresses(&files[0].0, &global, &located)?;
    validate::check_host_limits(&files[0].0, &global, &located, ids, host)?;
    let sources = Sources {
        files: files.iter().map(|(src, _)| src.path.clone()).collect(),
        include_globs: includes
            .iter()
            .map(|pat| full_glob(&files[0].0, pat))
            .collect(),
    };
    let mut origins = Origins::default();
    if let Some(t) = files[0].0.doc.get("global").and_then(|i| i.as_table_like()) {
        origins
            .0
            .insert(String::new(), source::key_lines(&files[0].0, t));
    }
    for (pool, &i) in pools.iter().zip(&origin) {
        let src = &files[i].0;
        if let Some(t) = src.doc.get(&pool.name).and_then(|i| i.as_table_like()) {
            origins
                .0
                .insert(pool.name.clone(), source::key_lines(src, t));
        }
    }
    Ok(Config {
        file: path.to_path_buf(),
        global,
        pools,
        sources,
        origins,
        options: opts.clone(),
        notices: Vec::new(),
    })
}

/// An include pattern as a glob over the file system: relative ones are
/// relative to the main file's directory.
fn full_glob(main: &SourceFile, pat: &str) -> String {
    let display_dir = main.path.parent().unwrap_or(Path::new(""));
    if Path::new(pat).is_absolute() || display_dir.as_os_str().is_empty() {
        pat.to_string()
    } else {
        let dir = glob::Pattern::escape(&display_dir.to_string_lossy());
        format!("{}/{pat}", dir.trim_end_matches('/'))
    }
}

/// The files matched by the include patterns, relative to the main file's
/// directory, sorted by name within each pattern, without duplicates and
/// without the main file itself.
fn find_includes(
    reader: &dyn Reader,
    main: &SourceFile,
    patterns: &[String],
) -> Result<Vec<PathBuf>, ConfigError> {
    let err = |message: String| ConfigError {
        file: main.path.clone(),
        line: main.find_line(&["global", "include"]),
        pool: None,
        key: Some("global.include".into()),
        message,
    };
    let main_canon = reader.canonicalize(&main.path);
    let mut out: Vec<PathBuf> = Vec::new();
    let mut canon_seen = Vec::new();
    for pat in patterns {
        let full = glob::Pattern::new(&full_glob(main, pat))
            .map_err(|e| err(format!("invalid glob pattern \"{pat}\": {e}")))?;
        let mut matched = reader.glob(&full).map_err(err)?;
        matched.sort();
        for p in matched {
            let canon = reader.canonicalize(&p);
            if canon.is_some() && (canon == main_canon || canon_seen.contains(&canon)) {
                continue;
            }
            canon_seen.push(canon);
            out.push(p);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::render::toml_str;
    use crate::config::testutil::*;
    use std::net::{IpAddr, Ipv6Addr, SocketAddr};

    #[test]
    fn full_config_with_includes() {
        let main = r#"# fpmd.toml
[global]
pid = "run/fpmd.pid"
error_log = "log/fpmd.log"
log_level = "debug"
include = "pool.d/*.toml"
process_control_timeout = "10s"
control_socket = "run/fpmd.sock"
watch = true

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
                emergency_restart: None,
                process_control_timeout: Some(std::time::Duration::from_secs(10)),
                control_socket: d.join("run/fpmd.sock"),
                watch: true,
                metrics_listen: None,
                php_ini: None,
                php_ini_scan_dir: None,
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
                acl_users: Vec::new(),
                acl_groups: Vec::new(),
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
            access_log: None,
            access_format: Default::default(),
            access_suppress_paths: Vec::new(),
            request_queue_timeout: None,
            catch_workers_output: false,
            decorate_workers_output: true,
            graceful_timeout: Some(std::time::Duration::from_secs(10)),
            cgroup: Default::default(),
            pcntl: false,
            limit_extensions: vec![".php".into(), ".phar".into()],
            local: LocalEndpoints {
                ping_response: "pong".into(),
                ..Default::default()
            },
            isolation: Default::default(),
            php_ini: bbb.php_ini.clone(),
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
                emergency_restart: None,
                process_control_timeout: None,
                control_socket: if nix::unistd::geteuid().is_root() {
                    PathBuf::from("/run/fpmd/fpmd.sock")
                } else {
                    dir.path().join("fpmd.sock")
                },
                watch: false,
                metrics_listen: None,
                php_ini: None,
                php_ini_scan_dir: None,
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
        assert_eq!(p.graceful_timeout, None);
        assert!(!p.pcntl);
        assert_eq!(
            p.ini_args(),
            [
                "-d".to_string(),
                format!(
                    "disable_functions={}",
                    crate::config::model::PCNTL_FUNCTIONS.join(",")
                )
            ]
        );
        assert_eq!(p.cgroup, crate::cgroup::Limits::default());
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

    /// The fuzz target's entry point: the same pipeline as `load`, the
    /// files and the include glob in memory.
    #[test]
    fn load_from_memory_as_load() {
        let files: std::collections::BTreeMap<PathBuf, Vec<u8>> = [
            ("/m/fpmd.toml", INCLUDE_MAIN.to_string()),
            ("/m/pool.d/b.toml", pool("b", "")),
            ("/m/pool.d/a.toml", pool("a", "")),
            ("/m/pool.d/sub/c.toml", pool("c", "")),
            ("/m/pool.d/d.conf", pool("d", "")),
        ]
        .into_iter()
        .map(|(p, t)| (PathBuf::from(p), t.into_bytes()))
        .collect();
        let c = load_from_memory(Path::new("/m/fpmd.toml"), &files).unwrap();
        let names: Vec<&str> = c.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "sorted, '*' stops at '/', only *.toml");
        assert_eq!(c.pools[0].file, PathBuf::from("/m/pool.d/a.toml"));
        let e = load_from_memory(Path::new("/m/other.toml"), &files).unwrap_err();
        assert!(
            e.message.starts_with("cannot read configuration file: "),
            "{e}"
        );
        let bad = [(
            PathBuf::from("/m/fpmd.toml"),
            b"[www]\nuser = \"\xff\"\n".to_vec(),
        )]
        .into();
        let e = load_from_memory(Path::new("/m/fpmd.toml"), &bad).unwrap_err();
        assert_eq!(
            e.message,
            "cannot read configuration file: stream did not contain valid UTF-8"
        );
        // As load() says it of the same bytes on disk.
        let dir = tempfile::tempdir().unwrap();
        let on_disk = dir.path().join("fpmd.toml");
        std::fs::write(&on_disk, &bad[Path::new("/m/fpmd.toml")]).unwrap();
        assert_eq!(load(&on_disk).unwrap_err().message, e.message);
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
}
