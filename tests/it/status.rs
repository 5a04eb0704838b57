//! The status page and ping (`pm.status_path`, `ping.path`), answered by
//! fpmd itself: php-fpm's fields in php-fpm's formats, read by a parser
//! written for php-fpm's output; exact counts under load; ping and status
//! while every child is busy (php-fpm answers neither then); the
//! effective listen queue length (case C04).

use crate::harness::http::assert_all_200;
use crate::harness::phpfpm::{PhpFpm, PhpFpmOpts};
use crate::harness::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A value as a status parser written for php-fpm types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Float,
    Text,
}

fn kind_of_text(v: &str) -> Kind {
    if v.parse::<i64>().is_ok() {
        Kind::Int
    } else if v.parse::<f64>().is_ok() {
        Kind::Float
    } else {
        Kind::Text
    }
}

/// One parsed status page: the pool's fields, and one map per process.
#[derive(Debug, Default)]
struct Parsed {
    pool: BTreeMap<String, (Kind, String)>,
    procs: Vec<BTreeMap<String, (Kind, String)>>,
}

/// php-fpm's text format: `name: value` lines, processes after lines of
/// asterisks.
fn parse_text(body: &str) -> Parsed {
    let mut p = Parsed::default();
    let mut in_procs = false;
    for line in body.lines() {
        if line.starts_with("****") {
            in_procs = true;
            p.procs.push(BTreeMap::new());
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim().to_string();
        let entry = (kind_of_text(&v), v);
        if in_procs {
            p.procs
                .last_mut()
                .unwrap()
                .insert(k.trim().to_string(), entry);
        } else {
            p.pool.insert(k.trim().to_string(), entry);
        }
    }
    p
}

fn kind_of_json(v: &serde_json::Value) -> Kind {
    match v {
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Kind::Int,
        serde_json::Value::Number(_) => Kind::Float,
        _ => Kind::Text,
    }
}

fn parse_json(body: &str) -> Parsed {
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    let mut p = Parsed::default();
    for (k, x) in v.as_object().expect("a JSON object") {
        if k == "processes" {
            for proc in x.as_array().expect("processes is an array") {
                let mut m = BTreeMap::new();
                for (k, x) in proc.as_object().expect("a process is an object") {
                    m.insert(k.clone(), (kind_of_json(x), x.to_string()));
                }
                p.procs.push(m);
            }
        } else {
            p.pool.insert(k.clone(), (kind_of_json(x), x.to_string()));
        }
    }
    p
}

/// php-fpm's XML: `<name>value</name>` elements, `<process>` rows.
fn parse_xml(body: &str) -> Parsed {
    assert!(body.starts_with("<?xml"), "not XML: {body}");
    let mut p = Parsed::default();
    let mut rest = body;
    let mut in_proc = false;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let Some(j) = rest.find('>') else { break };
        let tag = &rest[..j];
        rest = &rest[j + 1..];
        match tag {
            "process" => {
                in_proc = true;
                p.procs.push(BTreeMap::new());
            }
            "/process" => in_proc = false,
            t if t.starts_with('/') || t.starts_with('?') => {}
            "status" | "processes" => {}
            t => {
                let end = format!("</{t}>");
                let Some(k) = rest.find(&end) else { continue };
                let v = rest[..k].to_string();
                rest = &rest[k + end.len()..];
                let entry = (kind_of_text(&v), v);
                if in_proc {
                    p.procs.last_mut().unwrap().insert(t.to_string(), entry);
                } else {
                    p.pool.insert(t.to_string(), entry);
                }
            }
        }
    }
    p
}

/// Every field of `reference` (php-fpm's) is in `ours` with the same type.
fn same_fields(what: &str, reference: &Parsed, ours: &Parsed) {
    assert!(
        !reference.pool.is_empty(),
        "{what}: php-fpm's page parsed to nothing"
    );
    for (k, (kind, v)) in &reference.pool {
        let Some((ok, ov)) = ours.pool.get(k) else {
            panic!("{what}: fpmd lacks php-fpm's field {k:?} (php-fpm: {v})")
        };
        assert_eq!(ok, kind, "{what}: field {k:?}: php-fpm {v:?}, fpmd {ov:?}");
    }
    if let Some(rp) = reference.procs.first() {
        let op = ours
            .procs
            .first()
            .unwrap_or_else(|| panic!("{what}: fpmd shows no process rows"));
        for (k, (kind, v)) in rp {
            let Some((ok, ov)) = op.get(k) else {
                panic!("{what}: fpmd's process rows lack {k:?} (php-fpm: {v})")
            };
            // A method or URI may be "-" on one side and a word on the other;
            // numbers must be numbers.
            if *kind != Kind::Text {
                assert_eq!(
                    ok, kind,
                    "{what}: process field {k:?}: php-fpm {v:?}, fpmd {ov:?}"
                );
            }
        }
    }
}

fn status_pool() -> Pool {
    Pool::www()
        .max_children(4)
        .line("pm.status_path = \"/status\"")
        .line("ping.path = \"/ping\"")
}

#[test]
fn status_page_has_php_fpms_fields_in_every_format() {
    let s = Stack::start_with(
        FpmdConfig::new().pool(status_pool()),
        NginxOpts::default().status(),
    );
    s.fpmd.wait_workers(4, LONG);
    let fpm = PhpFpm::start_with(
        &s.dir,
        PhpFpmOpts::default()
            .max_children(4)
            .line("pm.status_path = /status")
            .line("ping.path = /ping"),
    );
    let ref_nginx = Nginx::start(
        &s.dir,
        NginxOpts::default()
            .status()
            .name("nginx-php-fpm")
            .upstream(fpm.upstream()),
    );
    // Both have served a script first (process rows with a request).
    for _ in 0..4 {
        assert_eq!(get(&s.url("/pid.php")).status, 200);
        assert_eq!(get(&ref_nginx.url("/pid.php")).status, 200);
    }
    // Both pages, with the same status and Content-Type.
    let both = |query: &str| {
        let theirs = get(&ref_nginx.url(&format!("/status{query}")));
        let ours = get(&s.url(&format!("/status{query}")));
        assert_eq!(
            theirs.status,
            200,
            "php-fpm /status{query}: {}",
            theirs.text()
        );
        assert_eq!(ours.status, 200, "fpmd /status{query}: {}", ours.text());
        assert_eq!(
            ours.header("content-type"),
            theirs.header("content-type"),
            "/status{query}"
        );
        (theirs, ours)
    };
    for query in ["?html", "?html&full", "?openmetrics"] {
        both(query);
    }
    type Parser = fn(&str) -> Parsed;
    let cases: [(&str, Parser, &str); 6] = [
        ("", parse_text, "text/plain"),
        ("?full", parse_text, "text/plain"),
        ("?json", parse_json, "application/json"),
        ("?json&full", parse_json, "application/json"),
        ("?xml", parse_xml, "text/xml"),
        ("?xml&full", parse_xml, "text/xml"),
    ];
    for (query, parse, content_type) in cases {
        let (theirs, ours) = both(query);
        assert!(
            ours.header("content-type")
                .unwrap_or_default()
                .starts_with(content_type),
            "/status{query}"
        );
        let (r, o) = (parse(&theirs.text()), parse(&ours.text()));
        same_fields(&format!("/status{query}"), &r, &o);
        if query.contains("full") {
            assert_eq!(o.procs.len(), 4, "one row per child:\n{}", ours.text());
            // Every row names a real child, pre-forked ones too.
            let pids: std::collections::BTreeSet<i64> = o
                .procs
                .iter()
                .map(|p| p["pid"].1.trim_matches('"').parse().unwrap())
                .collect();
            assert!(
                pids.len() == 4 && pids.iter().all(|p| *p > 0),
                "four distinct pids: {pids:?}\n{}",
                ours.text()
            );
        }
        let pm = |p: &Parsed| p.pool.get("pool").or(p.pool.get("\"pool\"")).cloned();
        assert!(pm(&o).is_some(), "{}", ours.text());
    }
    // Ping, as php-fpm answers it.
    let (theirs, ours) = (get(&ref_nginx.url("/ping")), get(&s.url("/ping")));
    assert_eq!((ours.status, ours.text()), (theirs.status, theirs.text()));
    assert_eq!(ours.text(), "pong");
    // openmetrics: php-fpm's metric names.
    let theirs = get(&ref_nginx.url("/status?openmetrics")).text();
    let ours = get(&s.url("/status?openmetrics")).text();
    for line in theirs.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(' ').next().unwrap();
        assert!(
            ours.lines().any(|l| l.split(' ').next() == Some(name)),
            "fpmd's openmetrics lacks {name}:\n{ours}"
        );
    }
}

/// The pool's figures from a text status page.
fn sample(url: &str) -> BTreeMap<String, String> {
    let r = get(url);
    assert_eq!(r.status, 200, "{url}: {}", r.text());
    parse_text(&r.text())
        .pool
        .into_iter()
        .map(|(k, (_, v))| (k, v))
        .collect()
}

fn num(m: &BTreeMap<String, String>, k: &str) -> u64 {
    m.get(k)
        .unwrap_or_else(|| panic!("no {k:?} in {m:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{k:?} is not a number in {m:?}"))
}

/// Case C13 and item 2 of the issue: 8 concurrent 2.5 s requests on 4
/// static children: the status page shows active 4, idle 0, listen queue
/// 4, and ping answers `pong` while they run; `accepted conn` counts every
/// request exactly (the status requests too, as php-fpm counts them).
#[test]
fn c13_status_counts_are_exact_under_load_and_ping_answers_while_all_busy() {
    let s = Stack::start_with(
        FpmdConfig::new().pool(status_pool()),
        NginxOpts::default().status(),
    );
    s.fpmd.wait_workers(4, LONG);
    let status = s.url("/status");
    let before = num(&sample(&status), "accepted conn");
    const N: u64 = 10;
    for _ in 0..N {
        assert_eq!(get(&s.url("/pid.php")).status, 200);
    }
    let after = num(&sample(&status), "accepted conn");
    assert_eq!(
        after - before,
        N + 1,
        "accepted conn rose by {} for {N} requests and one status request",
        after - before
    );

    let url = s.url("/sleep.php?ms=2500");
    let load = http::spawn_concurrent(8, 1, move |a, _, _| http::try_get_with(a, &url));
    let mut seen = None;
    wait_for(Duration::from_secs(10), "4 active and 4 queued", || {
        let m = sample(&status);
        // Every sample is consistent, whatever the moment.
        assert_eq!(
            num(&m, "idle processes") + num(&m, "active processes"),
            num(&m, "total processes"),
            "{m:?}"
        );
        assert!(num(&m, "active processes") <= 4, "{m:?}");
        let full = num(&m, "active processes") == 4 && num(&m, "listen queue") == 4;
        if full {
            seen = Some(m);
        }
        full
    });
    let m = seen.unwrap();
    assert_eq!(num(&m, "idle processes"), 0, "{m:?}");
    assert_eq!(num(&m, "total processes"), 4, "{m:?}");
    assert_eq!(num(&m, "listen queue len"), 511, "{m:?}");
    assert!(num(&m, "max listen queue") >= 4, "{m:?}");
    assert_eq!(num(&m, "max active processes"), 4, "{m:?}");
    // Ping while every child is busy.
    let t0 = Instant::now();
    let ping = get(&s.url("/ping"));
    let took = t0.elapsed();
    assert_eq!((ping.status, ping.text().as_str()), (200, "pong"));
    let still = sample(&status);
    assert_eq!(
        num(&still, "active processes"),
        4,
        "ping was answered while every child was busy: {still:?}"
    );
    eprintln!(
        "ping took {:.1} ms with every child busy",
        took.as_secs_f64() * 1000.0
    );
    let full = get(&s.url("/status?json&full")).text();
    let j: serde_json::Value = serde_json::from_str(&full).unwrap();
    let running = j["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["state"] == "Running")
        .inspect(|p| {
            assert_eq!(p["request uri"], "/sleep.php?ms=2500", "{p}");
            assert_eq!(p["request method"], "GET", "{p}");
            assert!(p["script"].as_str().unwrap().ends_with("/sleep.php"), "{p}");
            assert!(p["pid"].as_i64().unwrap() > 0, "{p}");
        })
        .count();
    assert_eq!(running, 4, "{full}");
    let out = load.join();
    assert_all_200(&out);
    let m = sample(&status);
    assert_eq!(num(&m, "active processes"), 0, "{m:?}");
    assert_eq!(num(&m, "idle processes"), 4, "{m:?}");
    assert_eq!(num(&m, "listen queue"), 0, "{m:?}");
}

/// Case C04: the status page reports the effective listen queue length,
/// `min(listen.backlog, somaxconn)`; a backlog over somaxconn is warned of
/// at start. With `listen.backlog = 16` and 2 children, 40 concurrent
/// 500 ms requests fill the queue: `max listen queue` reaches 16 and the
/// overflow is answered 503 with Retry-After (or, for connections the
/// kernel's queue of 16 cannot hold, 502 from nginx); with 1024 every
/// request is served.
#[test]
fn c04_listen_queue_len_is_the_effective_backlog() {
    let somaxconn: u64 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pool = |backlog: u64| {
        Pool::www()
            .max_children(2)
            .line("pm.status_path = \"/status\"")
            .line(format!("listen.backlog = {backlog}"))
    };
    // Over somaxconn: capped, and said so.
    let over = somaxconn + 100;
    let s = Stack::start_with(
        FpmdConfig::new().pool(pool(over)),
        NginxOpts::default().status(),
    );
    assert_eq!(
        num(&sample(&s.url("/status")), "listen queue len"),
        somaxconn
    );
    assert!(
        s.fpmd.log().contains(&format!(
            "listen.backlog = {over} is capped by the kernel to net.core.somaxconn = {somaxconn}"
        )),
        "{}",
        s.fpmd.log()
    );
    drop(s);

    let s = Stack::start_with(
        FpmdConfig::new().pool(pool(16)),
        NginxOpts::default().status(),
    );
    s.fpmd.wait_workers(2, LONG);
    let url = s.url("/sleep.php?ms=500");
    let out = http::concurrent(40, 1, move |a, _, _| http::try_get_with(a, &url));
    let m = sample(&s.url("/status"));
    assert_eq!(num(&m, "listen queue len"), 16, "{m:?}");
    assert_eq!(num(&m, "max listen queue"), 16, "{m:?}");
    let statuses: Vec<u16> = out.iter().map(|o| o.status()).collect();
    // 503: fpmd's queue was full; 502: nginx's connect() found the
    // kernel's queue of 16 full before fpmd accepted (EAGAIN on a unix
    // socket), as with php-fpm.
    assert!(
        statuses.iter().all(|s| matches!(s, 200 | 502 | 503)),
        "only 200, 502 and 503: {statuses:?}"
    );
    // Which queue overflows first is the machine's timing (a busy machine
    // leaves connections in the kernel's queue longer: all 502): some
    // request is refused either way.
    assert!(
        statuses.iter().any(|s| *s != 200),
        "the queue overflowed: {statuses:?}"
    );
    let count = |code: u16| statuses.iter().filter(|s| **s == code).count();
    eprintln!(
        "backlog 16, 40 at once: {} × 200, {} × 503 (fpmd's queue), {} × 502 (the kernel's)",
        count(200),
        count(503),
        count(502)
    );
    drop(s);

    let s = Stack::start_with(
        FpmdConfig::new().pool(pool(1024)),
        NginxOpts::default().status(),
    );
    s.fpmd.wait_workers(2, LONG);
    let url = s.url("/sleep.php?ms=500");
    let out = http::concurrent(40, 1, move |a, _, _| http::try_get_with(a, &url));
    assert_all_200(&out);
    let m = sample(&s.url("/status"));
    assert_eq!(num(&m, "listen queue len"), 1024.min(somaxconn), "{m:?}");
}

/// `pm.status_listen`: a listener of its own that answers the status page
/// and ping (even while the pool's main listener and every child are in
/// use) and runs no script; `fpmd -t` prints it.
#[test]
fn status_listen_serves_status_and_ping_only() {
    use crate::harness::fcgi;
    let port = free_port();
    let pool = Pool::www()
        .max_children(2)
        .line(format!("pm.status_listen = \"127.0.0.1:{port}\""))
        .line("ping.path = \"/ping\"");
    let s = Stack::start_with(FpmdConfig::new().pool(pool), NginxOpts::default());
    s.fpmd.wait_workers(2, LONG);
    assert!(
        s.fpmd.log().contains(&format!(
            "listening on 127.0.0.1:{port} (status and ping only)"
        )),
        "{}",
        s.fpmd.log()
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let ask = |script: &str, query: &str| {
        let mut params = fcgi::params_for(&s.dir.docroot(), script, query, "GET", 0);
        // php-fpm's status path is "/" when only pm.status_listen is set.
        if script.is_empty() {
            params.retain(|(k, _)| k != "SCRIPT_NAME");
            params.push(("SCRIPT_NAME".into(), "/".into()));
        }
        let (recs, _) = fcgi::exchange(addr, &fcgi::request(1, 0, &params, b""), 1, LONG);
        let (status, _, body) = fcgi::cgi_response(&fcgi::stdout_of(&recs, 1));
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    // Both children busy: the status listener still answers.
    let url = s.url("/sleep.php?ms=1500");
    let load = http::spawn_concurrent(2, 1, move |a, _, _| http::try_get_with(a, &url));
    wait_for(Duration::from_secs(10), "2 active children", || {
        let (status, body) = ask("", "");
        status == 200 && body.contains("active processes:     2\n")
    });
    assert_eq!(ask("ping", ""), (200, "pong".to_string()));
    let (status, body) = ask("", "json");
    assert_eq!(status, 200);
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["pool"], "www");
    // A script is not run there.
    let (status, body) = ask("pid.php", "");
    assert_eq!((status, body.trim()), (404, "File not found."));
    assert_all_200(&load.join());
    // The main listener serves scripts as before, not the status page at "/".
    assert_eq!(get(&s.url("/pid.php")).status, 200);
}

/// php-fpm's status and ping pages are answered by PHP in a child, so they
/// carry PHP's `X-Powered-By` when `expose_php` is on (php-src's FPM tests
/// check it on every ping and status response): fpmd's own pages send the
/// header the pool's php-cgi sends, and none with `expose_php` off.
#[test]
fn status_and_ping_carry_phps_x_powered_by() {
    for expose in ["1", "0"] {
        let pool = status_pool().line(format!("php_admin_value.expose_php = \"{expose}\""));
        let s = Stack::start_with(FpmdConfig::new().pool(pool), NginxOpts::default().status());
        let script = get(&s.url("/hello.php"));
        assert_eq!(script.status, 200);
        let php = script.header("x-powered-by").map(str::to_string);
        assert_eq!(
            php.is_some(),
            expose == "1",
            "php-cgi's own header with expose_php = {expose}: {:?}",
            script.headers
        );
        for page in ["/ping", "/status", "/status?json"] {
            let r = get(&s.url(page));
            assert_eq!(r.status, 200, "{page}");
            assert_eq!(
                r.header("x-powered-by").map(str::to_string),
                php,
                "{page} with expose_php = {expose}: {:?}",
                r.headers
            );
        }
    }
}
