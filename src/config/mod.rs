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
//!   that contains them (to the prefix with php-fpm's `-p`, see
//!   [`LoadOptions`]), and are stored absolute;
//! - a bare port in `listen.address` binds `[::]` (IPv6 and IPv4 clients)
//!   and falls back to `0.0.0.0`, as php-fpm does
//!   ([`ListenAddress::Port`]);
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

pub mod access_format;
mod diff;
mod error;
mod fpm;
mod keys;
mod load;
mod model;
mod options;
pub mod paths;
mod php;
mod raw;
mod render;
mod source;
mod structure;
mod toml;
mod users;
mod validate;

#[cfg(test)]
mod testutil;

pub use diff::{
    changed_fields, pool_change, Change, ConfigDiff, GlobalChanges, ListenChange, ListenerChanges,
    PoolChange,
};
pub use keys::{registry, RegistryKey};
pub use model::{
    CgroupLimits, Config, Credentials, Global, Isolation, Landlock, Listen, ListenAddress,
    LocalEndpoints, LogFormat, LogLevel, LogTarget, MinAvailable, Origins, PhpIni, PmMode,
    PoolConfig, ProcessManager, Sources, Spawn, ADDITIVE_INI, DEFAULT_LIMIT_EXTENSIONS,
    DEFAULT_LOG_LIMIT, DEFAULT_WARM_TIMEOUT, MIN_LOG_LIMIT, SHARED_ORDER_MAX,
};
pub use raw::{ByteSize, Duration};

pub use error::{ConfigError, PhpFpmLevel, PhpFpmStage, PhpFpmWords, EXIT_CONFIG};
#[cfg(test)]
use load::load_as;
use load::{load_from, FileSystem, Memory, Reader};
pub use options::LoadOptions;
use users::Ids;

// ---------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------

/// Load, parse and validate the main configuration file at `path` and every
/// file its `global.include` matches, with the default [`LoadOptions`].
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with(path, &LoadOptions::default())
}

/// [`load`] with the command line's [`LoadOptions`]. A main file ending
/// in `.conf` is php-fpm's configuration (its includes too), read with
/// php-fpm's rules (see `fpm/mod.rs`); any other is fpmd's TOML.
pub fn load_with(path: &Path, options: &LoadOptions) -> Result<Config, ConfigError> {
    let ids = Ids::current();
    load_from(&FileSystem, path, ids, &users::Host::of(ids), options)
}

pub use fpm::php_fpm_dump;

/// The level of one of [`Config::notices`]: the php-fpm reader's notices
/// carry php-fpm's own after their `FILE:LINE: ` (`NOTICE: 'log_buffering'
/// is accepted …`, `WARNING: Nothing matches the include pattern …`);
/// `"WARNING"` for those it words as php-fpm's warnings, else `"NOTICE"`.
pub fn notice_level(notice: &str) -> &'static str {
    if notice.contains(": WARNING: ") {
        "WARNING"
    } else {
        "NOTICE"
    }
}

/// Logs `notices` ([`Config::notices`]) at their level ([`notice_level`]):
/// a php-fpm warning is a WARNING line, as php-fpm logs it.
pub fn log_notices(notices: &[String]) {
    for n in notices {
        match notice_level(n) {
            "WARNING" => tracing::warn!("{n}"),
            _ => tracing::info!("{n}"),
        }
    }
}

/// Whether the configuration at `path` is php-fpm's (read with php-fpm's
/// rules: a `.conf` main file, or `-y`'s php-fpm syntax), whose errors
/// are reported in php-fpm's words ([`ConfigError::php_fpm_lines`]).
pub fn is_php_fpm_config(path: &Path, options: &LoadOptions) -> bool {
    options.fpm_syntax || fpm::is_fpm_conf(path)
}

/// Which files a path names on fpmd's command line: `-c PATH` is the
/// configuration when PATH ends in `.toml` or `.conf`, else (a php.ini
/// file, or a directory) php-fpm's `-c`, the php.ini of the children.
pub fn is_config_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml" || e == "conf")
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
/// Errors: those of [`load_with`]; a file that is not a `.conf`.
pub fn convert(path: &Path, opts: &LoadOptions) -> Result<String, ConfigError> {
    if !(opts.fpm_syntax || fpm::is_fpm_conf(path)) {
        return Err(ConfigError::file_only(
            path,
            "fpmd convert reads php-fpm's configuration: a file ending in .conf",
        ));
    }
    load_with(path, opts)?;
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
    load_from(
        &Memory(files),
        main,
        ids,
        &users::Host::of(ids),
        &LoadOptions::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::load::wildcard_dir;
    use super::*;
    use crate::config::testutil::*;
    use crate::config::toml::toml_str;
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
listen.address = "/tmp/bbb.sock"
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
                ("log/.keep", ""),
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
                unused_error_log: None,
                emergency_restart: None,
                process_control_timeout: Some(std::time::Duration::from_secs(10)),
                control_socket: d.join("run/fpmd.sock"),
                watch: true,
                daemonize: false,
                log_format: LogFormat::Fpmd,
                log_limit: 1024,
                metrics_listen: None,
                php_ini: None,
                php_ini_scan_dir: None,
                warm_min_available: MinAvailable::DEFAULT,
                warm_timeout: DEFAULT_WARM_TIMEOUT,
                sched_batch: true,
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
                home: bbb.user.home.clone(),
            },
            php_cgi: PathBuf::from("/bin/true"),
            listen: Listen {
                address: ListenAddress::Unix("/tmp/bbb.sock".into()),
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
            fpm_sapi: true,
            track_finished: false,
            graceful_timeout: Some(std::time::Duration::from_secs(10)),
            cgroup: Default::default(),
            pcntl: false,
            no_php_ini: false,
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
        let (dir, c) = load_ok("[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"www.d/www.sock\"\npm.max_children = 3\n", &[("www.d/.keep", "")]);
        let (uid, gid) = nobody();
        assert_eq!(
            c.global,
            Global {
                pid: None,
                error_log: LogTarget::Stderr,
                log_level: LogLevel::Notice,
                unused_error_log: None,
                emergency_restart: None,
                process_control_timeout: None,
                control_socket: dir.path().join("fpmd.sock"),
                watch: false,
                daemonize: false,
                log_format: LogFormat::Fpmd,
                log_limit: 1024,
                metrics_listen: None,
                php_ini: None,
                php_ini_scan_dir: None,
                warm_min_available: MinAvailable::DEFAULT,
                warm_timeout: DEFAULT_WARM_TIMEOUT,
                sched_batch: true,
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
                    "disable_functions=${{disable_functions}},{}",
                    crate::config::model::PCNTL_FUNCTIONS.join(",")
                )
            ]
        );
        assert_eq!(p.cgroup, crate::config::CgroupLimits::default());
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

    /// The command line's options: `-p` for relative paths and includes,
    /// `-g`, `-d` below the pool's values, `-n`, `-D`/`-F` over
    /// `daemonize`, `-O` over `error_log` unless detaching; kept in the
    /// configuration and printed as set on the command line.
    #[test]
    fn load_options() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("prefix");
        std::fs::create_dir_all(prefix.join("run")).unwrap();
        write(
            dir.path(),
            "etc/fpmd.toml",
            "[global]\npid = \"run/fpmd.pid\"\nerror_log = \"log/fpmd.log\"\ninclude = \"pool.d/*.toml\"\ndaemonize = true\n",
        );
        write(
            &prefix,
            "pool.d/www.toml",
            &pool("www", "php_value.memory_limit = \"1G\"\n")
                .replace("/tmp/www.sock", "run/www.sock"),
        );
        let main = dir.path().join("etc/fpmd.toml");
        let mut options = LoadOptions {
            prefix: Some(prefix.clone()),
            php_defines: vec![
                ("memory_limit".into(), "8M".into()),
                ("html_errors".into(), "1".into()),
                ("html_errors".into(), "0".into()),
            ],
            no_php_ini: true,
            force_stderr: true,
            ..Default::default()
        };
        let c = load_with(&main, &options).unwrap();
        assert_eq!(c.options, options);
        assert_eq!(c.global.pid, Some(prefix.join("run/fpmd.pid")));
        assert_eq!(
            c.global.error_log,
            LogTarget::File(prefix.join("log/fpmd.log")),
            "-O: not when detaching"
        );
        assert!(c.global.daemonize);
        let www = &c.pools[0];
        assert_eq!(
            www.file,
            prefix.join("pool.d/www.toml"),
            "include relative to the prefix"
        );
        assert_eq!(
            www.listen.address,
            ListenAddress::Unix(prefix.join("run/www.sock"))
        );
        assert_eq!(
            www.php_values["memory_limit"], "1G",
            "the pool's own value wins"
        );
        assert_eq!(www.php_values["html_errors"], "0", "the last -d wins");
        assert_eq!(&www.ini_args()[..3], ["-n", "-d", "html_errors=0"]);
        let text = c.to_toml_with_origins();
        assert!(
            text.contains("php_value.html_errors = \"0\" # set on the command line\n"),
            "{text}"
        );
        assert!(
            text.contains("php_value.memory_limit = \"1G\" # set in "),
            "{text}"
        );
        assert!(text.contains("# no php.ini (php-cgi -n)"), "{text}");

        options.daemonize = Some(false);
        options.pid = Some("other.pid".into());
        let c = load_with(&main, &options).unwrap();
        assert!(!c.global.daemonize, "-F");
        assert_eq!(
            c.global.error_log,
            LogTarget::Stderr,
            "-O in the foreground"
        );
        assert_eq!(
            c.global.pid,
            Some(prefix.join("other.pid")),
            "-g relative to the prefix"
        );
        let text = c.to_toml_with_origins();
        for key in ["pid", "error_log", "daemonize"] {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{key} = "))
                    && l.ends_with("# set on the command line")),
                "{key}: {text}"
            );
        }
        assert_eq!(
            options.to_args(false),
            [
                "-p",
                prefix.to_str().unwrap(),
                "-g",
                "other.pid",
                "-d",
                "memory_limit=8M",
                "-d",
                "html_errors=1",
                "-d",
                "html_errors=0",
                "-n",
                "-F",
                "-O"
            ]
            .map(std::ffi::OsString::from)
        );
        assert!(!options.to_args(true).contains(&"-O".into()));
    }

    /// What an include glob may match: a dangling symlink, a symlink loop,
    /// a FIFO or a socket is an error at `global.include` naming it; a
    /// directory is passed over; a glob whose directory is missing is an
    /// error, one that matches nothing in an existing directory is not (as
    /// php-fpm).
    #[test]
    fn include_matches_that_cannot_be_read() {
        type Make = fn(&Path);
        let cases: [(&str, Make); 4] = [
            ("is a dangling symlink (to /nonexistent", |d| {
                std::os::unix::fs::symlink("/nonexistent", d.join("pool.d/x.toml")).unwrap()
            }),
            ("is a symlink loop", |d| {
                std::os::unix::fs::symlink("x.toml", d.join("pool.d/x.toml")).unwrap()
            }),
            ("is a FIFO, not a configuration file", |d| {
                nix::unistd::mkfifo(&d.join("pool.d/x.toml"), nix::sys::stat::Mode::S_IRWXU)
                    .unwrap()
            }),
            ("is a socket, not a configuration file", |d| {
                std::os::unix::net::UnixListener::bind(d.join("pool.d/x.toml")).unwrap();
            }),
        ];
        for (message, make) in cases {
            let dir = tempfile::tempdir().unwrap();
            let main = write(dir.path(), "fpmd.toml", &format!("# main\n{INCLUDE_MAIN}"));
            write(dir.path(), "pool.d/a.toml", &pool("a", ""));
            make(dir.path());
            let e = load(&main).unwrap_err();
            assert_eq!(
                (e.line, e.key.as_deref()),
                (Some(3), Some("global.include")),
                "{e}"
            );
            let x = dir.path().join("pool.d/x.toml");
            assert!(
                e.message.starts_with(&format!(
                    "include \"pool.d/*.toml\": {} {message}",
                    x.display()
                )),
                "{e}"
            );
        }
        // A directory is passed over; nothing matched is no error, but a
        // warning naming the pattern's line.
        let dir = tempfile::tempdir().unwrap();
        let main = write(
            dir.path(),
            "fpmd.toml",
            &format!("{INCLUDE_MAIN}\n{}", pool("m", "")),
        );
        std::fs::create_dir_all(dir.path().join("pool.d/sub.toml")).unwrap();
        let c = load(&main).unwrap();
        assert_eq!(c.pools.len(), 1);
        assert_eq!(
            c.warnings,
            [format!(
                "{}:2: key 'global.include': nothing matches the include pattern \"pool.d/*.toml\"",
                main.display()
            )]
        );
        // The glob's directory is missing.
        std::fs::remove_dir_all(dir.path().join("pool.d")).unwrap();
        let e = load(&main).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("global.include"));
        assert!(
            e.message.contains(&format!(
                "the directory {} of the glob does not exist",
                dir.path().join("pool.d").display()
            )),
            "{e}"
        );
        // A plain path that does not exist matches nothing, as in php-fpm.
        let main = write(
            dir.path(),
            "fpmd.toml",
            &format!("[global]\ninclude = \"nothere/x.toml\"\n{}", pool("m", "")),
        );
        assert!(load(&main).is_ok());
        assert_eq!(wildcard_dir("/a/b/*.toml"), Some(PathBuf::from("/a/b")));
        assert_eq!(wildcard_dir("/a/*/x.toml"), Some(PathBuf::from("/a")));
        assert_eq!(wildcard_dir("/*.toml"), Some(PathBuf::from("/")));
        assert_eq!(wildcard_dir("*.toml"), Some(PathBuf::from(".")));
        assert_eq!(wildcard_dir("/a/b.toml"), None);
    }

    #[test]
    fn find_default_config_returns_an_existing_file() {
        if let Some(p) = paths::find_default_config() {
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
            php_fpm: None,
        };
        assert_eq!(e.to_string(), "fpmd.toml:4: key 'global.include': x");
        let e = ConfigError {
            file: "fpmd.toml".into(),
            line: None,
            pool: None,
            key: None,
            message: "no pool defined".into(),
            php_fpm: None,
        };
        assert_eq!(e.to_string(), "fpmd.toml: no pool defined");
        let e = ConfigError {
            file: "pool.d/www.toml".into(),
            line: Some(1),
            pool: Some("www".into()),
            key: None,
            message: "m".into(),
            php_fpm: None,
        };
        assert_eq!(e.to_string(), "pool.d/www.toml:1: [www] m");
    }
}
