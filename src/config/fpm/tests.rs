//! The php-fpm front-end: each directive's fate (mapped, a pool default,
//! a notice, refused with its message), errors located in the php-fpm
//! files, and the corpus quirks that are about more than one line
//! (INDEX.md of /work/shared/fpm-configs; quirks of a single line are
//! tested in `scan.rs`).

use std::path::Path;
use std::time::Duration;

use tempfile::TempDir;

use super::super::testutil::write;
use super::super::{load_with, Config, ConfigError, ListenAddress, LoadOptions, PmMode};

/// A valid php-fpm pool (7 lines after the header), with `extra` appended.
fn pool(name: &str, extra: &str) -> String {
    format!("[{name}]\nuser = nobody\ngroup = nogroup\nphp_cgi = /bin/sh\nlisten = /tmp/{name}.sock\npm = static\npm.max_children = 5\n{extra}")
}

fn try_conf(main: &str, files: &[(&str, &str)]) -> (TempDir, Result<Config, ConfigError>) {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        write(dir.path(), rel, text);
    }
    let main = write(dir.path(), "php-fpm.conf", main);
    let r = load_with(&main, &LoadOptions::default());
    (dir, r)
}

fn conf_ok(main: &str, files: &[(&str, &str)]) -> (TempDir, Config) {
    let (dir, r) = try_conf(main, files);
    (dir, r.unwrap_or_else(|e| panic!("unexpected error: {e}")))
}

fn conf_err(main: &str, files: &[(&str, &str)]) -> (TempDir, ConfigError) {
    match try_conf(main, files) {
        (dir, Err(e)) => (dir, e),
        (_, Ok(c)) => panic!("expected an error, got {c:?}"),
    }
}

/// File (relative to the temp dir), line, pool, key, message.
fn assert_at(
    dir: &Path,
    e: &ConfigError,
    file: &str,
    line: usize,
    pool: Option<&str>,
    key: Option<&str>,
    msg: &str,
) {
    assert_eq!(
        (
            e.file.clone(),
            e.line,
            e.pool.as_deref(),
            e.key.as_deref(),
            e.message.as_str()
        ),
        (dir.join(file), Some(line), pool, key, msg),
        "{e}"
    );
}

#[test]
fn directives_become_fpmd_settings() {
    let extra = "listen.backlog = -1\nlisten.mode = 0600\nlisten.allowed_clients = 127.0.0.1,::1\nrequest_terminate_timeout = 1d\nrequest_slowlog_timeout = 5m\npm.process_idle_timeout = 10s;\nclear_env = no\ncatch_workers_output = yes\ndecorate_workers_output = off\nsecurity.limit_extensions = .php .php7\nenv[TMP] = /tmp\nphp_flag[display_errors] = on\nphp_admin_flag[log_errors] = off\nphp_value[error_reporting] = E_ALL & ~E_DEPRECATED & ~E_STRICT\nphp_admin_value[memory_limit] = 64M\nrlimit_core = unlimited\nprocess.priority = 3\nping.path = /ping\nping.response = \"alive $pool\"\npm.status_path = /status_$pool\n";
    let main = format!("[global]\nlog_level = debug\nprocess_control_timeout = 1h\nemergency_restart_threshold = 10\nemergency_restart_interval = 1m\npid = run/fpm.pid\n{}", pool("www", extra));
    let (dir, c) = conf_ok(&main, &[]);
    let g = &c.global;
    assert_eq!(g.log_level.as_str(), "debug");
    assert_eq!(g.process_control_timeout, Some(Duration::from_secs(3600)));
    assert_eq!(g.emergency_restart, Some((10, Duration::from_secs(60))));
    assert_eq!(
        g.pid.as_deref(),
        Some(dir.path().join("run/fpm.pid").as_path()),
        "relative to the prefix"
    );
    let p = &c.pools[0];
    assert_eq!(
        p.listen.address,
        ListenAddress::Unix("/tmp/www.sock".into())
    );
    assert_eq!(p.listen.backlog, super::somaxconn(), "php-fpm's -1");
    assert_eq!(p.listen.mode, 0o600);
    assert_eq!(p.listen.allowed_clients.as_ref().map(Vec::len), Some(2));
    assert_eq!(
        p.request_terminate_timeout,
        Some(Duration::from_secs(86400))
    );
    assert_eq!(p.request_slowlog_timeout, Some(Duration::from_secs(300)));
    assert!(!p.clear_env && p.catch_workers_output && !p.decorate_workers_output);
    assert_eq!(p.limit_extensions, [".php", ".php7"]);
    assert_eq!(p.env["TMP"], "/tmp");
    assert_eq!(p.php_values["display_errors"], "1");
    assert_eq!(p.php_values["error_reporting"], "22527");
    assert_eq!(p.php_admin_values["log_errors"], "0");
    assert_eq!(p.php_admin_values["memory_limit"], "64M");
    assert_eq!(p.isolation.rlimit_core, Some(u64::MAX));
    assert_eq!(p.isolation.process_priority, Some(3));
    assert_eq!(p.local.ping_response, "alive www");
    assert_eq!(p.local.status_path.as_deref(), Some("/status_www"));
    assert_eq!(p.pm.mode, PmMode::Static);
    assert_eq!(p.file, dir.path().join("php-fpm.conf"));
    // Origins name the php-fpm file and line.
    assert_eq!(
        c.origins.at("www", "pm.max_children"),
        Some((dir.path().join("php-fpm.conf").as_path(), 13))
    );
    assert_eq!(
        c.origins.at("", "log_level"),
        Some((dir.path().join("php-fpm.conf").as_path(), 2))
    );
    assert_eq!(
        c.origins.at("www", "listen.backlog").map(|(_, l)| l),
        Some(14)
    );
}

/// fpmd's own pool keys that take a php-fpm value type may be written in
/// a `.conf` as in TOML (README "php-fpm's configuration files"):
/// `fpm_sapi` was refused as an unknown entry.
#[test]
fn fpmds_own_boolean_keys_in_a_conf() {
    let main = format!(
        "[global]\n{}",
        pool(
            "www",
            "fpm_sapi = no\nsecurity.pcntl = yes\nno_new_privs = on\n"
        )
    );
    let (_dir, c) = conf_ok(&main, &[]);
    let p = &c.pools[0];
    assert!(!p.fpm_sapi);
    assert!(p.pcntl);
    assert!(p.isolation.no_new_privs);
}

/// INDEX.md quirks 8 and 10: sections reopen (pool names case-insensitive,
/// across files), may be empty; the last scalar wins; the FIRST value of
/// an array key wins, as php-fpm applies its list.
#[test]
fn sections_reopen_and_duplicates() {
    // The include comes last: the first spelling of a pool names it.
    let main = format!("[global]\nlog_level = error\n[global]\nlog_level = warning\n{}\nenv[A] = first\n[WWW]\npm.max_children = 7\nenv[A] = second\n[www]\ninclude = {{DIR}}/pool.d/*.conf\n", pool("www", ""));
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "pool.d/b.conf", "[Www]\npm.max_requests = 9\n[other]\nuser = nobody\nlisten = 9123\npm = ondemand\npm.max_children = 2\n");
    let path = write(
        dir.path(),
        "php-fpm.conf",
        &main.replace("{DIR}", &dir.path().display().to_string()),
    );
    let c = load_with(&path, &LoadOptions::default()).unwrap();
    assert_eq!(c.global.log_level.as_str(), "warning");
    assert_eq!(c.pools.len(), 2);
    let www = &c.pools[0];
    assert_eq!(
        (www.name.as_str(), www.pm.max_children, www.pm.max_requests),
        ("www", 7, 9)
    );
    assert_eq!(www.env["A"], "first");
    assert!(
        c.notices.iter().any(|n| n.contains("env[A] has no effect")),
        "{:?}",
        c.notices
    );
    assert!(matches!(c.pools[1].pm.mode, PmMode::Ondemand { .. }));
    assert_eq!(c.pools[1].file, dir.path().join("pool.d/b.conf"));
    assert_eq!(c.sources.files.len(), 2);
    // The values of one pool from two files, each with its own origin.
    assert_eq!(
        c.origins.at("www", "pm.max_requests"),
        Some((dir.path().join("pool.d/b.conf").as_path(), 2))
    );
}

/// INDEX.md quirk 9: include before any section, in a pool (continuing
/// it), relative to the prefix; nothing matching warns; a wildcard in a
/// missing directory is an error.
#[test]
fn includes() {
    let (dir, c) = conf_ok(
        &format!(
            "include=etc/*.conf\n{}include = shared/defaults.ini\ninclude = nothing/here.conf\n",
            pool("site", "")
        ),
        &[
            ("etc/a.conf", &pool("a", "")),
            (
                "shared/defaults.ini",
                "pm.max_requests = 33\nslowlog = log/$pool.slow\n",
            ),
            ("log/.keep", ""),
        ],
    );
    let names: Vec<_> = c.pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a", "site"], "pools in the order they were opened");
    let site = c.pool("site").unwrap();
    assert_eq!(
        site.pm.max_requests, 33,
        "the included file continues the pool"
    );
    assert_eq!(site.slowlog, Some(dir.path().join("log/site.slow")));
    assert!(
        c.notices
            .iter()
            .any(|n| n.contains("WARNING: Nothing matches the include pattern")),
        "{:?}",
        c.notices
    );
    let with_prefix = load_with(
        &dir.path().join("php-fpm.conf"),
        &LoadOptions {
            prefix: Some(dir.path().join("etc")),
            ..LoadOptions::default()
        },
    );
    assert!(
        with_prefix.is_err(),
        "etc/*.conf relative to another prefix matches nothing, and its directory is missing"
    );
    let (dir, e) = conf_err(
        &format!("{}include = missing/*.conf\n", pool("www", "")),
        &[],
    );
    assert_eq!(
        (e.file.clone(), e.line),
        (dir.path().join("php-fpm.conf"), Some(8))
    );
    assert!(e.message.contains("Unable to globalize"), "{e}");
    let (_, e) = conf_err("[global]\n", &[]);
    assert!(e.message.starts_with("No pool defined"), "{e}");
}

#[test]
fn errors_name_file_line_and_directive() {
    let (dir, e) = conf_err(
        "[global]\ninclude = pool.d/*.conf\n",
        &[(
            "pool.d/www.conf",
            &pool("www", "").replace("pm.max_children = 5", "pm.max_children = 0"),
        )],
    );
    assert_at(
        dir.path(),
        &e,
        "pool.d/www.conf",
        7,
        Some("www"),
        Some("pm.max_children"),
        "pm.max_children must be at least 1",
    );
    assert_eq!(
        e.to_string(),
        format!(
            "{}:7: [www] key 'pm.max_children': pm.max_children must be at least 1",
            dir.path().join("pool.d/www.conf").display()
        )
    );
    let (dir, e) = conf_err(&pool("www", "pm = fixed\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("pm"),
        "invalid process manager 'fixed' (static, dynamic or ondemand)",
    );
    let (dir, e) = conf_err(&pool("www", "request_terminate_timeout = 5x\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("request_terminate_timeout"),
        "unknown suffix used in time value '5x' (seconds, or a number with s, m, h or d)",
    );
    let (dir, e) = conf_err(&pool("www", "clear_env = maybe\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("clear_env"),
        "invalid boolean value 'maybe' (yes/no, on/off, true/false, 1/0)",
    );
    let (dir, e) = conf_err(&pool("www", "pm.max_requests = ten\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("pm.max_requests"),
        "'ten' is not a valid number (greater or equal than zero)",
    );
    let (dir, e) = conf_err(&pool("www", "pm.max_childs = 3\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("pm.max_childs"),
        "unknown entry 'pm.max_childs' (did you mean 'pm.max_children'?)",
    );
    let (dir, e) = conf_err(&pool("www", "log_level = debug\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("log_level"),
        "unknown entry 'log_level' ('log_level' belongs in the [global] section)",
    );
    let (dir, e) = conf_err(&format!("user = nobody\n{}", pool("www", "")), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        1,
        None,
        Some("user"),
        "unknown entry 'user' ('user' belongs in a pool section)",
    );
    let (dir, e) = conf_err(
        &format!("[global]\npid = /run/$pool.pid\n{}", pool("www", "")),
        &[],
    );
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        2,
        None,
        Some("pid"),
        "Can't use '$pool' when the pool is not defined",
    );
    let (dir, e) = conf_err(&pool("www", "php_admin_value[x] = a=b\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        None,
        "syntax error, unexpected '=' in a value (quote the value)",
    );
    let (dir, e) = conf_err(&pool("www", "").replace("pm = static\n", ""), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        1,
        Some("www"),
        Some("pm"),
        "the process manager is missing (static, dynamic or ondemand)",
    );
    let (dir, e) = conf_err(&pool("www", "env[EMPTY] =\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("env[EMPTY]"),
        "empty value",
    );
    let (dir, e) = conf_err(&pool("www", "php_value[] = 1\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("php_value[]"),
        "You must provide a key for field 'php_value'",
    );
    let (dir, e) = conf_err(
        &pool("www", "").replace("/tmp/www.sock", "127.0.0.1:0"),
        &[],
    );
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        5,
        Some("www"),
        Some("listen"),
        "invalid listen address '127.0.0.1:0': port 0 is not allowed",
    );
}

/// Each refused directive says what to do instead.
#[test]
fn refused_directives() {
    let (dir, e) = conf_err(&pool("www", "apparmor_hat = www\n"), &[]);
    assert_at(dir.path(), &e, "php-fpm.conf", 8, Some("www"), Some("apparmor_hat"), "not supported by fpmd: fpmd cannot change a child's AppArmor hat: confine fpmd with an AppArmor profile, or the pool with chroot, landlock.read and landlock.write");
    let (dir, e) = conf_err(&pool("www", "access.suppress_path[x] = /ping\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("access.suppress_path[x]"),
        "Keys provided to field 'access.suppress_path' are ignored",
    );
    for (line, key, message) in [
        ("error_log = syslog", "error_log", "not supported by fpmd: error_log = syslog; write a file path, or leave error_log out for stderr (journald keeps it under systemd)"),
        ("process.max = 3", "process.max", "the pools' pm.max_children add up to 5, more than process.max = 3: fpmd runs every child it is given, so lower pm.max_children (or raise process.max)"),
    ] {
        let (dir, e) = conf_err(&format!("[global]\n{line}\n{}", pool("www", "")), &[]);
        assert_at(dir.path(), &e, "php-fpm.conf", 2, None, Some(key), message);
    }
    // php-fpm 8.3's directive, unknown to 8.2.
    let (_, e) = conf_err(
        &format!("[global]\nproctitle_prefix = x\n{}", pool("www", "")),
        &[],
    );
    assert_eq!(e.message, "unknown entry 'proctitle_prefix'");
}

/// Directives accepted with a notice, and global ones that are every
/// pool's default.
#[test]
fn notices_and_pool_defaults() {
    let global = "[global]\nsyslog.ident = php\nsyslog.facility = daemon\nlog_buffering = no\nlog_limit = 8192\nevents.mechanism = epoll\nsystemd_interval = 10\nprocess.max = 64\nrlimit_files = 4096\nprocess.priority = 5\ndaemonize = no\n";
    let extra = "request_slowlog_trace_depth = 20\nrlimit_files = 1024\n";
    let (_, c) = conf_ok(
        &format!("{global}{}{}", pool("a", extra), pool("b", "")),
        &[],
    );
    for directive in [
        "syslog.ident",
        "syslog.facility",
        "log_buffering",
        "events.mechanism",
        "systemd_interval",
        "request_slowlog_trace_depth",
    ] {
        assert!(
            c.notices.iter().any(|n| n.contains("NOTICE: ")
                && n.contains(&format!("'{directive}' is accepted and has no effect"))),
            "{directive}: {:?}",
            c.notices
        );
    }
    assert!(c
        .notices
        .iter()
        .any(|n| n.contains("'process.max' holds: the pools' pm.max_children add up to 10")));
    assert_eq!(
        c.pool("a").unwrap().isolation.rlimit_files,
        Some(1024),
        "the pool's own wins"
    );
    assert_eq!(
        c.pool("b").unwrap().isolation.rlimit_files,
        Some(4096),
        "inherited from [global]"
    );
    assert_eq!(c.pool("b").unwrap().isolation.process_priority, Some(5));
    assert_eq!(c.global.log_limit, 8192, "log_limit is fpmd's too");
    // Still checked as php-fpm checks them.
    let (_, e) = conf_err(
        &format!("[global]\nlog_buffering = sometimes\n{}", pool("www", "")),
        &[],
    );
    assert_eq!(
        e.message,
        "invalid boolean value 'sometimes' (yes/no, on/off, true/false, 1/0)"
    );
}

/// INDEX.md quirks 1 and 6: `$pool`, `$prefix`, constants in keys.
#[test]
fn expansions() {
    let extra = "access.log = log/$pool_access.log\nenv[LC_ALL] = C\nenv['LANG'] = C.UTF-8\nenv[PATH] = $PATH\nphp_admin_value[error_log] = log/$pool.php.log\n";
    let (dir, c) = conf_ok(&pool("site1", extra), &[("log/.keep", "")]);
    let p = &c.pools[0];
    assert_eq!(p.access_log, Some(dir.path().join("log/site1_access.log")));
    assert_eq!(p.env["6"], "C", "php-fpm's env[6]");
    assert_eq!(p.env["LANG"], "C.UTF-8");
    assert_eq!(
        p.env["PATH"],
        std::env::var("PATH").unwrap(),
        "$NAME from fpmd's environment, as php-fpm's worker"
    );
    assert_eq!(
        p.php_admin_values["error_log"],
        dir.path().join("log/site1.php.log").to_string_lossy(),
        "php-fpm's FPM_PHP_INI_TO_EXPAND"
    );
    assert!(
        c.notices
            .iter()
            .any(|n| n.contains("write ['LC_ALL'] to mean the name")),
        "{:?}",
        c.notices
    );
    let (_, e) = conf_err(&pool("www", "chroot = /srv/$prefix\n"), &[]);
    assert!(
        e.message
            .starts_with("'$prefix' must be use at the beginning"),
        "{e}"
    );
}

/// Debian's layout: php.ini and conf.d/ beside php-fpm.conf are what the
/// children read.
#[test]
fn php_ini_beside_the_configuration() {
    let (dir, c) = conf_ok(
        &pool("www", ""),
        &[
            ("php.ini", "memory_limit = 77M\n"),
            ("conf.d/20-b.ini", ""),
            ("conf.d/10-a.ini", ""),
            ("conf.d/notes.txt", ""),
        ],
    );
    let ini = &c.pools[0].php_ini;
    assert_eq!(ini.file, Some(dir.path().join("php.ini")));
    assert_eq!(
        ini.scan_dir.as_deref(),
        Some(dir.path().join("conf.d").to_str().unwrap())
    );
    assert_eq!(
        ini.reads.as_deref(),
        Some(
            &[
                dir.path().join("php.ini"),
                dir.path().join("conf.d/10-a.ini"),
                dir.path().join("conf.d/20-b.ini")
            ][..]
        )
    );
    let args = c.pools[0].ini_args();
    assert_eq!(
        args[..2],
        [
            "-c".to_string(),
            dir.path().join("php.ini").display().to_string()
        ]
    );
    // The command line's -c wins over what is found.
    let other = write(dir.path(), "other/php.ini", "");
    let c = load_with(
        &dir.path().join("php-fpm.conf"),
        &LoadOptions {
            php_ini: Some(other.clone()),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    assert_eq!(c.pools[0].php_ini.file, Some(other));
}

/// `fpmd convert`'s document loads to the same configuration.
#[test]
fn convert_round_trips() {
    let (dir, c) = conf_ok(
        &format!(
            "[global]\nlog_level = debug\ninclude = pool.d/*.conf\n{}",
            pool("www", "env[X] = \"a b\"\nrequest_terminate_timeout = 30s\n")
        ),
        &[(
            "pool.d/b.conf",
            &pool("b", "listen.backlog = 100\n").replace("/tmp/b.sock", "127.0.0.1:9777"),
        )],
    );
    let text =
        super::super::convert(&dir.path().join("php-fpm.conf"), &LoadOptions::default()).unwrap();
    assert!(
        text.contains(&format!(
            "pm.max_children = 5 # {}:10 pm.max_children\n",
            dir.path().join("php-fpm.conf").display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "listen.address = \"127.0.0.1:9777\" # {}:5 listen\n",
            dir.path().join("pool.d/b.conf").display()
        )),
        "{text}"
    );
    let toml = write(dir.path(), "converted/fpmd.toml", &text);
    let c2 = super::super::load(&toml).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(c2.global, c.global);
    assert_eq!(
        c2.to_toml()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>(),
        c.to_toml()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
    );
}

/// `listen.acl_users`/`acl_groups` (RHEL's default pool): ids on the
/// socket's ACL; listen.owner/group may not be set with them.
#[test]
fn socket_acls() {
    let (_, c) = conf_ok(
        &pool(
            "www",
            "listen.acl_users = nobody,0\nlisten.acl_groups = nogroup\n",
        )
        .replace("user = nobody\ngroup = nogroup\n", "user = nobody\n"),
        &[],
    );
    let l = &c.pools[0].listen;
    assert_eq!(
        (l.acl_users.clone(), l.acl_groups.clone(), l.owner, l.group),
        (vec![65534, 0], vec![65534], None, None)
    );
    let (dir, e) = conf_err(
        &pool("www", "listen.acl_users = nobody\nlisten.owner = nobody\n"),
        &[],
    );
    assert_at(dir.path(), &e, "php-fpm.conf", 9, Some("www"), Some("listen.owner"), "listen.owner has no effect with listen.acl_users or listen.acl_groups (php-fpm ignores it then): remove one of them");
}

/// A chroot pool's children see only /etc/php of the host's /etc: a
/// php.ini elsewhere is refused (as root, where chroot is allowed).
#[test]
fn chroot_pools_read_php_ini_under_etc_php_only() {
    let dir = tempfile::tempdir().unwrap();
    let ini = write(dir.path(), "custom.ini", "");
    let extra = format!("chroot = /usr\nchdir = /\nphp_ini = {}\n", ini.display());
    let (dir2, r) = try_conf(&pool("www", &extra), &[]);
    if !nix::unistd::geteuid().is_root() {
        assert!(r.is_err(), "chroot needs root");
        return;
    }
    let e = r.unwrap_err();
    assert_at(
        dir2.path(),
        &e,
        "php-fpm.conf",
        10,
        Some("www"),
        Some("php_ini"),
        &format!("{} is outside /etc/php, the only part of the host's /etc a chroot pool's children see: move it under /etc/php", ini.display()),
    );
    let extra = "chroot = /usr\nchdir = /\nphp_ini = /etc/php/8.2/cgi/php.ini\nphp_ini_scan_dir = /etc/php/8.2/cgi/conf.d\n";
    if Path::new("/etc/php/8.2/cgi/php.ini").is_file() {
        let (_, c) = conf_ok(&pool("www", extra), &[]);
        assert_eq!(
            c.pools[0].php_ini.file.as_deref(),
            Some(Path::new("/etc/php/8.2/cgi/php.ini"))
        );
    }
}

/// INDEX.md quirk 12: what Debian's php-fpm 8.2 has when a directive is
/// unset is what a php-fpm file gives in fpmd.
#[test]
fn quirk_12_php_fpm_defaults() {
    let dynamic = pool(
        "www",
        "pm.min_spare_servers = 1\npm.max_spare_servers = 3\n",
    )
    .replace("pm = static", "pm = dynamic");
    let (_, c) = conf_ok(&dynamic, &[]);
    let p = &c.pools[0];
    assert_eq!(p.limit_extensions, [".php", ".phar"]);
    assert_eq!(p.listen.backlog, super::somaxconn(), "php-fpm's -1");
    assert!(p.clear_env && p.decorate_workers_output && !p.catch_workers_output);
    assert_eq!(p.access_format.as_str(), "%R - %u %t \"%m %r\" %s");
    match p.pm.mode {
        PmMode::Dynamic {
            start_servers,
            max_spawn_rate,
            ..
        } => assert_eq!((start_servers, max_spawn_rate), (2, 32)),
        m => panic!("{m:?}"),
    }
    assert_eq!(c.origins.at("www", "listen.backlog"), None, "a default");
}

/// INDEX.md quirk 7: `$NAME` in an env value stays literal through the
/// scanner and is fpmd's variable when a child starts (php-fpm reads its
/// own environment then); `${NAME}` is replaced while reading.
#[test]
fn quirk_7_env_values() {
    std::env::set_var("FPMD_QUIRK7", "seven");
    let (_, c) = conf_ok(
        &pool(
            "www",
            "env[A] = $FPMD_QUIRK7\nenv[B] = ${FPMD_QUIRK7}/x\nenv[C] = '$FPMD_QUIRK7'\n",
        ),
        &[],
    );
    let env = &c.pools[0].env;
    assert_eq!(
        (env["A"].as_str(), env["B"].as_str(), env["C"].as_str()),
        ("seven", "seven/x", "seven")
    );
}

/// php-fpm 8.2's `access.suppress_path[]` append syntax (php-src
/// config-array.phpt): every value, in order; keys and paths not starting
/// with '/' refused as php-fpm refuses them.
#[test]
fn access_suppress_path_appends() {
    let (dir, c) = conf_ok(
        &pool(
            "www",
            "access.suppress_path[] = /ping\naccess.suppress_path[] = /health_check.php\n",
        ),
        &[],
    );
    assert_eq!(
        c.pools[0].access_suppress_paths,
        ["/ping", "/health_check.php"]
    );
    assert_eq!(
        c.origins.at("www", "access.suppress_path"),
        Some((dir.path().join("php-fpm.conf").as_path(), 8))
    );
    let (dir, e) = conf_err(&pool("www", "access.suppress_path[] = ping\n"), &[]);
    assert_at(
        dir.path(),
        &e,
        "php-fpm.conf",
        8,
        Some("www"),
        Some("access.suppress_path[]"),
        "Values provided to field 'access.suppress_path' must begin with '/'",
    );
}

/// php-src gh13563-conf-bool-env.phpt: a boolean from `${VAR}` is the
/// variable's text, which php-fpm's boolean parser reads (on, false, none…).
#[test]
fn booleans_from_the_environment() {
    std::env::set_var("FPMD_T_ON", "on");
    std::env::set_var("FPMD_T_NONE", "none");
    let (_, c) = conf_ok(
        &pool(
            "www",
            "catch_workers_output = ${FPMD_T_ON}\nclear_env = ${FPMD_T_NONE}\n",
        ),
        &[],
    );
    assert!(c.pools[0].catch_workers_output && !c.pools[0].clear_env);
}

/// Without a php.ini beside the file: what Debian's php-fpmX.Y reads
/// (its compiled-in /etc/php/X.Y/fpm), X.Y of the pools' php-cgi.
#[test]
fn php_ini_of_debian_php_fpm() {
    let cgi = Path::new("/usr/bin/php-cgi8.2");
    assert!(
        cgi.is_file() && Path::new("/etc/php/8.2/fpm/php.ini").is_file(),
        "this test reads Debian's PHP 8.2: apt-get install php8.2-cgi php8.2-fpm"
    );
    let (_, c) = conf_ok(
        &pool("www", "").replace("php_cgi = /bin/sh", "php_cgi = /usr/bin/php-cgi8.2"),
        &[],
    );
    let ini = &c.pools[0].php_ini;
    assert_eq!(
        ini.file.as_deref(),
        Some(Path::new("/etc/php/8.2/fpm/php.ini"))
    );
    assert_eq!(ini.scan_dir.as_deref(), Some("/etc/php/8.2/fpm/conf.d"));
    assert_eq!(
        ini.reads.as_ref().unwrap()[0],
        Path::new("/etc/php/8.2/fpm/php.ini")
    );
}

/// php-src bug68423-multi-pool-all-pms.phpt, bug68458-pm-no-start-server.phpt
/// and pm-max-spawn-rate-config.phpt: three pools of one file, one per
/// process manager; a dynamic pool without pm.start_servers starts
/// min + (max - min) / 2; pm.max_spawn_rate is the pool's.
#[test]
fn php_src_pm_configurations() {
    let text = "[global]\nlog_level = warning\n[pool_dynamic]\nuser = nobody\nphp_cgi = /bin/sh\nlisten = 9611\nping.path = /ping\nping.response = pong-dynamic\npm = dynamic\npm.max_children = 5\n;pm.start_servers = 2\npm.min_spare_servers = 1\npm.max_spare_servers = 3\npm.max_spawn_rate = 64\n[pool_ondemand]\nuser = nobody\nphp_cgi = /bin/sh\nlisten = 9612\nping.path = /ping\nping.response = pong-on-demand\npm = ondemand\npm.max_children = 2\npm.process_idle_timeout = 10\n[pool_static]\nuser = nobody\nphp_cgi = /bin/sh\nlisten = 9613\nping.path = /ping\nping.response = pong-static\npm = static\npm.max_children = 1\n";
    let (_, c) = conf_ok(text, &[]);
    assert_eq!(c.global.log_level.as_str(), "warning");
    let modes: Vec<_> = c
        .pools
        .iter()
        .map(|p| (p.name.as_str(), p.pm.mode, p.local.ping_response.as_str()))
        .collect();
    assert_eq!(
        modes,
        [
            (
                "pool_dynamic",
                PmMode::Dynamic {
                    start_servers: 2,
                    min_spare_servers: 1,
                    max_spare_servers: 3,
                    max_spawn_rate: 64
                },
                "pong-dynamic"
            ),
            (
                "pool_ondemand",
                PmMode::Ondemand {
                    process_idle_timeout: Duration::from_secs(10),
                    max_spawn_rate: 32
                },
                "pong-on-demand"
            ),
            ("pool_static", PmMode::Static, "pong-static"),
        ]
    );
    // php-fpm's notice for the start_servers it chose (proc-no-start-server.phpt).
    assert_eq!(
        c.notices,
        ["[pool pool_dynamic] pm.start_servers is not set. It's been set to 2."]
    );
}

#[test]
fn fpmd_keys_in_a_conf_and_suggestions() {
    // fpmd's own log_format, and the scan directory alone, in [global].
    let (_d, c) = conf_ok(
        &format!(
            "[global]\nlog_format = fpmd\nphp_ini_scan_dir = /tmp\n{}",
            pool("www", "")
        ),
        &[],
    );
    assert_eq!(c.global.log_format, crate::config::LogFormat::Fpmd);
    assert_eq!(c.global.php_ini_scan_dir.as_deref(), Some("/tmp"));
    // Without it, php-fpm's format.
    let (_d, c) = conf_ok(&format!("[global]\n{}", pool("www", "")), &[]);
    assert_eq!(c.global.log_format, crate::config::LogFormat::PhpFpm);
    // A misspelt directive gets the closest php-fpm name.
    let (_, e) = conf_err(&pool("www", "pm.max_childern = 3\n"), &[]);
    assert_eq!(
        e.message,
        "unknown entry 'pm.max_childern' (did you mean 'pm.max_children'?)"
    );
}

/// A php-fpm configuration's errors in php-fpm's words and levels
/// (`ConfigError::php_fpm_lines`), as php-src's FPM tests read them
/// (config-array-validation-*, bug68591-conf-test-*, log-invalid-port,
/// log-bwd-limit-64-too-low-error) and as `php-fpm8.2 -t` writes the
/// process manager's (`fpm_conf_process_all_pools`).
#[test]
fn errors_in_php_fpms_words() {
    let main = Path::new("/etc/php/8.2/fpm/php-fpm.conf");
    let lines = |text: &str| {
        let (dir, e) = conf_err(text, &[]);
        let file = dir.path().join("php-fpm.conf");
        let at = format!("[{}:", file.display());
        e.php_fpm_lines(main)
            .into_iter()
            .map(|(level, l)| format!("{}: {}", level.as_str(), l.replace(&at, "[FILE:")))
            .collect::<Vec<_>>()
    };
    let load_failed = "ERROR: failed to load configuration file '/etc/php/8.2/fpm/php-fpm.conf'";
    let post_process = "ERROR: failed to post process the configuration";
    let failed = "ERROR: FPM initialization failed";
    assert_eq!(
        lines(&format!("[global]\nlog_limit = 64\n{}", pool("www", ""))),
        [
            "ERROR: log_limit must be greater than 512",
            post_process,
            failed
        ]
    );
    assert_eq!(
        lines(&pool("www", "php_value[] = 1\n")),
        [
            "ERROR: [FILE:8] You must provide a key for field 'php_value'",
            load_failed,
            failed
        ]
    );
    assert_eq!(
        lines(&pool("www", "pm.max_childern = 3\n")),
        [
            "ERROR: [FILE:8] unknown entry 'pm.max_childern' (did you mean 'pm.max_children'?)",
            load_failed,
            failed
        ]
    );
    assert_eq!(
        lines(&pool("www", "pm = sometimes\n")),
        [
            "ERROR: [FILE:8] [pool www] key 'pm': invalid process manager 'sometimes' (static, dynamic or ondemand)",
            load_failed,
            failed
        ],
        "fpmd's own words in php-fpm's framing"
    );
    let user = |extra: &str| {
        format!("[www]\n{extra}\nphp_cgi = /bin/sh\nlisten = /tmp/www.sock\npm = static\npm.max_children = 5\n")
    };
    assert_eq!(
        lines(&user("user = nosuchuser\ngroup = nosuchgroup")),
        [
            "ERROR: [pool www] cannot get uid for user 'nosuchuser'",
            failed
        ]
    );
    assert_eq!(
        lines(&user("user = root\ngroup = nosuchgroup")),
        [
            "ERROR: [pool www] cannot get gid for group 'nosuchgroup'",
            failed
        ],
        "an unknown name is reported before root is refused"
    );
    assert_eq!(
        lines(&user("user = root\nlisten.owner = nosuchuser")),
        [
            "ERROR: [pool www] cannot get uid for user 'nosuchuser': Success (0)",
            failed
        ]
    );
    assert_eq!(
        lines(&user("user = root\nlisten.group = nosuchgroup")),
        [
            "ERROR: [pool www] cannot get gid for group 'nosuchgroup': Success (0)",
            failed
        ]
    );
    assert_eq!(
        lines(&pool("www", "").replace("/tmp/www.sock", "127.0.0.1:69002")),
        ["ERROR: invalid port value '69002'", failed]
    );
    assert_eq!(
        lines(&pool("www", "").replace("/tmp/www.sock", "70000")),
        ["ERROR: invalid port value '70000'", failed]
    );
    // The process manager's checks, as php-fpm 8.2 makes them after the
    // files are read.
    let dynamic = |spare: &str| pool("www", &format!("pm = dynamic\n{spare}\n"));
    for (text, alert) in [
        (
            pool("www", "pm.max_children = 0\n"),
            "pm.max_children must be a positive value",
        ),
        (
            pool("www", "").replace("pm.max_children = 5\n", ""),
            "pm.max_children must be a positive value",
        ),
        (
            dynamic("pm.min_spare_servers = 0\npm.max_spare_servers = 3"),
            "pm.min_spare_servers(0) must be a positive value",
        ),
        (
            dynamic("pm.max_spare_servers = 3"),
            "pm.min_spare_servers(0) must be a positive value",
        ),
        (
            dynamic("pm.min_spare_servers = 1\npm.max_spare_servers = 0"),
            "pm.max_spare_servers(0) must be a positive value",
        ),
        (
            dynamic("pm.min_spare_servers = 1"),
            "pm.max_spare_servers(0) must be a positive value",
        ),
        (
            dynamic("pm.min_spare_servers = 1\npm.max_spare_servers = 6"),
            "pm.min_spare_servers(1) and pm.max_spare_servers(6) cannot be greater than pm.max_children(5)",
        ),
        (
            dynamic("pm.min_spare_servers = 6\npm.max_spare_servers = 3"),
            "pm.min_spare_servers(6) and pm.max_spare_servers(3) cannot be greater than pm.max_children(5)",
        ),
        (
            dynamic("pm.min_spare_servers = 3\npm.max_spare_servers = 2"),
            "pm.max_spare_servers(2) must not be less than pm.min_spare_servers(3)",
        ),
        (
            dynamic("pm.min_spare_servers = 2\npm.max_spare_servers = 3\npm.start_servers = 4"),
            "pm.start_servers(4) must not be less than pm.min_spare_servers(2) and not greater than pm.max_spare_servers(3)",
        ),
        (
            dynamic("pm.min_spare_servers = 2\npm.max_spare_servers = 3\npm.start_servers = 1"),
            "pm.start_servers(1) must not be less than pm.min_spare_servers(2) and not greater than pm.max_spare_servers(3)",
        ),
        (
            pool("www", "pm = ondemand\npm.process_idle_timeout = 0\n"),
            "pm.process_idle_timeout(0s) must be greater than 0s",
        ),
    ] {
        assert_eq!(
            lines(&text),
            [
                format!("ALERT: [pool www] {alert}").as_str(),
                post_process,
                failed
            ],
            "{text}"
        );
    }
    // php-fpm takes pm.start_servers = 0 as unset, and so does fpmd now
    // (start_servers_zero_is_not_set): no error.
}

/// An unknown PHP constant in a value is kept as written, and said once
/// per line (it was said twice for `E_ALL & ~E_FOOBAR`).
#[test]
fn an_unknown_constant_is_said_once() {
    let (_, c) = conf_ok(
        &pool("www", "php_value[error_reporting] = E_ALL & ~E_FOOBAR\n"),
        &[],
    );
    let said: Vec<&String> = c
        .notices
        .iter()
        .filter(|n| n.contains("'E_FOOBAR' is kept as written"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", c.notices);
    assert_eq!(crate::config::notice_level(said[0]), "WARNING");
}

/// php-fpm takes `pm.start_servers = 0` as not set: the default halfway
/// between the spare servers, with its notice (fpmd refused it).
#[test]
fn start_servers_zero_is_not_set() {
    let (_d, c) = conf_ok(
        &pool(
            "www",
            "pm.min_spare_servers = 1\npm.max_spare_servers = 3\npm.start_servers = 0\n",
        )
        .replace("pm = static", "pm = dynamic"),
        &[],
    );
    assert!(
        matches!(
            c.pools[0].pm.mode,
            PmMode::Dynamic {
                start_servers: 2,
                ..
            }
        ),
        "{:?}",
        c.pools[0].pm.mode
    );
    assert_eq!(
        c.notices,
        ["[pool www] pm.start_servers is not set. It's been set to 2."]
    );
}
