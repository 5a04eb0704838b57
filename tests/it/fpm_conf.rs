//! Issue 11: fpmd reads php-fpm's own configuration. Every file of the
//! corpus (/work/shared/fpm-configs, see its INDEX.md) and Debian's stock
//! php-fpm.conf with its pool.d/www.conf, adapted as INDEX.md did for
//! `php-fpm8.2 -tt` (users mapped to www-data, absolute paths moved under
//! the test dir, ports free): `fpmd -t` accepts it and prints the
//! effective configuration, fpmd serves a request with it behind nginx,
//! `fpmd convert` then load prints the same configuration, and where
//! cheap the effective values agree with `php-fpm8.2 -tt`'s.

use crate::harness::fpmd::cli;
use crate::harness::{self, *};
use std::path::{Path, PathBuf};
use std::process::Command;

const CORPUS: &str = "/work/shared/fpm-configs";

/// A php-fpm configuration adapted to a test dir.
struct Adapted {
    /// The main file (`<test dir>/<name>`).
    main: PathBuf,
    /// Each pool's name (as first written) and its last `listen`, `$pool`
    /// replaced.
    pools: Vec<(String, String)>,
    /// fpmd's log: what `[global] error_log` names (as the harness reads it).
    cfg: FpmdConfig,
}

/// The harness's view of fpmd's log for a php-fpm file: the file its
/// `[global] error_log` names, if it names one that is not stderr.
fn log_of(text: &str) -> FpmdConfig {
    let file = text
        .lines()
        .rev()
        .filter_map(|l| l.trim().strip_prefix("error_log"))
        .filter_map(|r| r.trim_start().strip_prefix('='))
        .map(|v| v.trim().to_string())
        .next()
        .filter(|v| v.starts_with('/') && !v.starts_with("/proc/") && !v.starts_with("/dev/"));
    match file {
        Some(f) => FpmdConfig::new().error_log(f),
        None => FpmdConfig::new(),
    }
}

/// `text` with INDEX.md's adaptations: `user`, `group`, `listen.owner`,
/// `listen.group` → www-data; absolute paths of `listen`, `pid`,
/// `error_log`, `slowlog`, `access.log`, `chdir` and `include` moved under
/// `root` (directories created); TCP listen addresses on free ports;
/// `open_basedir` extended with the docroot.
fn adapt(text: &str, root: &Path, docroot: &Path, pools: &mut Vec<(String, String)>) -> String {
    let mut out = String::new();
    let mut section = String::from("global");
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
            section = name.to_string();
            if !name.eq_ignore_ascii_case("global")
                && !pools.iter().any(|(p, _)| p.eq_ignore_ascii_case(name))
            {
                pools.push((name.to_string(), String::new()));
            }
        }
        let Some((key, value)) = t.split_once('=').filter(|_| !t.starts_with(';')) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let under = |v: &str| format!("{}{v}", root.display());
        let new = match key {
            "user" | "group" | "listen.owner" | "listen.group" | "listen.acl_users"
            | "listen.acl_groups" => Some("www-data".to_string()),
            "listen" => {
                let v = if value.starts_with('/') {
                    under(value)
                } else {
                    format!("127.0.0.1:{}", free_port())
                };
                let expanded = v.replace("$pool", &section);
                if v.starts_with('/') {
                    std::fs::create_dir_all(Path::new(&expanded).parent().unwrap()).unwrap();
                }
                if let Some(p) = pools
                    .iter_mut()
                    .find(|(p, _)| p.eq_ignore_ascii_case(&section))
                {
                    p.1 = expanded;
                }
                Some(v)
            }
            "pid" | "error_log" | "slowlog" | "access.log" | "chdir" | "include"
                if value.starts_with('/')
                    && !value.starts_with("/proc/")
                    && !value.starts_with("/dev/") =>
            {
                let v = under(value);
                let dir = if key == "chdir" {
                    PathBuf::from(&v)
                } else {
                    Path::new(&v).parent().unwrap().to_path_buf()
                };
                std::fs::create_dir_all(dir.to_string_lossy().replace("$pool", &section)).unwrap();
                Some(v)
            }
            "include" => {
                std::fs::create_dir_all(root.join(value).parent().unwrap()).unwrap();
                None
            }
            "php_admin_value[open_basedir]" => Some(format!("{value}:{}", docroot.display())),
            // Within this machine's hard limit: a child cannot raise it
            // without CAP_SYS_RESOURCE, which a container may not have
            // (php-fpm's children fail there too).
            "rlimit_files" => Some(hard_nofile().min(value.parse().unwrap()).to_string()),
            _ => None,
        };
        match new {
            Some(v) => out.push_str(&format!("{key} = {v}\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// What fpmd needs on top of a php-fpm file in a test: its own control
/// socket, and the spawn strategy of the run (`FPMD_TEST_SPAWN`).
fn fpmd_lines(root: &Path, pools: &[(String, String)]) -> String {
    let mut s = format!("\n[global]\ncontrol_socket = {}/ctl.sock\n", root.display());
    if let Ok(spawn) = std::env::var("FPMD_TEST_SPAWN") {
        if !spawn.is_empty() {
            for (p, _) in pools {
                s.push_str(&format!("[{p}]\npm.spawn = {spawn}\n"));
            }
        }
    }
    s
}

fn hard_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_max
}

fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display()))
}

/// The corpus file `name`, set up in `t` as INDEX.md says php-fpm checked
/// it (01 with 02 as its pool, 04 layered on 02, 12's relative include
/// directory made).
fn corpus(t: &TestDir, name: &str) -> Adapted {
    let root = t.path();
    let docroot = t.docroot();
    let mut pools = Vec::new();
    let text = match &name[..2] {
        "01" => {
            let main = adapt(
                &read(format!("{CORPUS}/{name}")),
                root,
                &docroot,
                &mut pools,
            );
            let www = adapt(
                &read(format!("{CORPUS}/02-php-src-www.conf")),
                root,
                &docroot,
                &mut pools,
            );
            std::fs::write(root.join("usr/local/etc/php-fpm.d/www.conf"), www).unwrap();
            main
        }
        "04" => {
            let www = read(format!("{CORPUS}/02-php-src-www.conf"));
            adapt(
                &format!("{www}\n{}", read(format!("{CORPUS}/{name}"))),
                root,
                &docroot,
                &mut pools,
            )
        }
        _ => adapt(
            &read(format!("{CORPUS}/{name}")),
            root,
            &docroot,
            &mut pools,
        ),
    };
    let main = root.join(name);
    std::fs::write(&main, format!("{text}{}", fpmd_lines(root, &pools))).unwrap();
    // php-fpm's default error_log, log/php-fpm.log under the prefix.
    std::fs::create_dir_all(root.join("log")).unwrap();
    Adapted {
        main,
        pools,
        cfg: log_of(&text),
    }
}

/// `fpmd -t` output without the notes that name where a value was set
/// (` # set in FILE:LINE`, ` # default`) and without the comment lines
/// that name the loaded files: what must be equal byte for byte between a
/// php-fpm file and its conversion.
fn effective(t_output: &str) -> String {
    let mut out = String::new();
    for line in t_output.lines() {
        if line.starts_with("# fpmd effective configuration") || line.starts_with("# pool ") {
            continue;
        }
        let mut l = line;
        for note in ["; set in ", " # set in ", "; default", " # default"] {
            if let Some(i) = l.rfind(note) {
                l = &l[..i];
            }
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// `fpmd -t` accepts it; `fpmd convert` then `-t` prints the same; fpmd
/// serves hello.php with it behind nginx.
fn accept_convert_serve(t: &TestDir, a: &Adapted) -> String {
    let tested = cli(t.path(), &a.main, &t.tag(), &["-t"]);
    assert_eq!(tested.code(), Some(0), "{tested}");
    for (p, _) in &a.pools {
        assert!(
            tested.stdout.contains(&format!("\n[{p}]\n"))
                || tested.stdout.contains(&format!("\n[\"{p}\"]\n")),
            "pool {p} in\n{tested}"
        );
    }
    let converted = cli(t.path(), &a.main, &t.tag(), &["convert"]);
    assert_eq!(converted.code(), Some(0), "{converted}");
    let toml = t.join("converted.toml");
    std::fs::write(&toml, &converted.stdout).unwrap();
    let again = cli(t.path(), &toml, &t.tag(), &["-t"]);
    assert_eq!(
        again.code(),
        Some(0),
        "{again}\nconverted:\n{}",
        converted.stdout
    );
    assert_eq!(
        effective(&again.stdout),
        effective(&tested.stdout),
        "converted:\n{}",
        converted.stdout
    );

    let upstream = Addr::parse(&a.pools[0].1).nginx();
    let mut fpmd = Fpmd::start_file(
        t,
        &a.cfg,
        &a.main,
        &["-y", &a.main.display().to_string()],
        vec![Addr::parse(&a.pools[0].1)],
    );
    let nginx = Nginx::start(t, NginxOpts::default().upstream(upstream));
    let r = get(&nginx.url("/hello.php?name=fpm"));
    assert_eq!(r.status, 200, "{}\nfpmd log:\n{}", r.text(), fpmd.log());
    assert!(r.text().starts_with("hello fpm\n"), "{}", r.text());
    fpmd.assert_running();
    tested.stdout
}

fn corpus_case(name: &str) -> String {
    let t = TestDir::new();
    let a = corpus(&t, name);
    accept_convert_serve(&t, &a)
}

#[test]
fn corpus_01_php_src_global_with_include() {
    let out = corpus_case("01-php-src-php-fpm.conf");
    assert!(out.contains("\n[www]\n"), "{out}");
}

#[test]
fn corpus_02_php_src_www() {
    let out = corpus_case("02-php-src-www.conf");
    assert!(out.contains("pm.mode = \"dynamic\""), "{out}");
}

#[test]
fn corpus_03_debian_www() {
    let out = corpus_case("03-debian-www.conf");
    assert!(
        out.contains("security.limit_extensions = [\".php\", \".phar\"]"),
        "{out}"
    );
}

#[test]
fn corpus_04_docker_sections_reopened() {
    let out = corpus_case("04-docker-library-docker.conf");
    assert!(out.contains("clear_env = false"), "{out}");
    assert!(out.contains("decorate_workers_output = false"), "{out}");
}

#[test]
fn corpus_06_ansible_include_first() {
    let out = corpus_case("06-ansible-geerlingguy-php.conf");
    assert!(out.contains("request_terminate_timeout = \"5m\""), "{out}");
}

#[test]
fn corpus_08_puppet_every_key() {
    let out = corpus_case("08-puppet-voxpupuli-pool.conf");
    assert!(out.contains("env.APP_ENV = \"production\""), "{out}");
}

#[test]
fn corpus_09_yunohost_day_suffix_and_constant_key() {
    let out = corpus_case("09-yunohost-nextcloud.conf");
    assert!(
        out.contains("request_terminate_timeout = \"1day\""),
        "{out}"
    );
    assert!(out.contains("\nenv.6 = "), "php-fpm's env[6]:\n{out}");
}

#[test]
fn corpus_10_ispconfig() {
    let out = corpus_case("10-ispconfig-pool.conf");
    assert!(out.contains("pm.process_idle_timeout = \"10s\""), "{out}");
}

#[test]
fn corpus_12_helm_relative_include() {
    let out = corpus_case("12-helm-chatwork-php.conf");
    assert!(out.contains("pm.mode = \"static\""), "{out}");
}

#[test]
fn corpus_14_imagick_pool_and_include_in_pool() {
    let out = corpus_case("14-imagickdemos-pool-include.conf");
    assert!(out.contains("[imagick]"), "{out}");
}

/// 05 sets `listen.acl_users` (RHEL's default) and no listen.owner: the
/// socket gets the ACL entry php-fpm gives it.
#[test]
fn corpus_05_rhel_acl_users() {
    let t = TestDir::new();
    let a = corpus(&t, "05-rhel-ius-www.conf");
    let out = accept_convert_serve(&t, &a);
    assert!(out.contains("listen.acl_users = \"33\" # ids"), "{out}");
    let fpmd = Fpmd::start_file(
        &t,
        &a.cfg,
        &a.main,
        &["-y", &a.main.display().to_string()],
        vec![Addr::parse(&a.pools[0].1)],
    );
    let path = std::ffi::CString::new(a.pools[0].1.as_bytes()).unwrap();
    let mut buf = [0u8; 256];
    // SAFETY: NUL-terminated strings; the buffer's length is passed.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(
        n > 4,
        "no ACL on {}: {}; fpmd log:\n{}",
        a.pools[0].1,
        std::io::Error::last_os_error(),
        fpmd.log()
    );
    let www_data_rw = buf[4..n as usize]
        .chunks(8)
        .any(|e| e[..4] == [2, 0, 6, 0] && e[4..] == 33u32.to_le_bytes());
    assert!(
        www_data_rw,
        "no user:www-data:rw- entry: {:?}",
        &buf[..n as usize]
    );
}

/// Debian's stock php-fpm.conf and pool.d/www.conf, with php.ini and
/// conf.d beside them as Debian installs them: accepted, served, converted;
/// the children read that php.ini (a value set only there), the
/// php_value `-d` args still win, and `-t` lists the files PHP reads.
#[test]
fn debian_stock_configuration_and_its_php_ini() {
    let t = TestDir::new();
    let root = t.path();
    let etc = root.join("etc/php/8.2/fpm");
    std::fs::create_dir_all(etc.join("pool.d")).unwrap();
    std::fs::create_dir_all(etc.join("conf.d")).unwrap();
    let mut pools = Vec::new();
    let main_text = adapt(
        &read("/etc/php/8.2/fpm/php-fpm.conf"),
        root,
        &t.docroot(),
        &mut pools,
    );
    let www = adapt(
        &read("/etc/php/8.2/fpm/pool.d/www.conf"),
        root,
        &t.docroot(),
        &mut pools,
    );
    std::fs::write(
        etc.join("pool.d/www.conf"),
        format!("{www}php_value[post_max_size] = 5M\n"),
    )
    .unwrap();
    let php_ini = format!(
        "{}\nmemory_limit = 77M\npost_max_size = 3M\n",
        read("/etc/php/8.2/fpm/php.ini")
    );
    std::fs::write(etc.join("php.ini"), php_ini).unwrap();
    std::fs::write(
        etc.join("conf.d/10-test.ini"),
        "default_charset = \"ISO-8859-15\"\n",
    )
    .unwrap();
    let main = etc.join("php-fpm.conf");
    std::fs::write(&main, format!("{main_text}{}", fpmd_lines(root, &pools))).unwrap();
    std::fs::write(
        t.docroot().join("phpini.php"),
        "<?php\necho php_ini_loaded_file(), \"|\", trim(php_ini_scanned_files()), \"|\", ini_get('memory_limit'), \"|\", ini_get('post_max_size'), \"|\", ini_get('default_charset');\n",
    )
    .unwrap();
    let a = Adapted {
        main: main.clone(),
        pools,
        cfg: log_of(&main_text),
    };
    let out = accept_convert_serve(&t, &a);
    assert!(
        out.contains(&format!(
            "# PHP reads, in this order:\n#   {}\n#   {}\n",
            etc.join("php.ini").display(),
            etc.join("conf.d/10-test.ini").display()
        )),
        "{out}"
    );
    let mut fpmd = Fpmd::start_file(
        &t,
        &a.cfg,
        &main,
        &["-y", &main.display().to_string()],
        vec![Addr::parse(&a.pools[0].1)],
    );
    let nginx = Nginx::start(
        &t,
        NginxOpts::default()
            .upstream(Addr::parse(&a.pools[0].1).nginx())
            .name("phpini"),
    );
    let r = get(&nginx.url("/phpini.php"));
    assert_eq!(
        r.text(),
        format!(
            "{}|{}|77M|5M|ISO-8859-15",
            etc.join("php.ini").display(),
            etc.join("conf.d/10-test.ini").display()
        ),
        "fpmd log:\n{}",
        fpmd.log()
    );
    fpmd.assert_running();
}

/// The effective pm.*, listen and request_terminate_timeout of fpmd -t
/// and php-fpm8.2 -tt agree on the corpus pools php-fpm can check here.
#[test]
fn effective_values_agree_with_php_fpm() {
    let php_fpm = require_php_fpm();
    for name in [
        "03-debian-www.conf",
        "08-puppet-voxpupuli-pool.conf",
        "09-yunohost-nextcloud.conf",
        "12-helm-chatwork-php.conf",
    ] {
        let t = TestDir::new();
        let a = corpus(&t, name);
        // php-fpm refuses fpmd's own keys: its copy goes without them.
        let text = read(&a.main);
        let theirs = t.join("php-fpm-copy.conf");
        std::fs::write(
            &theirs,
            &text[..text.rfind("\n[global]\ncontrol_socket").unwrap()],
        )
        .unwrap();
        let out = Command::new(&php_fpm)
            .args(["-tt", "-y"])
            .arg(&theirs)
            .arg("-p")
            .arg(t.path())
            .output()
            .unwrap();
        let fpm = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{name}: php-fpm -tt: {fpm}");
        let ours = cli(t.path(), &a.main, &t.tag(), &["-t"]);
        assert_eq!(ours.code(), Some(0), "{ours}");
        let theirs_value = |key: &str| {
            fpm.lines()
                .find_map(|l| {
                    l.split_once(&format!("\t{key} = "))
                        .map(|(_, v)| v.trim().to_string())
                })
                .unwrap_or_else(|| panic!("{name}: no {key} in php-fpm -tt:\n{fpm}"))
        };
        let ours_value = |key: &str| {
            ours.stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key} = ")))
                .map(|v| v.split(" #").next().unwrap().trim_matches('"').to_string())
        };
        assert_eq!(
            ours_value("pm.mode").as_deref(),
            Some(theirs_value("pm").as_str()),
            "{name}"
        );
        assert_eq!(
            ours_value("listen.address").as_deref(),
            Some(theirs_value("listen").as_str()),
            "{name}"
        );
        for key in ["pm.max_children", "pm.max_requests"] {
            assert_eq!(
                ours_value(key).as_deref(),
                Some(theirs_value(key).as_str()),
                "{name}: {key}"
            );
        }
        if theirs_value("pm") == "dynamic" {
            for key in [
                "pm.start_servers",
                "pm.min_spare_servers",
                "pm.max_spare_servers",
            ] {
                assert_eq!(
                    ours_value(key).as_deref(),
                    Some(theirs_value(key).as_str()),
                    "{name}: {key}"
                );
            }
        }
        let rtt = theirs_value("request_terminate_timeout");
        let secs: u64 = rtt.trim_end_matches('s').parse().unwrap();
        let expected = if secs == 0 {
            None
        } else {
            Some(humantime_secs(secs))
        };
        assert_eq!(ours_value("request_terminate_timeout"), expected, "{name}");
        let backlog = theirs_value("listen.backlog");
        let somaxconn = read("/proc/sys/net/core/somaxconn").trim().to_string();
        let expected = if backlog == "-1" { somaxconn } else { backlog };
        assert_eq!(ours_value("listen.backlog"), Some(expected), "{name}");
    }
}

/// How fpmd -t prints a number of seconds (humantime's format).
fn humantime_secs(secs: u64) -> String {
    let units = [(86400, "day"), (3600, "h"), (60, "m"), (1, "s")];
    let mut parts = Vec::new();
    let mut rest = secs;
    for (n, u) in units {
        if rest >= n {
            let k = rest / n;
            rest %= n;
            parts.push(if u == "day" {
                format!("{k}day{}", if k > 1 { "s" } else { "" })
            } else {
                format!("{k}{u}")
            });
        }
    }
    parts.join(" ")
}

/// A broken php-fpm file: exit 78 with php-fpm's words for it (an ALERT,
/// then `failed to post process the configuration`); a reload with it
/// (SIGUSR2 or `fpmd reload`) keeps the running configuration and names
/// the file and the line.
#[test]
fn broken_conf_is_refused_and_a_reload_keeps_the_old_one() {
    let t = TestDir::new();
    let pool_d = t.join("pool.d");
    std::fs::create_dir_all(&pool_d).unwrap();
    let sock = t.join("www.sock");
    let main = t.join("php-fpm.conf");
    let mut pools = vec![("www".to_string(), sock.display().to_string())];
    std::fs::write(
        &main,
        format!(
            "[global]\ninclude = pool.d/*.conf\n{}",
            fpmd_lines(t.path(), &pools)
        ),
    )
    .unwrap();
    let www = |children: u32| {
        format!("[www]\nuser = www-data\ngroup = www-data\nlisten = {}\npm = static\npm.max_children = {children}\n", sock.display())
    };
    std::fs::write(pool_d.join("www.conf"), www(0)).unwrap();
    let r = cli(t.path(), &main, &t.tag(), &["-t"]);
    assert_eq!(r.code(), Some(78), "{r}");
    assert!(
        r.stderr
            .contains("] ALERT: [pool www] pm.max_children must be a positive value\n")
            && r.stderr
                .contains("] ERROR: failed to post process the configuration\n")
            && r.stderr.ends_with("] ERROR: FPM initialization failed\n"),
        "{r}"
    );
    std::fs::write(pool_d.join("www.conf"), www(2)).unwrap();
    let mut fpmd = Fpmd::start_file(
        &t,
        &FpmdConfig::new(),
        &main,
        &["-c", &main.display().to_string()],
        vec![Addr::Unix(sock.clone())],
    );
    let nginx = Nginx::start(
        &t,
        NginxOpts::default().upstream(format!("unix:{}", sock.display())),
    );
    assert_eq!(get(&nginx.url("/hello.php")).status, 200);
    std::fs::write(pool_d.join("www.conf"), www(0)).unwrap();
    let line = fpmd.reload();
    assert!(line.contains("reload refused"), "{line}\n{}", fpmd.log());
    assert!(line.contains("www.conf:6"), "{line}");
    let r = cli(t.path(), &main, &t.tag(), &["reload"]);
    assert_eq!(r.code(), Some(78), "{r}");
    assert!(
        r.stderr.contains("www.conf:6: [www] key 'pm.max_children'"),
        "{r}"
    );
    assert_eq!(
        get(&nginx.url("/hello.php")).status,
        200,
        "the old configuration serves"
    );
    pools.clear();
    fpmd.assert_running();
}

/// A key given twice in php-fpm's arrays (`env[X]`, `php_value[X]`,
/// `php_flag[X]` then `php_value[X]`): php-fpm applies the first one (it
/// prepends each to a list it then applies in order), and so does fpmd.
#[test]
fn repeated_array_keys_as_php_fpm() {
    let lines = [
        "env[DUP] = first",
        "env[DUP] = second",
        "php_value[memory_limit] = 11M",
        "php_value[memory_limit] = 22M",
        "php_flag[display_errors] = on",
        "php_value[display_errors] = off",
    ];
    let t = TestDir::new();
    let mut opts = harness::phpfpm::PhpFpmOpts::default();
    for l in lines {
        opts = opts.line(l);
    }
    let php_fpm = harness::phpfpm::PhpFpm::start_with(&t, opts);
    let theirs = Nginx::start(
        &t,
        NginxOpts::default()
            .upstream(php_fpm.upstream())
            .name("nginx-php-fpm"),
    );
    let (fpmd, ours) = one_pool(&t, &lines, "nginx-fpmd");
    for path in [
        "/env.php?names=DUP",
        "/ini.php?name=memory_limit",
        "/ini.php?name=display_errors",
    ] {
        let (a, b) = (get(&theirs.url(path)), get(&ours.url(path)));
        assert_eq!(
            (b.status, b.text()),
            (a.status, a.text()),
            "{path}; fpmd log:\n{}",
            fpmd.log()
        );
    }
    assert_eq!(get(&ours.url("/env.php?names=DUP")).text(), "DUP='first'\n");
}

/// The php-fpm file of [`one_pool`]: its path and the pool's socket.
fn one_pool_file(t: &TestDir, lines: &[&str]) -> (PathBuf, PathBuf) {
    let sock = t.join("www.sock");
    let pools = vec![("www".to_string(), sock.display().to_string())];
    let main = t.join("php-fpm.conf");
    std::fs::write(
        &main,
        format!(
            "[www]\nuser = www-data\ngroup = www-data\nlisten = {}\npm = static\npm.max_children = 1\n{}\n{}",
            sock.display(),
            lines.join("\n"),
            fpmd_lines(t.path(), &pools)
        ),
    )
    .unwrap();
    (main, sock)
}

/// fpmd on a php-fpm file of one static pool `www` (one child, on
/// `<test dir>/www.sock`) with `lines` added, behind an nginx called
/// `nginx_name`.
fn one_pool(t: &TestDir, lines: &[&str], nginx_name: &str) -> (Fpmd, Nginx) {
    let (main, sock) = one_pool_file(t, lines);
    let fpmd = Fpmd::start_file(
        t,
        &FpmdConfig::new(),
        &main,
        &["-y", &main.display().to_string()],
        vec![Addr::Unix(sock.clone())],
    );
    let nginx = Nginx::start(
        t,
        NginxOpts::default()
            .upstream(format!("unix:{}", sock.display()))
            .name(nginx_name),
    );
    (fpmd, nginx)
}

const PHPINI_PHP: &str = "<?php\necho php_ini_loaded_file(), \"|\", trim((string) php_ini_scanned_files()), \"|\", ini_get('memory_limit'), \"|\", ini_get('default_charset');\n";

/// fpmd's TOML: a pool's `php_ini` and `php_ini_scan_dir` reach its
/// php-cgi (also with clear_env, the default), and the command line's
/// `-c DIR` is the php.ini of the pools that set none.
#[test]
fn php_ini_keys_and_the_c_flag() {
    let t = TestDir::new();
    std::fs::write(t.docroot().join("phpini.php"), PHPINI_PHP).unwrap();
    let ini = t.join("ini");
    std::fs::create_dir_all(ini.join("scan")).unwrap();
    std::fs::write(ini.join("custom.ini"), "memory_limit = 33M\n").unwrap();
    std::fs::write(
        ini.join("scan/50-charset.ini"),
        "default_charset = \"ISO-8859-2\"\n",
    )
    .unwrap();
    std::fs::write(ini.join("php.ini"), "memory_limit = 44M\n").unwrap();
    let cfg = FpmdConfig::new()
        .pool(Pool::new("own").lines(&[
            &format!(
                "php_ini = {:?}",
                ini.join("custom.ini").display().to_string()
            ),
            &format!(
                "php_ini_scan_dir = {:?}",
                ini.join("scan").display().to_string()
            ),
        ]))
        .pool(Pool::new("flag"));
    let conf = cfg.write(&t);
    let args = [
        "-y",
        &conf.display().to_string(),
        "-c",
        &ini.display().to_string(),
    ];
    let tested = cli(t.path(), &conf, &t.tag(), &["-t"]);
    assert_eq!(tested.code(), Some(0), "{tested}");
    let mut with_c: Vec<&str> = args.to_vec();
    with_c.push("-t");
    let out = Command::new(FPMD_BIN).args(&with_c).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!(
            "# PHP reads, in this order:\n#   {}\n#   {}\n",
            ini.join("custom.ini").display(),
            ini.join("scan/50-charset.ini").display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("\nphp_ini = {:?} #", ini.display().to_string())),
        "the -c directory:\n{text}"
    );
    let addrs = cfg
        .pools
        .iter()
        .map(|p| Addr::parse(&p.address(t.path())))
        .collect::<Vec<_>>();
    let fpmd = Fpmd::start_file(&t, &cfg, &conf, &args, addrs.clone());
    for (addr, expected) in [
        (
            &addrs[0],
            format!(
                "{}|{}|33M|ISO-8859-2",
                ini.join("custom.ini").display(),
                ini.join("scan/50-charset.ini").display()
            ),
        ),
        (&addrs[1], format!("{}|", ini.join("php.ini").display())),
    ] {
        let nginx = Nginx::start(
            &t,
            NginxOpts::default().upstream(addr.nginx()).name(&format!(
                "nginx-{}",
                addrs
                    .iter()
                    .position(|a| a.nginx() == addr.nginx())
                    .unwrap()
            )),
        );
        let r = get(&nginx.url("/phpini.php"));
        assert!(
            r.text().starts_with(&expected),
            "{} (expected {expected}); fpmd log:\n{}",
            r.text(),
            fpmd.log()
        );
    }
}

/// `access.suppress_path` leaves out of the access log exactly what
/// php-fpm's `fpm_access_log_suppress` does: a plain successful GET of the
/// path; with a query string, or a path not listed, the line is written.
#[test]
fn access_suppress_path_as_php_fpm() {
    let t = TestDir::new();
    let log = t.join("access.log");
    let format = format!("access.log = {}", log.display());
    let lines = [
        format.as_str(),
        "access.format = \"%m %r%Q%q %s\"",
        "access.suppress_path[] = /hello.php",
    ];
    let (fpmd, nginx) = one_pool(&t, &lines, "nginx");
    for path in ["/hello.php", "/hello.php?name=x", "/hello.php", "/env.php"] {
        assert_eq!(get(&nginx.url(path)).status, 200, "{path}");
    }
    // The last request's line would follow the others: wait for env.php's.
    wait_for(
        std::time::Duration::from_secs(10),
        "the access log lines",
        || std::fs::read_to_string(&log).is_ok_and(|l| l.lines().count() >= 2),
    );
    assert_eq!(
        read(&log),
        "GET /hello.php?name=x 200\nGET /env.php 200\n",
        "fpmd log:\n{}",
        fpmd.log()
    );
}

/// A binary upgrade of an fpmd started on a php-fpm file with `-c DIR`:
/// the new process reads the same files with the same php.ini.
#[test]
fn upgrade_keeps_the_php_ini_of_the_command_line() {
    let t = TestDir::new();
    std::fs::write(t.docroot().join("phpini.php"), PHPINI_PHP).unwrap();
    let ini = t.join("ini");
    std::fs::create_dir_all(&ini).unwrap();
    std::fs::write(ini.join("php.ini"), "memory_limit = 55M\n").unwrap();
    let (main, sock) = one_pool_file(&t, &[]);
    let args = [
        "-y",
        &main.display().to_string(),
        "-c",
        &ini.display().to_string(),
    ];
    let mut fpmd = Fpmd::start_file(
        &t,
        &FpmdConfig::new(),
        &main,
        &args,
        vec![Addr::Unix(sock.clone())],
    );
    let nginx = Nginx::start(
        &t,
        NginxOpts::default().upstream(format!("unix:{}", sock.display())),
    );
    let memory = || {
        get(&nginx.url("/phpini.php"))
            .text()
            .split('|')
            .nth(2)
            .map(str::to_string)
    };
    assert_eq!(
        memory().as_deref(),
        Some("55M"),
        "fpmd log:\n{}",
        fpmd.log()
    );
    let r = cli(t.path(), &main, &t.tag(), &["upgrade"]);
    assert_eq!(r.code(), Some(0), "{r}\nfpmd log:\n{}", fpmd.log());
    // The old process exits once the new one serves.
    assert!(
        fpmd.wait_exit(std::time::Duration::from_secs(60)).is_some(),
        "{}",
        fpmd.log()
    );
    assert_eq!(
        memory().as_deref(),
        Some("55M"),
        "after the upgrade; fpmd log:\n{}",
        fpmd.log()
    );
}

/// `-y FILE` reads php-fpm's syntax whatever FILE ends in (php-src's tests
/// name theirs `.ini`); a php-fpm configuration logs in php-fpm's format
/// unless it says otherwise; `$PHPRC` names the children's php.ini, as PHP
/// reads it before any other place.
#[test]
fn y_flag_any_name_php_fpm_log_format_and_phprc() {
    let t = TestDir::new();
    let phprc = t.join("phprc.ini");
    std::fs::write(&phprc, "memory_limit = 55M\n").unwrap();
    let conf = t.join("fpm.ini");
    let pool = format!(
        "[global]\nerror_log = {}\n[www]\nuser = www-data\nlisten = {}\npm = static\npm.max_children = 1\n",
        t.join("fpmd.log").display(),
        t.join("www.sock").display()
    );
    std::fs::write(&conf, &pool).unwrap();
    let run = |extra: &str| {
        std::fs::write(&conf, format!("{pool}{extra}")).unwrap();
        Command::new(FPMD_BIN)
            .args(["-t", "-y"])
            .arg(&conf)
            .env("PHPRC", &phprc)
            .output()
            .unwrap()
    };
    let out = run("");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("log_format = \"php-fpm\""), "{text}");
    assert!(
        text.contains(&format!("php_ini = {:?}", phprc.display().to_string())),
        "{text}"
    );
    // The same file through -c is a php.ini path, not a configuration.
    let out = Command::new(FPMD_BIN)
        .arg("-t")
        .arg("-c")
        .arg(&conf)
        .current_dir(t.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "-c fpm.ini is php-fpm's -c");
    // A typo is named at its line in php-fpm's file.
    let out = run("pm.max_childrem = 3\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("fpm.ini:8] unknown entry 'pm.max_childrem'"),
        "{err}"
    );
}

/// Two daemons on two php-fpm configurations that set no control_socket
/// (a php8.2 and a php7.4 php-fpm.conf side by side): each gets its own,
/// and `fpmd stop -y FILE` stops the daemon started on FILE, not the other
/// one (found by a new-user trial: both once shared /run/fpmd/fpmd.sock).
#[test]
fn two_php_fpm_configurations_two_control_sockets() {
    let start = |t: &TestDir| {
        let conf = t.join("php-fpm.conf");
        std::fs::write(
            &conf,
            format!(
                "[global]\nerror_log = {}\n[www]\nuser = www-data\nlisten = {}\npm = static\npm.max_children = 1\n",
                t.join("fpmd.log").display(),
                t.join("www.sock").display()
            ),
        )
        .unwrap();
        let addrs = vec![Addr::parse(&t.join("www.sock").display().to_string())];
        let conf_s = conf.display().to_string();
        let f = Fpmd::start_file(t, &FpmdConfig::new(), &conf, &["-F", "-y", &conf_s], addrs);
        (conf, f)
    };
    let (t1, t2) = (TestDir::new(), TestDir::new());
    let (_c1, mut one) = start(&t1);
    let (c2, mut two) = start(&t2);
    let out = Command::new(FPMD_BIN)
        .arg("-y")
        .arg(&c2)
        .arg("stop")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        two.wait_exit(std::time::Duration::from_secs(30)).is_some(),
        "the daemon of the file named stops"
    );
    assert!(one.try_wait().is_none(), "the other daemon keeps running");
    assert!(!one.log().contains("another fpmd answers"), "{}", one.log());
    assert!(!two.log().contains("another fpmd answers"), "{}", two.log());
}

/// `-t`/`-tt` of a php-fpm configuration speak php-fpm's words on stderr
/// (php-src config-array, pm-max-spawn-rate-config): `-tt` dumps the
/// effective configuration as php-fpm's NOTICE lines, `E_ALL` evaluated
/// and `php_flag` as `php_value … = 1`; the verdict is php-fpm's line;
/// fpmd's own reading stays on stdout.
#[test]
fn tt_dumps_the_configuration_as_php_fpm_does() {
    let t = TestDir::new();
    let main = t.join("php-fpm.conf");
    std::fs::write(
        &main,
        format!(
            "[global]\nerror_log = {}\n[www]\nuser = www-data\ngroup = www-data\nlisten = {}\npm = dynamic\npm.max_children = 5\npm.start_servers = 2\npm.min_spare_servers = 1\npm.max_spare_servers = 3\npm.max_spawn_rate = 64\nphp_value[error_reporting] = E_ALL & ~E_NOTICE\nphp_flag[display_errors] = On\naccess.suppress_path[] = /ping\n",
            t.join("fpm.log").display(),
            t.join("www.sock").display()
        ),
    )
    .unwrap();
    let r = cli(t.path(), &main, &t.tag(), &["-tt"]);
    assert_eq!(r.code(), Some(0), "{r}");
    for line in [
        "] NOTICE: [global]\n",
        "] NOTICE: \tlog_limit = 1024\n",
        "] NOTICE: [www]\n",
        "] NOTICE: \tpm = dynamic\n",
        "] NOTICE: \tpm.max_spawn_rate = 64\n",
        "] NOTICE: \taccess.suppress_path[] = /ping\n",
        "] NOTICE: \tphp_value[error_reporting] = 32759\n",
        "] NOTICE: \tphp_value[display_errors] = 1\n",
    ] {
        assert!(r.stderr.contains(line), "no {line:?} in\n{r}");
    }
    assert!(
        r.stderr.ends_with(&format!(
            "] NOTICE: configuration file {} test is successful\n",
            main.display()
        )),
        "{r}"
    );
    assert!(r.stdout.contains("pm.max_spawn_rate = 64"), "{r}");
    let once = cli(t.path(), &main, &t.tag(), &["-t"]);
    assert_eq!(once.code(), Some(0), "{once}");
    assert!(
        !once.stderr.contains("\tpm ="),
        "-t alone dumps nothing: {once}"
    );
}
