//! The metrics endpoint (`[global] metrics.listen`): `GET /metrics` over
//! plain HTTP/1.1 answers the OpenMetrics 1.0 text of every pool, read at
//! scrape time; any other path is 404, any other method 405.
//!
//! Families, one per name, each pool's series labelled `pool`:
//! - php-fpm's, with the names and values of its status page's
//!   `?openmetrics` (php-src `sapi/fpm/fpm/fpm_status.c`): `phpfpm_up`,
//!   `phpfpm_start_since`, `phpfpm_accepted_connections`,
//!   `phpfpm_listen_queue`, `phpfpm_max_listen_queue`,
//!   `phpfpm_listen_queue_length`, `phpfpm_idle_processes`,
//!   `phpfpm_active_processes`, `phpfpm_total_processes`,
//!   `phpfpm_max_active_processes`, `phpfpm_max_children_reached`,
//!   `phpfpm_slow_requests`. php-fpm declares six of them `counter` but
//!   names their samples without `_total`, which OpenMetrics forbids (a
//!   counter's sample is `<family>_total`). Dashboards written for
//!   php-fpm's page and hipages/php-fpm_exporter query the bare names, so
//!   fpmd keeps the names and declares those six `unknown` (the OpenMetrics
//!   type whose sample is the family name): valid OpenMetrics, stored by
//!   Prometheus under php-fpm's names, and `rate()` works on them as on
//!   any counter. The gauges stay `gauge`.
//! - fpmd's own: `fpmd_request_queue_wait_seconds` and
//!   `fpmd_request_service_seconds` (histograms, buckets
//!   [`LATENCY_BUCKETS`]), `fpmd_children_spawned_total`,
//!   `fpmd_children_stopped_total{reason}` ([`StopReason::as_str`]),
//!   `fpmd_pool_generation`, and per child `fpmd_child_generation{pid}`
//!   and `fpmd_child_resident_bytes{pid}` (RSS from `/proc/PID/statm`).
//! - per idle child, php-fpm's `last request memory` and `last request
//!   cpu` under hipages/php-fpm_exporter's names,
//!   `phpfpm_process_last_request_memory{pid}` (bytes) and
//!   `phpfpm_process_last_request_cpu{pid}` (percent), from what the
//!   child's `sapi.php` reported (`crate::process::sapi`).
//!
//! Owns: the endpoint's socket (its file, for a unix path) and its HTTP
//! connections; the text format. Must not touch: dispatch. A scrape runs
//! on a blocking thread, not on the runtime that serves requests: it takes
//! each pool's slot-table lock once, briefly (the status page's sample),
//! reads the pools' atomics, and reads `/proc` (each child's statm) with
//! no lock held.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::config::{Listen, ListenAddress};
use crate::pool::stats::{HistogramSnapshot, StopReason, LATENCY_BUCKETS};
use crate::pool::{Pool, PoolStatus};

/// The `Content-Type` of `GET /metrics` (OpenMetrics 1.0 text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a client may take to send a request's head, after which its
/// connection is closed.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Between two tries to bind an address that is taken (during a binary
/// upgrade the old fpmd holds it until it hands over).
const REBIND_EVERY: Duration = Duration::from_secs(1);

/// What one pool looks like at a scrape.
#[derive(Debug, Clone)]
pub struct PoolSample {
    /// The status sample with one row per child (`Pool::status(true)`).
    pub status: PoolStatus,
    /// `PoolStats::queue_wait` (seconds).
    pub queue_wait: HistogramSnapshot,
    /// `PoolStats::service` (seconds).
    pub service: HistogramSnapshot,
    /// `PoolStats::spawned`.
    pub spawned: u64,
    /// Children stopped per reason, every reason (zeros included).
    pub stopped: Vec<(StopReason, u64)>,
    /// The children whose pid is known, each once, by pid.
    pub children: Vec<ChildSample>,
}

/// One child at a scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSample {
    pub pid: i32,
    /// The generation it was started with.
    pub generation: u32,
    /// Resident memory in bytes (`/proc/PID/statm`); `None` when it could
    /// not be read (the child just ended).
    pub resident: Option<u64>,
}

impl PoolSample {
    /// Samples `pool` now: its status sample (the slot-table lock taken
    /// once; `/proc` is read after releasing it).
    pub fn of(pool: &Pool) -> PoolSample {
        let status = pool.status(true);
        let pids: std::collections::BTreeMap<i32, u32> = status
            .processes
            .iter()
            .map(|p| (p.pid, p.generation))
            .collect();
        let children = pids
            .into_iter()
            .map(|(pid, generation)| ChildSample {
                pid,
                generation,
                resident: crate::sys::procfs::resident_bytes(pid),
            })
            .collect();
        PoolSample {
            queue_wait: pool.stats.queue_wait.snapshot(),
            service: pool.stats.service.snapshot(),
            spawned: pool
                .stats
                .spawned
                .load(std::sync::atomic::Ordering::Relaxed),
            stopped: pool.stats.stopped_by_reason(),
            children,
            status,
        }
    }
}

/// The OpenMetrics text of `samples` (one per pool) at `now`, ending in
/// `# EOF`. Pure: the caller samples the pools.
pub fn encode(samples: &[PoolSample], now: SystemTime) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        samples: samples.to_vec(),
        now,
    }));
    let mut out = String::with_capacity(4096 + samples.len() * 4096);
    // Writing to a String cannot fail; the encoder fails only on that.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        error!("cannot encode the metrics: {e}");
        out.clear();
        let _ = writeln!(out, "# EOF");
    }
    out
}

/// The families of one scrape, written by prometheus-client's encoder.
#[derive(Debug)]
struct Scrape {
    samples: Vec<PoolSample>,
    now: SystemTime,
}

/// A family's type and, for a sample of it, how it is written.
fn om_type(php_fpm_kind: &str) -> MetricType {
    match php_fpm_kind {
        // See the module docs: php-fpm's counters keep their names.
        "counter" => MetricType::Unknown,
        _ => MetricType::Gauge,
    }
}

impl Scrape {
    /// A family with one plain value per pool (`gauge` and `unknown`
    /// samples are both written `<name>{labels} <value>`).
    fn per_pool(
        &self,
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        ty: MetricType,
        value: impl Fn(usize, &PoolSample) -> u64,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(name, help, None, ty)?;
        for (i, s) in self.samples.iter().enumerate() {
            let labels = [("pool", s.status.pool.as_str())];
            family.encode_family(&labels)?.encode_gauge(&value(i, s))?;
        }
        Ok(())
    }

    fn histogram(
        &self,
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        which: fn(&PoolSample) -> &HistogramSnapshot,
    ) -> Result<(), std::fmt::Error> {
        let mut family =
            encoder.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
        for s in &self.samples {
            let h = which(s);
            let bounds = LATENCY_BUCKETS.iter().copied().chain([f64::INFINITY]);
            // Per bucket, not cumulative: the encoder adds them up.
            let buckets: Vec<(f64, u64)> = bounds.zip(h.buckets.iter().copied()).collect();
            let labels = [("pool", s.status.pool.as_str())];
            family
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(h.sum, h.count, &buckets, None)?;
        }
        Ok(())
    }
}

impl Scrape {
    /// A gauge family with one sample per child of known pid (labels
    /// `pool`, `pid`), its value from the child's status row.
    fn per_process<T: prometheus_client::encoding::EncodeGaugeValue>(
        &self,
        e: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        value: impl Fn(&crate::pool::ProcessStatus) -> T,
    ) -> Result<(), std::fmt::Error> {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for s in &self.samples {
            for p in &s.status.processes {
                let pid = p.pid.to_string();
                let labels = [("pool", s.status.pool.as_str()), ("pid", pid.as_str())];
                family.encode_family(&labels)?.encode_gauge(&value(p))?;
            }
        }
        Ok(())
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        self.per_pool(
            e,
            "phpfpm_up",
            "Could the pool be reached? (1: fpmd serves it.)",
            MetricType::Gauge,
            |_, _| 1,
        )?;
        let values: Vec<_> = self
            .samples
            .iter()
            .map(|s| crate::observe::status::openmetrics_values(&s.status, self.now))
            .collect();
        for (k, (name, kind, help, _)) in crate::observe::status::OPENMETRICS.iter().enumerate() {
            self.per_pool(e, name, help, om_type(kind), |i, _| values[i][k].3)?;
        }
        self.histogram(
            e,
            "fpmd_request_queue_wait",
            "Time from a request's arrival to the child that takes it (or to fpmd's own answer).",
            |s| &s.queue_wait,
        )?;
        self.histogram(
            e,
            "fpmd_request_service",
            "Time from a child taking a request to its end.",
            |s| &s.service,
        )?;
        {
            let mut family = e.encode_descriptor(
                "fpmd_children_spawned",
                "php-cgi children started to serve requests (prefork: forked by the php-cgi parents).",
                None,
                MetricType::Counter,
            )?;
            for s in &self.samples {
                let labels = [("pool", s.status.pool.as_str())];
                family
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, f64>(&s.spawned, None)?;
            }
        }
        {
            let mut family = e.encode_descriptor(
                "fpmd_children_stopped",
                "php-cgi children that ended, by reason.",
                None,
                MetricType::Counter,
            )?;
            for s in &self.samples {
                for (reason, n) in &s.stopped {
                    let labels = [
                        ("pool", s.status.pool.as_str()),
                        ("reason", reason.as_str()),
                    ];
                    family
                        .encode_family(&labels)?
                        .encode_counter::<NoLabelSet, _, f64>(n, None)?;
                }
            }
        }
        self.per_pool(
            e,
            "fpmd_pool_generation",
            "The pool's current generation (configuration epoch of its children; a reload that changes how children start adds one).",
            MetricType::Gauge,
            |_, s| s.status.generation.into(),
        )?;
        {
            let mut family = e.encode_descriptor(
                "fpmd_child_generation",
                "The generation each child was started with.",
                None,
                MetricType::Gauge,
            )?;
            for s in &self.samples {
                for c in &s.children {
                    let pid = c.pid.to_string();
                    let labels = [("pool", s.status.pool.as_str()), ("pid", pid.as_str())];
                    family
                        .encode_family(&labels)?
                        .encode_gauge(&u64::from(c.generation))?;
                }
            }
        }
        {
            let mut family = e.encode_descriptor(
                "fpmd_child_resident",
                "Resident memory (RSS) of each child, read from /proc at the scrape.",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?;
            for s in &self.samples {
                for c in &s.children {
                    let Some(bytes) = c.resident else { continue };
                    let pid = c.pid.to_string();
                    let labels = [("pool", s.status.pool.as_str()), ("pid", pid.as_str())];
                    family.encode_family(&labels)?.encode_gauge(&bytes)?;
                }
            }
        }
        // php-fpm's per-process `last request memory` and `last request
        // cpu` (the names php-fpm_exporter gives them), idle children only.
        self.per_process(
            e,
            "phpfpm_process_last_request_memory",
            "Peak memory of the child's last request in bytes (memory_get_peak_usage(true)); 0 while a request runs.",
            |p| p.last_request_memory,
        )?;
        self.per_process(
            e,
            "phpfpm_process_last_request_cpu",
            "CPU of the child's last request, percent of its duration (user + system); 0 while a request runs.",
            |p| p.last_request_cpu,
        )?;
        Ok(())
    }
}

/// The pools a scrape reads: the daemon sends the current set after its
/// start and after every reload.
pub type PoolsView = watch::Receiver<Vec<Arc<Pool>>>;

/// The running endpoint: one tokio task that binds, accepts and serves
/// (each connection a task of its own, ended with it).
pub struct MetricsServer {
    address: ListenAddress,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Starts serving `GET /metrics` on `address`. When the address cannot
    /// be bound (in use, as during a binary upgrade until the old fpmd lets
    /// it go), the error is logged and the bind tried again every second:
    /// the pools serve regardless.
    pub fn start(address: ListenAddress, pools: PoolsView) -> MetricsServer {
        let task = tokio::spawn(serve(address.clone(), pools));
        MetricsServer { address, task }
    }

    /// Where it listens (or tries to).
    pub fn address(&self) -> &ListenAddress {
        &self.address
    }

    /// Stops accepting and closes its connections; a unix socket file it
    /// bound is removed (if it is still its own).
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// A bound endpoint; a unix socket's file is unlinked when dropped.
enum Bound {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, crate::listen::SocketFile),
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Bound::Unix(_, file) = self {
            file.unlink();
        }
    }
}

/// Binds `address` as a pool's socket is bound (a stale unix socket file
/// is replaced, a live one or a non-socket is not); a unix socket gets
/// mode 0660 with fpmd's user and group.
fn bind(address: &ListenAddress) -> Result<Bound, crate::listen::BindError> {
    let listen = Listen {
        address: address.clone(),
        owner: None,
        group: None,
        mode: 0o660,
        backlog: 128,
        allowed_clients: None,
        acl_users: Vec::new(),
        acl_groups: Vec::new(),
    };
    let (socket, file) = crate::listen::bind_socket("metrics", &listen)?;
    let io = |e: std::io::Error| crate::listen::BindError::Io {
        address: address.to_string(),
        source: e,
    };
    match file {
        None => {
            let std: std::net::TcpListener = socket.into();
            Ok(Bound::Tcp(
                tokio::net::TcpListener::from_std(std).map_err(io)?,
            ))
        }
        Some(file) => {
            let std: std::os::unix::net::UnixListener = socket.into();
            match tokio::net::UnixListener::from_std(std) {
                Ok(l) => Ok(Bound::Unix(l, file)),
                Err(e) => {
                    file.unlink();
                    Err(io(e))
                }
            }
        }
    }
}

async fn serve(address: ListenAddress, pools: PoolsView) {
    let mut failed = false;
    let bound = loop {
        match bind(&address) {
            Ok(b) => break b,
            Err(e) => {
                if !failed {
                    error!(
                        "metrics.listen: {e}; trying again every {} s (the pools serve regardless)",
                        REBIND_EVERY.as_secs()
                    );
                    failed = true;
                }
                tokio::time::sleep(REBIND_EVERY).await;
            }
        }
    };
    info!("metrics endpoint: GET /metrics on {address}");
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // Finished connection tasks are collected as they end.
        while connections.try_join_next().is_some() {}
        let accepted = match &bound {
            Bound::Tcp(l) => l.accept().await.map(|(s, _)| {
                let _ = s.set_nodelay(true);
                connections.spawn(connection(s, pools.clone()));
            }),
            Bound::Unix(l, _) => l.accept().await.map(|(s, _)| {
                connections.spawn(connection(s, pools.clone()));
            }),
        };
        if let Err(e) = accepted {
            // EMFILE and the like: wait a little instead of spinning.
            warn!("metrics endpoint: accept failed: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Serves one HTTP/1.1 connection (keep-alive, as Prometheus scrapes).
async fn connection<S>(stream: S, pools: PoolsView)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let pools = pools.clone();
        async move { Ok::<_, Infallible>(respond(req, pools).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        debug!("metrics endpoint: connection ended: {e}");
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn respond(req: Request<Incoming>, pools: PoolsView) -> Response<Full<Bytes>> {
    if req.uri().path() != "/metrics" {
        return text(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        return r;
    }
    let pools: Vec<Arc<Pool>> = pools.borrow().clone();
    let body = tokio::task::spawn_blocking(move || {
        let samples: Vec<PoolSample> = pools.iter().map(|p| PoolSample::of(p)).collect();
        encode(&samples, SystemTime::now())
    })
    .await;
    match body {
        Ok(body) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(CONTENT_TYPE),
            );
            r
        }
        Err(e) => {
            error!("metrics endpoint: the scrape failed: {e}");
            text(StatusCode::INTERNAL_SERVER_ERROR, "the scrape failed\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{ProcessStatus, RequestInfo};
    use std::time::UNIX_EPOCH;

    fn status(pool: &str, pids: &[i32]) -> PoolStatus {
        let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        PoolStatus {
            pool: pool.into(),
            process_manager: "static",
            start_time: start,
            accepted_conn: 12,
            listen_queue: 0,
            max_listen_queue: 3,
            listen_queue_len: 511,
            idle: 1,
            active: pids.len() - 1,
            max_active: 2,
            max_children_reached: 0,
            slow_requests: 1,
            max_children: 4,
            generation: 2,
            processes: pids
                .iter()
                .map(|pid| ProcessStatus {
                    pid: *pid,
                    state: "Idle",
                    start_time: start,
                    requests: 3,
                    request_duration_us: 0,
                    request: RequestInfo::default(),
                    generation: 2,
                    slot: 0,
                    last_request_memory: 2 << 20,
                    last_request_cpu: 12.5,
                })
                .collect(),
        }
    }

    fn sample(pool: &str, pids: &[i32]) -> PoolSample {
        let mut buckets = vec![0; LATENCY_BUCKETS.len() + 1];
        buckets[0] = 2; // ≤ 1 ms
        buckets[3] = 5; // ≤ 10 ms
        buckets[LATENCY_BUCKETS.len()] = 1; // > 30 s
        PoolSample {
            status: status(pool, pids),
            queue_wait: HistogramSnapshot {
                buckets: buckets.clone(),
                sum: 40.5,
                count: 8,
            },
            service: HistogramSnapshot {
                buckets: vec![0; LATENCY_BUCKETS.len() + 1],
                sum: 0.0,
                count: 0,
            },
            spawned: 6,
            stopped: StopReason::ALL
                .iter()
                .map(|r| (*r, u64::from(*r == StopReason::MaxRequests) * 2))
                .collect(),
            children: pids
                .iter()
                .filter(|p| **p > 0)
                .map(|p| ChildSample {
                    pid: *p,
                    generation: 2,
                    resident: Some(1 << 20),
                })
                .collect(),
        }
    }

    /// The sample lines (`name{labels} value`), comments left out.
    fn samples_of(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn php_fpm_names_kept_with_a_pool_label() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_010);
        let t = encode(&[sample("www", &[41, 42]), sample("api", &[43])], now);
        assert!(t.ends_with("\n# EOF\n"), "{t}");
        let lines = samples_of(&t);
        for want in [
            r#"phpfpm_up{pool="www"} 1"#,
            r#"phpfpm_up{pool="api"} 1"#,
            r#"phpfpm_start_since{pool="www"} 10"#,
            r#"phpfpm_accepted_connections{pool="www"} 12"#,
            r#"phpfpm_listen_queue{pool="www"} 0"#,
            r#"phpfpm_max_listen_queue{pool="api"} 3"#,
            r#"phpfpm_listen_queue_length{pool="www"} 511"#,
            r#"phpfpm_idle_processes{pool="www"} 1"#,
            r#"phpfpm_active_processes{pool="www"} 1"#,
            r#"phpfpm_total_processes{pool="www"} 2"#,
            r#"phpfpm_max_active_processes{pool="www"} 2"#,
            r#"phpfpm_max_children_reached{pool="www"} 0"#,
            r#"phpfpm_slow_requests{pool="www"} 1"#,
            r#"fpmd_children_spawned_total{pool="www"} 6"#,
            r#"fpmd_children_stopped_total{pool="www",reason="max_requests"} 2"#,
            r#"fpmd_children_stopped_total{pool="api",reason="died"} 0"#,
            r#"fpmd_pool_generation{pool="api"} 2"#,
            r#"fpmd_child_generation{pool="www",pid="42"} 2"#,
            r#"fpmd_child_resident_bytes{pool="api",pid="43"} 1048576"#,
        ] {
            assert!(lines.contains(&want), "no line {want:?} in:\n{t}");
        }
        // php-fpm's counters keep their names: declared `unknown`, never
        // `counter` (whose samples would need `_total`).
        assert!(
            t.contains("# TYPE phpfpm_accepted_connections unknown\n"),
            "{t}"
        );
        assert!(t.contains("# TYPE phpfpm_idle_processes gauge\n"), "{t}");
        assert!(!t.contains("phpfpm_accepted_connections_total"), "{t}");
        assert!(t.contains("# TYPE fpmd_children_spawned counter\n"), "{t}");
        // Every reason, each pool.
        let stopped = lines
            .iter()
            .filter(|l| l.starts_with("fpmd_children_stopped_total{"))
            .count();
        assert_eq!(stopped, 2 * StopReason::ALL.len(), "{t}");
    }

    #[test]
    fn one_family_per_name() {
        let t = encode(&[sample("a", &[1]), sample("b", &[2])], SystemTime::now());
        let mut types: Vec<&str> = t
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        let n = types.len();
        types.sort();
        types.dedup();
        assert_eq!(types.len(), n, "a family declared twice:\n{t}");
        assert_eq!(n, 12 + 9, "{t}");
        // Each sample belongs to the family declared last before it.
        let mut family = "";
        for l in t.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                family = rest.split(' ').next().unwrap();
            } else if !l.starts_with('#') {
                assert!(l.starts_with(family), "{l:?} outside its family {family}");
            }
        }
    }

    #[test]
    fn histograms_cumulative_in_seconds() {
        let t = encode(&[sample("www", &[1])], SystemTime::now());
        assert!(
            t.contains("# TYPE fpmd_request_queue_wait_seconds histogram\n# UNIT fpmd_request_queue_wait_seconds seconds\n"),
            "{t}"
        );
        let buckets: Vec<(String, u64)> = samples_of(&t)
            .iter()
            .filter_map(|l| l.strip_prefix(r#"fpmd_request_queue_wait_seconds_bucket{le=""#))
            .map(|rest| {
                let (le, value) = rest.split_once("\",pool=\"www\"} ").unwrap();
                (le.to_string(), value.parse().unwrap())
            })
            .collect();
        assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1, "{t}");
        assert_eq!(buckets[0], ("0.001".to_string(), 2));
        assert_eq!(buckets[2].1, 2, "≤ 5 ms: the 2 of ≤ 1 ms");
        assert_eq!(buckets[3].1, 7, "≤ 10 ms: 2 + 5");
        assert_eq!(buckets[LATENCY_BUCKETS.len() - 1], ("30.0".to_string(), 7));
        assert_eq!(buckets[LATENCY_BUCKETS.len()], ("+Inf".to_string(), 8));
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
        let lines = samples_of(&t);
        assert!(
            lines.contains(&r#"fpmd_request_queue_wait_seconds_count{pool="www"} 8"#),
            "{t}"
        );
        assert!(
            lines.contains(&r#"fpmd_request_queue_wait_seconds_sum{pool="www"} 40.5"#),
            "{t}"
        );
        assert!(
            lines.contains(&r#"fpmd_request_service_seconds_count{pool="www"} 0"#),
            "{t}"
        );
    }

    #[test]
    fn no_pools_is_just_the_families() {
        let t = encode(&[], SystemTime::now());
        assert!(samples_of(&t).is_empty(), "{t}");
        assert!(t.ends_with("# EOF\n"), "{t}");
    }
}
