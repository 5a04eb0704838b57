//! Issue 11, `log_format = "php-fpm"`: the same events (start, a child
//! SIGKILLed and replaced, reload, reopen, stop) through php-fpm8.2 and
//! fpmd give the same lines once the time, pids, durations and pool name
//! are masked.

use crate::harness::phpfpm::{PhpFpm, PhpFpmOpts};
use crate::harness::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;

/// A php-fpm log line with what differs between runs masked: the time
/// stamp (`[T]`), the pool's name (`[pool P]`), every number (`N`).
fn mask(line: &str) -> String {
    let line = match line.strip_prefix('[').and_then(|l| l.split_once("] ")) {
        Some((_, rest)) => format!("[T] {rest}"),
        None => line.to_string(),
    };
    let line = match (line.find("[pool "), line.find("] ")) {
        (Some(a), _) => {
            let end = line[a..].find(']').map_or(line.len(), |e| a + e);
            format!("{}[pool P{}", &line[..a], &line[end..])
        }
        _ => line,
    };
    let mut out = String::new();
    let mut in_number = false;
    for c in line.chars() {
        if c.is_ascii_digit() || (in_number && c == '.') {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

/// php-fpm lines fpmd has no counterpart for: systemd's watchdog
/// interval, and the sockets it inherits at its start (the harness hands
/// php-fpm its socket; fpmd binds its own); `started`: php-fpm said
/// `fpm is running` already.
fn php_fpm_only(masked: &str, started: bool) -> bool {
    masked.contains("systemd monitor interval")
        || (!started && masked.contains("using inherited socket"))
}

/// What of a masked line must be the same: all of it, but for a reload's
/// `reloading: …` (php-fpm's re-exec, fpmd's in place) and the address of
/// an inherited socket (the two servers listen on different ones).
fn comparable(masked: &str) -> &str {
    for head in [
        "NOTICE: reloading: ",
        "NOTICE: using inherited socket fd=N, ",
    ] {
        if let Some(i) = masked.find(head) {
            return &masked[..i + head.len()];
        }
    }
    masked
}

/// An nginx named `name` in front of `upstream`.
fn nginx_to(t: &TestDir, upstream: String, name: &str) -> Nginx {
    Nginx::start(
        t,
        NginxOpts {
            upstream: Some(upstream),
            name: Some(name.into()),
            ..Default::default()
        },
    )
}

/// Waits until `log()` has `n` lines containing `what`.
fn wait_lines(what: &str, n: usize, log: impl Fn() -> String) {
    wait_for(LONG, what, || {
        log().lines().filter(|l| l.contains(what)).count() >= n
    });
}

/// The events, on a server whose master is `pid` and whose one child
/// `child()` finds; returns its log then.
fn events(pid: i32, child: impl Fn() -> i32, log: impl Fn() -> String) -> String {
    assert!(pid > 0, "no master pid");
    wait_lines("ready to handle connections", 1, &log);
    // Never 0: kill(0, …) would signal the test's own process group.
    wait_for(LONG, "a child", || child() > 0);
    let first = child();
    assert!(first > 0 && first != pid);
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    wait_for(LONG, "the child replaced", || {
        let c = child();
        c > 0 && c != first
    });
    wait_lines(" started", 1, &log);
    kill(Pid::from_raw(pid), Signal::SIGUSR2).unwrap();
    wait_lines("ready to handle connections", 2, &log);
    kill(Pid::from_raw(pid), Signal::SIGUSR1).unwrap();
    wait_lines("error log file re-opened", 1, &log);
    kill(Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    wait_lines("exiting, bye-bye!", 1, &log);
    log()
}

#[test]
fn lifecycle_lines_as_php_fpm_writes_them() {
    let t = TestDir::new();
    let fpm = PhpFpm::start_with(&t, PhpFpmOpts::default().max_children(1));
    let theirs = events(
        fpm.pid(),
        || fpm.children().first().copied().unwrap_or(0),
        || fpm.log(),
    );
    drop(fpm);
    let cfg = FpmdConfig::new()
        .pool(Pool::www().max_children(1))
        .error_log("fpmd.php-fpm.log")
        .global("log_format = \"php-fpm\"");
    let mut f = Fpmd::spawn(&t, &cfg, &["-F"]);
    let log_path = t.join("fpmd.php-fpm.log");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let worker = || f.workers().into_iter().next().unwrap_or(0);
    let ours = events(f.pid(), worker, log);
    assert!(f.wait_exit(LONG).is_some());
    eprintln!("--- php-fpm ---\n{theirs}--- fpmd ---\n{ours}");
    let ours: Vec<String> = ours.lines().map(mask).collect();
    let mut at = 0;
    let mut started = false;
    for line in theirs.lines().map(mask) {
        if php_fpm_only(&line, started) {
            continue;
        }
        started |= line.ends_with("NOTICE: fpm is running, pid N");
        match ours[at..]
            .iter()
            .position(|l| comparable(l) == comparable(&line))
        {
            Some(i) => at += i + 1,
            None => panic!(
                "php-fpm's line {line:?} is not in fpmd's log after line {at}:\n{}\n--- php-fpm ---\n{theirs}",
                ours.join("\n")
            ),
        }
    }
    for l in &ours {
        assert!(
            l.starts_with("[T] ") && l.contains(": "),
            "not php-fpm's form: {l}"
        );
    }
}

/// The lines of `log` about requests and output, masked.
fn request_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            [
                "said into stderr",
                "executing too slow",
                "execution timed out",
                "server reached pm.max_children",
            ]
            .iter()
            .any(|s| l.contains(s))
        })
        .map(mask)
        .collect()
}

/// The request events through `web`, logged in `log`: a child's stderr, a
/// slow request, two at once on one child, one over
/// request_terminate_timeout.
fn request_events(web: &Nginx, log: impl Fn() -> String) -> String {
    let r = get(&web.url("/stderr.php?marker=m1"));
    assert_eq!(r.status, 200, "{}", r.text());
    wait_lines("process-stderr:m1", 1, &log);
    let r = get(&web.url("/sleep.php?ms=1500"));
    assert_eq!(r.status, 200, "{}", r.text());
    wait_lines("executing too slow", 1, &log);
    let both: Vec<_> = (0..2)
        .map(|_| {
            let url = web.url("/sleep.php?ms=1200");
            std::thread::spawn(move || get(&url).status)
        })
        .collect();
    for h in both {
        assert_eq!(h.join().unwrap(), 200);
    }
    wait_lines("server reached pm.max_children setting", 1, &log);
    let r = get(&web.url("/sleep.php?ms=6000"));
    assert!(
        r.status >= 500,
        "past request_terminate_timeout: {}",
        r.status
    );
    wait_lines("execution timed out", 1, &log);
    log()
}

#[test]
fn request_lines_as_php_fpm_writes_them() {
    let t = TestDir::new();
    let slow = t.join("slow.log").display().to_string();
    let settings = |pm: &str| {
        vec![
            format!("{pm} = dynamic"),
            "pm.start_servers = 1".to_string(),
            "pm.min_spare_servers = 1".to_string(),
            "pm.max_spare_servers = 1".to_string(),
            "catch_workers_output = yes".to_string(),
            "request_slowlog_timeout = 1".to_string(),
            format!("slowlog = {slow}"),
            "request_terminate_timeout = 3".to_string(),
        ]
    };
    let mut opts = PhpFpmOpts::default().max_children(1);
    for l in settings("pm") {
        opts = opts.line(l);
    }
    let fpm = PhpFpm::start_with(&t, opts);
    let web = nginx_to(&t, fpm.upstream(), "php-fpm");
    let theirs = request_lines(&request_events(&web, || fpm.log()));
    drop(web);
    drop(fpm);

    // The same pool in fpmd's TOML.
    let toml: Vec<String> = settings("pm.mode")
        .into_iter()
        .map(|l| {
            let (k, v) = l.split_once(" = ").unwrap();
            match v.parse::<u32>() {
                Ok(_) => format!("{k} = {v}"),
                Err(_) if v == "yes" => format!("{k} = true"),
                Err(_) => format!("{k} = {v:?}"),
            }
        })
        .collect();
    let toml: Vec<&str> = toml.iter().map(String::as_str).collect();
    let cfg = FpmdConfig::new()
        .pool(Pool::www().max_children(1).lines(&toml))
        .error_log("fpmd.php-fpm.log")
        .global("log_format = \"php-fpm\"");
    let f = Fpmd::start(&t, cfg);
    let web = nginx_to(&t, f.upstream(0), "fpmd");
    let ours = request_lines(&request_events(&web, || f.log()));
    eprintln!("--- php-fpm ---\n{theirs:#?}\n--- fpmd ---\n{ours:#?}");
    // Both wrote their slow request's entry to the same slowlog: its head
    // is php-fpm's in both (fpm_php_trace_dump).
    let heads: Vec<String> = std::fs::read_to_string(&slow)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" [pool "))
        .map(mask)
        .collect();
    assert!(
        heads.len() >= 2 && heads.iter().all(|h| h == &heads[0]),
        "slowlog entry heads: {heads:#?}"
    );
    for kind in [
        "said into stderr",
        "executing too slow",
        "execution timed out",
        "server reached pm.max_children",
    ] {
        let pick = |v: &[String]| v.iter().find(|l| l.contains(kind)).cloned();
        let want = pick(&theirs).unwrap_or_else(|| panic!("php-fpm logged no {kind:?}"));
        assert_eq!(pick(&ours), Some(want), "{kind}");
    }
}

/// A dynamic pool short of spares under a burst of slow requests: php-fpm
/// says `seems busy (…), spawning 8 children, …` once its spawn rate,
/// doubled each second, reaches 8; fpmd, which starts children as
/// requests wait, once 8 were started within a second. The masked lines
/// are the same.
#[test]
fn busy_dynamic_pool_line_as_php_fpm_writes_it() {
    let t = TestDir::new();
    let settings = [
        "dynamic",
        "pm.start_servers = 2",
        "pm.min_spare_servers = 2",
        "pm.max_spare_servers = 30",
    ];
    let burst = |web: &Nginx, log: &dyn Fn() -> String| {
        let all: Vec<_> = (0..20)
            .map(|_| {
                let url = web.url("/sleep.php?ms=6000");
                std::thread::spawn(move || get(&url).status)
            })
            .collect();
        wait_lines("seems busy", 1, log);
        for h in all {
            assert_eq!(h.join().unwrap(), 200);
        }
        log()
            .lines()
            .find(|l| l.contains("seems busy"))
            .map(mask)
            .unwrap()
    };
    let mut opts = PhpFpmOpts::default().max_children(30);
    opts = opts.line(format!("pm = {}", settings[0]));
    for l in &settings[1..] {
        opts = opts.line(*l);
    }
    let fpm = PhpFpm::start_with(&t, opts);
    let web = nginx_to(&t, fpm.upstream(), "php-fpm");
    let theirs = burst(&web, &|| fpm.log());
    drop(web);
    drop(fpm);
    let mut lines = vec![format!("pm.mode = {:?}", settings[0])];
    lines.extend(settings[1..].iter().map(|l| l.to_string()));
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let cfg = FpmdConfig::new()
        .pool(Pool::www().max_children(30).lines(&lines))
        .error_log("fpmd.php-fpm.log")
        .global("log_format = \"php-fpm\"");
    let f = Fpmd::start(&t, cfg);
    let web = nginx_to(&t, f.upstream(0), "fpmd");
    let ours = burst(&web, &|| f.log());
    eprintln!("php-fpm: {theirs}\nfpmd:    {ours}");
    assert_eq!(ours, theirs);
}

/// Broken configurations through `php-fpm -t` and `fpmd -t` (the same
/// `.conf`): the same lines and levels, masked, where both refuse the
/// same thing for the same reason (the process manager's checks are
/// `ALERT`s, then `failed to post process the configuration`); where
/// fpmd words its own refusal (a value php-fpm parses differently, or a
/// refusal php-fpm makes only at start), php-fpm's framing: `ERROR:
/// [FILE:LINE] …`, then `failed to load configuration file 'FILE'`, then
/// `FPM initialization failed`.
#[test]
fn broken_configuration_lines_as_php_fpm_writes_them() {
    let php_fpm = require_php_fpm();
    let t = TestDir::new();
    let conf = t.join("php-fpm.conf");
    let test = |bin: &std::path::Path, text: &str| -> Vec<String> {
        std::fs::write(&conf, text).unwrap();
        let out = std::process::Command::new(bin)
            .args(["-t", "-y"])
            .arg(&conf)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{} accepted:\n{text}", bin.display());
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .map(|l| mask(&l.replace(&conf.display().to_string(), "FILE")))
            .collect()
    };
    let pool = |extra: &str| {
        format!(
            "[global]\nerror_log = {}\n[www]\nuser = www-data\ngroup = www-data\nlisten = {}\npm = static\npm.max_children = 2\n{extra}\n",
            t.join("fpm.log").display(),
            t.join("www.sock").display()
        )
    };
    let same = [
        pool("php_value[] = 1"),
        pool("user = nosuchuser"),
        pool("group = nosuchgroup"),
        pool("listen.owner = nosuchuser"),
        pool("listen.group = nosuchgroup"),
        pool("").replace("[global]\n", "[global]\nlog_limit = 64\n"),
        // The process manager's checks (fpm_conf_process_all_pools): an
        // ALERT, then "failed to post process the configuration".
        pool("pm.max_children = 0"),
        pool("").replace("pm.max_children = 2\n", ""),
        pool("pm = dynamic\npm.min_spare_servers = 0\npm.max_spare_servers = 1"),
        pool("pm = dynamic\npm.max_spare_servers = 1"),
        pool("pm = dynamic\npm.min_spare_servers = 1\npm.max_spare_servers = 0"),
        pool("pm = dynamic\npm.min_spare_servers = 1\npm.max_spare_servers = 3"),
        pool("pm = dynamic\npm.min_spare_servers = 3\npm.max_spare_servers = 1"),
        pool("pm = dynamic\npm.min_spare_servers = 2\npm.max_spare_servers = 1"),
        pool("pm = dynamic\npm.min_spare_servers = 1\npm.max_spare_servers = 1\npm.start_servers = 2"),
        pool("pm = ondemand\npm.process_idle_timeout = 0"),
    ];
    for text in &same {
        let theirs = test(&php_fpm, text);
        let ours = test(Path::new(FPMD_BIN), text);
        eprintln!("php-fpm: {theirs:#?}\nfpmd: {ours:#?}");
        assert_eq!(ours, theirs, "{text}");
    }
    for (extra, key) in [
        ("pm.max_childrem = 3", "unknown entry 'pm.max_childrem'"),
        ("pm = sometimes", "'pm'"),
        (
            "request_terminate_timeout = 5x",
            "'request_terminate_timeout'",
        ),
    ] {
        let text = pool(extra);
        let theirs = test(&php_fpm, &text);
        let ours = test(Path::new(FPMD_BIN), &text);
        eprintln!("php-fpm: {theirs:#?}\nfpmd: {ours:#?}");
        assert_eq!(ours.len(), 3, "{ours:#?}");
        assert_eq!(ours[1..], theirs[1..], "{extra}");
        assert!(
            theirs[0].starts_with("[T] ERROR: [FILE:N] ") && theirs[0].contains(key),
            "{theirs:#?}"
        );
        assert!(
            ours[0].starts_with("[T] ERROR: [FILE:N] ") && ours[0].contains(key),
            "{ours:#?}"
        );
    }
}

/// A child recycled at `pm.max_requests`: php-fpm logs its exit and its
/// replacement's start (`fpm_children_bury`); fpmd, which stops the child
/// itself, writes the same two lines under `log_format = "php-fpm"`.
#[test]
fn recycled_child_lines_as_php_fpm_writes_them() {
    let t = TestDir::new();
    let recycle = |web: &Nginx, log: &dyn Fn() -> String| {
        for _ in 0..3 {
            assert_eq!(get(&web.url("/pid.php")).status, 200);
        }
        wait_lines(" started", 1, log);
        log()
            .lines()
            .filter(|l| l.contains(" exited ") || l.contains(" started"))
            .map(mask)
            .collect::<Vec<_>>()
    };
    let fpm = PhpFpm::start_with(
        &t,
        PhpFpmOpts::default()
            .max_children(1)
            .line("pm.max_requests = 2"),
    );
    let web = nginx_to(&t, fpm.upstream(), "php-fpm");
    let theirs = recycle(&web, &|| fpm.log());
    drop(web);
    drop(fpm);
    let cfg = FpmdConfig::new()
        .pool(Pool::www().max_children(1).max_requests(2))
        .error_log("fpmd.php-fpm.log")
        .global("log_format = \"php-fpm\"");
    let f = Fpmd::start(&t, cfg);
    let web = nginx_to(&t, f.upstream(0), "fpmd");
    let ours = recycle(&web, &|| f.log());
    eprintln!("php-fpm: {theirs:#?}\nfpmd: {ours:#?}");
    assert_eq!(ours, theirs);
}
