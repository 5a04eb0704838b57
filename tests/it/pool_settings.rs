//! Issue 2, item 5: children run as the pool's user and group (no
//! supplementary groups), clear_env/env.* as in php-fpm, ini values set by
//! php_admin_value/php_value/…_flag are what PHP reads.

use crate::harness::*;
use std::time::Duration;

fn status_ids(pid: i32, field: &str) -> Vec<u32> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = st
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap();
    line[field.len() + 1..]
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

#[test]
fn children_run_as_pool_user_and_group() {
    let s = Stack::start(Pool::www().user("nobody", "nogroup").max_children(2));
    let r = get(&s.url("/whoami.php"));
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let mut parts = text.split(' ');
    assert_eq!(parts.next(), Some("nobody"), "user: {text}");
    assert_eq!(parts.next(), Some("nogroup"), "group: {text}");
    let groups = parts.next().unwrap_or("");
    assert!(
        groups.split(',').all(|g| g.is_empty() || g == "nogroup"),
        "supplementary groups: {groups}"
    );
    for pid in s.fpmd.wait_workers(2, Duration::from_secs(30)) {
        assert_eq!(status_ids(pid, "Uid"), [65534; 4], "uids of child {pid}");
        assert_eq!(status_ids(pid, "Gid"), [65534; 4], "gids of child {pid}");
        assert!(
            status_ids(pid, "Groups").iter().all(|g| *g == 65534),
            "supplementary groups of child {pid}"
        );
    }
}

fn env_of(s: &Stack, names: &str) -> String {
    let r = get(&s.url(&format!("/env.php?names={names}")));
    assert_eq!(r.status, 200, "{}", r.text());
    r.text()
}

#[test]
fn clear_env_true_hides_fpmd_environment() {
    let pool = Pool::www().lines(&[
        "clear_env = true",
        r#"env.FOO = "bar""#,
        r#"env.COPIED = "$FROM_PARENT""#,
    ]);
    let cfg = FpmdConfig::new()
        .pool(pool)
        .env("SECRET", "s3cret")
        .env("FROM_PARENT", "parent-value");
    let s = Stack::start_with(cfg, NginxOpts::default());
    assert_eq!(
        env_of(&s, "FOO,COPIED,SECRET,FROM_PARENT"),
        "FOO='bar'\nCOPIED='parent-value'\nSECRET=false\nFROM_PARENT=false\n"
    );
}

#[test]
fn clear_env_false_keeps_fpmd_environment() {
    let pool = Pool::www().lines(&["clear_env = false", r#"env.FOO = "bar""#]);
    let cfg = FpmdConfig::new().pool(pool).env("SECRET", "s3cret");
    let s = Stack::start_with(cfg, NginxOpts::default());
    assert_eq!(env_of(&s, "FOO,SECRET"), "FOO='bar'\nSECRET='s3cret'\n");
}

/// C16: fpmd started with `FOO=bar SECRET=s`; a pool with `clear_env =
/// true` and php-fpm's `env[FOO] = $FOO` (`env.FOO = "$FOO"`) shows
/// FOO=bar and SECRET=false; with `clear_env = false` both are visible.
/// `fpmd -t` prints the effective `clear_env` and `env.FOO` with the file
/// and line that set them, and a key left out as `default`.
#[test]
fn c16_clear_env_with_env_from_fpmd_and_the_dump_names_the_file() {
    let cfg = |clear: &str| {
        FpmdConfig::new()
            .pool(Pool::www().lines(&[&format!("clear_env = {clear}"), r#"env.FOO = "$FOO""#]))
            .env("FOO", "bar")
            .env("SECRET", "s")
    };
    for (clear, want) in [
        ("true", "FOO='bar'\nSECRET=false\n"),
        ("false", "FOO='bar'\nSECRET='s'\n"),
    ] {
        // The dump first, in a directory of its own (its output is the log).
        let t = TestDir::new();
        let mut f = Fpmd::spawn(&t, &cfg(clear), &["-t"]);
        let st = f
            .wait_exit(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("fpmd -t still running after 30 s:\n{}", f.log()));
        let out = f.log();
        assert_eq!(st.code(), Some(0), "fpmd -t:\n{out}");
        let file = t.join("pool.d/www.toml").display().to_string();
        for (key, value) in [("clear_env", clear), ("env.FOO", "\"bar\"")] {
            let want_line = format!("{key} = {value} # set in {file}:");
            assert!(
                out.lines().any(|l| l.starts_with(&want_line)),
                "clear_env = {clear}: no line {want_line:?}N in fpmd -t's output:\n{out}"
            );
        }
        assert!(
            out.lines().any(|l| l == "listen.backlog = 511 # default"),
            "a key left out is not shown as the default:\n{out}"
        );
        drop(f);

        let s = Stack::start_with(cfg(clear), NginxOpts::default());
        assert_eq!(env_of(&s, "FOO,SECRET"), want, "clear_env = {clear}");
    }
}

#[test]
fn ini_values_reach_php() {
    // Each value differs from Debian's php-cgi php.ini default.
    let pool = Pool::www().lines(&[
        r#"php_admin_value.memory_limit = "96M""#,
        r#"php_value."session.save_path" = "/tmp/fpmd-sessions""#,
        "php_admin_flag.log_errors = false",
        "php_flag.display_errors = true",
        r#"php_value.default_charset = "ISO-8859-1""#,
    ]);
    let s = Stack::start(pool);
    let ini = |name: &str| {
        let r = get(&s.url(&format!("/ini.php?name={name}")));
        assert_eq!(r.status, 200, "{}", r.text());
        r.text()
    };
    assert_eq!(ini("memory_limit"), "'96M'");
    assert_eq!(ini("session.save_path"), "'/tmp/fpmd-sessions'");
    assert_eq!(ini("default_charset"), "'ISO-8859-1'");
    let off = ini("log_errors");
    assert!(
        ["''", "'0'", "'Off'", "'off'"].contains(&off.as_str()),
        "log_errors = {off}"
    );
    let on = ini("display_errors");
    assert!(
        ["'1'", "'On'", "'on'", "'stdout'"].contains(&on.as_str()),
        "display_errors = {on}"
    );
}

/// What `disabled.php` reports over FastCGI at `addr`: the functions of
/// `funcs` (and classes of `classes`) the child does not have.
fn disabled_at(
    addr: std::net::SocketAddr,
    docroot: &std::path::Path,
    funcs: &str,
    classes: &str,
) -> Vec<String> {
    let query = format!("f={funcs}&c={classes}");
    let (status, body) = fcgi::get_script(addr, docroot, "disabled.php", &query);
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter_map(|l| l.strip_suffix("=no"))
        .map(String::from)
        .collect()
}

/// Issue 20, item 1: php.ini's `disable_functions` (from the file or a
/// scan directory) is kept under the pool's own list, its
/// `php_admin_value`, and the command line's `-d`: the children disable
/// the union, and never less than php-fpm with the same files and values.
#[test]
fn disable_functions_of_php_ini_scan_dir_admin_value_and_command_line_add_up() {
    let t = TestDir::new();
    std::fs::write(t.join("php.ini"), "disable_functions = exec,shell_exec\n").unwrap();
    std::fs::write(t.join("empty.ini"), "").unwrap();
    std::fs::create_dir(t.join("conf.d")).unwrap();
    std::fs::write(
        t.join("conf.d/50-hardening.ini"),
        "disable_functions = passthru\ndisable_classes = SplFileObject\n",
    )
    .unwrap();
    let funcs = "exec,shell_exec,passthru,system,proc_open,popen,pcntl_fork,phpinfo";
    let classes = "SplFileObject,SplTempFileObject,ArrayObject";
    let admin = [
        r#"php_admin_value.disable_functions = "system""#,
        r#"php_admin_value.disable_classes = "SplTempFileObject""#,
    ];
    let (ini_port, scan_port) = (free_port(), free_port());
    let ini = format!("php_ini = {:?}", t.join("php.ini").display().to_string());
    let empty = format!("php_ini = {:?}", t.join("empty.ini").display().to_string());
    let scan = format!(
        "php_ini_scan_dir = {:?}",
        t.join("conf.d").display().to_string()
    );
    let cfg = FpmdConfig::new()
        .pool(
            Pool::new("ini")
                .tcp(format!("127.0.0.1:{ini_port}"))
                .max_children(1)
                .lines(&admin)
                .line(&ini),
        )
        .pool(
            Pool::new("scan")
                .tcp(format!("127.0.0.1:{scan_port}"))
                .max_children(1)
                .lines(&admin)
                .lines(&[&empty, &scan]),
        );
    let mut f = Fpmd::spawn(&t, &cfg, &["-d", "disable_functions=popen"]);
    f.wait_ready(LONG);
    let docroot = t.docroot();
    let ours_ini = disabled_at(f.addr(0).tcp(), &docroot, funcs, classes);
    let ours_scan = disabled_at(f.addr(1).tcp(), &docroot, funcs, classes);
    drop(f);

    // php-fpm with the same files and admin values, one run per php.ini.
    let reference = |args: &[String], env: Option<String>| {
        let mut o = PhpFpmOpts::default().tcp(free_port());
        for a in args {
            o = o.arg(a.clone());
        }
        if let Some(dir) = env {
            o = o.env("PHP_INI_SCAN_DIR", dir);
        }
        o = o
            .line("php_admin_value[disable_functions] = system")
            .line("php_admin_value[disable_classes] = SplTempFileObject");
        let fpm = PhpFpm::start_with(&t, o);
        let got = disabled_at(fpm.addr().tcp(), &docroot, funcs, classes);
        drop(fpm);
        got
    };
    let theirs_ini = reference(
        &["-c".into(), t.join("php.ini").display().to_string()],
        Some(String::new()),
    );
    let theirs_scan = reference(
        &["-c".into(), t.join("empty.ini").display().to_string()],
        Some(t.join("conf.d").display().to_string()),
    );
    eprintln!("fpmd: {ours_ini:?} {ours_scan:?}; php-fpm: {theirs_ini:?} {theirs_scan:?}");
    for (ours, theirs, from_ini) in [
        (&ours_ini, &theirs_ini, &["exec", "shell_exec"][..]),
        (&ours_scan, &theirs_scan, &["passthru", "SplFileObject"][..]),
    ] {
        for name in theirs {
            assert!(
                ours.contains(name),
                "php-fpm disables {name}, fpmd does not: {ours:?}"
            );
        }
        // php.ini's, the admin value's, -d's and pcntl's, all at once.
        for name in from_ini
            .iter()
            .chain(&["system", "SplTempFileObject", "popen", "pcntl_fork"])
        {
            assert!(
                ours.iter().any(|n| n == name),
                "{name} is not disabled: {ours:?}"
            );
        }
        assert!(
            !ours.iter().any(|n| n == "phpinfo" || n == "ArrayObject"),
            "{ours:?}"
        );
    }
}

/// Issue 20, item 6: the children get `USER` and `HOME` of the pool's
/// user, over `env.*`, as php-fpm's do (when it runs as root); an exec'd
/// child has no `PHP_FCGI_CHILDREN` in `$_SERVER` (a pre-fork parent needs
/// it).
#[test]
fn user_and_home_of_the_pool_user_as_php_fpm_sets_them() {
    let t = TestDir::new();
    let names = "USER,HOME,PHP_FCGI_CHILDREN";
    let env = |addr| fcgi::get_script(addr, &t.docroot(), "env.php", &format!("names={names}")).1;
    let fpm = PhpFpm::start_with(&t, PhpFpmOpts::default().tcp(free_port()));
    let theirs = env(fpm.addr().tcp());
    drop(fpm);
    assert!(
        theirs.contains("USER='www-data'\nHOME='/var/www'\n"),
        "php-fpm: {theirs}"
    );
    let port = free_port();
    let f = Fpmd::start(
        &t,
        FpmdConfig::new().pool(
            Pool::www()
                .tcp(format!("127.0.0.1:{port}"))
                .max_children(1)
                .lines(&[r#"env.USER = "someone""#, r#"pm.spawn = "exec""#]),
        ),
    );
    let ours = env(f.addr(0).tcp());
    assert_eq!(ours, theirs, "fpmd's environment differs from php-fpm's");
}

/// The scheduling policy of every thread of `pid` (`policy` of
/// `/proc/PID/task/TID/sched`: 0 SCHED_OTHER, 3 SCHED_BATCH), by thread name.
fn thread_policies(pid: i32) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let sched = std::fs::read_to_string(t.path().join("sched")).unwrap_or_default();
        let policy = sched
            .lines()
            .find(|l| l.starts_with("policy"))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(u32::MAX);
        out.push((comm.trim().to_string(), policy));
    }
    out
}

fn policy_of(pid: i32) -> u32 {
    let sched = std::fs::read_to_string(format!("/proc/{pid}/sched")).unwrap();
    sched
        .lines()
        .find(|l| l.starts_with("policy"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// `sched_batch` (global, default true): fpmd's event loop thread runs
/// under SCHED_BATCH (3), its children under SCHED_OTHER (0); a reload to
/// `sched_batch = false` switches the loop back at once.
#[test]
fn the_event_loop_runs_under_sched_batch_and_php_cgi_does_not() {
    let mut s = Stack::start(Pool::www().max_children(2));
    assert_eq!(get(&s.url("/hello.php")).status, 200);
    let pid = s.fpmd.pid();
    assert_eq!(policy_of(pid), 3, "event loop: {:?}", thread_policies(pid));
    let spawner = thread_policies(pid)
        .into_iter()
        .find(|(name, _)| name == "fpmd-spawner")
        .expect("a spawner thread");
    assert_eq!(
        spawner.1, 0,
        "the spawner thread forks php-cgi under SCHED_OTHER"
    );
    let workers = s.fpmd.wait_workers(2, Duration::from_secs(30));
    for w in &workers {
        assert_eq!(policy_of(*w), 0, "php-cgi {w}");
    }

    s.fpmd.rewrite(
        &FpmdConfig::new()
            .global("sched_batch = false")
            .pool(Pool::www().max_children(2)),
    );
    s.fpmd.reload_ok();
    assert_eq!(
        policy_of(pid),
        0,
        "after the reload: {:?}",
        thread_policies(pid)
    );
    assert_eq!(get(&s.url("/hello.php")).status, 200);
}

/// php-src's bug75212 test, and the part of it php-cgi cannot do: a
/// `.user.ini` in the script's directory changes the pool's `php_value`
/// (`date.timezone`: Europe/Paris) but not its `php_admin_value` or
/// `php_admin_flag` (`memory_limit` stays 32M over the pool's own
/// `php_value` of that name and the file's 64M; `log_errors` stays on),
/// as php-fpm locks them; `sapi.php` sets them back at the request's
/// start. `upload_max_filesize` (PHP_INI_PERDIR) cannot be set back at run
/// time: the file's value stays, and fpmd warns once for the pool and that
/// name, however many requests and children meet it.
#[test]
fn php_admin_value_is_kept_against_a_user_ini() {
    let s = Stack::start(Pool::www().max_children(2).lines(&[
        r#"php_admin_value.memory_limit = "32M""#,
        r#"php_value.memory_limit = "48M""#,
        r#"php_value."date.timezone" = "Europe/London""#,
        "php_admin_flag.log_errors = true",
        r#"php_admin_value.upload_max_filesize = "3M""#,
    ]));
    let dir = s.dir.docroot().join("locked");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o755);
    std::fs::copy(s.dir.docroot().join("ini.php"), dir.join("ini.php")).unwrap();
    std::fs::write(
        dir.join(".user.ini"),
        "memory_limit=64M\ndate.timezone=Europe/Paris\nlog_errors=0\nupload_max_filesize=7M\n",
    )
    .unwrap();
    for p in ["ini.php", ".user.ini"] {
        chmod(&dir.join(p), 0o644);
    }
    let start = s.fpmd.log_len();
    let ini = |name: &str| {
        let r = get(&s.url(&format!("/locked/ini.php?name={name}")));
        assert_eq!(r.status, 200, "{}", r.text());
        r.text()
    };
    for _ in 0..3 {
        assert_eq!(ini("memory_limit"), "'32M'");
        assert_eq!(ini("date.timezone"), "'Europe/Paris'");
        assert_eq!(ini("log_errors"), "'1'");
        assert_eq!(ini("upload_max_filesize"), "'7M'");
    }
    // Outside the .user.ini's directory, the pool's own values.
    let r = get(&s.url("/ini.php?name=date.timezone"));
    assert_eq!(r.text(), "'Europe/London'");
    let warned = |name: &str| {
        s.fpmd
            .log_lines_since(start)
            .iter()
            .filter(|l| l.contains("php_admin_value") && l.contains(&format!("'{name}'")))
            .count()
    };
    wait_for(LONG, "the warning about upload_max_filesize", || {
        warned("upload_max_filesize") > 0
    });
    for _ in 0..4 {
        assert_eq!(ini("upload_max_filesize"), "'7M'");
    }
    assert!(
        holds_for(SLACK, || warned("upload_max_filesize") == 1),
        "not one warning:\n{}",
        s.fpmd.log_since(start)
    );
    let line = s
        .fpmd
        .log_lines_since(start)
        .into_iter()
        .find(|l| l.contains("'upload_max_filesize'"))
        .unwrap();
    assert!(
        line.contains("WARN") && line.contains("www") && line.contains(".user.ini"),
        "{line}"
    );
    for name in ["memory_limit", "log_errors", "date.timezone"] {
        assert_eq!(warned(name), 0, "{}", s.fpmd.log_since(start));
    }
}
