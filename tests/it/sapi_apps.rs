//! Issue 22, Must show 3: real callers of `fastcgi_finish_request()` that
//! work after their answer, from Debian's packages, behind nginx: the
//! client's answer comes as early and with the same bytes as under
//! php-fpm 8.2 behind the same nginx configuration, and the work is
//! done afterwards. WordPress's `wp-cron.php` (`wordpress`, on a MariaDB
//! the test starts itself) and Symfony's `Response::send()`
//! (`php-symfony-http-foundation`, tests/php/symfony_send.php).
//!
//! Timing is asserted loosely: the work takes 1.5 s, the answer must come
//! before it is done (< 1 s, and before the work's mark exists); the
//! figures of both backends are printed.

use crate::harness::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the work after the answer takes (the scripts' `usleep`).
const WORK: Duration = Duration::from_millis(1500);
/// The answer must come before this.
const EARLY: Duration = Duration::from_millis(1000);

/// What the client got: status, headers but `Date`, body.
#[derive(Debug, PartialEq)]
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// One request to a backend: what the client got and when; when the
/// work's mark appeared; what it holds.
struct Run {
    got: Got,
    took: Duration,
    work_done: Duration,
    mark: String,
}

/// GETs `url`; then waits for `mark` (a file the script writes after
/// its work), which must not exist yet when the answer has come.
fn run(url: &str, mark: &Path) -> Run {
    let t0 = Instant::now();
    let r = get(url);
    let took = t0.elapsed();
    let early = !mark.exists();
    // Its text, not only its existence: file_put_contents() creates the
    // file before it writes.
    let mut text = String::new();
    wait_for(LONG, "the work after fastcgi_finish_request()", || {
        text = std::fs::read_to_string(mark).unwrap_or_default();
        !text.is_empty()
    });
    let work_done = t0.elapsed();
    assert!(
        early,
        "{url}: the work was done before the answer came ({took:?}): {}",
        r.text()
    );
    let mut headers: Vec<(String, String)> = r
        .headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("date"))
        .cloned()
        .collect();
    headers.sort();
    Run {
        got: Got {
            status: r.status,
            headers,
            body: r.body,
        },
        took,
        work_done,
        mark: text,
    }
}

/// The backends compared: php-fpm, then fpmd under each `pm.spawn`.
const BACKENDS: &[&str] = &["php-fpm", "prefork", "exec"];

/// `backend` (one of [`BACKENDS`], one child) in its own test dir, behind
/// nginx serving `root` (default: that dir's docroot; it must hold
/// tests/php/hello.php), once a request to hello.php was answered: fpmd
/// is ready when it listens, and its child may still be starting then
/// (an exec'd php-cgi takes tens of ms), which the measured request
/// would otherwise time instead of the call.
struct Behind {
    nginx: Nginx,
    _fpm: Option<PhpFpm>,
    _fpmd: Option<Fpmd>,
    dir: TestDir,
}

fn behind(backend: &str, root: Option<&Path>) -> Behind {
    let dir = TestDir::new();
    let (fpm, fpmd, upstream) = if backend == "php-fpm" {
        let fpm = PhpFpm::start_with(&dir, PhpFpmOpts::default().max_children(1));
        let u = fpm.upstream();
        (Some(fpm), None, u)
    } else {
        let f = Fpmd::start(
            &dir,
            FpmdConfig::new().pool(
                Pool::www()
                    .max_children(1)
                    .line(format!("pm.spawn = {backend:?}")),
            ),
        );
        let u = f.upstream(0);
        (None, Some(f), u)
    };
    let mut opts = NginxOpts::default().upstream(upstream);
    if let Some(r) = root {
        opts = opts.root(r);
    }
    let nginx = Nginx::start(&dir, opts);
    let r = get(&nginx.url("/hello.php"));
    assert_eq!(r.status, 200, "{backend}: hello.php: {}", r.text());
    Behind {
        nginx,
        _fpm: fpm,
        _fpmd: fpmd,
        dir,
    }
}

/// Checks each fpmd run against php-fpm's (the first of `runs`, in
/// [`BACKENDS`] order) and prints the figures.
fn compare(app: &str, runs: &[Run]) {
    let theirs = &runs[0];
    eprintln!(
        "{app}: php-fpm answered after {:?}, work done after {:?}",
        theirs.took, theirs.work_done
    );
    for (spawn, ours) in BACKENDS[1..].iter().zip(&runs[1..]) {
        eprintln!(
            "{app}: fpmd ({spawn}) answered after {:?}, work done after {:?}",
            ours.took, ours.work_done
        );
    }
    for (backend, r) in BACKENDS.iter().zip(runs) {
        assert!(
            r.took < EARLY,
            "{app}, {backend}: the answer took {:?}",
            r.took
        );
        assert!(
            r.work_done >= WORK,
            "{app}, {backend}: work done after {:?}",
            r.work_done
        );
        assert!(r.mark.starts_with("done "), "{app}, {backend}: {}", r.mark);
        assert_eq!(
            r.got, theirs.got,
            "{app}, {backend}: the answer differs from php-fpm's"
        );
    }
}

/// Symfony's `Response::send()`: the answer (201, Symfony's headers,
/// the body) as soon as `send()` returns, the 1.5 s of work after it.
#[test]
fn symfony_response_send_answers_before_the_work() {
    require_symfony_http_foundation();
    let runs: Vec<Run> = BACKENDS
        .iter()
        .map(|backend| {
            let b = behind(backend, None);
            let mark = format!("symfony-{backend}");
            let url = b.nginx.url(&format!(
                "/symfony_send.php?ms={}&mark={mark}",
                WORK.as_millis()
            ));
            let r = run(&url, &b.dir.docroot().join("run").join(&mark));
            assert_eq!(r.got.status, 201, "{backend}: {:?}", r.got);
            r
        })
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&runs[0].got.body),
        "sent by Response::send()\n"
    );
    compare("Symfony Response::send()", &runs);
}

/// A WordPress site of Debian's package in `<test dir>/wordpress`, on the
/// test's own MariaDB: Debian's top-level scripts copied (PHP resolves
/// symlinks, so `wp-load.php` must be here to find this `wp-config.php`),
/// `wp-includes` and `wp-admin` linked, a `wp-content` of its own with
/// the must-use plugin tests/wordpress/fpmd-test.php, tests/php/hello.php
/// (see [`behind`]), tests/wordpress/fpmd-setup.php, and a
/// `wp-config.php` for this database with `DISABLE_WP_CRON` (no page view
/// runs cron: only the test's request to wp-cron.php does).
struct WordPress {
    root: PathBuf,
    /// Where the cron event writes its mark (0777).
    run_dir: PathBuf,
    _db: MariaDb,
}

const WP_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/wordpress");

impl WordPress {
    fn install(t: &TestDir) -> WordPress {
        let db = MariaDb::start(t);
        let root = t.join("wordpress");
        std::fs::create_dir(&root).unwrap();
        for e in std::fs::read_dir(WORDPRESS_ROOT).unwrap() {
            let e = e.unwrap();
            let name = e.file_name();
            let name = name.to_str().unwrap();
            let from = e.path();
            if name == "wp-includes" || name == "wp-admin" {
                std::os::unix::fs::symlink(&from, root.join(name)).unwrap();
            } else if name.ends_with(".php") && name != "wp-config.php" {
                std::fs::copy(&from, root.join(name)).unwrap();
            }
        }
        let plugins = root.join("wp-content/mu-plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::copy(
            Path::new(WP_FIXTURES).join("fpmd-test.php"),
            plugins.join("fpmd-test.php"),
        )
        .unwrap();
        std::fs::copy(
            Path::new(WP_FIXTURES).join("fpmd-setup.php"),
            root.join("fpmd-setup.php"),
        )
        .unwrap();
        std::fs::copy(
            Path::new(PHP_SCRIPTS).join("hello.php"),
            root.join("hello.php"),
        )
        .unwrap();
        let run_dir = t.docroot().join("run");
        let config = format!(
            "<?php\n\
             // tests/it/sapi_apps.rs: this test's database and directories.\n\
             define('DB_NAME', '{db}');\n\
             define('DB_USER', '{user}');\n\
             define('DB_PASSWORD', '{pw}');\n\
             define('DB_HOST', '{host}');\n\
             define('DB_CHARSET', 'utf8mb4');\n\
             define('DB_COLLATE', '');\n\
             define('WP_HOME', 'http://127.0.0.1');\n\
             define('WP_SITEURL', 'http://127.0.0.1');\n\
             define('WP_CONTENT_DIR', __DIR__ . '/wp-content');\n\
             define('DISABLE_WP_CRON', true);\n\
             define('FPMD_TEST_RUN', '{run}');\n\
             $table_prefix = 'wp_';\n\
             if (!defined('ABSPATH')) {{\n    define('ABSPATH', __DIR__ . '/');\n}}\n\
             require_once ABSPATH . 'wp-settings.php';\n",
            db = MariaDb::DATABASE,
            user = MariaDb::USER,
            pw = MariaDb::PASSWORD,
            host = db.host(),
            run = run_dir.display(),
        );
        std::fs::write(root.join("wp-config.php"), config).unwrap();
        let wp = WordPress {
            root,
            run_dir,
            _db: db,
        };
        wp.setup(&[("FPMD_SETUP", "install")]);
        wp
    }

    /// Runs fpmd-setup.php with php-cgi from the command line.
    fn setup(&self, env: &[(&str, &str)]) {
        let out = Command::new(php_cgi_bin())
            .args(["-q", "fpmd-setup.php"])
            .current_dir(&self.root)
            .env("HTTP_HOST", "127.0.0.1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.trim_end().ends_with("ok"),
            "fpmd-setup.php {env:?}: {}: {text}",
            out.status
        );
    }

    /// Schedules the event fpmd_test_work(`mark`), due now.
    fn schedule(&self, mark: &str) {
        self.setup(&[("FPMD_SETUP", "schedule"), ("FPMD_MARK", mark)]);
    }
}

/// WordPress's wp-cron.php (`?doing_wp_cron`, as WordPress's own spawn
/// requests it) with a due event that works 1.5 s: wp-cron.php calls
/// `fastcgi_finish_request()` before it even loads WordPress, so the
/// answer (empty, with its `Expires` and `Cache-Control`) comes at once;
/// the event runs afterwards. php-fpm, then fpmd under both `pm.spawn`,
/// each in front of the same site and database.
#[test]
fn wordpress_wp_cron_answers_before_the_event_runs() {
    require_wordpress();
    let t = TestDir::new();
    let wp = WordPress::install(&t);
    let runs: Vec<Run> = BACKENDS
        .iter()
        .map(|backend| {
            let mark = format!("wp-cron-{backend}");
            wp.schedule(&mark);
            let b = behind(backend, Some(&wp.root));
            let r = run(
                &b.nginx.url("/wp-cron.php?doing_wp_cron"),
                &wp.run_dir.join(&mark),
            );
            // The cron run is over (wp-cron.php released its lock) before
            // the next backend's.
            wait_for(LONG, "the end of wp-cron.php", || {
                wp.run_dir.join(format!("{mark}.end")).exists()
            });
            assert_eq!(r.got.status, 200, "{backend}: {:?}", r.got);
            r
        })
        .collect();
    assert!(
        runs[0]
            .got
            .headers
            .iter()
            .any(|(k, v)| k == "expires" && v == "Wed, 11 Jan 1984 05:00:00 GMT"),
        "{:?}",
        runs[0].got
    );
    compare("WordPress wp-cron.php", &runs);
}
