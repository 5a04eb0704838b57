//! What the reload tests share: the pool whose `memory_limit` the reloads
//! change and how a child shows it, the children of a pool and of a
//! generation, requests in the background ([`get_async`], the clients of a
//! [`Load`] and their [`Sample`]s), the check of a usleep.php answer, and
//! the waits.

use crate::harness::http::{agent_with_timeout, try_get_with};
use crate::harness::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Twice [`LONG`], as long as [`Fpmd::reload`] waits for a reload to end:
/// the reloads, upgrades and new generations of children here run under
/// load, some with a php-cgi that takes 300 ms to start.
pub(super) const LONGER: Duration = Duration::from_secs(60);

/// A static pool of 4 children started with `memory_limit` (the value the
/// reloads change); its children carry `FPMD_TEST_POOL=<name>`.
pub(super) fn pool(name: &str, memory_limit: &str) -> Pool {
    Pool::new(name)
        .max_children(4)
        .line(format!("php_admin_value.memory_limit = {memory_limit:?}"))
        .line(format!("env.FPMD_TEST_POOL = {name:?}"))
}

/// `[global] control_socket` in the test dir (the default, for root,
/// `/run/fpmd/fpmd.sock`, would be shared by parallel tests).
pub(super) fn control_socket(dir: &TestDir) -> String {
    format!(
        "control_socket = {:?}",
        dir.join("ctl.sock").display().to_string()
    )
}

/// `ini_get(name)` as a child shows it through `nginx` (without
/// var_export's quotes).
pub(super) fn ini(nginx: &Nginx, name: &str) -> Result<String, String> {
    let r = try_get_with(
        &agent_with_timeout(LONGER),
        &nginx.url(&format!("/ini.php?name={name}")),
    )?;
    if r.status != 200 {
        return Err(format!("status {}: {}", r.status, r.text()));
    }
    Ok(r.text().trim_matches('\'').to_string())
}

pub(super) fn memory_limit(nginx: &Nginx) -> String {
    ini(nginx, "memory_limit").unwrap_or_else(|e| panic!("GET ini.php?name=memory_limit: {e}"))
}

/// Polls ini.php until it shows `want`; returns how long it took. Panics
/// after `timeout` with the last answer.
pub(super) fn wait_memory_limit(nginx: &Nginx, want: &str, timeout: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let last = match ini(nginx, "memory_limit") {
            Ok(v) if v == want => return t0.elapsed(),
            Ok(v) => v,
            Err(e) => e,
        };
        if t0.elapsed() > timeout {
            panic!("memory_limit is still {last:?} after {timeout:?}, want {want:?}");
        }
    }
}

pub(super) fn get_pid(nginx: &Nginx) -> i32 {
    let r = get(&nginx.url("/pid.php"));
    assert_eq!(r.status, 200, "pid.php: {}", r.text());
    try_pid_of(&r.text()).unwrap_or_else(|| panic!("pid.php said {:?}", r.text()))
}

/// The workers of pool `name` (by their `FPMD_TEST_POOL`).
pub(super) fn pool_workers(fpmd: &Fpmd, name: &str) -> Vec<i32> {
    fpmd.workers_with_env("FPMD_TEST_POOL", name)
}

/// The `memory_limit` a php-cgi was started with (`-d memory_limit=…`):
/// a pre-forked child shows its title alone, so its parent's.
fn started_with(pid: i32) -> Option<String> {
    let of = |pid: i32| {
        procs::cmdline(pid)
            .iter()
            .find_map(|a| a.strip_prefix("memory_limit=").map(String::from))
    };
    of(pid).or_else(|| {
        procs::info(pid)
            .filter(|p| procs::info(p.ppid).is_some_and(|parent| parent.is_php_cgi()))
            .and_then(|p| of(p.ppid))
    })
}

/// Every live php-cgi of the test (workers, pre-fork parents, strays
/// outside fpmd's tree too) and the `memory_limit` it was started with.
fn php_cgi_generations(tag: &str) -> Vec<(i32, Option<String>)> {
    procs::tagged_php(tag)
        .into_iter()
        .map(|p| (p, started_with(p)))
        .collect()
}

/// Path of a unix listen address.
pub(super) fn sock_path(a: &Addr) -> PathBuf {
    match a {
        Addr::Unix(p) => p.clone(),
        Addr::Tcp(t) => panic!("{t} is not a unix socket"),
    }
}

/// Line number (1-based) of the first line of `text` containing `needle`.
pub(super) fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
        + 1
}

/// The time stamp that starts a line of fpmd's log; panics without one.
pub(super) fn stamp_of(line: &str) -> SystemTime {
    log_time(line).unwrap_or_else(|| panic!("no time stamp on {line:?}"))
}

pub(super) fn secs_between(a: SystemTime, b: SystemTime) -> f64 {
    match b.duration_since(a) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// A GET in a thread: (response or transport error, time taken).
pub(super) fn get_async(url: String) -> JoinHandle<(Result<Resp, String>, Duration)> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let r = try_get_with(&agent_with_timeout(Duration::from_secs(120)), &url);
        (r, t0.elapsed())
    })
}

/// Checks a usleep.php answer: 200, "<pid> <µs>" with the full sleep, `kb`
/// lines and "end"; returns (pid, µs slept).
pub(super) fn check_usleep(r: &Result<Resp, String>, ms: u64, kb: usize, what: &str) -> (i32, u64) {
    let r = r
        .as_ref()
        .unwrap_or_else(|e| panic!("{what}: transport error {e}"));
    let text = r.text();
    assert_eq!(
        r.status,
        200,
        "{what}: {}",
        text.chars().take(300).collect::<String>()
    );
    let mut lines = text.lines();
    let head = lines.next().unwrap_or("");
    let mut f = head.split_whitespace();
    let pid: i32 = f
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{what}: first line {head:?}"));
    let slept: u64 = f
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{what}: first line {head:?}"));
    for i in 0..kb {
        let l = lines
            .next()
            .unwrap_or_else(|| panic!("{what}: body cut after {i} of {kb} lines"));
        let want = format!("{:x<1023}", format!("line {i} "));
        assert!(l == want, "{what}: line {i} is {l:?}");
    }
    assert_eq!(lines.next(), Some("end"), "{what}: no \"end\" line");
    assert_eq!(lines.next(), None, "{what}: more after \"end\"");
    assert_eq!(
        r.body.len(),
        head.len() + 1 + kb * 1024 + 4,
        "{what}: body length"
    );
    // microtime() around usleep(): a signal would have cut the sleep short.
    assert!(
        slept + 1000 >= ms * 1000,
        "{what}: the script slept only {slept} µs of {} µs",
        ms * 1000
    );
    (pid, slept)
}

/// One request of a [`Load`].
#[derive(Clone, Debug)]
pub(super) struct Sample {
    pub(super) start: Instant,
    took: Duration,
    /// 0: transport error.
    pub(super) status: u16,
    pub(super) pid: Option<i32>,
    /// Why it failed (status, error, body), if it did.
    pub(super) problem: Option<String>,
}

/// Clients, each on its own connection to nginx, GETting sleep.php in a
/// loop until stopped; every answer must be 200 with "<pid> <ms> done".
pub(super) struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<Sample>>>,
    pub(super) started: Instant,
}

impl Load {
    pub(super) fn start(threads: usize, url: String, pause: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|_| {
                let (stop, url) = (stop.clone(), url.clone());
                std::thread::spawn(move || {
                    let a = agent_with_timeout(Duration::from_secs(120));
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let start = Instant::now();
                        let r = try_get_with(&a, &url);
                        let took = start.elapsed();
                        let (status, pid, problem) = match &r {
                            Err(e) => (0, None, Some(format!("transport error: {e}"))),
                            Ok(r) => {
                                let text = r.text();
                                let ok = r.status == 200 && text.ends_with(" done");
                                (
                                    r.status,
                                    try_pid_of(&text),
                                    (!ok).then(|| {
                                        format!(
                                            "status {}: {}",
                                            r.status,
                                            text.chars().take(200).collect::<String>()
                                        )
                                    }),
                                )
                            }
                        };
                        out.push(Sample {
                            start,
                            took,
                            status,
                            pid,
                            problem,
                        });
                        if !pause.is_zero() {
                            std::thread::sleep(pause);
                        }
                    }
                    out
                })
            })
            .collect();
        Load {
            stop,
            threads,
            started: Instant::now(),
        }
    }

    pub(super) fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all: Vec<Sample> = self
            .threads
            .into_iter()
            .flat_map(|h| h.join().expect("load thread panicked"))
            .collect();
        all.sort_by_key(|s| s.start);
        all
    }
}

/// The failed samples, described relative to `t0`.
pub(super) fn failures(samples: &[Sample], t0: Instant) -> Vec<String> {
    samples
        .iter()
        .filter_map(|s| {
            s.problem.as_ref().map(|p| {
                format!(
                    "at {:.3} s (took {:?}): {p}",
                    s.start.saturating_duration_since(t0).as_secs_f64(),
                    s.took
                )
            })
        })
        .collect()
}

pub(super) fn assert_no_failure(samples: &[Sample], t0: Instant, what: &str) {
    let bad = failures(samples, t0);
    assert!(
        bad.is_empty(),
        "{what}: {} of {} requests failed:\n{}",
        bad.len(),
        samples.len(),
        bad.join("\n")
    );
}

/// The q-quantile (0..=1) of the latencies.
pub(super) fn quantile<'a>(samples: impl Iterator<Item = &'a Sample>, q: f64) -> Duration {
    let mut v: Vec<Duration> = samples.map(|s| s.took).collect();
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

pub(super) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Keeps the test going for `period` while checking fpmd stays alive (the
/// periods of a scenario, not a wait for anything).
pub(super) fn run_for(fpmd: &mut Fpmd, period: Duration) {
    let pid = fpmd.pid();
    assert!(
        holds_for(period, || procs::alive(pid)),
        "fpmd died; its log:\n{}",
        fpmd.log()
    );
    fpmd.assert_running();
}

/// The live php-cgi processes of the test must all have been started with
/// `want`; waits (generously) for older generations to go.
pub(super) fn wait_only_generation(fpmd: &Fpmd, want: &str, what: &str) {
    let mut last = Vec::new();
    if !wait_until(LONGER, || {
        last = php_cgi_generations(fpmd.tag());
        !last.is_empty() && last.iter().all(|(_, m)| m.as_deref() == Some(want))
    }) {
        panic!(
            "{what}: php-cgi processes of older generations left after {LONGER:?} (want only memory_limit={want}): {last:?}\n{}",
            procs::describe(&procs::descendants(fpmd.pid()))
        );
    }
}

/// Light load: two clients, a 10 ms script, a pause of 20 ms.
pub(super) fn light_load(s: &Stack) -> Load {
    Load::start(2, s.url("/sleep.php?ms=10"), Duration::from_millis(20))
}

/// A php_cgi that takes 300 ms to start (perl, which does not fork: see
/// C02), at `<test dir>/slow-php-cgi`.
pub(super) fn slow_php_cgi(dir: &TestDir) -> PathBuf {
    let slow = dir.join("slow-php-cgi");
    let php = php_cgi_bin().display().to_string();
    write_script(
        &slow,
        &format!("#!/usr/bin/perl\nselect(undef, undef, undef, 0.3);\nexec {{ {php:?} }} {php:?}, @ARGV;\n"),
    );
    slow
}
