use super::across::*;
use super::host::*;
use super::ini::*;
use super::isolation::*;
use super::*;
use crate::config::model::{Isolation, Landlock, ListenAddress, PmMode};
use crate::config::raw::{parse_mode, ByteSize};
use crate::config::testutil::*;
use crate::config::users::Host;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `log_format`: "fpmd" (default) or "php-fpm"; anything else at its line.
#[test]
fn log_format_key() {
    use crate::config::LogFormat;
    let (_d, c) = load_ok(&pool("www", ""), &[]);
    assert_eq!(c.global.log_format, LogFormat::Fpmd);
    assert!(c.to_toml().contains("log_format = \"fpmd\"\n"));
    let main = format!("[global]\nlog_format = \"php-fpm\"\n{}", pool("www", ""));
    let (_d, c) = load_ok(&main, &[]);
    assert_eq!(c.global.log_format, LogFormat::PhpFpm);
    assert!(c.to_toml().contains("log_format = \"php-fpm\"\n"));
    let main = format!("[global]\nlog_format = \"json\"\n{}", pool("www", ""));
    let (_d, e) = load_err(&main, &[]);
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(2), Some("global.log_format")),
        "{e}"
    );
    assert!(
        e.message
            .contains("unknown variant `json`, expected `fpmd` or `php-fpm`"),
        "{e}"
    );
}

/// A unix socket whose directory does not exist (or is a file) cannot
/// be bound: refused at its key.
#[test]
fn socket_directory_must_exist() {
    let cases = [
        (
            pool("www", "").replace("/tmp/www.sock", "/run/nothere/x.sock"),
            (5, "listen.address"),
            "cannot create the socket /run/nothere/x.sock: its directory /run/nothere does not exist (No such file or directory (os error 2)), so bind() would fail; create it (e.g. with systemd's RuntimeDirectory= or tmpfiles.d)",
        ),
        (
            pool("www", "pm.status_listen = \"/etc/passwd/s.sock\"\n"),
            (7, "pm.status_listen"),
            "cannot create the socket /etc/passwd/s.sock: /etc/passwd is not a directory",
        ),
    ];
    for (text, (line, key), message) in cases {
        let (dir, e) = load_err(&text, &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(line),
            Some("www"),
            Some(key),
            message,
        );
    }
}

/// An env value or ini value php-cgi cannot be exec'd with (one string
/// over MAX_ARG_STRLEN, or all together over ARG_MAX) is refused at
/// its key.
#[test]
fn exec_size_limits() {
    let big = "x".repeat(MAX_ARG_STRLEN);
    let (dir, e) = load_err(&pool("www", &format!("env.BIG = \"{big}\"\n")), &[]);
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(7), Some("env.BIG")),
        "{e}"
    );
    assert!(e.message.starts_with(&format!("env.BIG is {} bytes, more than Linux passes to a program in one string (MAX_ARG_STRLEN, 131072 bytes)", MAX_ARG_STRLEN + 5)), "{e}");
    drop(dir);
    let (_, e) = load_err(
        &pool("www", &format!("php_admin_value.x = \"{big}\"\n")),
        &[],
    );
    assert_eq!(e.key.as_deref(), Some("php_admin_value.x"), "{e}");
    // Just fits.
    let fits = "x".repeat(MAX_ARG_STRLEN - 5);
    load_ok(&pool("www", &format!("env.BIG = \"{fits}\"\n")), &[]);
    // Together too many: the largest named.
    let n = arg_max() / 100_000 + 1;
    let mut extra: String = (0..n)
        .map(|i| format!("env.V{i} = \"{}\"\n", "y".repeat(99_990)))
        .collect();
    extra.push_str(&format!("env.LARGEST = \"{}\"\n", "z".repeat(100_000)));
    let (_, e) = load_err(&pool("www", &extra), &[]);
    assert_eq!(e.key.as_deref(), Some("env.LARGEST"), "{e}");
    assert!(
        e.message
            .contains(&format!("more than ARG_MAX ({} bytes", arg_max())),
        "{e}"
    );
    assert!(
        e.message
            .ends_with("the largest is env.LARGEST (100009 bytes)"),
        "{e}"
    );
}

/// Under `pm.spawn = "shared"` the environment goes to each child in one
/// order of the shared parent: one that does not fit is refused at `-t`,
/// at its largest variable (it fits execve's limits).
#[test]
fn a_shared_pools_environment_fits_in_an_order() {
    let big = "x".repeat(70_000);
    let extra = format!("pm.spawn = \"shared\"\nenv.BIG1 = \"{big}\"\nenv.BIG2 = \"{big}y\"\n");
    let (_, e) = load_err(&pool("www", &extra), &[]);
    assert_eq!(e.key.as_deref(), Some("env.BIG2"), "{e}");
    assert!(e.message.starts_with("under pm.spawn = \"shared\" the pool's environment and groups go to each child in one order of at most 131072 bytes"), "{e}");
    // The same under prefork is started with execve, which takes it.
    load_ok(&pool("www", &extra.replace("shared", "prefork")), &[]);
}

#[test]
fn status_listen_needs_an_address_of_its_own() {
    let text = pool("www", "pm.status_listen = \"/tmp/www.sock\"\n");
    let (_dir, e) = load_err(&text, &[]);
    let m = e.to_string();
    assert!(
        m.contains("fpmd.toml:7: [www] key 'pm.status_listen'")
            && m.contains("is already the listen address of pool 'www'")
            && m.contains("the status listener needs an address of its own"),
        "{m}"
    );
    // Alone, it makes the status page "/" (php-fpm's default there).
    let (_dir, c) = load_ok(&pool("www", "pm.status_listen = \"127.0.0.1:9001\"\n"), &[]);
    let p = &c.pools[0];
    assert_eq!(p.local.status_path.as_deref(), Some("/"));
    assert_eq!(p.listeners().len(), 2);
    assert!(p.listeners()[1].1, "the second listener serves status only");
}

#[test]
fn listen_address_errors() {
    let text = pool("www", "").replace("\"/tmp/www.sock\"", "\"www.sock\"");
    let (dir, e) = load_err(&text, &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(5),
        Some("www"),
        Some("listen.address"),
        "invalid listen address 'www.sock' (expected a unix socket path (containing '/'), \"IP:PORT\", \"[IPv6]:PORT\" or a port)",
    );
    let long = format!("/run/{}.sock", "x".repeat(120));
    let (dir, e) = load_err(&pool("www", "").replace("/tmp/www.sock", &long), &[]);
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(5), Some("listen.address")),
        "{e}"
    );
    assert!(e.message.starts_with("unix socket path is too long"), "{e}");
    drop(dir);
    // Missing: reported at the pool's header line.
    let (dir, e) = load_err(
        "\n[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\npm.max_children = 1\n",
        &[],
    );
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(2),
        Some("www"),
        Some("listen.address"),
        "required key is missing",
    );
}

#[test]
fn listen_options() {
    let (_d, c) = load_ok(&pool("www", "listen.allowed_clients = \"127.0.0.1, ::1,10.0.0.1\"\nlisten.owner = \"0\"\nlisten.group = \"nogroup\"\n"), &[]);
    let l = &c.pools[0].listen;
    assert_eq!(l.allowed_clients.as_ref().unwrap().len(), 3);
    assert_eq!(l.owner, Some(0));
    assert_eq!(l.group, Some(nobody().1));

    for (extra, key, msg) in [
        ("listen.mode = \"0999\"", "listen.mode", "invalid mode \"0999\": expected an octal string such as \"0660\""),
        ("listen.mode = \"1777\"", "listen.mode", "invalid mode \"1777\": must be at most \"0777\""),
        ("listen.mode = 660", "listen.mode", "invalid type: integer `660`, expected an octal mode string such as \"0660\""),
        ("listen.backlog = 0", "listen.backlog", "listen.backlog must be at least 1"),
        ("listen.allowed_clients = [\"127.0.0.1\", \"nope\"]", "listen.allowed_clients", "invalid IP address 'nope'"),
        ("listen.allowed_clients = []", "listen.allowed_clients", "listen.allowed_clients is empty (it would refuse every client); remove it to allow any"),
        ("listen.owner = \"nosuchuser\"", "listen.owner", "unknown user 'nosuchuser'"),
        ("listen.group = \"nosuchgroup\"", "listen.group", "unknown group 'nosuchgroup'"),
    ] {
        let (dir, e) = load_err(&pool("www", &format!("{extra}\n")), &[]);
        assert_err(&dir, &e, "fpmd.toml", Some(7), Some("www"), Some(key), msg);
    }
    assert_eq!(parse_mode("0660"), Ok(0o660));
    assert_eq!(parse_mode("660"), Ok(0o660));
    assert_eq!(parse_mode("0o750"), Ok(0o750));
    assert_eq!(parse_mode("0777"), Ok(0o777));
    assert!(parse_mode("").is_err() && parse_mode("-660").is_err() && parse_mode("0o").is_err());
}

#[test]
fn env_expansion() {
    // PATH is set for any test run (set_var would race with other test threads).
    let path = std::env::var("PATH").expect("PATH is set");
    assert!(std::env::var_os("FPMD_CONFIG_TEST_SURELY_MISSING").is_none());
    let extra = "env.A = \"$PATH\"\nenv.B = \"$FPMD_CONFIG_TEST_SURELY_MISSING\"\nenv.C = \"$PATH/bin\"\nenv.D = \"plain\"\nenv.E = 42\nenv.F = \"$\"\n";
    let (_d, c) = load_ok(&pool("www", extra), &[]);
    let env = &c.pools[0].env;
    assert_eq!(env["A"], path);
    assert_eq!(
        env["B"], "",
        "a missing variable expands to an empty string"
    );
    assert_eq!(
        env["C"], "$PATH/bin",
        "only a value that is exactly $NAME is expanded"
    );
    assert_eq!(env["D"], "plain");
    assert_eq!(env["E"], "42");
    assert_eq!(env["F"], "$");
    let (dir, e) = load_err(&pool("www", "env.A = true\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("env.A"),
        "invalid type: boolean `true`, expected a string",
    );
}

#[test]
fn php_values_and_flags() {
    let extra = r#"php_flag.a = true
php_flag.b = false
php_flag.c = "On"
php_flag.d = "off"
php_flag.e = "YES"
php_flag.f = "no"
php_flag.g = "True"
php_flag.h = "FALSE"
php_flag.i = "1"
php_flag.j = "0"
php_flag.k = 1
php_flag.l = 0
php_value.m = true
php_value.n = 128
php_value.o = 1.5
php_value.p = "E_ALL & ~E_NOTICE"
php_value.session.save_path = "/tmp/sessions"
php_value."date.timezone" = "UTC"
php_value.memory_limit = "64M"
php_admin_value.memory_limit = "128M"
php_admin_flag.display_errors = "off"
"#;
    let (_d, c) = load_ok(&pool("www", extra), &[]);
    let p = &c.pools[0];
    let flags: Vec<(&str, &str)> = "abcdefghijkl"
        .chars()
        .zip(["1", "0", "1", "0", "1", "0", "1", "0", "1", "0", "1", "0"])
        .map(|(k, v)| {
            (
                p.php_values
                    .get_key_value(&k.to_string())
                    .unwrap()
                    .0
                    .as_str(),
                v,
            )
        })
        .collect();
    for (k, v) in flags {
        assert_eq!(p.php_values[k], v, "php_flag.{k}");
    }
    assert_eq!(p.php_values["m"], "1");
    assert_eq!(p.php_values["n"], "128");
    assert_eq!(p.php_values["o"], "1.5");
    assert_eq!(p.php_values["p"], "E_ALL & ~E_NOTICE");
    assert_eq!(
        p.php_values["session.save_path"], "/tmp/sessions",
        "nested tables flatten into a dotted name"
    );
    assert_eq!(p.php_values["date.timezone"], "UTC");
    assert!(
        !p.php_values.contains_key("memory_limit"),
        "admin values win over plain ones"
    );
    assert_eq!(p.php_admin_values["memory_limit"], "128M");
    assert_eq!(p.php_admin_values["display_errors"], "0");

    let mut p = (**p).clone();
    p.pcntl = true;
    let args = p.ini_args();
    assert_eq!(
        args.len(),
        2 * (p.php_values.len() + p.php_admin_values.len())
    );
    assert!(args.chunks(2).all(|c| c[0] == "-d"));
    let settings: Vec<&str> = args.iter().skip(1).step_by(2).map(|s| s.as_str()).collect();
    assert_eq!(settings[0], "a=1");
    assert!(settings.contains(&"session.save_path=/tmp/sessions"));
    assert_eq!(
        &settings[settings.len() - 2..],
        ["display_errors=0", "memory_limit=128M"],
        "admin values last"
    );
    assert!(!settings.contains(&"memory_limit=64M"));
}

#[test]
fn ini_args_admin_wins_even_if_plain_map_has_the_name() {
    let (_d, c) = load_ok(&pool("www", ""), &[]);
    let mut p = (*c.pools[0]).clone();
    p.php_values.insert("memory_limit".into(), "64M".into());
    p.php_values.insert("a".into(), "b".into());
    p.php_admin_values
        .insert("memory_limit".into(), "128M".into());
    p.pcntl = true;
    assert_eq!(p.ini_args(), ["-d", "a=b", "-d", "memory_limit=128M"]);
}

#[test]
fn pcntl_is_disabled_unless_allowed_and_the_pools_list_is_kept() {
    let (_d, c) = load_ok(
        &pool(
            "www",
            "php_admin_value.disable_functions = \"exec, system,pcntl_fork\"\n",
        ),
        &[],
    );
    let p = &c.pools[0];
    assert!(!p.pcntl);
    let args = p.ini_args();
    assert_eq!(args.len(), 2);
    let list = args[1]
        .strip_prefix("disable_functions=${disable_functions},")
        .unwrap();
    let names: Vec<&str> = list.split(',').collect();
    assert_eq!(&names[..3], ["exec", "system", "pcntl_fork"]);
    assert_eq!(names.iter().filter(|n| **n == "pcntl_fork").count(), 1);
    assert!(names.contains(&"pcntl_exec") && names.contains(&"pcntl_signal"));
    assert!(c.to_toml().contains("security.pcntl = false\n"));

    // A plain php_value is merged the same way.
    let (_d, c) = load_ok(
        &pool("www", "php_value.disable_functions = \"exec\"\n"),
        &[],
    );
    assert!(c.pools[0].ini_args()[1]
        .starts_with("disable_functions=${disable_functions},exec,pcntl_alarm,"));

    let (_d, c) = load_ok(
        &pool(
            "www",
            "security.pcntl = true\nphp_admin_value.disable_functions = \"exec\"\n",
        ),
        &[],
    );
    assert!(c.pools[0].pcntl);
    assert_eq!(
        c.pools[0].ini_args(),
        ["-d", "disable_functions=${disable_functions},exec"]
    );
    assert!(c.to_toml().contains("security.pcntl = true\n"));

    // pcntl allowed and no list of the pool's: php.ini's alone.
    let (_d, c) = load_ok(&pool("www", "security.pcntl = true\n"), &[]);
    assert!(c.pools[0].ini_args().is_empty());
}

/// php-fpm disables a pool's `disable_functions` and `disable_classes`
/// on top of php.ini's; the pool's plain and admin values and the
/// command line's -d are joined, never one chosen.
#[test]
fn additive_ini_values_are_joined_never_replaced() {
    let plain = BTreeMap::from([
        ("disable_functions".to_string(), "exec, system".to_string()),
        ("disable_classes".to_string(), "Phar".to_string()),
        ("memory_limit".to_string(), "64M".to_string()),
    ]);
    let admin = BTreeMap::from([
        ("disable_functions".to_string(), "system,popen".to_string()),
        ("memory_limit".to_string(), "128M".to_string()),
    ]);
    let defines = [
        ("disable_functions".to_string(), "proc_open".to_string()),
        ("disable_classes".to_string(), "SplFileObject".to_string()),
        ("memory_limit".to_string(), "8M".to_string()),
        ("html_errors".to_string(), "1".to_string()),
        ("html_errors".to_string(), "0".to_string()),
    ];
    let (plain, admin) = merge_ini_values(plain, admin, &defines);
    assert_eq!(admin["disable_functions"], "proc_open,exec,system,popen");
    assert_eq!(admin["memory_limit"], "128M", "admin wins");
    assert_eq!(plain["disable_classes"], "SplFileObject,Phar");
    assert_eq!(plain["html_errors"], "0", "the last -d wins");
    assert!(!plain.contains_key("disable_functions") && !plain.contains_key("memory_limit"));

    let mut p = crate::pool::tests::test_config();
    p.php_values = plain;
    p.php_admin_values = admin;
    let args = p.ini_args();
    assert!(args.contains(&"disable_classes=${disable_classes},SplFileObject,Phar".into()));
    assert!(args.iter().any(|a| a.starts_with(
        "disable_functions=${disable_functions},proc_open,exec,system,popen,pcntl_alarm,"
    )));
    p.no_php_ini = true;
    assert!(
        p.ini_args()
            .contains(&"disable_classes=SplFileObject,Phar".into()),
        "-n: no php.ini to keep"
    );
}

#[test]
fn cgroup_limits() {
    let (_d, c) = load_ok(
        &pool(
            "www",
            "cgroup.memory_max = \"256M\"\ncgroup.pids_max = 50\ncgroup.cpu_weight = 200\n",
        ),
        &[],
    );
    let p = &c.pools[0];
    assert_eq!(
        p.cgroup,
        crate::config::CgroupLimits {
            memory_max: Some(256 << 20),
            pids_max: Some(50),
            cpu_weight: Some(200),
        }
    );
    let text = c.to_toml();
    assert!(
        text.contains("cgroup.memory_max = 268435456 # bytes\n"),
        "{text}"
    );
    assert!(text.contains("cgroup.pids_max = 50\n"), "{text}");
    assert!(text.contains("cgroup.cpu_weight = 200\n"), "{text}");
    // The rendering loads again to the same limits.
    let (_d, again) = load_ok(&text, &[]);
    assert_eq!(again.pools[0].cgroup, p.cgroup);

    // The smallest limit is accepted.
    let (_d, c) = load_ok(&pool("www", "cgroup.memory_max = \"32M\"\n"), &[]);
    assert_eq!(c.pools[0].cgroup.memory_max, Some(MIN_MEMORY_MAX));

    let (_d, c) = load_ok(
        &pool("www", "cgroup.memory_max = 0\ncgroup.pids_max = 0\n"),
        &[],
    );
    assert_eq!(c.pools[0].cgroup, crate::config::CgroupLimits::default());
    let text = c.to_toml();
    assert!(text.contains("# cgroup.memory_max: no limit\n"), "{text}");

    for (line, key, message) in [
        (
            "cgroup.cpu_weight = 0\n",
            "cgroup.cpu_weight",
            "0 is out of range: 1 to 10000 (as cgroup v2's cpu.weight; default 100)",
        ),
        (
            "cgroup.cpu_weight = 10001\n",
            "cgroup.cpu_weight",
            "10001 is out of range: 1 to 10000 (as cgroup v2's cpu.weight; default 100)",
        ),
        (
            "cgroup.memory_max = \"512K\"\n",
            "cgroup.memory_max",
            "524288 bytes is too small for php-cgi: at least 32M (0 for no limit); one idle php-cgi alone uses about 9M of its cgroup, so below that the pool's children are killed by the limit as they start",
        ),
        // The trial's value: passed `fpmd -t`, then the pool never
        // started (php-cgi killed by the limit in a loop).
        (
            "cgroup.memory_max = \"2M\"\n",
            "cgroup.memory_max",
            "2097152 bytes is too small for php-cgi: at least 32M (0 for no limit); one idle php-cgi alone uses about 9M of its cgroup, so below that the pool's children are killed by the limit as they start",
        ),
        (
            "cgroup.memory_max = 33554431\n",
            "cgroup.memory_max",
            "33554431 bytes is too small for php-cgi: at least 32M (0 for no limit); one idle php-cgi alone uses about 9M of its cgroup, so below that the pool's children are killed by the limit as they start",
        ),
    ] {
        let (dir, e) = load_err(&pool("www", line), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some(key),
            message,
        );
    }
    let (dir, e) = load_err(&pool("www", "cgroup.pids_max = 4\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("cgroup.pids_max"),
        "4 is fewer than the pool's own php-cgi processes (pm.max_children = 5, plus the pre-fork parent): at least 6",
    );
    let (_dir, e) = load_err(&pool("www", "cgroup.pids_max = -1\n"), &[]);
    assert_eq!(e.key.as_deref(), Some("cgroup.pids_max"), "{e}");
    assert_eq!(e.line, Some(7), "{e}");
    let (_dir, e) = load_err(&pool("www", "cgroup.memory = 1\n"), &[]);
    assert_eq!(e.line, Some(7), "{e}");
    assert!(e.to_string().contains("cgroup.memory"), "{e}");
}

#[test]
fn php_value_errors() {
    for (extra, key, msg) in [
        (
            "php_flag.display_errors = \"maybe\"",
            "php_flag.display_errors",
            "invalid flag value \"maybe\" (expected on/off, yes/no, true/false or 1/0)",
        ),
        (
            "php_admin_flag.x = 2",
            "php_admin_flag.x",
            "invalid flag value 2 (expected on/off, yes/no, true/false or 1/0)",
        ),
        (
            "php_value.x = [1, 2]",
            "php_value.x",
            "invalid type: sequence, expected a string, number or boolean",
        ),
        (
            "php_value.x = \"a\\nb = c\"",
            "php_value.x",
            "an ini value must not contain a line break or NUL byte",
        ),
        (
            "php_value.\"a=b\" = \"c\"",
            "php_value.\"a=b\"",
            "invalid ini setting name 'a=b'",
        ),
    ] {
        let (dir, e) = load_err(&pool("www", &format!("{extra}\n")), &[]);
        assert_err(&dir, &e, "fpmd.toml", Some(7), Some("www"), Some(key), msg);
    }
    let (dir, e) = load_err(
        &pool(
            "www",
            "php_value.log_errors = \"1\"\nphp_flag.log_errors = true\n",
        ),
        &[],
    );
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(8),
        Some("www"),
        Some("php_flag.log_errors"),
        "'log_errors' is already set in php_value",
    );
}

#[test]
fn max_children_zero() {
    let www = "[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/run/www.sock\"\n\n\npm.max_children = 0\n";
    let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", www)]);
    assert_err(
        &dir,
        &e,
        "pool.d/www.toml",
        Some(8),
        Some("www"),
        Some("pm.max_children"),
        "pm.max_children must be at least 1",
    );
    assert_eq!(
        e.to_string(),
        format!(
            "{}:8: [www] key 'pm.max_children': pm.max_children must be at least 1",
            dir.path().join("pool.d/www.toml").display()
        )
    );
    let (dir, e) = load_err(
        "[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/x/y.sock\"\n",
        &[],
    );
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(1),
        Some("www"),
        Some("pm.max_children"),
        "required key is missing",
    );
}

#[test]
fn pm_modes_checked_as_php_fpm_does() {
    // pool(): [www] on line 1, pm.max_children = 5, extra lines from 7.
    let (dir, e) = load_err(&pool("www", "pm.mode = \"dynamic\"\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(1),
        Some("www"),
        Some("pm.min_spare_servers"),
        "required with pm.mode = \"dynamic\"",
    );
    let (dir, e) = load_err(
        &pool(
            "www",
            "pm.mode = \"dynamic\"\npm.min_spare_servers = 1\npm.max_spare_servers = 10\n",
        ),
        &[],
    );
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(9),
        Some("www"),
        Some("pm.max_spare_servers"),
        "pm.max_spare_servers (10) must not be greater than pm.max_children (5)",
    );
    let (dir, e) = load_err(&pool("www", "pm.mode = \"dynamic\"\npm.min_spare_servers = 3\npm.max_spare_servers = 4\npm.start_servers = 2\n"), &[]);
    assert_err(&dir, &e, "fpmd.toml", Some(10), Some("www"), Some("pm.start_servers"),
        "pm.start_servers (2) must be between pm.min_spare_servers (3) and pm.max_spare_servers (4)");
    let (_dir, c) = load_ok(
        &pool(
            "www",
            "pm.mode = \"dynamic\"\npm.min_spare_servers = 1\npm.max_spare_servers = 3\n",
        ),
        &[],
    );
    assert_eq!(
        c.pools[0].pm.mode,
        PmMode::Dynamic {
            start_servers: 2,
            min_spare_servers: 1,
            max_spare_servers: 3,
            max_spawn_rate: 32
        }
    );
    let (_dir, c) = load_ok("[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/tmp/www.sock\"\n\n[www.pm]\nmode = \"ondemand\"\nmax_children = 8\n", &[]);
    assert_eq!(
        c.pools[0].pm.mode,
        PmMode::Ondemand {
            process_idle_timeout: std::time::Duration::from_secs(10),
            max_spawn_rate: 32
        }
    );
    let (dir, e) = load_err(
        &pool(
            "www",
            "pm.mode = \"ondemand\"\npm.process_idle_timeout = 0\n",
        ),
        &[],
    );
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(8),
        Some("www"),
        Some("pm.process_idle_timeout"),
        "pm.process_idle_timeout must be more than 0",
    );
}

#[test]
fn security_limit_extensions() {
    // Unset: php-fpm 8.2's compiled-in default.
    let (_dir, c) = load_ok(&pool("www", ""), &[]);
    assert_eq!(c.pools[0].limit_extensions, [".php", ".phar"]);
    assert!(c
        .to_toml()
        .contains("security.limit_extensions = [\".php\", \".phar\"]\n"));
    // A list; each string split at spaces and tabs as php-fpm does.
    let (_dir, c) = load_ok(
        &pool(
            "www",
            "security.limit_extensions = [\".php\", \".php7 .phtml\"]\n",
        ),
        &[],
    );
    assert_eq!(c.pools[0].limit_extensions, [".php", ".php7", ".phtml"]);
    let (_dir, c) = load_ok(
        &pool("www", "security.limit_extensions = \".php\\t.inc\"\n"),
        &[],
    );
    assert_eq!(c.pools[0].limit_extensions, [".php", ".inc"]);
    // Empty: no limit, as php-fpm's empty value; -t says so.
    let (_dir, c) = load_ok(&pool("www", "security.limit_extensions = []\n"), &[]);
    assert!(c.pools[0].limit_extensions.is_empty());
    assert!(c
        .to_toml()
        .contains("security.limit_extensions = [] # any file may run as a script\n"));
    let (dir, e) = load_err(
        &pool("www", "security.limit_extensions = [\".php\\u0000\"]\n"),
        &[],
    );
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("security.limit_extensions"),
        "the extension \".php\\0\" contains a NUL byte: no script path can end with it",
    );
    let (dir, e) = load_err(&pool("www", "security.limit_extensions = 1\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("security.limit_extensions"),
        "invalid type: integer `1`, expected a string or an array of strings",
    );
}

#[test]
fn workers_output_keys() {
    // php-fpm's defaults: not caught; decorated when caught.
    let (_dir, c) = load_ok(&pool("www", ""), &[]);
    assert!(!c.pools[0].catch_workers_output);
    assert!(c.pools[0].decorate_workers_output);
    let text = c.to_toml();
    assert!(
        text.contains("catch_workers_output = false\ndecorate_workers_output = true\n"),
        "{text}"
    );

    let (_dir, c) = load_ok(
        &pool(
            "www",
            "catch_workers_output = true\ndecorate_workers_output = false\n",
        ),
        &[],
    );
    assert!(c.pools[0].catch_workers_output);
    assert!(!c.pools[0].decorate_workers_output);
    assert!(c
        .to_toml()
        .contains("catch_workers_output = true\ndecorate_workers_output = false\n"));

    // php-fpm's ini spelling of a boolean is not TOML's.
    let (dir, e) = load_err(&pool("www", "catch_workers_output = \"yes\"\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("catch_workers_output"),
        "invalid type: string \"yes\", expected a boolean",
    );
    let (dir, e) = load_err(&pool("www", "decorate_workers_output = 1\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("decorate_workers_output"),
        "invalid type: integer `1`, expected a boolean",
    );
    let (dir, e) = load_err(&pool("www", "catch_worker_output = true\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("catch_worker_output"),
        "unknown key (did you mean 'catch_workers_output'?)",
    );
}

/// A log file in a directory that does not exist: `-t` says so, with
/// file, line and key, instead of a start that fails later.
#[test]
fn log_files_in_missing_directories_are_errors() {
    for (extra, key) in [
        ("access.log = \"nolog/www.access.log\"\n", "access.log"),
        ("slowlog = \"nolog/www.slow\"\n", "slowlog"),
    ] {
        let (dir, e) = load_err(&pool("www", extra), &[]);
        let missing = dir.path().join("nolog");
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(7),
            Some("www"),
            Some(key),
            &format!(
                "the directory of {}/{} does not exist: create {}, or log elsewhere",
                missing.display(),
                extra.split('/').nth(1).unwrap().trim_end_matches("\"\n"),
                missing.display()
            ),
        );
    }
    let (dir, e) = load_err(
        &format!(
            "[global]\nerror_log = \"nolog/fpmd.log\"\n{}",
            pool("www", "")
        ),
        &[],
    );
    assert_eq!(e.key.as_deref(), Some("global.error_log"), "{e}");
    assert_eq!(e.line, Some(2), "{e}");
    assert_eq!(e.file, dir.path().join("fpmd.toml"));
}

#[test]
fn access_log_and_format() {
    let (dir, c) = load_ok(
        &pool(
            "www",
            "access.log = \"logs/www.access.log\"\naccess.format = \"%{mili}d %r\"\n",
        ),
        &[("logs/.keep", "")],
    );
    let p = &c.pools[0];
    assert_eq!(
        p.access_log.as_deref(),
        Some(dir.path().join("logs/www.access.log").as_path()),
        "relative to the pool's file"
    );
    assert_eq!(p.access_format.as_str(), "%{mili}d %r");
    let (_dir, c) = load_ok(&pool("www", "access.log = \"\"\n"), &[]);
    assert_eq!(c.pools[0].access_log, None, "empty: no access log");
    assert_eq!(c.pools[0].access_format.as_str(), "%R - %u %t \"%m %r\" %s");
    let (dir, e) = load_err(&pool("www", "access.format = \"%R %{x\"\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("access.format"),
        "wrong format for access.format '%R %{x': missing closing embrace in the access.format",
    );
}

#[test]
fn timeouts_slowlog_and_max_memory() {
    let (_dir, c) = load_ok(&pool(
        "www",
        "request_terminate_timeout = \"2s\"\nrequest_slowlog_timeout = 1\nslowlog = \"slow.log\"\nrequest_queue_timeout = \"250ms\"\npm.max_memory = \"64M\"\n",
    ), &[]);
    let p = &c.pools[0];
    assert_eq!(
        p.request_terminate_timeout,
        Some(std::time::Duration::from_secs(2))
    );
    assert_eq!(
        p.request_slowlog_timeout,
        Some(std::time::Duration::from_secs(1))
    );
    assert_eq!(
        p.request_queue_timeout,
        Some(std::time::Duration::from_millis(250))
    );
    assert!(p.slowlog.as_ref().unwrap().is_absolute());
    assert!(p.slowlog.as_ref().unwrap().ends_with("slow.log"));
    assert_eq!(p.pm.max_memory, Some(64 << 20));
    let (_dir, c) = load_ok(
        &pool("www", "request_terminate_timeout = 0\npm.max_memory = 0\n"),
        &[],
    );
    assert_eq!(c.pools[0].request_terminate_timeout, None);
    assert_eq!(c.pools[0].pm.max_memory, None);
    assert_eq!(ByteSize::parse("512k"), Some(512 << 10));
    assert_eq!(ByteSize::parse("1G"), Some(1 << 30));
    assert_eq!(ByteSize::parse("100"), Some(100));
    assert_eq!(ByteSize::parse("64MB"), None);
    assert_eq!(ByteSize::parse("M"), None);
}

#[test]
fn duplicate_pool() {
    let (dir, e) = load_err(
        INCLUDE_MAIN,
        &[
            ("pool.d/a.toml", &pool("www", "")),
            ("pool.d/b.toml", &format!("\n{}", pool("www", ""))),
        ],
    );
    let first = dir.path().join("pool.d/a.toml");
    assert_err(
        &dir,
        &e,
        "pool.d/b.toml",
        Some(2),
        Some("www"),
        None,
        &format!(
            "pool 'www' is defined twice: here and in {}:1",
            first.display()
        ),
    );
    // Main file and an included file.
    let (dir, e) = load_err(
        &format!("{INCLUDE_MAIN}{}", pool("www", "")),
        &[("pool.d/www.toml", &pool("www", ""))],
    );
    assert_err(
        &dir,
        &e,
        "pool.d/www.toml",
        Some(1),
        Some("www"),
        None,
        &format!(
            "pool 'www' is defined twice: here and in {}:3",
            dir.path().join("fpmd.toml").display()
        ),
    );
    // Within one file, TOML itself refuses it.
    let (dir, e) = load_err(&format!("{}{}", pool("www", ""), pool("www", "")), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        None,
        None,
        "syntax error at column 1: invalid table header; duplicate key `www` in document root",
    );
}

#[test]
fn two_pools_on_one_listen_address() {
    // In two files: the error is at the second pool's listen.address.
    let sock = |name: &str, extra: &str| {
        pool(name, extra).replace(&format!("/tmp/{name}.sock"), "/tmp/x.sock")
    };
    let (dir, e) = load_err(
        INCLUDE_MAIN,
        &[
            ("pool.d/a.toml", &sock("a", "")),
            ("pool.d/b.toml", &format!("\n{}", sock("b", ""))),
        ],
    );
    assert_err(
        &dir,
        &e,
        "pool.d/b.toml",
        Some(6),
        Some("b"),
        Some("listen.address"),
        &format!(
            "/tmp/x.sock is already the listen address of pool 'a' ({}:5): two pools cannot listen on one address",
            dir.path().join("pool.d/a.toml").display()
        ),
    );
    assert_eq!(
        e.to_string(),
        format!(
            "{}:6: [b] key 'listen.address': /tmp/x.sock is already the listen address of pool 'a' ({}:5): two pools cannot listen on one address",
            dir.path().join("pool.d/b.toml").display(),
            dir.path().join("pool.d/a.toml").display()
        )
    );
    // In one file.
    let (dir, e) = load_err(&format!("{}\n{}", sock("a", ""), sock("b", "")), &[]);
    assert_eq!(
        (e.line, e.pool.as_deref(), e.key.as_deref()),
        (Some(12), Some("b"), Some("listen.address")),
        "{e}"
    );
    assert!(
        e.message.contains(&format!(
            "pool 'a' ({}:5)",
            dir.path().join("fpmd.toml").display()
        )),
        "{e}"
    );
    // One socket through two relative spellings (its directory exists).
    let (dir, e) = load_err(
        &format!(
            "{INCLUDE_MAIN}{}",
            pool("a", "").replace("/tmp/a.sock", "run/x.sock")
        ),
        &[
            ("run/.keep", ""),
            (
                "pool.d/b.toml",
                &pool("b", "").replace("/tmp/b.sock", "../run/x.sock"),
            ),
        ],
    );
    assert_err(
        &dir,
        &e,
        "pool.d/b.toml",
        Some(5),
        Some("b"),
        Some("listen.address"),
        &format!(
            "{} is already the listen address of pool 'a' ({}:7): two pools cannot listen on one address",
            dir.path().join("pool.d/../run/x.sock").display(),
            dir.path().join("fpmd.toml").display()
        ),
    );
    // TCP: a bare port is `[::]:PORT` first, which takes IPv4 too.
    let tcp =
        |name: &str, addr: &str| pool(name, "").replace(&format!("\"/tmp/{name}.sock\""), addr);
    let (dir, e) = load_err(
        &format!("{INCLUDE_MAIN}{}", tcp("a", "9000")),
        &[("pool.d/b.toml", &tcp("b", "\"0.0.0.0:9000\""))],
    );
    assert_err(
        &dir,
        &e,
        "pool.d/b.toml",
        Some(5),
        Some("b"),
        Some("listen.address"),
        &format!(
            "0.0.0.0:9000 overlaps 9000, the listen address of pool 'a' ({}:7): all addresses and one of them on the same port cannot both be bound",
            dir.path().join("fpmd.toml").display()
        ),
    );
    // Overlapping TCP addresses.
    let (dir, e) = load_err(
        &format!("{INCLUDE_MAIN}{}", tcp("a", "\"127.0.0.1:9000\"")),
        &[("pool.d/b.toml", &tcp("b", "9000"))],
    );
    assert_err(
        &dir,
        &e,
        "pool.d/b.toml",
        Some(5),
        Some("b"),
        Some("listen.address"),
        &format!(
            "9000 overlaps 127.0.0.1:9000, the listen address of pool 'a' ({}:7): all addresses and one of them on the same port cannot both be bound",
            dir.path().join("fpmd.toml").display()
        ),
    );
    // `[::]` takes IPv4 clients too (dual-stack, as php-fpm binds it):
    // it overlaps an IPv4 address on the same port.
    let (dir, e) = load_err(
        &format!("{INCLUDE_MAIN}{}", tcp("a", "\"127.0.0.1:9000\"")),
        &[("pool.d/b.toml", &tcp("b", "\"[::]:9000\""))],
    );
    assert_err(
        &dir,
        &e,
        "pool.d/b.toml",
        Some(5),
        Some("b"),
        Some("listen.address"),
        &format!(
            "[::]:9000 overlaps 127.0.0.1:9000, the listen address of pool 'a' ({}:7): all addresses and one of them on the same port cannot both be bound",
            dir.path().join("fpmd.toml").display()
        ),
    );
    // Different addresses are fine, a unix socket and TCP never collide.
    let (_dir, c) = load_ok(
        &format!(
            "{}\n{}\n{}\n{}",
            tcp("a", "\"127.0.0.1:9000\""),
            tcp("b", "\"127.0.0.2:9000\""),
            tcp("c", "\"[::1]:9000\""),
            tcp("d", "\"127.0.0.1:9001\"")
        ),
        &[],
    );
    assert_eq!(c.pools.len(), 4);
}

#[test]
fn listen_collisions() {
    let tcp = |s: &str| ListenAddress::Tcp(s.parse().unwrap());
    let unix = |s: &str| ListenAddress::Unix(s.into());
    for (a, b, expected) in [
        ("127.0.0.1:9000", "127.0.0.1:9000", Some(Collision::Same)),
        ("0.0.0.0:9000", "127.0.0.1:9000", Some(Collision::Overlap)),
        ("127.0.0.1:9000", "0.0.0.0:9000", Some(Collision::Overlap)),
        ("0.0.0.0:9000", "0.0.0.0:9000", Some(Collision::Same)),
        ("[::]:9000", "[::1]:9000", Some(Collision::Overlap)),
        ("[::1]:9000", "[::]:9000", Some(Collision::Overlap)),
        ("[::1]:9000", "[::1]:9000", Some(Collision::Same)),
        ("0.0.0.0:9000", "[::]:9000", Some(Collision::Overlap)),
        ("[::]:9000", "0.0.0.0:9000", Some(Collision::Overlap)),
        ("[::]:9000", "127.0.0.1:9000", Some(Collision::Overlap)),
        ("127.0.0.1:9000", "[::]:9000", Some(Collision::Overlap)),
        ("[::]:9000", "127.0.0.1:9001", None),
        ("[::1]:9000", "0.0.0.0:9000", None),
        ("127.0.0.1:9000", "[::1]:9000", None),
        ("127.0.0.1:9000", "127.0.0.2:9000", None),
        ("0.0.0.0:9000", "0.0.0.0:9001", None),
        ("0.0.0.0:9000", "127.0.0.1:9001", None),
    ] {
        assert_eq!(collision(&tcp(a), &tcp(b)), expected, "{a} {b}");
    }
    assert_eq!(
        collision(&unix("/tmp/a.sock"), &unix("/tmp/a.sock")),
        Some(Collision::Same)
    );
    assert_eq!(collision(&unix("/tmp/a.sock"), &unix("/tmp/b.sock")), None);
    assert_eq!(
        collision(&unix("/tmp/../tmp/a.sock"), &unix("/tmp/a.sock")),
        Some(Collision::Same)
    );
    assert_eq!(
        collision(&unix("/0.0.0.0:9000"), &tcp("0.0.0.0:9000")),
        None
    );
}

/// Each `(line, key, message)`: `line` in `[global]` is an error at
/// line 2, `key`, with `message`.
fn assert_global_errors(rows: &[(&str, &str, String)]) {
    for (line, key, msg) in rows {
        let (dir, e) = load_err(&format!("[global]\n{line}\n{}", pool("www", "")), &[]);
        assert_err(&dir, &e, "fpmd.toml", Some(2), None, Some(key), msg);
    }
}

#[test]
fn warm_timeout() {
    use std::time::Duration as D;
    let global = |line: &str| format!("[global]\n{line}\n{}", pool("www", ""));
    // Unset: 10 minutes, printed by -t.
    let (_d, c) = load_ok(&pool("www", ""), &[]);
    assert_eq!(c.global.warm_timeout, D::from_secs(600));
    assert_eq!(c.global.warm_timeout, crate::config::DEFAULT_WARM_TIMEOUT);
    assert!(c.to_toml().contains("\nwarm_timeout = \"10m\"\n"));
    // The usual duration syntax; 0 is allowed (no warm parent).
    for (text, want) in [
        ("warm_timeout = \"30s\"", D::from_secs(30)),
        ("warm_timeout = \"5m\"", D::from_secs(300)),
        ("warm_timeout = \"250ms\"", D::from_millis(250)),
        ("warm_timeout = 90", D::from_secs(90)),
        ("warm_timeout = 1.5", D::from_millis(1500)),
        ("warm_timeout = 0", D::ZERO),
        ("warm_timeout = \"0s\"", D::ZERO),
    ] {
        let (dir, c) = load_ok(&global(text), &[]);
        assert_eq!(c.global.warm_timeout, want, "{text}");
        // Printed by -t, and read back to the same value.
        let printed = c.to_toml();
        let again = write(dir.path(), "again/fpmd.toml", &printed);
        let c2 = crate::config::load(&again).unwrap_or_else(|e| panic!("{e}\n{printed}"));
        assert_eq!(c2.global.warm_timeout, want, "{printed}");
    }
    let (_d, c) = load_ok(&global("warm_timeout = \"1m\""), &[]);
    assert!(c
        .to_toml_with_origins()
        .contains("\nwarm_timeout = \"1m\" # set in "));
    // Errors: at the file, line and key.
    assert_global_errors(&[
        ("warm_timeout = \"soon\"", "global.warm_timeout", "invalid duration \"soon\": expected number at 0 (expected e.g. \"30s\", \"5m\", \"1h\", \"250ms\")".to_string()),
        ("warm_timeout = -1", "global.warm_timeout", "invalid duration -1: must not be negative".to_string()),
        ("warm_timeout = -0.5", "global.warm_timeout", "invalid duration -0.5: must be a finite, non-negative number of seconds".to_string()),
        ("warm_timeout = true", "global.warm_timeout", "invalid type: boolean `true`, expected a duration such as \"30s\", \"5m\", \"250ms\" or a number of seconds".to_string()),
        ("warm_timout = \"5m\"", "global.warm_timout", "unknown key (did you mean 'global.warm_timeout'?)".to_string()),
    ]);
}

#[test]
fn metrics_listen() {
    let global = |line: &str| format!("[global]\n{line}\n{}", pool("www", ""));
    // Unset: no endpoint.
    let (_d, c) = load_ok(&pool("www", ""), &[]);
    assert_eq!(c.global.metrics_listen, None);
    assert!(c
        .to_toml()
        .contains("# metrics.listen: not set (no metrics endpoint)\n"));
    // TCP, a bare port (`[::]`, else `0.0.0.0`), IPv6, a unix path
    // relative to the main file; as a dotted key or a table.
    for (text, want) in [
        ("metrics.listen = \"127.0.0.1:9253\"", "127.0.0.1:9253"),
        ("metrics.listen = 9253", "9253"),
        ("metrics.listen = \"[::1]:9253\"", "[::1]:9253"),
        (
            "[global.metrics]\nlisten = \"127.0.0.1:9253\"",
            "127.0.0.1:9253",
        ),
    ] {
        let (_d, c) = load_ok(&global(text), &[]);
        let want = match want.parse() {
            Ok(port) => ListenAddress::Port(port),
            Err(_) => ListenAddress::Tcp(want.parse().unwrap()),
        };
        assert_eq!(c.global.metrics_listen.as_ref(), Some(&want), "{text}");
    }
    let (dir, c) = load_ok(&global("metrics.listen = \"run/metrics.sock\""), &[]);
    let want = ListenAddress::Unix(dir.path().join("run/metrics.sock"));
    assert_eq!(c.global.metrics_listen.as_ref(), Some(&want));
    // `-t` prints it, and its output loads to the same.
    let text = c.to_toml();
    assert!(
        text.contains(&format!(
            "metrics.listen = \"{}\"\n",
            dir.path().join("run/metrics.sock").display()
        )),
        "{text}"
    );
    let again = write(dir.path(), "again/fpmd.toml", &text);
    assert_eq!(crate::config::load(&again).unwrap().global, c.global);
    // Errors, at the key.
    assert_global_errors(&[
        ("metrics.listen = \"nope\"", "global.metrics.listen", "invalid listen address 'nope' (expected a unix socket path (containing '/'), \"IP:PORT\", \"[IPv6]:PORT\" or a port)".to_string()),
        ("metrics.listen = 0", "global.metrics.listen", "invalid port value '0' (expected 1-65535)".to_string()),
        ("metrics.lisen = 9253", "global.metrics.lisen", "unknown key (did you mean 'global.metrics.listen'?)".to_string()),
        ("metrics = 9253", "global.metrics", "unknown key (did you mean 'global.metrics.listen'?)".to_string()),
        (&format!("metrics.listen = \"/run/{}.sock\"", "x".repeat(120)), "global.metrics.listen", format!("unix socket path is too long (130 bytes, at most 107): /run/{}.sock", "x".repeat(120))),
    ]);
    // Never a pool's address (nor one that overlaps it), nor the
    // control socket.
    let on_tcp = pool("www", "").replace("\"/tmp/www.sock\"", "\"127.0.0.1:9000\"");
    for (line, pool_text, msg) in [
        ("metrics.listen = \"/tmp/www.sock\"", pool("www", ""), "/tmp/www.sock collides with /tmp/www.sock, the listen address of pool 'www' ({main}:7): the metrics endpoint needs an address of its own"),
        ("metrics.listen = 9000", on_tcp, "9000 collides with 127.0.0.1:9000, the listen address of pool 'www' ({main}:7): the metrics endpoint needs an address of its own"),
        ("control_socket = \"/run/m.sock\"\nmetrics.listen = \"/run/m.sock\"", pool("www", ""), "/run/m.sock is fpmd's control socket: the metrics endpoint needs an address of its own"),
    ] {
        let (dir, e) = load_err(&format!("[global]\n{line}\n{pool_text}"), &[]);
        let main = dir.path().join("fpmd.toml");
        let line_of = 1 + line.lines().count();
        let msg = msg.replace("{main}", &main.display().to_string());
        assert_err(&dir, &e, "fpmd.toml", Some(line_of), None, Some("global.metrics.listen"), &msg);
    }
}

#[test]
fn reload_keys() {
    use std::time::Duration as D;
    // Defaults: no bound, the control socket by fpmd's user, no watch.
    let dir = tempfile::tempdir().unwrap();
    let main = write(dir.path(), "fpmd.toml", &pool("www", ""));
    let (uid, gid) = nobody();
    let as_root = crate::config::load_as(&main, Ids { euid: 0, egid: 0 }).unwrap();
    assert_eq!(as_root.global.process_control_timeout, None);
    assert_eq!(
        as_root.global.control_socket,
        crate::config::paths::default_path_as(&main, None, true)
    );
    assert!(!as_root.global.watch);
    assert_eq!(as_root.pools[0].graceful_timeout, None);
    let text = pool("www", "").replace("user = \"nobody\"\ngroup = \"nogroup\"\n", "");
    let main = write(dir.path(), "user/fpmd.toml", &text);
    let as_user = crate::config::load_as(
        &main,
        Ids {
            euid: uid,
            egid: gid,
        },
    )
    .unwrap();
    assert_eq!(
        as_user.global.control_socket,
        dir.path().join("user/fpmd.sock")
    );

    // Set: process_control_timeout is the default of graceful_timeout;
    // a pool's own value wins, 0 included.
    let main = "[global]\nprocess_control_timeout = \"10s\"\ncontrol_socket = \"ctl/fpmd.sock\"\nwatch = true\ninclude = \"pool.d/*.toml\"\n";
    let (dir, c) = load_ok(
        main,
        &[
            ("pool.d/a.toml", &pool("a", "")),
            ("pool.d/b.toml", &pool("b", "graceful_timeout = \"1m\"\n")),
            ("pool.d/c.toml", &pool("c", "graceful_timeout = 0\n")),
        ],
    );
    assert_eq!(c.global.process_control_timeout, Some(D::from_secs(10)));
    assert_eq!(c.global.control_socket, dir.path().join("ctl/fpmd.sock"));
    assert!(c.global.watch);
    let graceful: Vec<_> = c.pools.iter().map(|p| p.graceful_timeout).collect();
    assert_eq!(
        graceful,
        [Some(D::from_secs(10)), Some(D::from_secs(60)), None]
    );
    let (_dir, c) = load_ok(
        &pool("www", "graceful_timeout = 30\n").replacen(
            "[www]",
            "[global]\nprocess_control_timeout = 0\n\n[www]",
            1,
        ),
        &[],
    );
    assert_eq!(c.global.process_control_timeout, None, "0 is none");
    assert_eq!(c.pools[0].graceful_timeout, Some(D::from_secs(30)));

    // Printed by -t, and read back to the same values.
    let (dir, c) = load_ok(
        main,
        &[
            ("pool.d/a.toml", &pool("a", "")),
            ("pool.d/b.toml", &pool("b", "graceful_timeout = \"1m\"\n")),
            ("pool.d/c.toml", &pool("c", "graceful_timeout = 0\n")),
        ],
    );
    let text = c.to_toml();
    for line in [
        "process_control_timeout = \"10s\" # default of graceful_timeout\n".to_string(),
        format!(
            "control_socket = \"{}\"\n",
            dir.path().join("ctl/fpmd.sock").display()
        ),
        "watch = true\n".to_string(),
        "graceful_timeout = \"10s\" # as global.process_control_timeout\n".to_string(),
        "graceful_timeout = \"1m\"\n".to_string(),
        "graceful_timeout = 0 # none, not global.process_control_timeout\n".to_string(),
    ] {
        assert!(text.contains(&line), "{line:?} not in\n{text}");
    }
    let again = write(dir.path(), "again/fpmd.toml", &text);
    let c2 = crate::config::load(&again).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(c2.global, c.global);
    let graceful2: Vec<_> = c2.pools.iter().map(|p| p.graceful_timeout).collect();
    assert_eq!(
        graceful2,
        [Some(D::from_secs(10)), Some(D::from_secs(60)), None]
    );
    let (_dir, c) = load_ok(&pool("www", ""), &[]);
    let text = c.to_toml();
    assert!(
        text.contains("# process_control_timeout: none\n")
            && text.contains("watch = false\n")
            && text.contains("# graceful_timeout: none\n"),
        "{text}"
    );

    // Errors.
    let global = |line: &str| format!("[global]\n{line}\n{}", pool("www", ""));
    assert_global_errors(&[
        ("watch = \"yes\"", "global.watch", "invalid type: string \"yes\", expected a boolean".to_string()),
        ("process_control_timeout = \"soon\"", "global.process_control_timeout", "invalid duration \"soon\": expected number at 0 (expected e.g. \"30s\", \"5m\", \"1h\", \"250ms\")".to_string()),
        ("control_socket = \"\"", "global.control_socket", "control_socket must not be empty".to_string()),
        ("control_socket = 1", "global.control_socket", "invalid type: integer `1`, expected a string".to_string()),
        (&format!("control_socket = \"/run/{}.sock\"", "x".repeat(120)), "global.control_socket", format!("unix socket path is too long (130 bytes, at most 107): /run/{}.sock", "x".repeat(120))),
    ]);
    let (dir, e) = load_err(&pool("www", "graceful_timeout = -1\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("graceful_timeout"),
        "invalid duration -1: must not be negative",
    );
    let (dir, e) = load_err(&pool("www", "graceful_timout = 1\n"), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("graceful_timout"),
        "unknown key (did you mean 'graceful_timeout'?)",
    );
    let (dir, e) = load_err("[global]\ncontrol_sockets = \"x.sock\"\n", &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(2),
        None,
        Some("global.control_sockets"),
        "unknown key (did you mean 'global.control_socket'?)",
    );

    // A pool on the control socket.
    let (dir, e) = load_err(&global("control_socket = \"/tmp/www.sock\""), &[]);
    assert_err(
        &dir,
        &e,
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("listen.address"),
        &format!(
            "/tmp/www.sock is fpmd's control socket (global.control_socket, {}:2): a pool cannot listen on it",
            dir.path().join("fpmd.toml").display()
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let default = crate::config::paths::default_path_as(&dir.path().join("fpmd.toml"), None, true);
    let main = write(
        dir.path(),
        "fpmd.toml",
        &pool("www", "").replace("/tmp/www.sock", &default.to_string_lossy()),
    );
    let e = crate::config::load_as(&main, Ids { euid: 0, egid: 0 }).unwrap_err();
    assert_eq!(
        e.message,
        format!("{} is fpmd's control socket (the default of global.control_socket): a pool cannot listen on it", default.display())
    );
}

#[test]
fn no_pool() {
    let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/notes.txt", "")]);
    assert_err(&dir, &e, "fpmd.toml", None, None, None, "no pool defined: add a pool table such as [www] to this file or to a file matched by global.include");
    assert!(e.to_string().ends_with("fpmd.toml: no pool defined: add a pool table such as [www] to this file or to a file matched by global.include"));
    let (dir, e) = load_err("", &[]);
    assert_eq!(e.file, dir.path().join("fpmd.toml"));
}

#[test]
fn isolation_keys() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir_all(site.join("pub")).unwrap();
    let site_s = site.display().to_string();
    let link = dir.path().join("site-link");
    std::os::unix::fs::symlink(&site, &link).unwrap();
    let link_s = link.display().to_string();
    let as_root = |extra: &str| {
        let main = write(dir.path(), "fpmd.toml", &pool("www", extra));
        crate::config::load_as(&main, Ids { euid: 0, egid: 0 })
    };
    // Defaults: nothing set, no_new_privs off (as php-fpm).
    let c = as_root("").unwrap();
    assert_eq!(c.pools[0].isolation, Isolation::default());
    assert!(!c.pools[0].isolation.no_new_privs);
    let text = c.to_toml();
    assert!(text.contains("# chroot: none\nchdir = \"/\"\n"), "{text}");
    assert!(
        text.contains("process.dumpable = false\nno_new_privs = false\n"),
        "{text}"
    );
    assert!(
        as_root("no_new_privs = true\n").unwrap().pools[0]
            .isolation
            .no_new_privs
    );

    // Everything set, and rendered so that it loads back the same.
    let c = as_root(&format!(
        "chroot = {site_s:?}\nchdir = \"/pub\"\nrlimit_files = 4096\nrlimit_core = \"unlimited\"\nprocess.priority = -5\nprocess.dumpable = true\nlandlock.read = [\"/pub\"]\nlandlock.write = \"/pub\"\n"
    ))
    .unwrap();
    let iso = &c.pools[0].isolation;
    assert_eq!(iso.chroot.as_deref(), Some(site.as_path()));
    assert_eq!(c.pools[0].chdir, PathBuf::from("/pub"));
    assert_eq!(iso.rlimit_files, Some(4096));
    assert_eq!(iso.rlimit_core, Some(u64::MAX));
    assert_eq!(iso.process_priority, Some(-5));
    assert!(iso.process_dumpable);
    assert_eq!(
        iso.landlock,
        Some(Landlock {
            read: vec!["/pub".into()],
            write: vec!["/pub".into()]
        })
    );
    let text = c.to_toml();
    for line in [
        format!("chroot = {site_s:?}\nchdir = \"/pub\" # inside the chroot\n"),
        "rlimit_files = 4096\nrlimit_core = \"unlimited\"\nprocess.priority = -5\nprocess.dumpable = true\nno_new_privs = true\nlandlock.read = [\"/pub\"]\nlandlock.write = [\"/pub\"]\n".into(),
    ] {
        assert!(text.contains(&line), "{line}\nnot in\n{text}");
    }
    assert_eq!(
        as_root("rlimit_core = 1048576\n").unwrap().pools[0]
            .isolation
            .rlimit_core,
        Some(1 << 20)
    );

    // Errors name file, line and key.
    let missing = dir.path().join("missing").display().to_string();
    for (extra, key, msg) in [
        ("chroot = \"site\"".to_string(), "chroot", "chroot must be an absolute path: site".to_string()),
        (format!("chroot = {missing:?}"), "chroot", format!("chroot directory does not exist or is not a directory: {missing}")),
        ("chroot = \"/\"".into(), "chroot", "chroot = \"/\" is no chroot: remove it".into()),
        (format!("chroot = {link_s:?}"), "chroot", format!("chroot must be the site's directory itself, not a symlink: {link_s} -> {site_s}")),
        (format!("chroot = {site_s:?}\nchdir = \"/nope\""), "chdir", format!("chdir directory /nope within the chroot {site_s} ({site_s}/nope) does not exist or is not a directory")),
        ("rlimit_files = 0".into(), "rlimit_files", "rlimit_files must be at least 1 (php-cgi could not open its own files)".into()),
        ("rlimit_files = 4000000000".into(), "rlimit_files", format!("rlimit_files = 4000000000 is more than the kernel allows (fs.nr_open = {})", std::fs::read_to_string("/proc/sys/fs/nr_open").unwrap().trim())),
        ("rlimit_core = \"lots\"".into(), "rlimit_core", "invalid value: string \"lots\", expected a number or \"unlimited\"".into()),
        ("process.priority = 21".into(), "process.priority", "process.priority must be between -19 and 20, got 21".into()),
        ("process.priority = -20".into(), "process.priority", "process.priority must be between -19 and 20, got -20".into()),
        ("landlock.read = [\"relative\"]".into(), "landlock.read", "landlock.read paths must be absolute: \"relative\"".into()),
        (format!("landlock.write = [{missing:?}]"), "landlock.write", format!("landlock.write path does not exist: {missing}")),
        (format!("chroot = {site_s:?}\nlandlock.read = [\"/other\"]"), "landlock.read", format!("landlock.read path does not exist: {site_s}/other")),
        ("no_new_privs = false\nlandlock.read = [\"/usr\"]".into(), "no_new_privs", "no_new_privs = false cannot go with landlock.*: an unprivileged process can only enforce a Landlock ruleset with no_new_privs".into()),
        (format!("chroot = {site_s:?}\npm.spawn = \"shared\""), "pm.spawn", "pm.spawn = \"shared\" cannot be used with chroot: the shared php-cgi parent runs outside every pool's root (use \"prefork\")".into()),
    ] {
        let e = as_root(&format!("{extra}\n")).expect_err(&extra);
        assert_eq!(e.key.as_deref(), Some(key), "{e}");
        assert_eq!(e.message, msg, "{e}");
        assert_eq!(e.pool.as_deref(), Some("www"), "{e}");
        let text = std::fs::read_to_string(&e.file).unwrap();
        let first = key.split('.').next_back().unwrap();
        let line = text.lines().nth(e.line.unwrap() - 1).unwrap();
        assert!(line.contains(first), "{e}: line {line:?}");
    }

    // Not root: chroot and a higher priority are refused.
    let (uid, gid) = nobody();
    let as_user = |extra: &str| {
        let main = write(dir.path(), "user.toml", &pool("www", extra));
        crate::config::load_as(
            &main,
            Ids {
                euid: uid,
                egid: gid,
            },
        )
    };
    let e = as_user(&format!("chroot = {site_s:?}\n")).unwrap_err();
    assert_eq!((e.key.as_deref(), e.line), (Some("chroot"), Some(7)));
    assert_eq!(e.message, "chroot needs fpmd to run as root (mount namespace and chroot(2) need CAP_SYS_ADMIN and CAP_SYS_CHROOT)");
    let e = as_user("process.priority = -1\n").unwrap_err();
    assert_eq!(
        e.message,
        "process.priority = -1 (a higher priority) needs fpmd to run as root"
    );
    assert_eq!(
        as_user("process.priority = 10\n").unwrap().pools[0]
            .isolation
            .process_priority,
        Some(10)
    );
}

/// Loads `main` (+ `files`) in a fresh directory as a process with
/// `ids` on a machine described by `host`.
fn load_on(
    main: &str,
    files: &[(&str, &str)],
    ids: Ids,
    host: &Host,
) -> (
    tempfile::TempDir,
    Result<crate::config::Config, ConfigError>,
) {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        write(dir.path(), rel, text);
    }
    let main = write(dir.path(), "fpmd.toml", main);
    let r = crate::config::load_from(
        &crate::config::FileSystem,
        &main,
        ids,
        host,
        &crate::config::LoadOptions::default(),
    );
    (dir, r)
}

fn big_host() -> Host {
    Host {
        cap_chown: true,
        cap_net_bind_service: true,
        groups: vec![0],
        unprivileged_port_start: 1024,
        nproc: None,
        pid_max: Some(32768),
        threads_max: Some(192_730),
        hard_limits: None,
    }
}

const ROOT: Ids = Ids { euid: 0, egid: 0 };

#[test]
fn max_children_beyond_pid_max_is_refused() {
    let host = big_host();
    let with = |n: &str, extra: &str| {
        pool("www", extra).replace("pm.max_children = 5", &format!("pm.max_children = {n}"))
    };
    let (dir, r) = load_on(&with("100000", ""), &[], ROOT, &host);
    assert_err(
        &dir,
        &r.unwrap_err(),
        "fpmd.toml",
        Some(6),
        Some("www"),
        Some("pm.max_children"),
        "the pool would run 100001 processes (pm.max_children = 100000 and the php-cgi parent of pm.spawn = \"prefork\"), more than the kernel allows at all: kernel.pid_max is 32768 (/proc/sys/kernel/pid_max)",
    );
    // At the limit: exec runs max_children processes, prefork one more.
    assert!(
        load_on(&with("32768", "pm.spawn = \"exec\"\n"), &[], ROOT, &host)
            .1
            .is_ok()
    );
    let (_d, r) = load_on(&with("32768", ""), &[], ROOT, &host);
    assert!(r
        .unwrap_err()
        .message
        .starts_with("the pool would run 32769 processes"));
    // threads-max, when it is the lower one.
    let low_threads = Host {
        threads_max: Some(100),
        ..big_host()
    };
    let (_d, r) = load_on(&with("100", ""), &[], ROOT, &low_threads);
    assert!(r
        .unwrap_err()
        .message
        .ends_with("kernel.threads-max is 100 (/proc/sys/kernel/threads-max)"));
    // The sum over pools: refused at the pool that crosses it.
    let two = format!(
        "{}\n{}",
        with("20000", ""),
        with("20000", "")
            .replace("[www]", "[two]")
            .replace("www.sock", "two.sock")
    );
    let (dir, r) = load_on(&two, &[], ROOT, &host);
    assert_err(
        &dir,
        &r.unwrap_err(),
        "fpmd.toml",
        Some(13),
        Some("two"),
        Some("pm.max_children"),
        "the pools together would run 40002 processes (this pool 20001 processes (pm.max_children = 20000 and the php-cgi parent of pm.spawn = \"prefork\"), the pools before it 20001), more than the kernel allows at all: kernel.pid_max is 32768 (/proc/sys/kernel/pid_max)",
    );
    // Unknown limits (no /proc) refuse nothing.
    let none = Host {
        pid_max: None,
        threads_max: None,
        ..big_host()
    };
    assert!(load_on(&with("100000", ""), &[], ROOT, &none).1.is_ok());
}

#[test]
fn rlimits_above_a_hard_limit_fpmd_cannot_raise_are_refused() {
    let capped = Host {
        hard_limits: Some((Some(20_000), Some(0))),
        ..big_host()
    };
    let (dir, r) = load_on(&pool("www", "rlimit_files = 65536\n"), &[], ROOT, &capped);
    assert_err(
        &dir,
        &r.unwrap_err(),
        "fpmd.toml",
        Some(7),
        Some("www"),
        Some("rlimit_files"),
        "rlimit_files = 65536 is above fpmd's hard RLIMIT_NOFILE (20000), which fpmd runs as uid 0 without CAP_SYS_RESOURCE cannot raise: every php-cgi would fail before exec (setrlimit: EPERM); lower it, or raise fpmd's own limit (systemd: LimitNOFILE=)",
    );
    let (_d, r) = load_on(
        &pool("www", "rlimit_core = \"unlimited\"\n"),
        &[],
        ROOT,
        &capped,
    );
    assert!(r
        .unwrap_err()
        .message
        .starts_with("rlimit_core = unlimited is above fpmd's hard RLIMIT_CORE (0)"));
    for ok in ["rlimit_files = 20000\n", "rlimit_core = 0\n"] {
        assert!(
            load_on(&pool("www", ok), &[], ROOT, &capped).1.is_ok(),
            "{ok}"
        );
    }
    // With CAP_SYS_RESOURCE (no hard limits recorded) any value up to
    // fs.nr_open goes.
    assert!(load_on(
        &pool("www", "rlimit_files = 65536\n"),
        &[],
        ROOT,
        &big_host()
    )
    .1
    .is_ok());
}

#[test]
fn max_children_beyond_rlimit_nproc_is_refused() {
    let host = Host {
        nproc: Some(10),
        ..big_host()
    };
    let with = |name: &str, user: &str, n: u32| {
        pool(name, "")
            .replace("pm.max_children = 5", &format!("pm.max_children = {n}"))
            .replace("user = \"nobody\"", &format!("user = \"{user}\""))
            .replace(
                "group = \"nogroup\"",
                &format!(
                    "group = \"{}\"",
                    if user == "nobody" { "nogroup" } else { user }
                ),
            )
    };
    let nobody_pool =
        |n: u32| pool("www", "").replace("pm.max_children = 5", &format!("pm.max_children = {n}"));
    assert!(
        load_on(&nobody_pool(9), &[], ROOT, &host).1.is_ok(),
        "9 children + their parent = 10"
    );
    let (dir, r) = load_on(&nobody_pool(10), &[], ROOT, &host);
    assert_err(
        &dir,
        &r.unwrap_err(),
        "fpmd.toml",
        Some(6),
        Some("www"),
        Some("pm.max_children"),
        &format!("the pool would run 11 processes (pm.max_children = 10 and the php-cgi parent of pm.spawn = \"prefork\") as user 'nobody' (uid {}), more than the soft RLIMIT_NPROC of 10 processes per user the children inherit from fpmd (ulimit -u; systemd: LimitNPROC=): the kernel would refuse the forks; lower pm.max_children or raise the limit", nobody().0),
    );
    // Two pools of one user count together; of two users, apart.
    let same = format!("{}\n{}", with("a", "nobody", 5), with("b", "nobody", 5));
    let (_d, r) = load_on(&same, &[], ROOT, &host);
    let e = r.unwrap_err();
    assert_eq!((e.pool.as_deref(), e.line), (Some("b"), Some(13)), "{e}");
    assert!(e.message.contains("and 6 more of that user"), "{e}");
    let apart = format!("{}\n{}", with("a", "nobody", 4), with("b", "www-data", 4));
    assert!(load_on(&apart, &[], ROOT, &host).1.is_ok());
    // Not root: the pool runs as fpmd's user, and fpmd counts too.
    let (uid, gid) = nobody();
    let me = Ids {
        euid: uid,
        egid: gid,
    };
    let me_host = Host {
        cap_chown: false,
        cap_net_bind_service: false,
        groups: vec![gid],
        ..host
    };
    assert!(load_on(&nobody_pool(8), &[], me, &me_host).1.is_ok());
    let (_d, r) = load_on(&nobody_pool(9), &[], me, &me_host);
    let e = r.unwrap_err();
    assert!(
        e.message.contains("and 1 more of that user (fpmd itself"),
        "{e}"
    );
}

#[test]
fn non_root_cannot_use_root_only_settings() {
    let (uid, gid) = nobody();
    let me = Ids {
        euid: uid,
        egid: gid,
    };
    let host = Host {
        cap_chown: false,
        cap_net_bind_service: false,
        groups: vec![gid],
        ..big_host()
    };
    let sock = |dir: &tempfile::TempDir| dir.path().join("run/www.sock").display().to_string();
    // The sockets' directory exists.
    const RUN: &[(&str, &str)] = &[("run/.keep", "")];
    let at = |extra: &str| pool("www", extra).replace("/tmp/www.sock", "run/www.sock");
    // fpmd's own user and group are fine, given or by default.
    let own = at("listen.owner = \"nobody\"\nlisten.group = \"nogroup\"\n");
    assert!(load_on(&own, RUN, me, &host).1.is_ok());
    assert!(load_on(&at(""), RUN, me, &host).1.is_ok());

    let (dir, r) = load_on(&at("listen.owner = \"www-data\"\n"), RUN, me, &host);
    let e = r.unwrap_err();
    let www = nix::unistd::User::from_name("www-data")
        .unwrap()
        .unwrap()
        .uid
        .as_raw();
    assert_err(&dir, &e, "fpmd.toml", Some(7), Some("www"), Some("listen.owner"), &format!(
        "cannot give the socket {} to listen.owner 'www-data' (uid {www}): fpmd runs as uid {uid} without CAP_CHOWN, so chown() would fail with EPERM (Operation not permitted); remove listen.owner or set it to fpmd's own user 'nobody'",
        sock(&dir)
    ));
    let (dir, r) = load_on(&at("listen.group = \"www-data\"\n"), RUN, me, &host);
    let e = r.unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(7), Some("listen.group")),
        "{e}"
    );
    assert!(
        e.message.starts_with(&format!(
            "cannot give the socket {} to listen.group 'www-data'",
            sock(&dir)
        )) && e.message.contains("EPERM"),
        "{e}"
    );

    // cgroup limits need root.
    let (dir, r) = load_on(&at("cgroup.pids_max = 50\n"), RUN, me, &host);
    assert_err(&dir, &r.unwrap_err(), "fpmd.toml", Some(7), Some("www"), Some("cgroup.pids_max"),
        &format!("cgroup.pids_max needs fpmd to run as root (it runs as uid {uid}): the pool's cgroup is created and its limits written under /sys/fs/cgroup"));

    // Privileged ports: below ip_unprivileged_port_start, for every listener.
    let tcp = |addr: &str, extra: &str| {
        pool("www", extra).replace("\"/tmp/www.sock\"", &format!("\"{addr}\""))
    };
    let (dir, r) = load_on(&tcp("127.0.0.1:80", ""), &[], me, &host);
    assert_err(&dir, &r.unwrap_err(), "fpmd.toml", Some(5), Some("www"), Some("listen.address"),
        &format!("port 80 is privileged: fpmd runs as uid {uid} without CAP_NET_BIND_SERVICE and net.ipv4.ip_unprivileged_port_start is 1024, so bind() would fail with EACCES (Permission denied); use a port from 1024 up or a unix socket"));
    assert!(load_on(&tcp("127.0.0.1:1024", ""), &[], me, &host)
        .1
        .is_ok());
    let low_start = Host {
        unprivileged_port_start: 80,
        ..host.clone()
    };
    assert!(
        load_on(&tcp("127.0.0.1:80", ""), &[], me, &low_start)
            .1
            .is_ok(),
        "the sysctl, not 1024"
    );
    let (_d, r) = load_on(
        &tcp("127.0.0.1:9000", "pm.status_listen = \"443\"\n"),
        &[],
        me,
        &host,
    );
    let e = r.unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(7), Some("pm.status_listen")),
        "{e}"
    );
    let metrics = format!(
        "[global]\nmetrics.listen = \"127.0.0.1:99\"\n{}",
        tcp("127.0.0.1:9000", "")
    );
    let (_d, r) = load_on(&metrics, &[], me, &host);
    let e = r.unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref(), e.pool.as_deref()),
        (Some(2), Some("global.metrics.listen"), None),
        "{e}"
    );

    // Root (or the capabilities) may do all of it.
    let all = at("listen.owner = \"www-data\"\nlisten.group = \"www-data\"\n");
    assert!(load_on(&all, RUN, ROOT, &big_host()).1.is_ok());
    assert!(load_on(&tcp("127.0.0.1:80", ""), &[], ROOT, &big_host())
        .1
        .is_ok());
}

#[test]
fn require_root_names_the_key_and_why() {
    let src = SourceFile::parse(
        Path::new("/x/fpmd.toml"),
        "[www]\nuser = \"nobody\"\nchroot = \"/srv/www\"\n".into(),
    )
    .unwrap();
    let ctx = PoolCtx {
        src: &src,
        name: "www",
    };
    assert!(require_root(&ctx, ROOT, &["chroot"], "chroot(2) needs CAP_SYS_CHROOT").is_ok());
    let e = require_root(
        &ctx,
        Ids {
            euid: 1000,
            egid: 1000,
        },
        &["chroot"],
        "chroot(2) needs CAP_SYS_CHROOT",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "/x/fpmd.toml:3: [www] key 'chroot': chroot needs fpmd to run as root (it runs as uid 1000): chroot(2) needs CAP_SYS_CHROOT"
    );
}

#[test]
fn host_facts() {
    // Pretend ids: root may do all, anyone else nothing.
    let h = Host::of(Ids {
        euid: 4_000_000,
        egid: 4_000_001,
    });
    assert_eq!(
        (h.cap_chown, h.cap_net_bind_service, h.groups.as_slice()),
        (false, false, &[4_000_001][..])
    );
    let h = Host::of(Ids {
        euid: 0,
        egid: 4_000_001,
    });
    assert!(h.cap_chown && h.cap_net_bind_service);
    // The kernel's figures are the files'.
    let file = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
    };
    assert_eq!(h.pid_max, file("/proc/sys/kernel/pid_max"));
    assert_eq!(h.threads_max, file("/proc/sys/kernel/threads-max"));
    let start = file("/proc/sys/net/ipv4/ip_unprivileged_port_start").unwrap_or(1024);
    assert_eq!(u64::from(h.unprivileged_port_start), start);
    // The running process: its own groups.
    let me = Host::of(Ids::current());
    assert_eq!(me.groups[0], nix::unistd::getegid().as_raw());
}

/// Pools that read the same php.ini files share one list of them; a pool
/// with other files has its own.
#[test]
fn pools_that_read_the_same_ini_files_share_their_list() {
    let dir = tempfile::tempdir().unwrap();
    let ini = write(dir.path(), "php.ini", "");
    write(dir.path(), "conf.d/10-a.ini", "");
    let same = format!(
        "php_ini = {:?}\nphp_ini_scan_dir = {:?}\n",
        ini.display().to_string(),
        dir.path().join("conf.d").display().to_string()
    );
    let other = format!(
        "php_ini = {:?}\nphp_ini_scan_dir = \"\"\n",
        ini.display().to_string()
    );
    let (_d, c) = load_ok(
        &(pool("a", &same) + &pool("b", &same) + &pool("c", &other)),
        &[],
    );
    let reads = |i: usize| c.pools[i].php_ini.reads.clone().unwrap();
    assert_eq!(reads(0).len(), 2);
    assert!(std::sync::Arc::ptr_eq(&reads(0), &reads(1)));
    assert_eq!(&reads(2)[..], [ini]);
}
