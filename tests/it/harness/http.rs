//! HTTP client helpers over ureq: 4xx/5xx are ordinary responses, not
//! errors; redirects are not followed; bodies are read whole (no size cap).

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Resp {
    pub status: u16,
    /// (lower-case name, value), in order, repeated headers kept.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn headers_all(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn agent() -> ureq::Agent {
    agent_with_timeout(Duration::from_secs(180))
}

/// An agent whose requests fail (transport error) after `timeout` in all.
pub fn agent_with_timeout(timeout: Duration) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .redirects(0)
        .timeout_connect(Duration::from_secs(30).min(timeout))
        .timeout(timeout)
        .build()
}

fn convert(r: Result<ureq::Response, ureq::Error>) -> Result<Resp, String> {
    let resp = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t)) => return Err(t.to_string()),
    };
    let status = resp.status();
    let mut headers = Vec::new();
    let mut names = resp.headers_names();
    names.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if !seen.insert(name.to_ascii_lowercase()) {
            continue;
        }
        for v in resp.all(&name) {
            headers.push((name.to_ascii_lowercase(), v.to_string()));
        }
    }
    let mut body = Vec::new();
    resp.into_reader()
        .read_to_end(&mut body)
        .map_err(|e| format!("reading body: {e}"))?;
    Ok(Resp {
        status,
        headers,
        body,
    })
}

pub fn try_get_with(agent: &ureq::Agent, url: &str) -> Result<Resp, String> {
    convert(agent.get(url).call())
}

pub fn try_post_with(agent: &ureq::Agent, url: &str, body: &[u8]) -> Result<Resp, String> {
    convert(
        agent
            .post(url)
            .set("Content-Type", "application/octet-stream")
            .send_bytes(body),
    )
}

/// POST with `Transfer-Encoding: chunked` (no Content-Length), no Content-Type.
pub fn try_post_chunked_with(agent: &ureq::Agent, url: &str, body: &[u8]) -> Result<Resp, String> {
    convert(agent.post(url).send(std::io::Cursor::new(body.to_vec())))
}

/// GET; any status is returned; panics only on transport errors.
pub fn get(url: &str) -> Resp {
    try_get_with(&agent(), url).unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// POST (application/octet-stream); any status is returned; panics only on transport errors.
pub fn post(url: &str, body: &[u8]) -> Resp {
    try_post_with(&agent(), url, body).unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

/// What one request of a concurrent run gave.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub thread: usize,
    pub index: usize,
    pub result: Result<Resp, String>,
}

impl Outcome {
    pub fn status(&self) -> u16 {
        self.result.as_ref().map(|r| r.status).unwrap_or(0)
    }
    pub fn text(&self) -> String {
        match &self.result {
            Ok(r) => r.text(),
            Err(e) => format!("transport error: {e}"),
        }
    }
}

/// Runs `threads` threads, each with its own agent (so its own connection),
/// each doing `per_thread` requests with `f(agent, thread, index)`.
pub fn concurrent<F>(threads: usize, per_thread: usize, f: F) -> Vec<Outcome>
where
    F: Fn(&ureq::Agent, usize, usize) -> Result<Resp, String> + Send + Sync + 'static,
{
    spawn_concurrent(threads, per_thread, f).join()
}

pub struct Running {
    handles: Vec<std::thread::JoinHandle<()>>,
    out: Arc<Mutex<Vec<Outcome>>>,
}

impl Running {
    pub fn join(self) -> Vec<Outcome> {
        for h in self.handles {
            h.join().expect("client thread panicked");
        }
        let mut v = std::mem::take(&mut *self.out.lock().unwrap());
        v.sort_by_key(|o| (o.thread, o.index));
        v
    }
    pub fn done(&self) -> usize {
        self.out.lock().unwrap().len()
    }
}

/// Like `concurrent`, but returns at once; `join()` collects the outcomes.
pub fn spawn_concurrent<F>(threads: usize, per_thread: usize, f: F) -> Running
where
    F: Fn(&ureq::Agent, usize, usize) -> Result<Resp, String> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let out = Arc::new(Mutex::new(Vec::new()));
    let handles = (0..threads)
        .map(|t| {
            let f = f.clone();
            let out = out.clone();
            std::thread::spawn(move || {
                let a = agent();
                for i in 0..per_thread {
                    let result = f(&a, t, i);
                    out.lock().unwrap().push(Outcome {
                        thread: t,
                        index: i,
                        result,
                    });
                }
            })
        })
        .collect();
    Running { handles, out }
}

/// Panics listing the failures unless every outcome is a 200.
pub fn assert_all_200(outcomes: &[Outcome]) {
    let bad: Vec<String> = outcomes
        .iter()
        .filter(|o| o.status() != 200)
        .map(|o| {
            format!(
                "thread {} request {}: status {} {}",
                o.thread,
                o.index,
                o.status(),
                o.text().chars().take(200).collect::<String>()
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} requests failed:\n{}",
        bad.len(),
        outcomes.len(),
        bad.join("\n")
    );
}
