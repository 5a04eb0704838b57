//! Item 4: invalid configurations. A reload by signal or by `fpmd reload`
//! to a broken file changes nothing and names the problem (file and line,
//! exit 78); a new php_cgi that dies at start keeps the old children
//! serving, and the next reload tries the change again.

use super::helpers::*;
use crate::harness::*;
use std::time::Duration;

/// A broken configuration and what its error must name.
struct Bad {
    what: &'static str,
    cfg: FpmdConfig,
    names: Vec<String>,
}

/// The broken variants of `FpmdConfig::new().pool(pool("www", "64M"))`
/// (with `globals`): a syntax error, an unknown key, pm.max_children = 0,
/// two pools on one address, an unknown user, a missing php_cgi.
fn bad_configs(dir: &TestDir, globals: &[String]) -> Vec<Bad> {
    let with = |pools: Vec<Pool>| {
        let mut c = FpmdConfig::new();
        for g in globals {
            c = c.global(g.clone());
        }
        for p in pools {
            c = c.pool(p);
        }
        c
    };
    let at = |p: &Pool, needle: &str| {
        format!(
            "www.toml:{}",
            line_of(&p.toml(dir.path(), &dir.tag()), needle)
        )
    };
    let syntax = pool("www", "64M").line(r#"request_slowlog_timeout = "2s"#);
    let unknown = pool("www", "64M").line("pm.max_childs = 4");
    let zero = pool("www", "64M").max_children(0);
    let www = pool("www", "64M");
    let www_sock = www.address(dir.path());
    let twice = Pool::new("other").unix_at(&www_sock).max_children(1);
    vec![
        Bad {
            what: "syntax error",
            names: vec![at(&syntax, "request_slowlog_timeout")],
            cfg: with(vec![syntax]),
        },
        Bad {
            what: "unknown key",
            names: vec![at(&unknown, "pm.max_childs"), "pm.max_childs".into()],
            cfg: with(vec![unknown]),
        },
        Bad {
            what: "pm.max_children = 0",
            names: vec![at(&zero, "pm.max_children"), "pm.max_children".into()],
            cfg: with(vec![zero]),
        },
        Bad {
            what: "two pools on one address",
            names: vec![www_sock.clone()],
            cfg: with(vec![www, twice]),
        },
        Bad {
            what: "unknown user",
            names: vec!["fpmd-no-such-user".into()],
            cfg: with(vec![
                pool("www", "64M").user("fpmd-no-such-user", "www-data")
            ]),
        },
        Bad {
            what: "missing php_cgi",
            names: vec!["/nonexistent/php-cgi".into()],
            cfg: with(vec![pool("www", "64M").php_cgi("/nonexistent/php-cgi")]),
        },
    ]
}

/// Checks that nothing changed after a refused reload: fpmd runs, the same
/// children serve the old value.
fn unchanged(s: &mut Stack, before: &[i32], what: &str, problems: &mut Vec<String>) {
    s.fpmd.assert_running();
    let v = memory_limit(&s.nginx);
    if v != "64M" {
        problems.push(format!("{what}: memory_limit is now {v}, not the old 64M"));
    }
    let now = s.fpmd.workers();
    if now != before {
        problems.push(format!(
            "{what}: children changed from {before:?} to {now:?}"
        ));
    }
}

#[test]
fn invalid_reload_by_signal_changes_nothing_and_is_logged_with_file_and_line() {
    let mut s = Stack::start(pool("www", "64M"));
    let before = s.fpmd.wait_workers(4, LONGER);
    let mut problems = Vec::new();
    for bad in bad_configs(&s.dir, &[]) {
        s.fpmd.rewrite(&bad.cfg);
        let line = s.fpmd.reload();
        eprintln!("{}: {line}", bad.what);
        if !line.contains("reload refused") {
            problems.push(format!("{}: not refused: {line}", bad.what));
        }
        for n in &bad.names {
            if !line.contains(n.as_str()) {
                problems.push(format!(
                    "{}: the log line does not name {n:?}: {line}",
                    bad.what
                ));
            }
        }
        unchanged(&mut s, &before, bad.what, &mut problems);
        let t = s.fpmd.cli(&["-t"]);
        eprintln!("{}: {t}", bad.what);
        if t.code() != Some(EX_CONFIG) {
            problems.push(format!(
                "{}: fpmd -t exits {:?}, not 78: {}",
                bad.what,
                t.code(),
                t.stderr.trim()
            ));
        }
        for n in &bad.names {
            if !t.output().contains(n.as_str()) {
                problems.push(format!("{}: fpmd -t does not name {n:?}", bad.what));
            }
        }
    }
    s.fpmd.rewrite(&FpmdConfig::new().pool(pool("www", "96M")));
    let line = s.fpmd.reload_ok();
    eprintln!("corrected: {line}");
    assert_eq!(memory_limit(&s.nginx), "96M");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn invalid_reload_by_command_exits_78_naming_the_problem() {
    let dir = TestDir::new();
    let globals = vec![control_socket(&dir)];
    let cfg = FpmdConfig::new()
        .global(globals[0].clone())
        .pool(pool("www", "64M"));
    let fpmd = Fpmd::start(&dir, cfg);
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    let mut s = Stack { nginx, fpmd, dir };
    let before = s.fpmd.wait_workers(4, LONGER);
    let mut problems = Vec::new();
    for bad in bad_configs(&s.dir, &globals) {
        s.fpmd.rewrite(&bad.cfg);
        let r = s.fpmd.cli(&["reload"]);
        eprintln!("{}: {r}", bad.what);
        if r.code() != Some(EX_CONFIG) {
            problems.push(format!(
                "{}: fpmd reload exits {:?}, not 78",
                bad.what,
                r.code()
            ));
        }
        for n in &bad.names {
            if !r.stderr.contains(n.as_str()) {
                problems.push(format!(
                    "{}: fpmd reload's message does not name {n:?}",
                    bad.what
                ));
            }
        }
        unchanged(&mut s, &before, bad.what, &mut problems);
    }
    let good = FpmdConfig::new()
        .global(globals[0].clone())
        .pool(pool("www", "96M"));
    s.fpmd.rewrite(&good);
    let r = s.fpmd.cli(&["reload"]);
    eprintln!("corrected: {r}");
    assert_eq!(r.code(), Some(0), "the corrected file: {r}");
    // `fpmd reload` returns once the new configuration is in force.
    assert_eq!(memory_limit(&s.nginx), "96M");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A reload to a `php_cgi` that exists but dies at start (`script`, an
/// executable in the test dir) cannot be caught by validation; the new
/// generation never becomes ready, so the old children must serve on
/// (same pids, old ini value, no failed request) and the reload fail.
fn reload_to_a_php_cgi_that_dies(script: &str) {
    let dir = TestDir::new();
    let dead = dir.join("dead-php-cgi");
    write_script(&dead, script);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(pool("www", "64M")));
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    let mut s = Stack { nginx, fpmd, dir };
    let before = s.fpmd.wait_workers(4, LONGER);
    let load = light_load(&s);
    let t0 = load.started;
    s.fpmd
        .rewrite(&FpmdConfig::new().pool(pool("www", "96M").php_cgi(&dead)));
    let line = s.fpmd.reload();
    eprintln!("{line}");
    run_for(&mut s.fpmd, Duration::from_secs(2));
    let samples = load.stop();
    let bad = failures(&samples, t0);
    eprintln!(
        "{} requests during the failed reload, {} failed; workers now {:?}",
        samples.len(),
        bad.len(),
        s.fpmd.workers()
    );
    assert!(
        !line.contains("reload done"),
        "a reload whose php-cgi cannot start is reported as done: {line}"
    );
    assert_no_failure(&samples, t0, "requests during the failed reload");
    assert_eq!(memory_limit(&s.nginx), "64M");
    assert_eq!(s.fpmd.workers(), before, "the old children were replaced");
}

/// Found by a new user's trial: a reload whose new generation failed to
/// start left the new settings recorded as running, so the next reload of
/// the same file, once the cause was gone, said "unchanged" while the old
/// children went on. It tries the change again.
#[test]
fn reload_after_a_failed_generation_tries_it_again() {
    let dir = TestDir::new();
    let php = dir.join("php-cgi-wrapper");
    write_script(&php, "#!/bin/sh\necho 'cannot start' >&2\nexit 1\n");
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(pool("www", "64M")));
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    let mut s = Stack { nginx, fpmd, dir };
    s.fpmd.wait_workers(4, LONGER);
    s.fpmd
        .rewrite(&FpmdConfig::new().pool(pool("www", "96M").php_cgi(&php)));
    let line = s.fpmd.reload();
    assert!(!line.contains("reload done"), "{line}");
    assert_eq!(memory_limit(&s.nginx), "64M");
    // The cause goes away; the configuration file stays as it is.
    write_script(&php, "#!/bin/sh\nexec /usr/bin/php-cgi \"$@\"\n");
    let line = s.fpmd.reload();
    assert!(
        line.contains("reload done") && line.contains("new children"),
        "{line}"
    );
    wait_for(LONGER, "the new generation to serve", || {
        memory_limit(&s.nginx) == "96M"
    });
}

#[test]
fn reload_whose_php_cgi_dies_at_start_keeps_the_old_children_serving() {
    reload_to_a_php_cgi_that_dies("#!/bin/sh\necho 'cannot start' >&2\nexit 1\n");
}

/// The same with a wrapper that runs a command first (as `$(…)` or any
/// program does): the php-cgi "parent" then has a child before it fails.
#[test]
fn reload_whose_php_cgi_wrapper_forks_then_dies_keeps_the_old_children_serving() {
    reload_to_a_php_cgi_that_dies("#!/bin/sh\nsleep 0.3\necho 'cannot start' >&2\nexit 1\n");
}
