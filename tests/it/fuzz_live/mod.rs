//! A live mutation fuzzer against the real daemon.
//!
//! fpmd runs two pools of 4 static children, one on a unix socket and one
//! on TCP, each behind its own nginx with upstream keep-alive, both with
//! `request_terminate_timeout = "5s"` (a fuzzed request cannot hold a child
//! for ever). For `FPMD_LIVE_FUZZ_SECS` (default 20 s), on each listener:
//!
//! - good requests through nginx, 3 threads taking turns at GET hello.php
//!   with a query, a POST of a random body to body.php checked by md5, and a
//!   PATH_INFO request of server_vars.php: every answer must be right;
//! - a mutation fuzzer, 2 threads connecting straight to fpmd's listener:
//!   many raw FastCGI connections, some kept open (slowloris drips among
//!   them), some in bursts, some closed abruptly, some half-closed. Each
//!   follows a [`plan::Plan`] drawn from the seed: mutated versions of
//!   valid requests ([`mutators`]), CONTENT_LENGTH lies in well-formed
//!   requests, a valid request with something else sent while it runs,
//!   slow readers of big responses, management records (GET_VALUES small,
//!   huge, floods; unknown types), noise, idle connections; sent at
//!   various paces ([`plan::Pacing`]).
//!
//! Answers to garbage are read and thrown away; they must only be
//! well-formed FastCGI ([`checks::Got::take`]) and carry no other
//! connection's marker: every connection (and every good request) has its
//! own marker in the query string of hello.php, which echoes it, so a
//! request or a response that reached the wrong client shows. A quarter of
//! the connections send only legal FastCGI, cut and paced oddly (records
//! split anywhere, any padding, 4-byte lengths, several requests on a kept
//! connection, GET_VALUES before and during a request, byte by byte,
//! slowly, a big response read slowly): their answers must be right too.
//!
//! Afterwards: fpmd runs, each pool serves 4 requests at once, 8 live
//! children and no zombie, no panic in fpmd's log, an RSS under 200 MiB,
//! and no child was kept on the request of a client that had left
//! ([`afterwards::held_for_gone_clients`]).
//!
//! The seed is printed; `FPMD_LIVE_FUZZ_SEED=N` replays it: the bytes
//! each connection of each fuzz thread sends follow from the seed (the
//! interleaving of the threads, and so fpmd's answers, do not). With
//! FPMD_KEEP_TMP=1 the test dir keeps `fuzz-unix.log` and `fuzz-tcp.log`,
//! one line per connection (when, who, its marker and plan), next to
//! fpmd's log.
//!
//! The parts: [`rng`] (the PRNG and the markers), [`sock`] (the fuzzer's
//! client sockets), [`requests`] (what is sent before it is broken),
//! [`mutators`] (how it is broken), [`plan`] (what one connection does),
//! [`run`] (the fuzz threads running plans), [`checks`] (what every
//! connection's answers must be), [`good`] (the good requests through
//! nginx), [`afterwards`] (the figures, and the checks once the run is
//! over). This file: the test, as its steps.

mod afterwards;
mod checks;
mod good;
mod mutators;
mod plan;
mod requests;
mod rng;
mod run;
mod sock;

use crate::harness::*;
use afterwards::{held_for_gone_clients, n_concurrent, report, zombies};
use checks::raw_hello_works;
use good::{good_loop, GoodStats};
use rng::Rng;
use run::{fuzz_thread, FuzzStats};
use sock::Target;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

const CHILDREN: usize = 4;
const LISTENERS: [&str; 2] = ["unix", "tcp"];
const GOOD_THREADS: usize = 3;
const FUZZ_THREADS: usize = 2;
const RSS_BAR: u64 = 200 << 20;

/// What the fuzzer needs to know of the stack.
struct Ctx {
    docroot: PathBuf,
    target: Target,
    listener: usize,
    deadline: Instant,
    /// `fuzz-<listener>.log` in the test dir: one line per connection (when
    /// it was opened, who, what it does), to match with fpmd's log.
    plans: Mutex<std::fs::File>,
}

#[test]
fn live_fuzzer_on_unix_and_tcp_listeners() {
    let seed = env_seed();
    let run = env_secs();
    eprintln!(
        "live fuzz: seed {seed} (replay with FPMD_LIVE_FUZZ_SEED={seed}), {run:?} on each listener, spawn {}",
        std::env::var("FPMD_TEST_SPAWN").unwrap_or_else(|_| "default".into())
    );
    // The stack, and the fuzzer's own client working on both listeners.
    let dir = TestDir::new();
    let (mut fpmd, nginx) = start_stack(&dir);
    let docroot = dir.docroot();
    let targets: Vec<Target> = (0..LISTENERS.len()).map(|i| fpmd.addr(i).into()).collect();
    for (i, t) in targets.iter().enumerate() {
        raw_hello_works(t, &docroot, LISTENERS[i]);
    }

    // The run: good requests through nginx, fuzzed connections straight
    // to fpmd.
    let t0 = Instant::now();
    let (fuzz, good) = fuzz_and_serve(&dir, &nginx, &targets, seed, t0 + run);
    let wall = t0.elapsed();

    // The figures.
    let log = fpmd.log();
    eprintln!("---- live fuzz, seed {seed}: {wall:?} ----");
    report(&fuzz, &good, &log);

    // fpmd lived through it, and said nothing of a panic.
    fpmd.assert_running();
    let panics: Vec<&str> = log.lines().filter(|l| l.contains("panicked")).collect();
    assert!(panics.is_empty(), "seed {seed}: fpmd panicked: {panics:#?}");

    // Every child is accounted for: each pool runs 4 requests at once, 8
    // live workers, no zombie.
    for (l, name) in LISTENERS.iter().enumerate() {
        n_concurrent(&nginx[l], CHILDREN, &format!("after-{name}"));
    }
    let whole = wait_until(LONG, || {
        fpmd.workers().len() == 2 * CHILDREN
            && LISTENERS
                .iter()
                .all(|p| fpmd.workers_with_env("POOL", p).len() == CHILDREN)
            && zombies(&fpmd).is_empty()
    });
    assert!(
        whole,
        "seed {seed}: after the run: {} workers ({}), zombies: {}",
        fpmd.workers().len(),
        LISTENERS
            .iter()
            .map(|p| format!("{p}: {}", fpmd.workers_with_env("POOL", p).len()))
            .collect::<Vec<_>>()
            .join(", "),
        procs::describe(&zombies(&fpmd))
    );
    fpmd.assert_running();
    let rss = procs::vm_rss(fpmd.pid()).expect("fpmd's VmRSS");
    eprintln!(
        "after the run: {} workers, no zombie; fpmd RSS {:.1} MiB",
        fpmd.workers().len(),
        rss as f64 / 1048576.0
    );

    // The good loops, the fuzzed connections' answers, and children kept
    // on requests of clients that had left.
    let good_failures: Vec<String> = good
        .iter()
        .flat_map(|g| g.failures.lock().unwrap().clone())
        .collect();
    let failed: u64 = good.iter().map(|g| g.failed.load(Relaxed)).sum();
    assert!(
        failed == 0,
        "seed {seed}: {failed} good requests through nginx failed:\n{}",
        good_failures.join("\n")
    );
    let mut violations: Vec<String> = fuzz
        .iter()
        .flat_map(|f| f.violations.lock().unwrap().clone())
        .collect();
    let held = held_for_gone_clients(&fpmd.log(), &fuzz);
    for h in &held {
        eprintln!("VIOLATION: {h}");
    }
    violations.extend(held);
    assert!(
        violations.is_empty(),
        "seed {seed} (replay with FPMD_LIVE_FUZZ_SEED={seed}): {} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    for (l, f) in fuzz.iter().enumerate() {
        assert!(
            f.legal_ok.load(Relaxed) > 0,
            "{}: no legal fuzz request was answered at all",
            LISTENERS[l]
        );
    }
    assert!(
        rss < RSS_BAR,
        "seed {seed}: fpmd's RSS is {:.1} MiB after the run (bar: {} MiB)",
        rss as f64 / 1048576.0,
        RSS_BAR >> 20
    );
    eprintln!("test wall time {:?} (fuzzing {wall:?})", t0.elapsed());
}

/// fpmd with the two pools (unix, TCP) of [`CHILDREN`] static children,
/// `request_terminate_timeout = "5s"`, each behind its own nginx with
/// upstream keep-alive and PATH_INFO; returns once every child runs.
fn start_stack(dir: &TestDir) -> (Fpmd, Vec<Nginx>) {
    let mut cfg = FpmdConfig::new();
    for name in LISTENERS {
        let mut p = Pool::new(name).max_children(CHILDREN as u32).lines(&[
            r#"request_terminate_timeout = "5s""#,
            &format!("env.POOL = {name:?}"),
        ]);
        if name == "tcp" {
            p = p.tcp(format!("127.0.0.1:{}", free_port()));
        }
        cfg = cfg.pool(p);
    }
    let fpmd = Fpmd::start(dir, cfg);
    let nginx: Vec<Nginx> = (0..LISTENERS.len())
        .map(|i| {
            Nginx::start(
                dir,
                NginxOpts::default()
                    .keepalive()
                    .path_info()
                    .upstream(fpmd.upstream(i))
                    .name(&format!("nginx-{}", LISTENERS[i])),
            )
        })
        .collect();
    fpmd.wait_workers(2 * CHILDREN, LONG);
    (fpmd, nginx)
}

/// Until `deadline`, on each listener: [`GOOD_THREADS`] good loops
/// through its nginx and [`FUZZ_THREADS`] fuzz threads straight to
/// `targets`; returns their counts. Each fuzz thread's plans go to
/// `fuzz-<listener>.log` in the test dir.
fn fuzz_and_serve(
    dir: &TestDir,
    nginx: &[Nginx],
    targets: &[Target],
    seed: u64,
    deadline: Instant,
) -> (Vec<FuzzStats>, Vec<GoodStats>) {
    let docroot = dir.docroot();
    let fuzz: Vec<FuzzStats> = LISTENERS.iter().map(|_| FuzzStats::default()).collect();
    let good: Vec<GoodStats> = LISTENERS.iter().map(|_| GoodStats::default()).collect();
    let ctxs: Vec<Ctx> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| Ctx {
            docroot: docroot.clone(),
            target: t.clone(),
            listener: i,
            deadline,
            plans: Mutex::new(
                std::fs::File::create(dir.join(format!("fuzz-{}.log", LISTENERS[i]))).unwrap(),
            ),
        })
        .collect();
    std::thread::scope(|sc| {
        for l in 0..LISTENERS.len() {
            let base = nginx[l].url("");
            for t in 0..GOOD_THREADS {
                let (base, docroot, good) = (base.clone(), &docroot, &good[l]);
                sc.spawn(move || good_loop(l, t, &base, docroot, deadline, seed, good));
            }
            for t in 0..FUZZ_THREADS {
                let (ctx, fuzz) = (&ctxs[l], &fuzz[l]);
                sc.spawn(move || fuzz_thread(ctx, t, seed, fuzz));
            }
        }
    });
    (fuzz, good)
}

/// The seed: `FPMD_LIVE_FUZZ_SEED` (decimal, or hex after `0x`), else one
/// drawn from the clock and the pid.
fn env_seed() -> u64 {
    match std::env::var("FPMD_LIVE_FUZZ_SEED") {
        Ok(s) if !s.trim().is_empty() => {
            let s = s.trim();
            s.strip_prefix("0x")
                .map(|h| u64::from_str_radix(h, 16))
                .unwrap_or_else(|| s.parse())
                .unwrap_or_else(|e| panic!("FPMD_LIVE_FUZZ_SEED={s:?}: {e}"))
        }
        _ => {
            let t = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap();
            Rng::new(t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32)).next()
                % 1_000_000_000
        }
    }
}

/// How long the run lasts on each listener: `FPMD_LIVE_FUZZ_SECS`
/// (seconds, may be fractional), else 20 s.
fn env_secs() -> Duration {
    match std::env::var("FPMD_LIVE_FUZZ_SECS") {
        Ok(s) if !s.trim().is_empty() => {
            let secs: f64 = s
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("FPMD_LIVE_FUZZ_SECS={s:?}: {e}"));
            Duration::from_secs_f64(secs)
        }
        _ => Duration::from_secs(20),
    }
}
