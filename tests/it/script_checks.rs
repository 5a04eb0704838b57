//! What fpmd checks before a script runs (issue 10): `security.limit_extensions`,
//! scripts that are no regular file, a NUL byte in the script path, the
//! classic upload hole (case C17: `/uploads/a.jpg/x.php` with
//! `cgi.fix_pathinfo=1`, behind nginx without `try_files`, Apache GENERIC
//! and lighttpd), and PHP_VALUE / PHP_ADMIN_VALUE sent by the web server.
//! Where php-fpm is the reference, its answer to the same request is
//! fetched from a real php-fpm and compared.

use crate::harness::fcgi;
use crate::harness::phpfpm::{PhpFpm, PhpFpmOpts};
use crate::harness::*;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// The payload of the "uploads": if it ever runs, the answer says PWNED and
/// `run/<name>` appears.
fn payload(mark: &str) -> String {
    format!("<?php file_put_contents(__DIR__ . '/run/{mark}', 'ran'); echo \"PWNED\";\n")
}

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
        chmod(dir, 0o755);
    }
    std::fs::write(path, text).unwrap();
    chmod(path, 0o644);
}

/// The upload directory and files the tests attack: `uploads/a.jpg` and
/// `evil.jpg` holding PHP, `code.txt` holding PHP, a directory named like a
/// script, a fifo named like a script, and an `index.php`.
fn plant(docroot: &Path) {
    write(&docroot.join("uploads/a.jpg"), &payload("a.jpg"));
    write(&docroot.join("evil.jpg"), &payload("evil.jpg"));
    write(&docroot.join("code.txt"), &payload("code.txt"));
    write(&docroot.join("index.php"), "<?php echo \"index\\n\";\n");
    std::fs::create_dir_all(docroot.join("dir.php")).unwrap();
    let fifo = docroot.join("fifo.php");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
}

/// No payload ran: nothing in `run/` says so.
fn assert_nothing_ran(docroot: &Path) {
    let ran: Vec<_> = std::fs::read_dir(docroot.join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(ran.is_empty(), "payloads ran: {ran:?}");
}

/// One raw FastCGI request for `script_filename` (bytes, may hold a NUL),
/// with extra params; returns (status, content-type, body, whole stdout,
/// stderr).
fn raw(
    addr: SocketAddr,
    docroot: &Path,
    script_filename: &[u8],
    extra: &[(&[u8], &[u8])],
    body: &[u8],
) -> (u16, String, String, Vec<u8>, String) {
    let mut params = fcgi::params_for(docroot, "hello.php", "", "GET", body.len());
    params.retain(|(k, _)| k != "SCRIPT_FILENAME");
    let mut p = fcgi::name_value(b"SCRIPT_FILENAME", script_filename);
    p.extend(fcgi::encode_params(&params));
    for (n, v) in extra {
        p.extend(fcgi::name_value(n, v));
    }
    let mut bytes = fcgi::begin_request(1, 0);
    bytes.extend(fcgi::stream(fcgi::PARAMS, 1, &p));
    bytes.extend(fcgi::stream(fcgi::STDIN, 1, body));
    let (recs, end) = fcgi::exchange(addr, &bytes, 1, LONG);
    assert!(
        fcgi::has_end_request(&recs, 1),
        "no END_REQUEST for {:?} ({end:?})",
        String::from_utf8_lossy(script_filename)
    );
    let out = fcgi::stdout_of(&recs, 1);
    let (status, headers, body) = fcgi::cgi_response(&out);
    let ct = headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let err = String::from_utf8_lossy(&fcgi::stderr_of(&recs, 1)).into_owned();
    (
        status,
        ct,
        String::from_utf8_lossy(&body).into_owned(),
        out,
        err,
    )
}

fn tcp_pool(lines: &[&str]) -> Pool {
    Pool::www()
        .max_children(2)
        .tcp(format!("127.0.0.1:{}", free_port()))
        .lines(lines)
}

fn count(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

// ---------------------------------------------------------------------------
// The regression list, against php-fpm
// ---------------------------------------------------------------------------

#[test]
fn regression_list_is_denied_as_php_fpm_denies_it() {
    let dir = TestDir::new();
    let docroot = dir.docroot();
    plant(&docroot);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(tcp_pool(&[])));
    let fpm = PhpFpm::start_with(&dir, PhpFpmOpts::default().tcp(free_port()));
    let (ours_at, theirs_at) = (fpmd.addr(0).tcp(), fpm.addr().tcp());
    let d = docroot.display().to_string();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("/etc/passwd", b"/etc/passwd".to_vec()),
        ("code.txt", format!("{d}/code.txt").into_bytes()),
        (
            "code.txt\\0.php",
            format!("{d}/code.txt\0.php").into_bytes(),
        ),
        (
            "uploads/a.jpg/x.php",
            format!("{d}/uploads/a.jpg/x.php").into_bytes(),
        ),
        ("the docroot", d.clone().into_bytes()),
        ("/dev/zero", b"/dev/zero".to_vec()),
    ];
    for (what, sf) in &cases {
        let theirs = raw(theirs_at, &docroot, sf, &[], b"");
        let ours = raw(ours_at, &docroot, sf, &[], b"");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        eprintln!(
            "{what}: php-fpm {:?}; fpmd {:?}",
            text(&theirs.3),
            text(&ours.3)
        );
        assert_eq!(theirs.0, 403, "{what}: php-fpm itself: {}", fpm.log());
        assert_eq!(theirs.2, "Access denied.\n", "{what}: php-fpm itself");
        assert_eq!(ours.0, theirs.0, "{what}: status differs from php-fpm's");
        assert_eq!(ours.2, theirs.2, "{what}: body differs from php-fpm's");
        assert_eq!(
            ours.1, theirs.1,
            "{what}: Content-type differs from php-fpm's"
        );
        assert_eq!(
            text(&ours.3),
            text(&theirs.3),
            "{what}: STDOUT differs from php-fpm's byte for byte"
        );
        if !what.contains('\\') {
            assert_eq!(
                ours.4, theirs.4,
                "{what}: FastCGI stderr differs from php-fpm's"
            );
        }
        assert!(!ours.2.contains("PWNED"));
    }
    // Not regular files php-fpm's extension check lets through: a
    // directory and a fifo named like scripts (php-cgi would block on
    // the fifo). fpmd refuses them likewise.
    for name in ["dir.php", "fifo.php"] {
        let sf = format!("{d}/{name}");
        let ours = raw(ours_at, &docroot, sf.as_bytes(), &[], b"");
        assert_eq!(
            (ours.0, ours.2.as_str()),
            (403, "Access denied.\n"),
            "{name}"
        );
    }
    assert_nothing_ran(&docroot);
    let log = fpmd.log();
    assert!(
        log.contains(&format!(
            "Access to the script '{d}/code.txt' has been denied (see security.limit_extensions)"
        )),
        "{log}"
    );
    assert!(
        log.contains("has been denied (its path has a NUL byte"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "Access to the script '{d}/dir.php' has been denied (it is a directory)"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "Access to the script '{d}/fifo.php' has been denied (not a regular file)"
        )),
        "{log}"
    );
    // The pool still serves, with no child lost.
    let ok = raw(
        ours_at,
        &docroot,
        format!("{d}/hello.php").as_bytes(),
        &[],
        b"",
    );
    assert_eq!(ok.0, 200, "{}", ok.2);
    assert!(ok.2.starts_with("hello world"));
}

#[test]
fn an_empty_limit_list_runs_any_file_but_never_a_non_regular_one() {
    let dir = TestDir::new();
    let docroot = dir.docroot();
    plant(&docroot);
    write(&docroot.join("plain.txt"), "<?php echo \"TXT-RAN\\n\";\n");
    let fpmd = Fpmd::start(
        &dir,
        FpmdConfig::new().pool(tcp_pool(&["security.limit_extensions = []"])),
    );
    let d = docroot.display().to_string();
    let at = fpmd.addr(0).tcp();
    // No limit, as php-fpm with an empty security.limit_extensions.
    let txt = raw(at, &docroot, format!("{d}/plain.txt").as_bytes(), &[], b"");
    assert_eq!((txt.0, txt.2.as_str()), (200, "TXT-RAN\n"));
    for sf in [
        format!("{d}/code.txt\0.php").into_bytes(),
        format!("{d}/plain.txt\0.php").into_bytes(),
        d.clone().into_bytes(),
        b"/dev/zero".to_vec(),
        format!("{d}/fifo.php").into_bytes(),
    ] {
        let r = raw(at, &docroot, &sf, &[], b"");
        assert_eq!(
            (r.0, r.2.as_str()),
            (403, "Access denied.\n"),
            "{:?}",
            String::from_utf8_lossy(&sf)
        );
    }
    assert_nothing_ran(&docroot);
}

#[test]
fn a_new_limit_applies_on_reload_to_the_running_children() {
    let dir = TestDir::new();
    let docroot = dir.docroot();
    plant(&docroot);
    write(&docroot.join("plain.txt"), "<?php echo \"TXT-RAN\\n\";\n");
    let pool = tcp_pool(&[]);
    let mut fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(pool.clone()));
    let at = fpmd.addr(0).tcp();
    let sf = format!("{}/plain.txt", docroot.display());
    assert_eq!(raw(at, &docroot, sf.as_bytes(), &[], b"").0, 403);
    let before = fpmd.wait_workers(2, LONG);
    fpmd.rewrite(
        &FpmdConfig::new().pool(pool.line("security.limit_extensions = [\".php\", \".txt\"]")),
    );
    let line = fpmd.reload_ok();
    assert!(fpmd.log().contains("children kept"), "{line}");
    let r = raw(at, &docroot, sf.as_bytes(), &[], b"");
    assert_eq!((r.0, r.2.as_str()), (200, "TXT-RAN\n"));
    assert_eq!(
        fpmd.wait_workers(2, LONG),
        before,
        "no new children for the key"
    );
}

// ---------------------------------------------------------------------------
// C17 behind nginx: no try_files, fastcgi_split_path_info
// ---------------------------------------------------------------------------

#[test]
fn upload_behind_nginx_without_try_files_never_runs() {
    let dir = TestDir::new();
    let docroot = dir.docroot();
    plant(&docroot);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(Pool::www().max_children(2)));
    let opts = || NginxOpts::default().no_try_files().split_path_info();
    let nginx = Nginx::start(&dir, opts().upstream(fpmd.upstream(0)));
    let fpm = PhpFpm::start(&dir);
    let fpm_nginx = Nginx::start(&dir, opts().upstream(fpm.upstream()).name("nginx-php-fpm"));
    for path in [
        "/uploads/a.jpg/x.php",
        "/uploads/a.jpg/.php",
        "/evil.jpg/index.php",
    ] {
        let theirs = get(&fpm_nginx.url(path));
        let ours = get(&nginx.url(path));
        assert_eq!(
            (theirs.status, theirs.text().as_str()),
            (403, "Access denied.\n"),
            "php-fpm itself, {path}"
        );
        assert_eq!(ours.status, theirs.status, "{path}");
        assert_eq!(ours.text(), theirs.text(), "{path}");
        assert_eq!(ours.header("content-type"), theirs.header("content-type"));
    }
    assert_nothing_ran(&docroot);
    // php-fpm's message reaches the web server's error log too.
    let msg = format!(
        "Access to the script '{}/uploads/a.jpg' has been denied (see security.limit_extensions)",
        docroot.display()
    );
    wait_for(
        Duration::from_secs(5),
        "the denial in nginx's error log",
        || nginx.error_log().contains(&msg),
    );
    // PATH_INFO still works for a real script.
    let r = get(&nginx.url("/server_vars.php/foo.php"));
    assert_eq!(r.status, 200);
    assert!(r.text().contains("PATH_INFO=/foo.php\n"), "{}", r.text());
}

#[test]
fn newline_in_path_info_with_query_padding_gives_no_502_and_no_crash() {
    let dir = TestDir::new();
    let docroot = dir.docroot();
    plant(&docroot);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(Pool::www().max_children(2)));
    let nginx = Nginx::start(
        &dir,
        NginxOpts::default()
            .no_try_files()
            .split_path_info()
            .upstream(fpmd.upstream(0)),
    );
    // Every child has served once, so that the set is complete.
    for _ in 0..4 {
        assert_eq!(get(&nginx.url("/hello.php")).status, 200);
    }
    let before = fpmd.wait_workers(2, LONG);
    let agent = http::agent_with_timeout(LONG);
    let mut statuses = std::collections::BTreeMap::new();
    for n in 1500..=1950 {
        let url = nginx.url(&format!("/index.php/PHP%0Ais.php?{}", "Q".repeat(n)));
        let r = http::try_get_with(&agent, &url).unwrap_or_else(|e| panic!("padding {n}: {e}"));
        assert_ne!(r.status, 502, "padding {n}: {}", r.text());
        assert!(!r.text().contains("PWNED"));
        *statuses.entry(r.status).or_insert(0) += 1;
    }
    eprintln!("statuses over the sweep: {statuses:?}");
    let after = fpmd.wait_workers(2, LONG);
    assert_eq!(before, after, "a child was replaced during the sweep");
    let log = fpmd.log();
    assert!(
        !log.contains("child closed its connection"),
        "a child died: {log}"
    );
    assert_nothing_ran(&docroot);
}

// ---------------------------------------------------------------------------
// C17 behind Apache (ProxyFCGIBackendType GENERIC)
// ---------------------------------------------------------------------------

#[test]
fn upload_behind_apache_generic_never_runs() {
    let dir = TestDir::new();
    let docroot = dir.docroot();
    plant(&docroot);
    let port = free_port();
    let fpmd = Fpmd::start(
        &dir,
        FpmdConfig::new().pool(Pool::www().max_children(2).tcp(format!("127.0.0.1:{port}"))),
    );
    let apache = Apache::start(&dir, ApacheOpts::new(FcgiStyle::Generic, fpmd.addr(0)));
    let fpm = PhpFpm::start_with(&dir, PhpFpmOpts::default().tcp(free_port()));
    let fpm_apache = Apache::start(
        &dir,
        ApacheOpts::new(FcgiStyle::Generic, fpm.addr()).name("apache-php-fpm"),
    );
    for path in ["/evil.jpg/x.php", "/uploads/a.jpg/x.php"] {
        let theirs = get(&fpm_apache.url(path));
        let ours = get(&apache.url(path));
        assert_eq!(theirs.status, 403, "php-fpm itself, {path}");
        assert_eq!(ours.status, theirs.status, "{path}");
        assert_eq!(ours.text(), theirs.text(), "{path}");
        assert!(!ours.text().contains("PWNED"));
    }
    assert_nothing_ran(&docroot);
    assert_eq!(get(&apache.url("/hello.php")).status, 200);
}

// ---------------------------------------------------------------------------
// C17 behind lighttpd (mod_fastcgi, check-local disabled and enabled)
// ---------------------------------------------------------------------------

fn upload_behind_lighttpd(check_local: bool) {
    let dir = TestDir::new();
    let docroot = dir.docroot();
    plant(&docroot);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(Pool::www().max_children(2)));
    let ours = Lighttpd::start(
        &dir,
        LighttpdOpts::new(fpmd.addr(0)).check_local(check_local),
    );
    let fpm = PhpFpm::start(&dir);
    let theirs = Lighttpd::start(
        &dir,
        LighttpdOpts::new(fpm.addr())
            .check_local(check_local)
            .name("lighttpd-php-fpm"),
    );
    for path in ["/uploads/a.jpg/x.php", "/evil.jpg/x.php"] {
        let t = get(&theirs.url(path));
        let o = get(&ours.url(path));
        eprintln!(
            "{path}: php-fpm {} {:?}; fpmd {} {:?}",
            t.status,
            t.text(),
            o.status,
            o.text()
        );
        // With check-local, lighttpd itself serves a.jpg as a file (its
        // source, not its output), as it does for php-fpm.
        assert_ne!(o.text().trim(), "PWNED", "{path}: the payload ran");
        assert_eq!(o.status, t.status, "{path}: status differs from php-fpm's");
        assert_eq!(o.text(), t.text(), "{path}: body differs from php-fpm's");
    }
    assert_nothing_ran(&docroot);
    // A real script with PATH_INFO is served as php-fpm serves it.
    let path = "/server_vars.php/foo/bar?x=1";
    let (t, o) = (get(&theirs.url(path)), get(&ours.url(path)));
    assert_eq!(t.status, 200, "php-fpm itself: {}", t.text());
    assert_eq!((o.status, o.text()), (t.status, t.text()), "{path}");
    if check_local {
        assert!(o.text().contains("PATH_INFO=/foo/bar\n"), "{}", o.text());
    }
}

#[test]
fn upload_behind_lighttpd_check_local_disabled_never_runs() {
    upload_behind_lighttpd(false);
}

#[test]
fn upload_behind_lighttpd_check_local_enabled_never_runs_and_path_info_works() {
    upload_behind_lighttpd(true);
}

// ---------------------------------------------------------------------------
// PHP_VALUE / PHP_ADMIN_VALUE from the web server
// ---------------------------------------------------------------------------

fn ini_injection_never_applies(param: &str, pool_key: &str) {
    let dir = TestDir::new();
    let docroot = dir.docroot();
    write(
        &docroot.join("params.php"),
        "<?php foreach (['PHP_VALUE', 'PHP_ADMIN_VALUE', 'HTTP_X_PROBE'] as $k) \
         echo $k, array_key_exists($k, $_SERVER) ? ' present' : ' absent', \"\\n\";\n",
    );
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(tcp_pool(&[])));
    let at = fpmd.addr(0).tcp();
    let d = docroot.display().to_string();
    let body = b"<?php echo \"INJECTED\"; ?>";
    let value = b"allow_url_include=On\nauto_prepend_file=php://input";
    for i in 0..5 {
        let script = if i % 2 == 0 {
            "hello.php"
        } else {
            "params.php"
        };
        let r = raw(
            at,
            &docroot,
            format!("{d}/{script}").as_bytes(),
            &[(param.as_bytes(), value), (b"HTTP_X_PROBE", b"1")],
            body,
        );
        assert_eq!(r.0, 200, "{}", r.2);
        assert!(!r.2.contains("INJECTED"), "request {i}: {}", r.2);
        if script == "hello.php" {
            assert!(r.2.starts_with("hello world\n"), "{}", r.2);
        } else {
            // The param never reached the child; the others did.
            assert_eq!(
                r.2,
                "PHP_VALUE absent\nPHP_ADMIN_VALUE absent\nHTTP_X_PROBE present\n"
            );
        }
    }
    let needle = |name: &str| {
        format!(
            "{param} from the web server tries to set '{name}': ignored (php-cgi cannot apply per-request values; fpmd removes the param); set {pool_key}.{name} in the pool"
        )
    };
    wait_for(Duration::from_secs(10), "the warning in fpmd's log", || {
        fpmd.log().contains(&needle("auto_prepend_file"))
    });
    let log = fpmd.log();
    for name in ["allow_url_include", "auto_prepend_file"] {
        assert_eq!(count(&log, &needle(name)), 1, "once per name: {log}");
    }
    let line = log
        .lines()
        .find(|l| l.contains(&needle("allow_url_include")))
        .unwrap();
    assert!(
        line.contains("WARNING") && line.contains("pool=www"),
        "{line}"
    );
}

#[test]
fn php_value_from_a_raw_client_never_applies() {
    ini_injection_never_applies("PHP_VALUE", "php_value");
}

#[test]
fn php_admin_value_from_a_raw_client_never_applies() {
    ini_injection_never_applies("PHP_ADMIN_VALUE", "php_admin_value");
}

/// Issue 20, item 6: a script the pool's user cannot reach (a directory it
/// may not search) is not answered in silence: php-cgi's 404 "No input
/// file specified." comes with php-fpm's `Unable to open primary script:
/// PATH (Permission denied)` on STDERR (nginx's error log) and a warning
/// in fpmd's log naming the pool and the script.
#[test]
fn a_script_the_pool_user_cannot_reach_is_logged_as_php_fpm_logs_it() {
    let t = TestDir::new();
    let docroot = t.docroot();
    let script = docroot.join("private/a.php");
    write(&script, "<?php echo 'secret';\n");
    chmod(&docroot.join("private"), 0o700);
    let script_bytes = script.display().to_string().into_bytes();

    let fpm = PhpFpm::start_with(&t, PhpFpmOpts::default().tcp(free_port()));
    let (their_status, _, _, _, their_stderr) =
        raw(fpm.addr().tcp(), &docroot, &script_bytes, &[], b"");
    drop(fpm);
    let port = free_port();
    let f = Fpmd::start(
        &t,
        FpmdConfig::new().pool(Pool::www().tcp(format!("127.0.0.1:{port}")).max_children(1)),
    );
    let (status, _, body, _, stderr) = raw(f.addr(0).tcp(), &docroot, &script_bytes, &[], b"");
    eprintln!("php-fpm: {their_status} {their_stderr:?}; fpmd: {status} {body:?} {stderr:?}");
    assert!(!their_stderr.is_empty(), "php-fpm says nothing either");
    assert_eq!(status, 404, "{body}");
    assert_eq!(body, "No input file specified.\n");
    assert_eq!(
        stderr,
        format!(
            "Unable to open primary script: {} (Permission denied)",
            script.display()
        )
    );
    let logged = || {
        f.log().lines().any(|l| {
            l.contains("WARN")
                && l.contains("www")
                && l.contains(&script.display().to_string())
                && l.contains("www-data")
        })
    };
    wait_for(
        Duration::from_secs(5),
        "fpmd's warning naming pool, script and user",
        logged,
    );
    // A script that is not there is php-fpm's 404 as before, with its line.
    let missing = docroot.join("missing/b.php").display().to_string();
    let (status, _, _, _, stderr) = raw(f.addr(0).tcp(), &docroot, missing.as_bytes(), &[], b"");
    assert_eq!(status, 404);
    assert!(
        stderr.contains("Primary script unknown") || stderr.contains("No such file"),
        "{stderr}"
    );
}
