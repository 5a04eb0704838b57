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
