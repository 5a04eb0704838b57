//! php-fpm's access log (`access.log`, `access.format`) through real nginx
//! and real php-cgi: one line per request, served by a child or answered
//! by fpmd itself, in php-fpm's default format; durations against what
//! the client measured; logrotate (`mv` + SIGUSR1) loses no line; a
//! reload changes the format and the file without new children; an
//! invalid format is a configuration error naming file, line and key.

use crate::harness::http::{agent, try_get_with};
use crate::harness::*;
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn lines(p: &Path) -> Vec<String> {
    read_lossy(p).lines().map(str::to_string).collect()
}

/// The www pool writing its access log to `log`, in `format` (php-fpm's
/// default when `None`).
fn access_pool(log: &Path, format: Option<&str>) -> Pool {
    let p = Pool::www().line(format!("access.log = {:?}", log.display().to_string()));
    match format {
        // A TOML literal string: the formats here have no single quote.
        Some(f) => p.line(format!("access.format = '{f}'")),
        None => p,
    }
}

fn stack(dir: TestDir, cfg: FpmdConfig, opts: NginxOpts) -> Stack {
    let fpmd = Fpmd::start(&dir, cfg);
    let nginx = Nginx::start(&dir, opts.upstream(fpmd.upstream(0)));
    Stack { nginx, fpmd, dir }
}

/// Waits until `log` has `n` lines; returns them.
fn wait_lines(log: &Path, n: usize) -> Vec<String> {
    let mut got = Vec::new();
    let ok = wait_until(LONG, || {
        got = lines(log);
        got.len() >= n
    });
    assert!(
        ok,
        "{} lines of {n} in {}: {got:#?}",
        got.len(),
        log.display()
    );
    got
}

/// One line of php-fpm's default format, `%R - %u %t "%m %r" %s`, taken
/// apart.
#[derive(Debug, PartialEq, Eq)]
struct DefaultLine {
    remote: String,
    user: String,
    time: i64,
    method: String,
    uri: String,
    status: u16,
}

fn not_default(line: &str) -> ! {
    panic!("not php-fpm's default format: {line:?}")
}

fn parse_default(line: &str) -> DefaultLine {
    let parts = line.split_once(" - ").and_then(|(remote, rest)| {
        let (user, rest) = rest.split_once(' ')?;
        let (time, rest) = rest.split_once(" \"")?;
        let (request, status) = rest.rsplit_once("\" ")?;
        let (method, uri) = request.split_once(' ')?;
        Some((remote, user, time, method, uri, status))
    });
    let Some((remote, user, time, method, uri, status)) = parts else {
        not_default(line)
    };
    let time = chrono::DateTime::parse_from_str(time, "%d/%b/%Y:%H:%M:%S %z")
        .unwrap_or_else(|e| panic!("time {time:?} of {line:?}: {e}"))
        .timestamp();
    DefaultLine {
        remote: remote.into(),
        user: user.into(),
        time,
        method: method.into(),
        uri: uri.into(),
        status: status.parse().unwrap_or_else(|_| not_default(line)),
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// (a) php-fpm's default format: a GET with a query, a POST, a script's
/// 404, fpmd's own 404 for a missing script, the status page (php-fpm logs
/// it too) and a request with a Basic-auth user: one line each, in order,
/// with the method, script, status and user as sent.
#[test]
fn default_format_one_line_per_request_as_sent() {
    let dir = TestDir::new();
    let log = dir.join("www.access.log");
    let pool = access_pool(&log, None).line("pm.status_path = \"/status\"");
    let s = stack(
        dir,
        FpmdConfig::new().pool(pool),
        NginxOpts::default().no_try_files().status(),
    );
    let t0 = unix_now();
    assert_eq!(get(&s.url("/hello.php?name=access")).status, 200);
    assert_eq!(post(&s.url("/body.php"), b"0123456789").status, 200);
    assert_eq!(get(&s.url("/status404.php")).status, 404);
    let missing = get(&s.url("/missing.php"));
    assert_eq!(missing.status, 404);
    assert!(
        missing.text().contains("File not found."),
        "{}",
        missing.text()
    );
    assert_eq!(get(&s.url("/status")).status, 200);
    let authed = agent()
        .get(&s.url("/hello.php"))
        .set("Authorization", "Basic dXNlcjpzZWNyZXQ=") // user:secret
        .call()
        .expect("GET with a Basic-auth user");
    assert_eq!(authed.status(), 200);
    let t1 = unix_now();

    let want = [
        ("", "GET", "/hello.php", 200),
        ("", "POST", "/body.php", 200),
        ("", "GET", "/status404.php", 404),
        ("", "GET", "/missing.php", 404),
        ("", "GET", "/status", 200),
        ("user", "GET", "/hello.php", 200),
    ];
    let got = wait_lines(&log, want.len());
    eprintln!("{}", got.join("\n"));
    assert_eq!(got.len(), want.len(), "one line per request: {got:#?}");
    for (line, (user, method, uri, status)) in got.iter().zip(want) {
        let d = parse_default(line);
        assert_eq!(
            (
                d.remote.as_str(),
                d.user.as_str(),
                d.method.as_str(),
                d.uri.as_str(),
                d.status
            ),
            ("127.0.0.1", user, method, uri, status),
            "{line}"
        );
        assert!(
            t0 <= d.time && d.time <= t1,
            "{line}: time not in [{t0}, {t1}]"
        );
    }
    // No line for anything else (nginx's own answers never reach fpmd).
    assert!(holds_for(Duration::from_millis(300), || lines(&log).len()
        == want.len()));
}

/// (b) `%{mili}d %{kilo}M %C%% %s %m %r%Q%q`: the duration of each
/// `sleep.php?ms=200` is at least the script's sleep and at most what the
/// client measured around the whole request; memory and CPU are what the
/// child's `sapi.php` reported.
#[test]
fn durations_between_the_scripts_sleep_and_the_clients_time() {
    let dir = TestDir::new();
    let log = dir.join("www.access.log");
    let format = "%{mili}d %{kilo}M %C%% %s %m %r%Q%q";
    let s = stack(
        dir,
        FpmdConfig::new().pool(access_pool(&log, Some(format))),
        NginxOpts::default(),
    );
    let n = 5;
    let mut measured = Vec::new();
    for i in 0..n {
        let t0 = Instant::now();
        let r = get(&s.url(&format!("/sleep.php?ms=200&id={i}")));
        measured.push(t0.elapsed());
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let got = wait_lines(&log, n);
    assert_eq!(got.len(), n, "{got:#?}");
    for (i, (line, client)) in got.iter().zip(&measured).enumerate() {
        let fields: Vec<&str> = line.split(' ').collect();
        // The script's peak memory (PHP's 2 MiB chunk at least) and a
        // CPU share far below 100 % for a sleep.
        let kb: u64 = fields[1].parse().unwrap_or_else(|_| panic!("{line}"));
        let cpu: f64 = fields[2]
            .trim_end_matches('%')
            .parse()
            .unwrap_or_else(|_| panic!("{line}"));
        assert!(kb >= 2048 && cpu < 50.0, "{line}");
        assert_eq!(
            fields[3..],
            ["200", "GET", format!("/sleep.php?ms=200&id={i}").as_str()],
            "{line}"
        );
        let logged: f64 = fields[0]
            .parse()
            .unwrap_or_else(|_| panic!("{line}: no duration"));
        let client_ms = client.as_secs_f64() * 1000.0;
        eprintln!(
            "request {i}: logged {logged:.3} ms, client {client_ms:.3} ms (client − logged {:.3} ms, logged − sleep {:.3} ms)",
            client_ms - logged,
            logged - 200.0
        );
        assert!(logged >= 200.0, "{line}: shorter than the script's sleep");
        assert!(
            logged <= client_ms,
            "{line}: longer than the client's {client_ms:.3} ms"
        );
    }
}

/// (c) logrotate: `mv access.log access.log.1`, SIGUSR1, while requests
/// go on. Lines from before are in the moved file, lines from after the
/// reopen in a new access.log, and every request has exactly one line in
/// one of them; fpmd no longer holds the moved file.
#[test]
fn sigusr1_after_mv_moves_new_lines_to_a_new_file_and_loses_none() {
    let dir = TestDir::new();
    let log = dir.join("access.log");
    let s = stack(
        dir,
        FpmdConfig::new().pool(access_pool(&log, Some("%r%Q%q %s"))),
        NginxOpts::default(),
    );
    let request = |tag: String| {
        let r = get(&s.url(&format!("/hello.php?id={tag}")));
        assert_eq!(r.status, 200, "{tag}: {}", r.text());
    };
    for i in 0..5 {
        request(format!("before-{i}"));
    }
    wait_lines(&log, 5);

    // Requests go on while the file is moved and reopened.
    let url = s.url("/hello.php");
    let during = std::thread::spawn(move || {
        let a = agent();
        for i in 0..40 {
            let r = try_get_with(&a, &format!("{url}?id=during-{i}")).unwrap();
            assert_eq!(r.status, 200);
        }
    });
    let moved = PathBuf::from(format!("{}.1", log.display()));
    wait_for(LONG, "the first lines of the requests that go on", || {
        lines(&log).len() > 5
    });
    std::fs::rename(&log, &moved).unwrap();
    let mark = s.fpmd.log_len();
    s.fpmd.signal(Signal::SIGUSR1);
    wait_for(
        LONG,
        "fpmd to log that the access logs were reopened",
        || {
            s.fpmd
                .log_since(mark)
                .contains("access logs and slowlogs reopened: 1")
        },
    );
    let moved_len = read_lossy(&moved).len();
    during.join().unwrap();
    for i in 0..5 {
        request(format!("after-{i}"));
    }

    let total = 5 + 40 + 5;
    let mut all = Vec::new();
    let ok = wait_until(LONG, || {
        all = lines(&moved);
        all.extend(lines(&log));
        all.len() >= total
    });
    assert!(ok, "{} of {total} lines: {all:#?}", all.len());
    let tags: Vec<String> = (0..5)
        .map(|i| format!("before-{i}"))
        .chain((0..40).map(|i| format!("during-{i}")))
        .chain((0..5).map(|i| format!("after-{i}")))
        .collect();
    for tag in &tags {
        let line = format!("/hello.php?id={tag} 200");
        let n = all.iter().filter(|l| **l == line).count();
        assert_eq!(n, 1, "{tag}: {n} lines in access.log.1 + access.log");
    }
    assert_eq!(all.len(), total, "{all:#?}");
    let (old, new) = (lines(&moved), lines(&log));
    let during_in = |v: &[String]| v.iter().filter(|l| l.contains("during-")).count();
    eprintln!(
        "requests during the rotation: {} lines in access.log.1, {} in the new access.log",
        during_in(&old),
        during_in(&new)
    );
    assert!(
        old.iter().take(5).all(|l| l.contains("before-")),
        "{old:#?}"
    );
    assert!(
        new.iter().rev().take(5).all(|l| l.contains("after-")),
        "{new:#?}"
    );
    assert!(!old.iter().any(|l| l.contains("after-")), "{old:#?}");
    assert_eq!(
        read_lossy(&moved).len(),
        moved_len,
        "lines were added to the moved file after the reopen"
    );
    let held = procs::fds_on(&[&moved]);
    assert!(held.is_empty(), "the moved file is still open: {held:?}");
}

/// (d) An invalid `access.format` is a configuration error naming the
/// file, the line and the key, with php-fpm's reason (with and without
/// `-t`).
#[test]
fn invalid_format_is_a_config_error_with_file_line_and_key() {
    crate::config_errors::invalid_pool_key(
        "access.format",
        "\"%R %x\"",
        &["Invalid token in the access.format (%x)"],
    );
    crate::config_errors::invalid_pool_key(
        "access.format",
        "\"%{mili\"",
        &["missing closing embrace in the access.format"],
    );
    crate::config_errors::invalid_pool_key(
        "access.format",
        "\"%{hours}d\"",
        &["only 'seconds', 'milli', 'milliseconds', 'micro' or 'microseconds' are allowed as a modifier for %d ('hours')"],
    );
}

/// A reload that changes `access.format` and `access.log` applies both to
/// the next requests without new children; one with an invalid format is
/// refused and the log goes on as it was.
#[test]
fn reload_changes_format_and_file_without_new_children() {
    let dir = TestDir::new();
    let (first, second) = (dir.join("first.log"), dir.join("second.log"));
    let mut s = stack(
        dir,
        FpmdConfig::new().pool(access_pool(&first, Some("one %m %r"))),
        NginxOpts::default(),
    );
    let children = s.fpmd.wait_workers(4, LONG);
    assert_eq!(get(&s.url("/hello.php")).status, 200);
    assert_eq!(wait_lines(&first, 1), ["one GET /hello.php"]);

    s.fpmd.rewrite(&FpmdConfig::new().pool(access_pool(
        &second,
        Some("two %s %{Content-type}o %{Content-Type}o"),
    )));
    let line = s.fpmd.reload_ok();
    assert!(line.contains("children kept"), "{line}");
    assert_eq!(get(&s.url("/hello.php")).status, 200);
    assert_eq!(
        wait_lines(&second, 1),
        ["two 200 text/plain;charset=UTF-8 -"]
    );
    assert_eq!(lines(&first), ["one GET /hello.php"]);

    s.fpmd
        .rewrite(&FpmdConfig::new().pool(access_pool(&second, Some("%z"))));
    let line = s.fpmd.reload();
    assert!(line.contains("reload refused"), "{line}");
    assert_eq!(get(&s.url("/status404.php")).status, 404);
    // PHP writes `Content-type`: %{…}o is case-sensitive, as in php-fpm.
    assert_eq!(
        wait_lines(&second, 2)[1],
        "two 404 text/html; charset=UTF-8 -"
    );
    assert_eq!(s.fpmd.workers(), children, "children were replaced");
}

/// fpmd's own answers have a line too: with one busy child and
/// `request_queue_timeout`, the waiting request's 503 is logged with
/// fpmd's pid as `%p` (and `%P`), the busy one's 200 with the pid of the
/// child that ran it.
#[test]
fn fpmds_own_503_and_the_childs_pid() {
    let dir = TestDir::new();
    let log = dir.join("www.access.log");
    let pool = access_pool(&log, Some("%s %p %P %r%Q%q"))
        .max_children(1)
        .line("request_queue_timeout = \"100ms\"");
    let s = stack(dir, FpmdConfig::new().pool(pool), NginxOpts::default());
    let busy_url = s.url("/sleep.php?ms=1500&mark=busy");
    let busy = std::thread::spawn(move || get(&busy_url));
    wait_for(LONG, "the child to start the long request", || {
        s.dir.mark("busy").is_some()
    });
    let child: i32 = s.dir.mark("busy").unwrap().trim().parse().unwrap();
    let refused = get(&s.url("/hello.php?id=queued"));
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(busy.join().unwrap().status, 200);
    let fpmd = s.fpmd.pid();
    let got = wait_lines(&log, 2);
    assert_eq!(
        got,
        [
            format!("503 {fpmd} {fpmd} /hello.php?id=queued"),
            format!("200 {child} {fpmd} /sleep.php?ms=1500&mark=busy"),
        ]
    );
}

/// `%s` is php-fpm's: the script's last response code, also one it set
/// after its head went out (php-src's log-suppress-output: the client
/// gets 200, php-fpm logs 500), which also decides `access.suppress_path`;
/// a code set before the output, and one set twice, as sent. (The
/// scripts flush their output: php.ini's output_buffering would hold the
/// head back until the end.)
#[test]
fn status_is_the_scripts_last_response_code() {
    let dir = TestDir::new();
    let log = dir.join("www.access.log");
    write_script(
        &dir.docroot().join("late.php"),
        "<?php if (isset($_GET['early'])) { http_response_code(404); } echo 'out'; while (ob_get_level() > 0) { ob_end_flush(); } flush(); if (isset($_GET['late'])) { http_response_code((int) $_GET['late']); }",
    );
    write_script(
        &dir.docroot().join("late500.php"),
        "<?php echo 'out'; while (ob_get_level() > 0) { ob_end_flush(); } flush(); http_response_code(500);",
    );
    let pool = access_pool(&log, Some("%s %r%Q%q"))
        .line(r#"access.suppress_path = ["/late.php", "/late500.php"]"#);
    let s = stack(dir, FpmdConfig::new().pool(pool), NginxOpts::default());
    for (uri, sent) in [
        ("/late.php?late=500", 200),
        ("/late.php", 200),
        ("/late500.php", 200),
        ("/late.php?early=1", 404),
        ("/late.php?early=1&late=503", 404),
    ] {
        let r = get(&s.url(uri));
        assert_eq!((r.status, r.text().as_str()), (sent, "out"), "{uri}");
    }
    // /late.php's 200 without a query is suppressed, /late500.php's 500
    // is not, as php-fpm decides.
    let got = wait_lines(&log, 4);
    assert_eq!(
        got,
        [
            "500 /late.php?late=500",
            "500 /late500.php",
            "404 /late.php?early=1",
            "503 /late.php?early=1&late=503",
        ]
    );
}

/// Issue 20, item 6: fpmd's log file, the access log and the slowlog are
/// created 0600, as php-fpm creates its own: their lines name URIs with
/// their query strings.
#[test]
fn log_files_are_created_0600_as_php_fpm_creates_them() {
    use std::os::unix::fs::MetadataExt;
    let dir = TestDir::new();
    let (error_log, access, slow) = (
        dir.join("fpmd.error.log"),
        dir.join("www.access.log"),
        dir.join("www.slow.log"),
    );
    let pool = access_pool(&access, None).lines(&[
        &format!("slowlog = {:?}", slow.display().to_string()),
        r#"request_slowlog_timeout = "1s""#,
    ]);
    let s = stack(
        dir,
        FpmdConfig::new().pool(pool).error_log(&error_log),
        NginxOpts::default(),
    );
    assert_eq!(get(&s.url("/usleep.php?ms=1300&secret=1")).status, 200);
    wait_for(LONG, "the slowlog entry", || {
        read_lossy(&slow).contains("usleep.php")
    });
    wait_for(LONG, "the access log line", || {
        read_lossy(&access).contains("usleep.php")
    });
    for p in [&error_log, &access, &slow] {
        let mode = std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", p.display());
    }
}
