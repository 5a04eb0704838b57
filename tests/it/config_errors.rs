//! Issue 2, item 10 (and the CLI): an invalid configuration exits 78 with a
//! message naming file, line and key (or the address, or the user), with
//! and without -t, and leaves nothing running; a valid one passes -t.

use crate::harness::fpmd::describe_status;
use crate::harness::*;
use std::time::Duration;

/// A pool file, one key per line; line numbers are 1 + index (line 1 is `[www]`).
struct PoolFile(Vec<(String, String)>);

impl PoolFile {
    fn new(t: &TestDir) -> PoolFile {
        let v = [
            ("user", "\"www-data\"".to_string()),
            ("group", "\"www-data\"".to_string()),
            (
                "php_cgi",
                format!("{:?}", php_cgi_bin().display().to_string()),
            ),
            (
                "listen.address",
                format!("{:?}", t.join("www.sock").display().to_string()),
            ),
            ("pm.mode", "\"static\"".to_string()),
            ("pm.max_children", "2".to_string()),
            ("env.FPMD_TEST_TAG", format!("{:?}", t.tag())),
        ];
        PoolFile(v.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }
    /// Sets `key = value` (raw TOML value) in place, or appends it; returns its line number.
    fn set(&mut self, key: &str, value: &str) -> usize {
        if let Some(i) = self.0.iter().position(|(k, _)| k == key) {
            self.0[i].1 = value.to_string();
            i + 2
        } else {
            self.0.push((key.to_string(), value.to_string()));
            self.0.len() + 1
        }
    }
    fn text(&self) -> String {
        let mut s = "[www]\n".to_string();
        for (k, v) in &self.0 {
            s += &format!("{k} = {v}\n");
        }
        s
    }
}

/// Runs fpmd with `args` on the config; returns (exit code, output) after checking nothing is left.
fn run(t: &TestDir, cfg: &FpmdConfig, args: &[&str]) -> (i32, String) {
    let mut f = Fpmd::spawn(t, cfg, args);
    let st = f
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("fpmd {args:?} still running after 30 s:\n{}", f.log()));
    let log = f.log();
    eprintln!("fpmd {args:?}: {}\n{log}", describe_status(&st));
    let left_ok = wait_until(Duration::from_secs(1), || f.tagged().is_empty());
    assert!(
        left_ok,
        "processes left running after fpmd exited: {}",
        procs::describe(&f.tagged())
    );
    (st.code().unwrap_or(-1), log)
}

/// What the error message must name.
enum Expect {
    /// One line naming `FILE:LINE:` and the key (`'key'`, or `'table.key'`),
    /// and containing each of the extra strings (e.g. the closest known key).
    FileLineKey {
        file: &'static str,
        line: usize,
        key: String,
        extra: Vec<String>,
    },
    /// The output contains this (an address, a user name).
    Mentions(String),
}

fn check_message(out: &str, e: &Expect) -> bool {
    match e {
        Expect::Mentions(s) => out.contains(s.as_str()),
        Expect::FileLineKey {
            file,
            line,
            key,
            extra,
        } => out.lines().any(|l| {
            l.contains(&format!("{file}:{line}:"))
                && (l.contains(&format!("key '{key}'")) || l.contains(&format!(".{key}'")))
                && extra.iter().all(|x| l.contains(x.as_str()))
        }),
    }
}

fn expect_invalid(t: &TestDir, cfg: FpmdConfig, expected: Expect, also_with_t: bool) {
    let modes: &[&[&str]] = if also_with_t { &[&[], &["-t"]] } else { &[&[]] };
    for args in modes {
        let (code, log) = run(t, &cfg, args);
        assert_eq!(
            code, EX_CONFIG,
            "fpmd {args:?}: expected exit 78, output:\n{log}"
        );
        let what = match &expected {
            Expect::Mentions(s) => format!("{s:?}"),
            Expect::FileLineKey {
                file,
                line,
                key,
                extra,
            } => format!("{file}:{line}: key '{key}' {extra:?}"),
        };
        assert!(
            check_message(&log, &expected),
            "fpmd {args:?}: message does not name {what}:\n{log}"
        );
        std::fs::write(t.join("fpmd.log"), "").unwrap();
    }
}

/// A pool file setting `key = value` (raw TOML) is refused with exit 78
/// and a message naming www.toml, the line and the key, plus each of
/// `expected_extra` (with and without `-t`).
pub(crate) fn invalid_pool_key(key: &str, value: &str, expected_extra: &[&str]) {
    let t = TestDir::new();
    let mut p = PoolFile::new(&t);
    let line = p.set(key, value);
    let cfg = FpmdConfig::new().raw_pool_file("www.toml", p.text());
    let extra = expected_extra.iter().map(|s| s.to_string()).collect();
    expect_invalid(
        &t,
        cfg,
        Expect::FileLineKey {
            file: "www.toml",
            line,
            key: key.to_string(),
            extra,
        },
        true,
    );
}

#[test]
fn unknown_key_names_the_closest_one() {
    invalid_pool_key("pm.max_childs", "4", &["pm.max_children"]);
}

#[test]
fn wrong_type() {
    invalid_pool_key("pm.max_children", "\"four\"", &[]);
}

/// php-fpm's checks of `pm.status_path`, `ping.path` and `ping.response`
/// (fpm_conf.c), with file, line and key.
#[test]
fn bad_status_and_ping_paths() {
    invalid_pool_key(
        "pm.status_path",
        "\"status\"",
        &["the status path 'status' must start with a '/'"],
    );
    invalid_pool_key(
        "pm.status_path",
        "\"/\"",
        &["the status path '/' is not long enough"],
    );
    invalid_pool_key(
        "ping.path",
        "\"/p?ng\"",
        &["must contain only the following characters"],
    );
    invalid_pool_key(
        "ping.response",
        "\"\"",
        &["the ping response page '' is not long enough"],
    );
}

#[test]
fn max_children_zero() {
    invalid_pool_key("pm.max_children", "0", &[]);
}

#[test]
fn missing_php_cgi_binary() {
    invalid_pool_key("php_cgi", "\"/nonexistent/php-cgi\"", &[]);
}

#[test]
fn dynamic_spare_servers_are_checked() {
    let t = TestDir::new();
    let mut p = PoolFile::new(&t);
    p.set("pm.mode", "\"dynamic\"");
    p.set("pm.min_spare_servers", "1");
    let line = p.set("pm.max_spare_servers", "64");
    let cfg = FpmdConfig::new().raw_pool_file("www.toml", p.text());
    let extra = vec!["must not be greater than pm.max_children".to_string()];
    expect_invalid(
        &t,
        cfg,
        Expect::FileLineKey {
            file: "www.toml",
            line,
            key: "pm.max_spare_servers".into(),
            extra,
        },
        true,
    );
}

#[test]
fn unknown_user() {
    let t = TestDir::new();
    let mut p = PoolFile::new(&t);
    p.set("user", "\"fpmd-no-such-user\"");
    let cfg = FpmdConfig::new().raw_pool_file("www.toml", p.text());
    expect_invalid(&t, cfg, Expect::Mentions("fpmd-no-such-user".into()), true);
}

#[test]
fn unknown_global_key() {
    let t = TestDir::new();
    let p = PoolFile::new(&t);
    // fpmd.toml: [global], pid, error_log, log_level, include, then this line (6).
    let cfg = FpmdConfig::new()
        .raw_pool_file("www.toml", p.text())
        .global(r#"log_levl = "debug""#);
    let e = Expect::FileLineKey {
        file: "fpmd.toml",
        line: 6,
        key: "log_levl".into(),
        extra: vec!["log_level".into()],
    };
    expect_invalid(&t, cfg, e, true);
}

#[test]
fn listen_address_in_use() {
    let t = TestDir::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut p = PoolFile::new(&t);
    p.set("listen.address", &format!("{addr:?}"));
    let cfg = FpmdConfig::new().raw_pool_file("www.toml", p.text());
    expect_invalid(&t, cfg, Expect::Mentions(addr), false);
    drop(taken);
}

#[test]
fn config_test_prints_valid_config() {
    let t = TestDir::new();
    let mut p = PoolFile::new(&t);
    p.set("pm.max_children", "3");
    let cfg = FpmdConfig::new().raw_pool_file("www.toml", p.text());
    let (code, out) = run(&t, &cfg, &["-t"]);
    assert_eq!(code, 0, "fpmd -t on a valid config:\n{out}");
    assert!(
        out.contains("www") && out.contains(&t.join("www.sock").display().to_string()),
        "-t output:\n{out}"
    );
    assert!(!t.join("www.sock").exists(), "-t created the listen socket");
}

#[test]
fn two_pools_on_one_listen_address() {
    // Found by validation, so `-t` refuses it too (not only the bind).
    let t = TestDir::new();
    let p = PoolFile::new(&t);
    let other = p.text().replacen("[www]", "[other]", 1);
    let cfg = FpmdConfig::new()
        .raw_pool_file("a.toml", p.text())
        .raw_pool_file("b.toml", other);
    let e = Expect::FileLineKey {
        file: "pool.d/b.toml",
        line: 5,
        key: "listen.address".into(),
        extra: vec![
            "[other]".into(),
            "already the listen address of pool 'www'".into(),
            "pool.d/a.toml:5".into(),
        ],
    };
    expect_invalid(&t, cfg, e, true);
}

#[test]
fn one_pool_name_in_two_files() {
    let t = TestDir::new();
    let mut p = PoolFile::new(&t);
    let first = p.text();
    p.set(
        "listen.address",
        &format!("{:?}", t.join("www2.sock").display().to_string()),
    );
    let cfg = FpmdConfig::new()
        .raw_pool_file("a.toml", first)
        .raw_pool_file("b.toml", p.text());
    let e =
        Expect::Mentions("pool.d/b.toml:1: [www] pool 'www' is defined twice: here and in".into());
    expect_invalid(&t, cfg, e, true);
}

#[test]
fn reload_keys_are_checked_and_printed() {
    let t = TestDir::new();
    let mut p = PoolFile::new(&t);
    let ctl = t.join("ctl.sock").display().to_string();
    let cfg = FpmdConfig::new()
        .raw_pool_file("www.toml", p.text())
        .global("process_control_timeout = \"5s\"")
        .global(format!("control_socket = {ctl:?}"))
        .global("watch = true");
    let (code, out) = run(&t, &cfg, &["-t"]);
    assert_eq!(code, 0, "fpmd -t:\n{out}");
    for line in [
        "process_control_timeout = \"5s\"".to_string(),
        format!("control_socket = {ctl:?}"),
        "watch = true".to_string(),
        "graceful_timeout = \"5s\" # as global.process_control_timeout".to_string(),
    ] {
        assert!(out.contains(&line), "{line:?} not in -t output:\n{out}");
    }
    // fpmd.toml: [global], pid, error_log, log_level, include, then this line (6).
    let line = p.set("graceful_timeout", "\"later\"");
    let cfg = FpmdConfig::new()
        .raw_pool_file("www.toml", p.text())
        .global("watch = \"yes\"");
    let e = Expect::FileLineKey {
        file: "fpmd.toml",
        line: 6,
        key: "watch".into(),
        extra: vec!["expected a boolean".into()],
    };
    expect_invalid(&t, cfg, e, true);
    let cfg = FpmdConfig::new().raw_pool_file("www.toml", p.text());
    let e = Expect::FileLineKey {
        file: "www.toml",
        line,
        key: "graceful_timeout".into(),
        extra: vec!["invalid duration".into()],
    };
    expect_invalid(&t, cfg, e, true);
}

/// `fpmd reload|stop|status` with a main file that is not TOML: the
/// command cannot tell which daemon is meant, so it says why (file and
/// line) and exits 78, instead of guessing the default control socket
/// (which another fpmd may own).
#[test]
fn control_commands_with_a_broken_main_file_say_why() {
    let t = TestDir::new();
    let cfg = FpmdConfig::new().pool(Pool::www()).global("watch = ");
    for cmd in ["reload", "stop", "status"] {
        let (code, log) = run(&t, &cfg, &[cmd]);
        assert_eq!(code, EX_CONFIG, "fpmd {cmd}: {log}");
        assert!(
            log.contains("fpmd.toml:"),
            "fpmd {cmd} names the file: {log}"
        );
        assert!(
            !log.contains("fpmd.sock"),
            "fpmd {cmd} guessed a control socket: {log}"
        );
    }
}

/// Runs `fpmd -c CONF -t` with its output, as `ids` (uid, gid, no
/// supplementary group) when given and with a soft `RLIMIT_NPROC` when
/// given; returns (exit code, stdout and stderr).
fn config_test_as(
    conf: &std::path::Path,
    ids: Option<(u32, u32)>,
    nproc: Option<u64>,
) -> (i32, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(FPMD_BIN);
    cmd.arg("-c").arg(conf).arg("-t").env_remove("RUST_LOG");
    if let Some((uid, gid)) = ids {
        // std drops the supplementary groups (setgroups(0)) before setuid.
        cmd.uid(uid).gid(gid);
    }
    if let Some(soft) = nproc {
        soft_rlimit(&mut cmd, libc::RLIMIT_NPROC, soft);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {FPMD_BIN}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "fpmd -t as {ids:?} (RLIMIT_NPROC {nproc:?}): {}\n{text}",
        out.status
    );
    (out.status.code().unwrap_or(-1), text)
}

fn proc_number(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Issue 10, sanity limits: `pm.max_children` beyond what the kernel can
/// run at all (here 100,000 with `pid_max` 32768; on any machine one more
/// than `kernel.pid_max`) is refused by `-t` and at start, naming the file,
/// line, key, the limit and where it comes from.
#[test]
fn max_children_beyond_pid_max_is_refused() {
    let pid_max = proc_number("/proc/sys/kernel/pid_max");
    let n = (pid_max + 1).max(100_000);
    invalid_pool_key(
        "pm.max_children",
        &n.to_string(),
        &["more than the kernel allows at all", "/proc/sys/kernel/"],
    );
}

/// Issue 10, sanity limits: with a soft `RLIMIT_NPROC` of 50 (as
/// `ulimit -u 50` or systemd's `LimitNPROC=50` would give fpmd), a pool
/// of 60 children is refused; one of 20 passes.
#[test]
fn max_children_beyond_rlimit_nproc_is_refused() {
    let t = TestDir::new();
    let mut p = PoolFile::new(&t);
    let line = p.set("pm.max_children", "60");
    let conf = FpmdConfig::new()
        .raw_pool_file("www.toml", p.text())
        .write(&t);
    let (code, out) = config_test_as(&conf, None, Some(50));
    assert_eq!(code, EX_CONFIG, "{out}");
    let e = Expect::FileLineKey {
        file: "www.toml",
        line,
        key: "pm.max_children".into(),
        extra: vec![
            "RLIMIT_NPROC of 50 processes per user".into(),
            "user 'www-data'".into(),
        ],
    };
    assert!(
        check_message(&out, &e),
        "the refusal does not name the file, line, key and limit:\n{out}"
    );
    p.set("pm.max_children", "20");
    let conf = FpmdConfig::new()
        .raw_pool_file("www.toml", p.text())
        .write(&t);
    let (code, out) = config_test_as(&conf, None, Some(50));
    assert_eq!(code, 0, "{out}");
}

/// C15 (non-root half) and issue 10: `fpmd -t` run as `nobody` refuses,
/// with exit 78, file, line and key, what only root can do: another
/// `user`, a `listen.owner` or `listen.group` it cannot chown to (naming
/// the socket path and EPERM), a socket directory it cannot write (path
/// and EACCES), a privileged TCP port (below the real
/// `net.ipv4.ip_unprivileged_port_start`); and passes the same pool with
/// its own user, a directory it may write and an unprivileged port.
#[test]
fn non_root_config_test_refuses_root_only_settings() {
    use nix::unistd::{Group, User};
    let nobody = User::from_name("nobody").unwrap().expect("user nobody");
    let nogroup = Group::from_name("nogroup").unwrap().expect("group nogroup");
    let ids = Some((nobody.uid.as_raw(), nogroup.gid.as_raw()));
    let t = TestDir::new();
    // docroot/run is 0777: nobody may create a socket there.
    let writable = t.docroot().join("run").join("www.sock");
    let base = || {
        let mut p = PoolFile::new(&t);
        p.set("user", "\"nobody\"");
        p.set("group", "\"nogroup\"");
        p.set(
            "listen.address",
            &format!("{:?}", writable.display().to_string()),
        );
        p
    };
    let check = |p: &PoolFile, key: &str, extra: &[&str]| {
        let line = p.0.iter().position(|(k, _)| k == key).expect("key set") + 2;
        let conf = FpmdConfig::new()
            .raw_pool_file("www.toml", p.text())
            .write(&t);
        let (code, out) = config_test_as(&conf, ids, None);
        assert_eq!(code, EX_CONFIG, "fpmd -t as nobody with {key}: {out}");
        let e = Expect::FileLineKey {
            file: "www.toml",
            line,
            key: key.into(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        assert!(check_message(&out, &e), "fpmd -t as nobody: the refusal of {key} does not name file, line, key and {extra:?}:\n{out}");
    };

    let mut p = base();
    p.set("user", "\"www-data\"");
    check(
        &p,
        "user",
        &[
            "cannot run the pool as user 'www-data'",
            "fpmd is not running as root",
        ],
    );

    let mut p = base();
    p.set("listen.owner", "\"www-data\"");
    check(
        &p,
        "listen.owner",
        &[
            &writable.display().to_string(),
            "EPERM",
            "listen.owner 'www-data'",
        ],
    );

    let mut p = base();
    p.set("listen.group", "\"www-data\"");
    check(
        &p,
        "listen.group",
        &[&writable.display().to_string(), "EPERM"],
    );

    let mut p = base();
    let root_only = t.join("www.sock");
    p.set(
        "listen.address",
        &format!("{:?}", root_only.display().to_string()),
    );
    check(
        &p,
        "listen.address",
        &[&root_only.display().to_string(), "EACCES"],
    );

    let start = proc_number("/proc/sys/net/ipv4/ip_unprivileged_port_start");
    if start > 1 {
        let mut p = base();
        p.set("listen.address", &format!("\"127.0.0.1:{}\"", start - 1));
        check(
            &p,
            "listen.address",
            &[
                "is privileged",
                &format!("ip_unprivileged_port_start is {start}"),
                "EACCES",
            ],
        );
    }

    // What nobody may do passes.
    let mut p = base();
    p.set("listen.owner", "\"nobody\"");
    p.set("listen.group", "\"nogroup\"");
    let conf = FpmdConfig::new()
        .raw_pool_file("www.toml", p.text())
        .write(&t);
    let (code, out) = config_test_as(&conf, ids, None);
    assert_eq!(code, 0, "fpmd -t as nobody on what nobody may do: {out}");
    let mut p = base();
    p.set(
        "listen.address",
        &format!("\"127.0.0.1:{}\"", start.max(1024) + 7000),
    );
    let conf = FpmdConfig::new()
        .raw_pool_file("www.toml", p.text())
        .write(&t);
    let (code, out) = config_test_as(&conf, ids, None);
    assert_eq!(code, 0, "fpmd -t as nobody on an unprivileged port: {out}");
}

// Issue 11: what cannot start is caught by `-t`, at its file, line and key.

#[test]
fn missing_socket_directory() {
    invalid_pool_key(
        "listen.address",
        "\"/run/nothere/x.sock\"",
        &["cannot create the socket /run/nothere/x.sock: its directory /run/nothere does not exist"],
    );
}

/// One env string over Linux's MAX_ARG_STRLEN: php-cgi would fail with
/// `Argument list too long` at every spawn.
#[test]
fn env_value_too_large_for_exec() {
    let big = "x".repeat(128 << 10);
    invalid_pool_key(
        "env.BIG",
        &format!("{big:?}"),
        &["more than Linux passes to a program in one string (MAX_ARG_STRLEN"],
    );
    invalid_pool_key(
        "php_value.big",
        &format!("{big:?}"),
        &["php_value.big (php-cgi's -d big=…)", "MAX_ARG_STRLEN"],
    );
}

/// Every value fits alone, all together are over ARG_MAX: the largest is
/// named.
#[test]
fn env_and_args_together_too_large_for_exec() {
    let t = TestDir::new();
    let mut p = PoolFile::new(&t);
    for i in 0..80 {
        p.set(&format!("env.V{i}"), &format!("{:?}", "y".repeat(99_990)));
    }
    let line = p.set("env.LARGEST", &format!("{:?}", "z".repeat(100_000)));
    let cfg = FpmdConfig::new().raw_pool_file("www.toml", p.text());
    let e = Expect::FileLineKey {
        file: "www.toml",
        line,
        key: "env.LARGEST".into(),
        extra: vec![
            "more than ARG_MAX".into(),
            "the largest is env.LARGEST (100009 bytes)".into(),
        ],
    };
    expect_invalid(&t, cfg, e, true);
}

/// What an include glob matches must be a file fpmd can read; the error
/// is at `include` (line 5 of the harness's fpmd.toml) and names the file.
fn invalid_include_match(make: fn(&std::path::Path), what: &str) {
    let t = TestDir::new();
    let pool_d = t.join("pool.d");
    std::fs::create_dir_all(&pool_d).unwrap();
    make(&pool_d.join("zz.toml"));
    let cfg = FpmdConfig::new().raw_pool_file("www.toml", PoolFile::new(&t).text());
    let e = Expect::FileLineKey {
        file: "fpmd.toml",
        line: 5,
        key: "include".into(),
        extra: vec![format!("{} {what}", pool_d.join("zz.toml").display())],
    };
    expect_invalid(&t, cfg, e, true);
}

#[test]
fn include_matches_a_dangling_symlink() {
    invalid_include_match(
        |p| std::os::unix::fs::symlink("/nonexistent/www.toml", p).unwrap(),
        "is a dangling symlink (to /nonexistent/www.toml",
    );
}

#[test]
fn include_matches_a_symlink_loop() {
    invalid_include_match(
        |p| std::os::unix::fs::symlink(p.file_name().unwrap(), p).unwrap(),
        "is a symlink loop",
    );
}

#[test]
fn include_matches_a_fifo() {
    invalid_include_match(
        |p| nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap(),
        "is a FIFO, not a configuration file",
    );
}

/// As php-fpm: a wildcard whose directory does not exist is an error (at
/// the include line); one that matches nothing in an existing directory
/// is a warning.
#[test]
fn include_glob_whose_directory_is_missing() {
    let t = TestDir::new();
    let pool = PoolFile::new(&t).text();
    let main = t.join("main.toml");
    std::fs::write(
        &main,
        format!("[global]\ninclude = \"nothere/*.toml\"\n\n{pool}"),
    )
    .unwrap();
    let conf = main.display().to_string();
    let r = crate::harness::fpmd::run_fpmd(t.path(), &t.tag(), &["-c", &conf, "-t"]);
    assert_eq!(r.code(), Some(EX_CONFIG), "{r}");
    assert!(
        r.stderr.contains(&format!(
            "main.toml:2: key 'global.include': include \"nothere/*.toml\": the directory {} of the glob does not exist",
            t.join("nothere").display()
        )),
        "{r}"
    );
    std::fs::create_dir(t.join("nothere")).unwrap();
    let r = crate::harness::fpmd::run_fpmd(t.path(), &t.tag(), &["-c", &conf, "-t"]);
    assert_eq!(r.code(), Some(0), "nothing matched is no error: {r}");
    assert!(
        r.stderr.contains(
            "main.toml:2: key 'global.include': nothing matches the include pattern \"nothere/*.toml\""
        ),
        "but a warning, as php-fpm's: {r}"
    );
}

/// Issue 20, item 5: an access log or slowlog in a directory that does not
/// exist fails `-t` (and the start) with file, line and key: `-t` said
/// "successful" and the start exited 1 naming neither.
#[test]
fn log_file_in_a_missing_directory_is_refused_by_t() {
    for key in ["access.log", "slowlog"] {
        invalid_pool_key(
            key,
            "\"/nonexistent-fpmd-dir/www.log\"",
            &["the directory of /nonexistent-fpmd-dir/www.log does not exist"],
        );
    }
}
