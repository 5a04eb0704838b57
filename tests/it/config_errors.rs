//! Issue 2, item 10 (and the CLI): an invalid configuration exits 78 with a
//! message naming file, line and key (or the address, or the user), with
//! and without -t, and leaves nothing running; a valid one passes -t.

use crate::harness::fpmd::describe_status;
use crate::harness::*;
use std::time::Duration;

const EX_CONFIG: i32 = 78;

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
