//! Issue 11, php-fpm's command line: every flag php-fpm 8.2 takes (and
//! those php-src's FPM tester passes) against the real fpmd, php-cgi,
//! nginx, and php-fpm8.2 where the two can be compared.

use crate::harness::fpmd::{run_fpmd, CliRun};
use crate::harness::*;
use std::path::Path;
use std::process::Command;

/// `fpmd ARGS` in the test dir.
fn fpmd(t: &TestDir, args: &[&str]) -> CliRun {
    run_fpmd(t.path(), &t.tag(), args)
}

/// `PROGRAM ARGS`: (exit code, stdout, stderr).
fn output_of(program: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An nginx in front of `upstream` (`unix:/path`).
fn nginx(t: &TestDir, upstream: String) -> Nginx {
    Nginx::start(
        t,
        NginxOpts {
            upstream: Some(upstream),
            ..Default::default()
        },
    )
}

/// The body of `script` (`/ini.php?name=…`) through `nginx`; 200 asserted.
fn page(nginx: &Nginx, script: &str) -> String {
    let r = get(&nginx.url(script));
    assert_eq!(r.status, 200, "{script}: {}", r.text());
    r.text()
}

/// php-fpm's own usage line, e.g. `[-n] [-e] … [-F [-O]]`: every flag it
/// names is in fpmd's usage, which also lists fpmd's commands; `-h` exits
/// 0 on stdout as php-fpm's.
#[test]
fn help_is_php_fpms_usage_with_fpmds_commands() {
    let t = TestDir::new();
    let php_fpm = require_php_fpm();
    let (code, theirs, _) = output_of(&php_fpm, &["-h"]);
    assert_eq!(code, Some(0));
    let ours = fpmd(&t, &["-h"]);
    assert_eq!(ours.code(), Some(0), "{ours}");
    assert!(ours.stdout.starts_with("Usage: fpmd "), "{ours}");
    let usage_line = theirs.lines().next().unwrap();
    let flags: Vec<&str> = usage_line
        .split(['[', ' '])
        .filter(|w| w.starts_with('-') && w.len() >= 2)
        .map(|w| &w[..2])
        .collect();
    assert!(flags.len() >= 12, "php-fpm's usage: {usage_line}");
    let our_line = ours.stdout.lines().next().unwrap();
    for flag in flags.iter().chain(&["-R"]) {
        assert!(
            our_line.contains(&format!("[{flag}")),
            "{flag} (php-fpm: {usage_line}) missing from: {our_line}"
        );
    }
    for long in [
        "--prefix",
        "--pid",
        "--fpm-config",
        "--test",
        "--daemonize",
        "--nodaemonize",
        "--force-stderr",
        "--allow-to-run-as-root",
    ] {
        assert!(
            theirs.contains(long) && ours.stdout.contains(long),
            "{long}"
        );
    }
    for command in ["reload", "stop", "status", "upgrade"] {
        assert!(ours.stdout.contains(command), "{command}: {ours}");
    }
    assert_eq!(fpmd(&t, &["--help"]).stdout, ours.stdout);
}

/// An unknown option: the usage on stderr, exit 64 (`EX_USAGE`), as
/// php-fpm8.2 exits.
#[test]
fn unknown_option_prints_usage_and_exits_64_as_php_fpm() {
    let t = TestDir::new();
    let php_fpm = require_php_fpm();
    // php-fpm is asked only what it refuses: anything else starts it (it
    // would detach and serve its default configuration).
    for bad in [&["--bogus"][..], &["-q"], &["-d"], &["-d", "=x"]] {
        if bad != ["-d", "=x"] {
            let (theirs, _, _) = output_of(&php_fpm, bad);
            assert_eq!(theirs, Some(64), "php-fpm {bad:?}");
        }
        let ours = fpmd(&t, bad);
        assert_eq!(ours.code(), Some(64), "{ours}");
        assert!(ours.stderr.contains("Usage: fpmd "), "{ours}");
        assert!(ours.stdout.is_empty(), "{ours}");
    }
}

/// `-v` is php-fpm's text (php-src main-version.phpt: `PHP … (fpm… (built:
/// …`, PHP's copyright, the engine), from php-cgi's `-v`, the SAPI naming
/// fpmd and its version; with `-n`, php-cgi's `-n`.
#[test]
fn version_flag() {
    let t = TestDir::new();
    let (_, php, _) = output_of(&php_cgi_bin(), &["-n", "-v"]);
    let ours = format!("(fpm-fcgi, fpmd {})", env!("CARGO_PKG_VERSION"));
    for flag in ["-v", "--version"] {
        let r = fpmd(&t, &["-n", flag]);
        assert_eq!(r.code(), Some(0), "{r}");
        assert_eq!(r.stdout, php.replacen("(cgi-fcgi)", &ours, 1), "{r}");
        assert!(r.stdout.starts_with("PHP "), "{r}");
        assert_eq!(r.stdout.lines().count(), 3, "{r}");
    }
    // Run by a PHP script (a CGI request's variables in its environment,
    // which make php-cgi run the request's script instead of -v: the
    // script that ran `php-fpm -v`, again and again).
    let script = t.join("v.php");
    std::fs::write(&script, "<?php echo 'the script ran';").unwrap();
    let out = std::process::Command::new(FPMD_BIN)
        .args(["-n", "-v"])
        .current_dir(t.path())
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REQUEST_METHOD", "GET")
        .env("SCRIPT_FILENAME", &script)
        .env("REDIRECT_STATUS", "200")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, php.replacen("(cgi-fcgi)", &ours, 1));
}

/// `-m` and `-i` are php-cgi's, of the first pool's binary, with the
/// command line's `-n` and `-d`.
#[test]
fn modules_and_info_are_the_pools_php_cgis() {
    let t = TestDir::new();
    let conf = FpmdConfig::new().pool(Pool::www()).write(&t);
    let conf = conf.display().to_string();
    let php_cgi = php_cgi_bin();
    let (_, modules, _) = output_of(&php_cgi, &["-q", "-m"]);
    assert!(modules.starts_with("[PHP Modules]"), "{modules}");
    let r = fpmd(&t, &["-c", &conf, "-m"]);
    assert_eq!(r.code(), Some(0), "{r}");
    assert_eq!(r.stdout, modules);
    // -n: no php.ini, so none of Debian's conf.d extensions.
    let (_, bare, _) = output_of(&php_cgi, &["-n", "-q", "-m"]);
    assert_ne!(bare, modules, "php-cgi -n loads fewer modules");
    assert_eq!(fpmd(&t, &["-c", &conf, "-n", "-m"]).stdout, bare);
    // Without a configuration: php-cgi on PATH.
    assert_eq!(fpmd(&t, &["-n", "-m"]).stdout, bare);
    let r = fpmd(&t, &["-c", &conf, "-d", "memory_limit=77M", "-i"]);
    assert_eq!(r.code(), Some(0), "{r}");
    assert!(r.stdout.contains("PHP Version"), "{r}");
    assert!(r.stdout.contains("77M"), "-d reaches -i");
}

/// The command line php-src's FPM tester (`sapi/fpm/tests/tester.inc`,
/// `start()`) gives php-fpm is accepted as it is.
#[test]
fn php_src_testers_command_line_is_accepted() {
    let t = TestDir::new();
    let conf = FpmdConfig::new().pool(Pool::www()).write(&t);
    let conf = conf.display().to_string();
    let r = fpmd(
        &t,
        &[
            "-y",
            &conf,
            "-O",
            "-F",
            "-dextension_dir=/usr/lib/php/20220829",
            "-dmemory_limit=64M",
            "--allow-to-run-as-root",
            "-t",
        ],
    );
    assert_eq!(r.code(), Some(0), "{r}");
    assert!(
        r.stdout
            .contains("php_value.memory_limit = \"64M\" # set on the command line"),
        "{r}"
    );
    assert!(r
        .stdout
        .contains("php_value.extension_dir = \"/usr/lib/php/20220829\""));
    assert!(r
        .stdout
        .contains("error_log = \"stderr\" # set on the command line"));
    let r = fpmd(&t, &["--fpm-config", &conf, "-tt"]);
    assert_eq!(r.code(), Some(0), "{r}");
}

/// `-p DIR`: relative paths of the files are relative to DIR (not to the
/// file's directory), and DIR/etc/fpmd.toml is the default configuration.
#[test]
fn prefix_resolves_relative_paths_and_the_default_file() {
    let t = TestDir::new();
    let prefix = t.join("prefix");
    std::fs::create_dir_all(prefix.join("etc/pool.d")).unwrap();
    std::fs::create_dir_all(prefix.join("run")).unwrap();
    std::fs::create_dir_all(prefix.join("log")).unwrap();
    std::fs::write(
        prefix.join("etc/fpmd.toml"),
        "[global]\npid = \"run/fpmd.pid\"\nerror_log = \"log/fpmd.log\"\ninclude = \"etc/pool.d/*.toml\"\ncontrol_socket = \"run/ctl.sock\"\n",
    )
    .unwrap();
    let mut pool = Pool::www().toml(t.path(), &t.tag());
    pool = pool.replace(
        &format!("{:?}", t.join("www.sock").display().to_string()),
        "\"run/www.sock\"",
    );
    std::fs::write(prefix.join("etc/pool.d/www.toml"), &pool).unwrap();
    let p = prefix.display().to_string();
    let r = fpmd(&t, &["-p", &p, "-t"]);
    assert_eq!(r.code(), Some(0), "{r}");
    for (key, path) in [
        ("pid", "run/fpmd.pid"),
        ("error_log", "log/fpmd.log"),
        ("control_socket", "run/ctl.sock"),
        ("listen.address", "run/www.sock"),
    ] {
        let line = format!("{key} = {:?}", prefix.join(path).display().to_string());
        assert!(r.stdout.contains(&line), "{line}:\n{r}");
    }
    // It runs so, and `fpmd -p DIR stop` finds it.
    let mut child = Command::new(FPMD_BIN)
        .args(["-p", &p, "-F"])
        .current_dir("/")
        .env("FPMD_TEST_TAG", t.tag())
        .env("TMPDIR", t.path())
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _cleanup = KillTagged(t.tag());
    let sock = Addr::Unix(prefix.join("run/www.sock"));
    wait_for(LONG, "the pool's socket under the prefix", || {
        sock.accepts()
    });
    wait_for(LONG, "the pid file under the prefix", || {
        std::fs::read_to_string(prefix.join("run/fpmd.pid"))
            .is_ok_and(|s| s.trim() == child.id().to_string())
    });
    wait_for(LONG, "ready in the log under the prefix", || {
        std::fs::read_to_string(prefix.join("log/fpmd.log"))
            .is_ok_and(|s| s.contains("ready to handle connections"))
    });
    let r = fpmd(&t, &["-p", &p, "stop"]);
    assert_eq!(r.code(), Some(0), "{r}");
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(!prefix.join("run/fpmd.pid").exists());
}

/// Kills what a test started outside [`Fpmd`] (which does so itself).
struct KillTagged(String);

impl Drop for KillTagged {
    fn drop(&mut self) {
        procs::kill_tagged(&self.0);
    }
}

/// `-g FILE` writes the pid there instead of `[global] pid`.
#[test]
fn pid_flag_overrides_the_pid_file() {
    let t = TestDir::new();
    let cfg = FpmdConfig::new().pool(Pool::www());
    let mut f = Fpmd::spawn(&t, &cfg, &["-g", "other.pid"]);
    f.wait_ready(LONG);
    let other = t.join("other.pid");
    assert_eq!(
        std::fs::read_to_string(&other).unwrap().trim(),
        f.pid().to_string()
    );
    assert_eq!(f.pid_file(), None, "no fpmd.pid: -g replaces it");
    f.signal(nix::sys::signal::Signal::SIGQUIT);
    assert_eq!(f.wait_exit(LONG).and_then(|s| s.code()), Some(0));
    assert!(!other.exists(), "removed at exit");
}

/// The session of `pid` (field 6 of /proc/PID/stat).
fn session_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(3).unwrap().parse().unwrap()
}

/// The daemon a detaching start left: the process started exited 0 only
/// once the pool accepts; the daemon is another process, leader of its
/// own session, with /dev/null as stdin/stdout/stderr, in the pid file;
/// it serves, and `fpmd stop` stops it.
fn check_detached(t: &TestDir, mut f: Fpmd) {
    let st = f
        .wait_exit(LONG)
        .expect("the starting process did not exit");
    assert_eq!(st.code(), Some(0), "{}", f.log());
    assert!(
        f.log().contains("ready to handle connections"),
        "the parent exits once the daemon serves:\n{}",
        f.log()
    );
    let pid = f.pid_file().expect("the daemon writes the pid file");
    assert_ne!(pid, f.pid());
    assert!(procs::has_tag(pid, &t.tag()));
    assert_eq!(session_of(pid), pid, "setsid");
    for fd in 0..=2 {
        let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
        assert_eq!(target, Path::new("/dev/null"), "fd {fd}");
    }
    let web = nginx(t, f.upstream(0));
    assert!(page(&web, "/hello.php").contains("hello"));
    let r = f.cli(&["stop"]);
    assert_eq!(r.code(), Some(0), "{r}");
    wait_for(LONG, "the daemon to exit", || !procs::alive(pid));
    assert_eq!(f.pid_file(), None, "pid file removed");
}

#[test]
fn daemonize_flag_detaches() {
    let t = TestDir::new();
    let cfg = FpmdConfig::new()
        .pool(Pool::www())
        .error_log("fpmd.daemon.log");
    let f = Fpmd::spawn(&t, &cfg, &["-D"]);
    check_detached(&t, f);
}

#[test]
fn daemonize_key_detaches_and_f_overrides_it() {
    let t = TestDir::new();
    let cfg = FpmdConfig::new()
        .pool(Pool::www())
        .error_log("fpmd.daemon.log")
        .global("daemonize = true");
    let f = Fpmd::spawn(&t, &cfg, &[]);
    check_detached(&t, f);
    // -F wins over daemonize = true (and over an earlier -D).
    let cfg = cfg.error_log("fpmd.foreground.log");
    let mut f = Fpmd::spawn(&t, &cfg, &["-D", "-F"]);
    f.wait_ready(LONG);
    assert!(f.running(), "-F stays in the foreground");
    assert_eq!(f.pid_file(), Some(f.pid()));
}

/// A daemon that cannot start: the process started exits with its
/// status (78 for an address in use), as php-fpm's parent reports its
/// child's failure.
#[test]
fn daemonize_failure_is_the_exit_status() {
    let t = TestDir::new();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let cfg = FpmdConfig::new()
        .pool(Pool::www().tcp(addr.clone()))
        .global("daemonize = true");
    let mut f = Fpmd::spawn(&t, &cfg, &[]);
    let st = f
        .wait_exit(LONG)
        .expect("the starting process did not exit");
    assert_eq!(st.code(), Some(78), "{}", f.log());
    assert!(f.log().contains(&addr), "{}", f.log());
    wait_for(LONG, "nothing left", || f.tagged().is_empty());
}

/// `-O`: the log goes to stderr even though `error_log` is a file.
#[test]
fn force_stderr_logs_to_stderr() {
    let t = TestDir::new();
    let cfg = FpmdConfig::new()
        .pool(Pool::www())
        .error_log("fpmd.file.log");
    let mut f = Fpmd::spawn(&t, &cfg, &["-O"]);
    let stderr = t.join("fpmd.log");
    wait_for(LONG, "ready on stderr", || {
        std::fs::read_to_string(&stderr).is_ok_and(|s| s.contains("ready to handle connections"))
    });
    assert!(
        !std::fs::read_to_string(t.join("fpmd.file.log"))
            .is_ok_and(|s| s.contains("ready to handle connections")),
        "-O: the error_log file is not used"
    );
    f.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(f.wait_exit(LONG).is_some());
}

/// As root, a pool whose children would run as root (no `user`, or
/// `user = "root"`) is refused at its file, line and key, naming -R; with
/// `-R` its children run as root. Not as root, -R changes nothing: the
/// children run as fpmd's user, and `user = "root"` is refused.
#[test]
fn run_as_root_only_with_r() {
    let t = TestDir::new();
    let as_root = nix::unistd::geteuid().is_root();
    let pool = |user: Option<&str>| {
        let mut text = Pool::www().toml(t.path(), &t.tag());
        text = text.replace("user = \"www-data\"\ngroup = \"www-data\"\n", "");
        if let Some(u) = user {
            text = text.replacen("[www]\n", &format!("[www]\nuser = {u:?}\n"), 1);
        }
        FpmdConfig::new().raw_pool_file("www.toml", text)
    };
    let cfg = pool(Some("root"));
    let refused = fpmd(&t, &["-c", &cfg.write(&t).display().to_string(), "-t"]);
    assert_eq!(refused.code(), Some(78), "{refused}");
    assert!(
        refused.stderr.contains("www.toml:2: [www] key 'user'"),
        "{refused}"
    );
    if !as_root {
        let r = fpmd(
            &t,
            &["-c", &cfg.write(&t).display().to_string(), "-R", "-t"],
        );
        assert_eq!(r.code(), Some(78), "{r}");
        return;
    }
    assert!(
        refused.stderr.contains("-R (--allow-to-run-as-root)"),
        "{refused}"
    );
    let none = pool(None);
    let r = fpmd(&t, &["-c", &none.write(&t).display().to_string(), "-t"]);
    assert_eq!(r.code(), Some(78), "{r}");
    assert!(
        r.stderr
            .contains("[www] key 'user': user is required when fpmd runs as root")
            && r.stderr.contains("-R (--allow-to-run-as-root)"),
        "{r}"
    );
    // With -R both run, as root.
    let sock = Addr::Unix(t.join("www.sock"));
    let web = nginx(&t, sock.nginx());
    for cfg in [pool(Some("root")), pool(None)] {
        let mut f = Fpmd::spawn(&t, &cfg, &["-R"]);
        wait_for(LONG, "the pool's socket", || sock.accepts());
        let who = page(&web, "/whoami.php");
        assert!(who.starts_with("root root"), "{who}");
        f.signal(nix::sys::signal::Signal::SIGTERM);
        assert!(f.wait_exit(LONG).is_some());
    }
}

/// `-d name=value` reaches every child's PHP (`ini_get`), below the pool's
/// own values; `-d name` is `name=1`.
#[test]
fn define_reaches_php() {
    let t = TestDir::new();
    let cfg =
        FpmdConfig::new().pool(Pool::www().line("php_admin_value.max_execution_time = \"7\""));
    let mut f = Fpmd::spawn(
        &t,
        &cfg,
        &[
            "-d",
            "memory_limit=77M",
            "-dmax_execution_time=99",
            "-d",
            "html_errors",
            "-d",
            "html_errors=0",
            "-d",
            "short_open_tag",
        ],
    );
    f.wait_ready(LONG);
    let web = nginx(&t, f.upstream(0));
    assert_eq!(page(&web, "/ini.php?name=memory_limit"), "'77M'");
    assert_eq!(page(&web, "/ini.php?name=max_execution_time"), "'7'");
    assert_eq!(
        page(&web, "/ini.php?name=html_errors"),
        "'0'",
        "the last -d wins"
    );
    assert_eq!(page(&web, "/ini.php?name=short_open_tag"), "'1'");
}

/// `-n`: the children read no php.ini.
#[test]
fn no_php_ini_flag() {
    let t = TestDir::new();
    let cfg = FpmdConfig::new().pool(Pool::www());
    let mut f = Fpmd::spawn(&t, &cfg, &[]);
    f.wait_ready(LONG);
    let web = nginx(&t, f.upstream(0));
    let with = page(&web, "/ini_file.php");
    assert!(with.contains("php.ini"), "{with}");
    drop(f);
    let mut f = Fpmd::spawn(&t, &cfg, &["-n"]);
    f.wait_ready(LONG);
    assert_eq!(page(&web, "/ini_file.php"), "false");
}

/// Issue 20, item 7: `-h` lists every command; `help` and `help COMMAND`,
/// and `-h`/`--help` on every command, print on stdout and exit 0; `help`
/// of no such command and `convert` without a file are usage errors (64).
#[test]
fn help_and_every_commands_help_exit_0() {
    let t = TestDir::new();
    let usage = fpmd(&t, &["-h"]);
    for command in ["reload", "stop", "status", "upgrade", "convert", "help"] {
        assert!(
            usage.stdout.contains(command),
            "-h lacks {command}: {usage}"
        );
    }
    let help = fpmd(&t, &["help"]);
    assert_eq!(
        (help.code(), &help.stdout),
        (Some(0), &usage.stdout),
        "{help}"
    );
    for command in ["reload", "stop", "status", "upgrade", "convert", "help"] {
        for args in [
            vec!["help", command],
            vec![command, "--help"],
            vec![command, "-h"],
        ] {
            let r = fpmd(&t, &args);
            assert_eq!(r.code(), Some(0), "{r}");
            assert!(r.stdout.contains(&format!("Usage: fpmd {command}")), "{r}");
            assert!(r.stderr.is_empty(), "{r}");
        }
    }
    let r = fpmd(&t, &["help", "dance"]);
    assert_eq!(r.code(), Some(64), "{r}");
    assert!(r.stderr.contains("no command named 'dance'"), "{r}");
    // No configuration here, none in /etc/fpmd that is a php-fpm one.
    let r = fpmd(&t, &["-p", &t.path().display().to_string(), "convert"]);
    assert_eq!(r.code(), Some(64), "{r}");
    assert!(r.stderr.contains("give the php-fpm configuration"), "{r}");
}

/// Issue 20, item 3: `fpmd stop` returns once the daemon has exited, so
/// `fpmd stop && fpmd …` works: 20 times over, with a request in flight
/// each time (it finishes with 200), the new daemon binds the same TCP
/// address (no "already in use") and the pid file is always the running
/// daemon's.
#[test]
fn stop_then_start_twenty_times_with_a_request_in_flight() {
    let t = TestDir::new();
    let port = free_port();
    let cfg = FpmdConfig::new().pool(Pool::www().tcp(format!("127.0.0.1:{port}")).max_children(2));
    let docroot = t.docroot();
    for i in 0..20 {
        let mut f = Fpmd::spawn(&t, &cfg, &[]);
        f.wait_ready(LONG);
        f.wait_control_socket(LONG);
        assert_eq!(f.pid_file(), Some(f.pid()), "start {i}: the pid file");
        let addr = f.addr(0).tcp();
        let mark = format!("stop-{i}");
        let root = docroot.clone();
        let query = format!("ms=400&mark={mark}");
        let in_flight =
            std::thread::spawn(move || fcgi::get_script(addr, &root, "sleep.php", &query));
        wait_for(LONG, "the request to run", || t.mark(&mark).is_some());
        let stop = f.cli(&["stop"]);
        assert_eq!(stop.code(), Some(0), "stop {i}: {stop}");
        assert!(
            f.try_wait().is_some(),
            "stop {i} returned while fpmd {} still runs",
            f.pid()
        );
        let (status, body) = in_flight.join().unwrap();
        assert_eq!(status, 200, "the request in flight at stop {i}: {body}");
        assert!(!t.join("fpmd.pid").exists(), "stop {i} left the pid file");
        assert!(
            !t.join("ctl.sock").exists(),
            "stop {i} left the control socket"
        );
    }
}

/// `fpmd stop` waits at most `--timeout`: past it, exit 75 (the daemon is
/// still stopping: a request runs on), and the daemon's pid is named.
#[test]
fn stop_gives_up_after_its_timeout_with_exit_75() {
    let t = TestDir::new();
    let port = free_port();
    let mut f = Fpmd::start(
        &t,
        FpmdConfig::new().pool(Pool::www().tcp(format!("127.0.0.1:{port}")).max_children(1)),
    );
    f.wait_control_socket(LONG);
    let (addr, root) = (f.addr(0).tcp(), t.docroot());
    let in_flight =
        std::thread::spawn(move || fcgi::get_script(addr, &root, "sleep.php", "ms=3000&mark=long"));
    wait_for(LONG, "the request to run", || t.mark("long").is_some());
    let stop = f.cli(&["stop", "--timeout", "0.5"]);
    assert_eq!(stop.code(), Some(75), "{stop}");
    assert!(stop.stderr.contains(&format!("pid {}", f.pid())), "{stop}");
    assert!(f.try_wait().is_none(), "fpmd exited although a request ran");
    assert_eq!(in_flight.join().unwrap().0, 200);
    assert!(
        f.wait_exit(LONG).is_some(),
        "fpmd did not exit once the request ended"
    );
}
