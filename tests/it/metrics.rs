//! The metrics endpoint (`[global] metrics.listen`) as a real Prometheus
//! scrapes it: exact request counts per pool, php-fpm's family names with
//! the types Prometheus stores, fpmd's histograms and child series; the
//! endpoint's HTTP answers and its move on reload; children stopped at
//! `pm.max_requests` counted by reason.

use crate::harness::http::{agent_with_timeout, try_get_with, try_post_with};
use crate::harness::prometheus::{require_prometheus, Prometheus};
use crate::harness::*;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn metrics_line(port: u16) -> String {
    format!("metrics.listen = \"127.0.0.1:{port}\"")
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `GET http://127.0.0.1:port/path`, or why not.
fn scrape(port: u16, path: &str) -> Result<Resp, String> {
    try_get_with(
        &agent_with_timeout(Duration::from_secs(5)),
        &format!("http://127.0.0.1:{port}{path}"),
    )
}

/// The value of the sample line `series` (`name{labels}`) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn prometheus_scrapes_exact_counts_per_pool() {
    require_prometheus();
    let port = free_port();
    let (max_a, max_b) = (3u32, 2u32);
    let cfg = FpmdConfig::new()
        .global(metrics_line(port))
        .pool(Pool::new("a").max_children(max_a))
        .pool(Pool::new("b").max_children(max_b));
    let s = Stack::start_with(cfg, NginxOpts::default());
    let nginx_b = Nginx::start(
        &s.dir,
        NginxOpts::default()
            .upstream(s.fpmd.upstream(1))
            .name("nginx-b"),
    );
    let (n_a, n_b) = (7u32, 4u32);
    for i in 0..n_a {
        let r = get(&s.url(&format!("/hello.php?a={i}")));
        assert_eq!(r.status, 200, "pool a: {}", r.text());
    }
    for i in 0..n_b {
        let r = get(&nginx_b.url(&format!("/hello.php?b={i}")));
        assert_eq!(r.status, 200, "pool b: {}", r.text());
    }
    let done = now_secs();

    let prom = Prometheus::start(&s.dir, local(port));
    // A scrape that began after the last response (with a margin for the
    // counters written just after it).
    wait_for(LONG, "a Prometheus scrape after the requests", || {
        prom.last_scrape().is_some_and(|t| t > done + 0.2)
    });
    let targets = prom.api("/api/v1/targets", &[]);
    let target = &targets["activeTargets"][0];
    assert_eq!(
        target["health"],
        "up",
        "{targets}\nfpmd log:\n{}",
        s.fpmd.log()
    );
    assert_eq!(target["lastError"], "", "{targets}");

    let by_pool = |q: &str| -> BTreeMap<String, f64> {
        prom.query(q)
            .into_iter()
            .map(|s| (s.label("pool").to_string(), s.value))
            .collect()
    };
    let per_pool =
        |a: u32, b: u32| BTreeMap::from([("a".to_string(), a.into()), ("b".to_string(), b.into())]);
    let sent = per_pool(n_a, n_b);
    // Exact: every request read counts once, in its pool only.
    assert_eq!(
        by_pool("phpfpm_accepted_connections"),
        sent,
        "accepted connections"
    );
    assert_eq!(
        by_pool("fpmd_request_service_seconds_count"),
        sent,
        "service histogram"
    );
    assert_eq!(
        by_pool("fpmd_request_queue_wait_seconds_count"),
        sent,
        "queue-wait histogram"
    );
    assert_eq!(
        by_pool(r#"fpmd_request_service_seconds_bucket{le="+Inf"}"#),
        sent,
        "+Inf bucket"
    );
    // Buckets are cumulative: no bucket holds more than the next one up.
    let not_cumulative = prom.query(
        r#"fpmd_request_service_seconds_bucket{le="0.1"} > ignoring(le) fpmd_request_service_seconds_bucket{le="0.25"}"#,
    );
    assert!(not_cumulative.is_empty(), "{not_cumulative:?}");
    // hello.php is served within a second.
    assert_eq!(
        by_pool(r#"fpmd_request_service_seconds_bucket{le="1.0"}"#),
        sent
    );
    assert_eq!(by_pool("phpfpm_up"), per_pool(1, 1));
    // Static pools, every request answered: all children idle.
    assert_eq!(by_pool("phpfpm_active_processes"), per_pool(0, 0));
    assert_eq!(by_pool("phpfpm_idle_processes"), per_pool(max_a, max_b));
    assert_eq!(by_pool("phpfpm_total_processes"), per_pool(max_a, max_b));
    assert_eq!(by_pool("phpfpm_listen_queue"), per_pool(0, 0));
    let max_active = by_pool("phpfpm_max_active_processes");
    assert!(
        max_active["a"] >= 1.0 && max_active["a"] <= max_a.into() && max_active["b"] >= 1.0,
        "{max_active:?}"
    );
    let spawned = by_pool("fpmd_children_spawned_total");
    assert!(
        spawned["a"] >= max_a.into() && spawned["b"] >= max_b.into(),
        "children spawned: {spawned:?}"
    );
    assert_eq!(
        by_pool("sum by (pool) (fpmd_children_stopped_total)"),
        per_pool(0, 0),
        "no child stopped"
    );
    // One series per child, each with its memory and generation.
    assert_eq!(
        by_pool("count by (pool) (fpmd_child_resident_bytes)"),
        per_pool(max_a, max_b),
        "one RSS series per child"
    );
    let rss = by_pool("min by (pool) (fpmd_child_resident_bytes)");
    assert!(
        rss.values().all(|b| *b > 1_048_576.0),
        "a php-cgi uses more than 1 MiB: {rss:?}"
    );
    assert_eq!(
        by_pool("max by (pool) (fpmd_child_generation)"),
        per_pool(1, 1)
    );
    assert_eq!(by_pool("fpmd_pool_generation"), per_pool(1, 1));
    // Prometheus stored php-fpm's counters under their own names, typed
    // `unknown` (see src/observe/metrics.rs), the gauges and histograms as such.
    let metadata = prom.api("/api/v1/metadata", &[]);
    for (family, ty) in [
        ("phpfpm_accepted_connections", "unknown"),
        ("phpfpm_slow_requests", "unknown"),
        ("phpfpm_idle_processes", "gauge"),
        ("fpmd_request_service_seconds", "histogram"),
        ("fpmd_child_resident_bytes", "gauge"),
    ] {
        assert_eq!(metadata[family][0]["type"], ty, "{family}: {metadata}");
    }
    let unit = &metadata["fpmd_request_service_seconds"][0]["unit"];
    assert_eq!(unit, "seconds", "{metadata}");
}

#[test]
fn endpoint_answers_http_and_moves_on_reload() {
    let dir = TestDir::new();
    let (p1, p2) = (free_port(), free_port());
    let cfg = |line: Option<String>| {
        let mut c = FpmdConfig::new().pool(Pool::www().max_children(1));
        if let Some(l) = line {
            c = c.global(l);
        }
        c
    };
    let mut fpmd = Fpmd::start(&dir, cfg(Some(metrics_line(p1))));
    wait_for(LONG, "the metrics endpoint on its first port", || {
        scrape(p1, "/metrics").is_ok()
    });
    let r = scrape(p1, "/metrics").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some(CONTENT_TYPE));
    let text = r.text();
    assert!(text.ends_with("\n# EOF\n"), "{text}");
    assert_eq!(
        sample(&text, r#"phpfpm_up{pool="www"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"phpfpm_accepted_connections{pool="www"}"#),
        Some(0.0),
        "{text}"
    );
    let r = scrape(p1, "/").unwrap();
    assert_eq!(r.status, 404, "{}", r.text());
    let r = scrape(p1, "/metrics/x").unwrap();
    assert_eq!(r.status, 404, "{}", r.text());
    let r = try_post_with(
        &agent_with_timeout(Duration::from_secs(5)),
        &format!("http://127.0.0.1:{p1}/metrics"),
        b"x",
    )
    .unwrap();
    assert_eq!(r.status, 405, "{}", r.text());
    assert_eq!(r.header("allow"), Some("GET, HEAD"));

    // A reload that changes metrics.listen moves the endpoint.
    fpmd.rewrite(&cfg(Some(metrics_line(p2))));
    fpmd.reload_ok();
    wait_for(LONG, "the metrics endpoint on its new port", || {
        scrape(p2, "/metrics").is_ok_and(|r| r.status == 200)
    });
    assert!(!tcp_connectable(local(p1)), "the old port still accepts");
    let text = scrape(p2, "/metrics").unwrap().text();
    assert_eq!(
        sample(&text, r#"phpfpm_up{pool="www"}"#),
        Some(1.0),
        "{text}"
    );

    // Unset: no endpoint.
    fpmd.rewrite(&cfg(None));
    fpmd.reload_ok();
    assert!(
        !tcp_connectable(local(p2)),
        "the endpoint still accepts after metrics.listen was removed"
    );
    let log = fpmd.log();
    assert!(
        log.contains(&format!("metrics endpoint on 127.0.0.1:{p2} stopped")),
        "{log}"
    );
}

#[test]
fn children_stopped_at_max_requests_by_reason() {
    let port = free_port();
    let (max, per_child, n) = (2u32, 2u32, 6u32);
    let cfg = FpmdConfig::new()
        .global(metrics_line(port))
        .pool(Pool::www().max_children(max).max_requests(per_child));
    let s = Stack::start_with(cfg, NginxOpts::default());
    for i in 0..n {
        let r = get(&s.url(&format!("/hello.php?i={i}")));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // One after another, each request goes to the most recently used
    // child: every second request retires one, and the pool replaces it.
    let retired = n / per_child;
    let stopped = r#"fpmd_children_stopped_total{pool="www",reason="max_requests"}"#;
    let spawned = r#"fpmd_children_spawned_total{pool="www"}"#;
    let mut last = String::new();
    let settled = wait_until(LONG, || {
        last = scrape(port, "/metrics")
            .map(|r| r.text())
            .unwrap_or_default();
        sample(&last, stopped) == Some(retired.into())
            && sample(&last, spawned) == Some((max + retired).into())
    });
    assert!(
        settled,
        "expected {retired} children stopped at max_requests and {} spawned; last scrape:\n{last}\nfpmd log:\n{}",
        max + retired,
        s.fpmd.log()
    );
    for reason in [
        "max_memory",
        "idle",
        "request_terminate_timeout",
        "killed",
        "retired",
        "died",
    ] {
        let series = format!(r#"fpmd_children_stopped_total{{pool="www",reason="{reason}"}}"#);
        assert_eq!(sample(&last, &series), Some(0.0), "{series}:\n{last}");
    }
    assert_eq!(
        sample(&last, r#"fpmd_request_service_seconds_count{pool="www"}"#),
        Some(n.into())
    );
}

#[test]
fn reload_with_new_children_counts_the_old_ones_retired() {
    let dir = TestDir::new();
    let port = free_port();
    let max = 2u32;
    let cfg = |generation: &str| {
        FpmdConfig::new().global(metrics_line(port)).pool(
            Pool::www()
                .max_children(max)
                .line(format!("env.GENERATION = {generation:?}")),
        )
    };
    let mut fpmd = Fpmd::start(&dir, cfg("1"));
    // Every child of generation 1 up (a parent stopped while it still
    // forks has fewer children to retire).
    wait_for(LONG, "generation 1's children", || {
        let text = scrape(port, "/metrics")
            .map(|r| r.text())
            .unwrap_or_default();
        let children = text
            .lines()
            .filter(|l| l.starts_with("fpmd_child_generation{"))
            .count();
        sample(&text, r#"fpmd_children_spawned_total{pool="www"}"#) == Some(max.into())
            && children == max as usize
    });
    // A changed environment needs new children: generation 2.
    fpmd.rewrite(&cfg("2"));
    fpmd.reload_ok();
    let retired = r#"fpmd_children_stopped_total{pool="www",reason="retired"}"#;
    let mut last = String::new();
    let settled = wait_until(LONG, || {
        last = scrape(port, "/metrics")
            .map(|r| r.text())
            .unwrap_or_default();
        let children: Vec<&str> = last
            .lines()
            .filter(|l| l.starts_with("fpmd_child_generation{"))
            .collect();
        sample(&last, retired) == Some(max.into())
            && sample(&last, r#"fpmd_pool_generation{pool="www"}"#) == Some(2.0)
            && children.len() == max as usize
            && children.iter().all(|l| l.ends_with(" 2"))
    });
    assert!(
        settled,
        "expected {max} children retired by the reload and only generation 2 left; last scrape:\n{last}\nfpmd log:\n{}",
        fpmd.log()
    );
    assert_eq!(
        sample(&last, r#"fpmd_children_spawned_total{pool="www"}"#),
        Some((2 * max).into()),
        "{last}"
    );
    assert_eq!(
        sample(
            &last,
            r#"fpmd_children_stopped_total{pool="www",reason="died"}"#
        ),
        Some(0.0),
        "{last}"
    );
}
