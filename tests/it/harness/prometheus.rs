//! A real Prometheus (Debian's `prometheus` package) scraping one target
//! every second, with its configuration, TSDB and log inside the test dir,
//! its web API on a free port; and its HTTP query API.

use super::{free_port, tcp_connectable, TestDir};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const PROMETHEUS_BIN: &str = "/usr/bin/prometheus";

/// Fails the test (never skips) when Prometheus is missing.
pub fn require_prometheus() {
    if !std::path::Path::new(PROMETHEUS_BIN).is_file() {
        panic!(
            "{PROMETHEUS_BIN} is missing: this test scrapes fpmd with a real Prometheus; install it with `apt-get install prometheus` (or run `make test`, which does it)"
        );
    }
}

pub struct Prometheus {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    agent: ureq::Agent,
}

/// One series of an instant vector: its labels and value.
#[derive(Debug, Clone)]
pub struct Series {
    pub labels: serde_json::Map<String, serde_json::Value>,
    pub value: f64,
}

impl Series {
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .get(name)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `http://target/metrics` every second,
    /// and waits until it is ready.
    pub fn start(t: &TestDir, target: SocketAddr) -> Prometheus {
        require_prometheus();
        let dir = t.join("prometheus");
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let conf = dir.join("prometheus.yml");
        std::fs::write(
            &conf,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: fpmd\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(10))
            .build();
        let mut last = String::new();
        // The port can be taken by a parallel test between the probe and
        // Prometheus' bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
            let child = Command::new(PROMETHEUS_BIN)
                .arg(format!("--config.file={}", conf.display()))
                .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot run {PROMETHEUS_BIN}: {e}; install it with `apt-get install prometheus`")
                });
            let mut p = Prometheus {
                child: Some(child),
                port,
                dir: dir.clone(),
                agent: agent.clone(),
            };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(60) {
                if let Some(st) = p.child.as_mut().unwrap().try_wait().unwrap() {
                    last = format!("prometheus exited ({st}):\n{}", p.log());
                    break;
                }
                if tcp_connectable(SocketAddr::from(([127, 0, 0, 1], port)))
                    && p.agent.get(&p.url("/-/ready")).call().is_ok()
                {
                    return p;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if last.is_empty() {
                last = format!("prometheus not ready after 60 s:\n{}", p.log());
            }
        }
        panic!("cannot start prometheus: {last}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path?name=value…` of the HTTP API; its `data` (panics unless
    /// the status is `success`).
    pub fn api(&self, path: &str, params: &[(&str, &str)]) -> serde_json::Value {
        let mut req = self.agent.get(&self.url(path));
        for (k, v) in params {
            req = req.query(k, v);
        }
        let body = match req.call() {
            Ok(r) => r.into_string().unwrap(),
            Err(ureq::Error::Status(code, r)) => {
                panic!(
                    "{path} {params:?}: HTTP {code}: {}",
                    r.into_string().unwrap_or_default()
                )
            }
            Err(e) => panic!("{path} {params:?}: {e}"),
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{path} {params:?}: {body}");
        v["data"].clone()
    }

    /// An instant query (`/api/v1/query`): the series of the vector it
    /// returns.
    pub fn query(&self, q: &str) -> Vec<Series> {
        let data = self.api("/api/v1/query", &[("query", q)]);
        assert_eq!(data["resultType"], "vector", "{q}: {data}");
        data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| Series {
                labels: s["metric"].as_object().cloned().unwrap_or_default(),
                value: s["value"][1].as_str().unwrap().parse().unwrap(),
            })
            .collect()
    }

    /// The time of the last scrape of the target (epoch seconds), once
    /// there was one.
    pub fn last_scrape(&self) -> Option<f64> {
        self.query("timestamp(up{job=\"fpmd\"})")
            .first()
            .map(|s| s.value)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
