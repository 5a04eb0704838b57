//! What children write to their own stdout and stderr (outside FastCGI):
//! `catch_workers_output` on and off, `decorate_workers_output` on and
//! off, php-cgi's start-up warnings with catch off, the per-child rate
//! limit under a 100 MiB flood, and escaping. Each runs under both
//! `pm.spawn` strategies (`FPMD_TEST_SPAWN`).

use crate::harness::*;
use std::time::Duration;

const MIB: usize = 1 << 20;

/// Waits for a log line after `mark` containing `needle`; returns it.
fn wait_line(fpmd: &Fpmd, mark: usize, needle: &str) -> String {
    let mut found = None;
    if !wait_until(Duration::from_secs(5), || {
        found = fpmd
            .log_lines_since(mark)
            .into_iter()
            .find(|l| l.contains(needle));
        found.is_some()
    }) {
        panic!(
            "no line with {needle:?} in fpmd's log:\n{}",
            fpmd.log_since(mark)
        );
    }
    found.unwrap()
}

/// One child, warmed up: its first request is complete, so under
/// `pm.spawn = "exec"` its start-up window is closed too.
fn one_child(lines: &[&str]) -> Stack {
    let s = Stack::start(Pool::www().max_children(1).lines(lines));
    s.fpmd.wait_workers(1, LONG);
    assert_eq!(get(&s.url("/pid.php")).status, 200);
    s
}

#[test]
fn catch_off_logs_php_cgi_start_up_warnings_only() {
    let s = one_child(&[r#"php_admin_value.extension = "nonexistent.so""#]);
    // php-cgi's warning about the missing extension, written while it
    // starts (prefork: by the php-cgi parent; exec: by the child).
    let line = wait_line(
        &s.fpmd,
        0,
        "Unable to load dynamic library 'nonexistent.so'",
    );
    eprintln!("start-up line: {line}");
    assert!(
        line.contains(" WARNING [pool www] child ")
            && line.contains(" said into stderr: \"PHP Warning:  PHP Startup:"),
        "{line}"
    );
    assert!(log_time(&line).is_some(), "{line}");

    // What scripts write afterwards goes nowhere, stdout and stderr.
    let mark = s.fpmd.log_len();
    let r = get(&s.url("/output.php?marker=quiet1"));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = get(&s.url("/stderr.php?marker=quiet2"));
    assert_eq!(r.status, 200, "{}", r.text());
    let quiet = holds_for(Duration::from_millis(700), || {
        let log = s.fpmd.log_since(mark);
        !log.contains("quiet1") && !log.contains("quiet2")
    });
    assert!(
        quiet,
        "script output was logged with catch_workers_output off:\n{}",
        s.fpmd.log_since(mark)
    );
}

#[test]
fn catch_on_decorated_lines_name_pool_child_and_stream() {
    let s = one_child(&["catch_workers_output = true"]);
    let mark = s.fpmd.log_len();
    let r = get(&s.url("/output.php?marker=dec1"));
    assert_eq!(r.status, 200, "{}", r.text());
    // output.php answers "ok PID".
    let pid = pid_of(r.text().trim_start_matches("ok "));
    let prefix = format!("[pool www] child {pid} said into");
    for (needle, whole) in [
        (
            "stdout-line:dec1",
            format!("{prefix} stdout: \"stdout-line:dec1\""),
        ),
        (
            "stderr-line:dec1",
            format!("{prefix} stderr: \"stderr-line:dec1\""),
        ),
        // Escaped: ESC, quotes and backslash; one line.
        (
            "esc:dec1",
            format!(r#"{prefix} stderr: "esc:dec1 \x1b[31mred\x1b[0m \"quoted\" back\\slash""#),
        ),
        (
            "json",
            format!(r#"{prefix} stderr: "{{\"json\":\"dec1\"}}""#),
        ),
    ] {
        let line = wait_line(&s.fpmd, mark, needle);
        assert!(
            line.ends_with(&whole),
            "expected a line ending {whole:?}, got {line:?}"
        );
        assert!(line.contains(" WARNING "), "{line}");
        assert!(log_time(&line).is_some(), "{line}");
    }
    assert!(
        !s.fpmd.log().contains('\x1b'),
        "a raw ESC reached fpmd's log"
    );
}

#[test]
fn catch_on_undecorated_lines_are_the_childs_text() {
    let s = one_child(&[
        "catch_workers_output = true",
        "decorate_workers_output = false",
    ]);
    let mark = s.fpmd.log_len();
    let r = get(&s.url("/output.php?marker=raw1"));
    assert_eq!(r.status, 200, "{}", r.text());
    for whole in [
        "stdout-line:raw1",
        "stderr-line:raw1",
        r#"{"json":"raw1"}"#,
        r#"esc:raw1 \x1b[31mred\x1b[0m "quoted" back\slash"#,
    ] {
        let needle = whole.split(' ').next().unwrap();
        let line = wait_line(&s.fpmd, mark, needle);
        assert_eq!(
            line, whole,
            "a raw line is the child's text alone (control characters escaped)"
        );
    }
}

/// The 100 MiB flood of one request: fpmd's log growth, printed and bounded.
fn flood(lines: &[&str]) -> (Stack, usize) {
    let s = one_child(lines);
    let mark = s.fpmd.log_len();
    let r = get(&s.url("/flood.php?mib=100"));
    assert_eq!(r.status, 200, "{}", r.text());
    let written: usize = r
        .text()
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        written >= 100 * MIB,
        "the script wrote only {written} bytes: {}",
        r.text()
    );
    // Settled: the log stops growing (the summary comes within a second).
    let mut last = usize::MAX;
    wait_for(
        Duration::from_secs(10),
        "fpmd's log to stop growing",
        || {
            let now = s.fpmd.log_len();
            let settled = now == last;
            last = now;
            if !settled {
                std::thread::sleep(Duration::from_millis(1200));
            }
            settled
        },
    );
    let grew = s.fpmd.log_len() - mark;
    eprintln!(
        "100 MiB to stderr with {lines:?}: fpmd's log grew by {grew} bytes ({:.2} MiB)",
        grew as f64 / MIB as f64
    );
    assert_eq!(get(&s.url("/pid.php")).status, 200, "the pool serves on");
    (s, grew)
}

#[test]
fn flood_of_100_mib_with_catch_on_adds_little_to_the_log() {
    let (s, grew) = flood(&["catch_workers_output = true"]);
    assert!(
        grew <= 4 * MIB,
        "fpmd's log grew by {grew} bytes for a 100 MiB flood (bar: 4 MiB)"
    );
    let mark = 0;
    let summary = wait_line(&s.fpmd, mark, "wrote more than fpmd logs");
    eprintln!("{summary}");
    assert!(
        summary.contains("[pool www] child ")
            && summary.contains(" lines (")
            && summary.contains(" bytes) dropped"),
        "{summary}"
    );
    let logged = s
        .fpmd
        .log()
        .lines()
        .filter(|l| l.contains("said into stderr: \"xxxx"))
        .count();
    assert!(logged >= 1000, "the burst was logged: {logged} lines");
}

#[test]
fn flood_of_100_mib_with_catch_off_adds_nothing_to_the_log() {
    let (s, grew) = flood(&[]);
    assert!(
        grew <= 4096,
        "fpmd's log grew by {grew} bytes with catch_workers_output off:\n{}",
        s.fpmd.log()
    );
}

/// With `catch_workers_output`, the messages PHP sends on FastCGI STDERR
/// reach fpmd's log as php-fpm's master logs what its child's zlog wrote to
/// stderr: `[pool www] child N said into stderr: "NOTICE: PHP message: …"`,
/// one line per line of a message (compared with php-fpm 8.2's log).
#[test]
fn catch_on_php_messages_are_logged_as_php_fpm_logs_them() {
    use crate::harness::phpfpm::{PhpFpm, PhpFpmOpts};
    let s = one_child(&["catch_workers_output = true"]);
    let fpm = PhpFpm::start_with(
        &s.dir,
        PhpFpmOpts::default().line("catch_workers_output = yes"),
    );
    let fpm_nginx = Nginx::start(
        &s.dir,
        NginxOpts::default()
            .upstream(fpm.upstream())
            .name("nginx-php-fpm"),
    );
    let mark = s.fpmd.log_len();
    assert_eq!(get(&s.url("/messages.php")).status, 500);
    assert_eq!(get(&fpm_nginx.url("/messages.php")).status, 500);
    // What follows `said into stderr: ` on each line of each log.
    let tails = |log: &str| -> Vec<String> {
        log.lines()
            .filter_map(|l| Some(l[l.find("said into stderr: ")?..].to_string()))
            .filter(|l| {
                ["fpmd_msg", "Stack trace", "#0", "thrown in"]
                    .iter()
                    .any(|n| l.contains(n))
            })
            .collect()
    };
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    wait_for(LONG, "both logs hold the exception's last line", || {
        ours = tails(&s.fpmd.log_since(mark));
        theirs = tails(&fpm.log());
        [&ours, &theirs]
            .iter()
            .all(|t| t.iter().any(|l| l.contains("thrown in")))
    });
    eprintln!("fpmd: {ours:#?}\nphp-fpm: {theirs:#?}");
    assert!(
        theirs[0]
            .starts_with("said into stderr: \"NOTICE: PHP message: PHP Warning:  first fpmd_msg"),
        "php-fpm itself: {theirs:?}"
    );
    assert_eq!(ours, theirs, "fpmd's lines differ from php-fpm's");
}

/// php-fpm's master ends a child's unfinished line at the end of each
/// request (its child writes a flush marker then) and cuts a line at
/// `log_limit` bytes with its prefix (php-src `log-bwd-multiple-msgs`,
/// `log-bwd-limit-*`, `log-bwp-msg-flush-split-*`): two requests that
/// write without a newline are two log lines; a 1500-byte line under
/// `log_limit = 600` is continued on lines of exactly 600 bytes, newline
/// included, in php-fpm's format; the flush marker written by a script
/// ends a line there.
#[test]
fn catch_on_lines_end_with_each_request_and_at_log_limit() {
    let cfg = FpmdConfig::new()
        .global("log_format = \"php-fpm\"")
        .global("log_limit = 600")
        .pool(
            Pool::www()
                .max_children(1)
                .lines(&["catch_workers_output = true"]),
        );
    let s = Stack::start_with(cfg, NginxOpts::default());
    s.fpmd.wait_workers(1, LONG);
    let docroot = s.dir.docroot();
    write_script(
        &docroot.join("partial.php"),
        "<?php file_put_contents('php://stderr', 'part-' . $_GET['n'] . ' a'); \
         file_put_contents('php://stderr', ' b'); echo 'ok';",
    );
    write_script(
        &docroot.join("long.php"),
        "<?php file_put_contents('php://stderr', str_repeat('x', 1500) . \"\\n\"); echo 'ok';",
    );
    write_script(
        &docroot.join("marker.php"),
        "<?php file_put_contents('php://stderr', \"before\\0fscf\\0after\"); echo 'ok';",
    );
    let mark = s.fpmd.log_len();
    for n in 1..=2 {
        let r = get(&s.url(&format!("/partial.php?n={n}")));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    for n in 1..=2 {
        let line = wait_line(&s.fpmd, mark, &format!("part-{n}"));
        assert!(
            line.ends_with(&format!("said into stderr: \"part-{n} a b\"")),
            "one request's unfinished output is one line of its own: {line}"
        );
    }

    let mark = s.fpmd.log_len();
    assert_eq!(get(&s.url("/long.php")).status, 200);
    let mut text = String::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            text = s
                .fpmd
                .log_lines_since(mark)
                .iter()
                .filter(|l| l.contains("said into stderr: \"x"))
                .map(|l| {
                    assert!(
                        l.starts_with('[') && l.contains("] WARNING: [pool www] child "),
                        "{l}"
                    );
                    assert!(
                        l.len() < 600,
                        "longer than log_limit: {} bytes",
                        l.len() + 1
                    );
                    let quoted = &l[l.find("stderr: \"").unwrap() + 9..];
                    quoted.strip_suffix('"').unwrap_or(quoted).to_string()
                })
                .collect();
            text.len() == 1500
        }),
        "the 1500 bytes as continued lines:\n{}",
        s.fpmd.log_since(mark)
    );
    let pieces: Vec<String> = s
        .fpmd
        .log_lines_since(mark)
        .into_iter()
        .filter(|l| l.contains("said into stderr: \"x"))
        .collect();
    assert_eq!(pieces.len(), 3, "{pieces:#?}");
    for l in &pieces[..2] {
        assert_eq!(l.len() + 1, 600, "a continued line is log_limit long: {l}");
        assert!(
            !l.contains("(continued)"),
            "php-fpm's format marks nothing: {l}"
        );
    }
    assert_eq!(text, "x".repeat(1500));

    let mark = s.fpmd.log_len();
    assert_eq!(get(&s.url("/marker.php")).status, 200);
    wait_line(&s.fpmd, mark, "said into stderr: \"after\"");
    let log = s.fpmd.log_since(mark);
    assert!(log.contains("said into stderr: \"before\"\n"), "{log}");
}
