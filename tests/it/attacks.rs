//! Issue 10, "scripts that attack their own pool" and must-show 5: a
//! script that kills or stops its php-cgi parent or siblings, stops
//! itself, forks and leaves a grandchild, allocates without bound or
//! fork-bombs costs at most its own pool's requests, is logged, and the
//! pool recovers; another pool's request loop running alongside has 0
//! failures; nothing a script started outlives its pool (the pool's
//! cgroup). Also: pcntl is disabled for web requests unless
//! `security.pcntl = true`.

use crate::harness::http::{agent_with_timeout, try_get_with};
use crate::harness::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

/// The attacked pool `a` (nginx `na`) and a bystander pool `b` (nginx
/// `nb`), whose request loop runs for the whole test.
struct Arena {
    a: Nginx,
    b: Nginx,
    fpmd: Fpmd,
    dir: TestDir,
    loop_b: Option<Bystander>,
}

struct Bystander {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    thread: JoinHandle<Vec<String>>,
}

fn prefork() -> bool {
    std::env::var("FPMD_TEST_SPAWN").map_or(true, |s| s.is_empty() || s == "prefork")
}

impl Arena {
    /// Pool `a` gets `lines` (and 3 children), pool `b` 2 children. The
    /// attack scripts are written into the docroot.
    fn start(lines: &[&str]) -> Arena {
        let dir = TestDir::new();
        for (name, body) in SCRIPTS {
            std::fs::write(dir.docroot().join(name), body).unwrap();
        }
        let cfg = FpmdConfig::new()
            .pool(Pool::new("a").max_children(3).lines(lines))
            .pool(Pool::new("b").max_children(2));
        let fpmd = Fpmd::start(&dir, cfg);
        let a = Nginx::start(
            &dir,
            NginxOpts::default().upstream(fpmd.upstream(0)).name("na"),
        );
        let b = Nginx::start(
            &dir,
            NginxOpts::default().upstream(fpmd.upstream(1)).name("nb"),
        );
        let mut arena = Arena {
            a,
            b,
            fpmd,
            dir,
            loop_b: None,
        };
        // Both pools serve before the attack.
        assert_eq!(arena.get_a("/pid.php").0, 200);
        let url = arena.b.url("/pid.php");
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (stop, ok) = (stop.clone(), ok.clone());
            std::thread::spawn(move || {
                let agent = agent_with_timeout(Duration::from_secs(30));
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match try_get_with(&agent, &url) {
                        Ok(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => failures.push(format!("{} {}", r.status, r.text())),
                        Err(e) => failures.push(e),
                    }
                }
                failures
            })
        };
        arena.loop_b = Some(Bystander { stop, ok, thread });
        wait_for(LONG, "the bystander pool's loop to get going", || {
            arena.loop_b.as_ref().unwrap().ok.load(Ordering::Relaxed) >= 5
        });
        arena
    }

    /// GET on pool `a`: status (0: no response within 60 s) and body.
    fn get_a(&self, path: &str) -> (u16, String) {
        let agent = agent_with_timeout(LONG);
        match try_get_with(&agent, &self.a.url(path)) {
            Ok(r) => (r.status, r.text()),
            Err(e) => (0, e),
        }
    }

    /// Pool `a` answers 200 again (a few requests in a row, so that every
    /// child slot was tried).
    fn wait_a_recovers(&self) {
        wait_for(LONG, "pool a to serve 200 again", || {
            (0..6).all(|_| self.get_a("/pid.php").0 == 200)
        });
    }

    /// Ends the bystander's loop: it must have had 0 failures.
    fn assert_bystander_unharmed(&mut self) {
        let b = self.loop_b.take().expect("bystander loop");
        // A few more requests after the attack, too.
        let base = b.ok.load(Ordering::Relaxed);
        wait_for(LONG, "the bystander pool's loop to go on", || {
            b.ok.load(Ordering::Relaxed) >= base + 5
        });
        b.stop.store(true, Ordering::Relaxed);
        let failures = b.thread.join().unwrap();
        let ok = b.ok.load(Ordering::Relaxed);
        eprintln!("bystander pool b: {ok} requests answered 200");
        assert!(
            failures.is_empty(),
            "pool b failed {} requests during the attack on pool a: {:?}\nfpmd log:\n{}",
            failures.len(),
            &failures[..failures.len().min(5)],
            self.fpmd.log()
        );
    }

    /// Every process with the test's tag: php-cgi and what scripts started.
    fn tagged_alive(&self) -> Vec<i32> {
        procs::tagged(&self.dir.tag())
            .into_iter()
            .filter(|p| p.alive())
            .map(|p| p.pid)
            .filter(|p| *p != self.fpmd.pid())
            .collect()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if let Some(b) = self.loop_b.take() {
            b.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// The attack scripts, written into the docroot by [`Arena::start`].
const SCRIPTS: &[(&str, &str)] = &[
    (
        "setsid_grandchild.php",
        r#"<?php
$pid = pcntl_fork();
if ($pid === 0) {
    posix_setsid();
    file_put_contents(__DIR__ . '/run/grandchild', (string)getmypid());
    sleep(600);
    posix_kill(getmypid(), SIGKILL);
}
while (!is_file(__DIR__ . '/run/grandchild')) { usleep(10000); }
echo "forked $pid";
"#,
    ),
    (
        "eat_memory.php",
        r#"<?php
ini_set('memory_limit', '-1');
$a = [];
while (true) { $a[] = str_repeat('x', 1 << 20); }
"#,
    ),
    (
        "fork_bomb.php",
        r#"<?php
$ok = 0; $failed = 0;
for ($i = 0; $i < 200; $i++) {
    $pid = pcntl_fork();
    if ($pid === 0) {
        // Stay until the parent is done forking, then vanish without
        // writing to the shared FastCGI connection.
        usleep(1500000);
        posix_kill(getmypid(), SIGKILL);
    } elseif ($pid > 0) {
        $ok++;
    } else {
        $failed++;
    }
}
echo "forked $ok failed $failed";
"#,
    ),
    (
        "has_pcntl.php",
        r#"<?php
echo function_exists('pcntl_fork') ? 'pcntl on' : 'pcntl off';
"#,
    ),
];

#[test]
fn pcntl_is_disabled_for_web_requests_by_default() {
    let mut s = Arena::start(&[]);
    assert_eq!(s.get_a("/has_pcntl.php"), (200, "pcntl off".to_string()));
    let (status, body) = s.get_a("/fork_bomb.php");
    assert!(
        body.contains("pcntl_fork() has been disabled") || status == 500,
        "{status} {body}"
    );
    s.assert_bystander_unharmed();
}

#[test]
fn pcntl_opt_out_allows_it() {
    let mut s = Arena::start(&["security.pcntl = true"]);
    assert_eq!(s.get_a("/has_pcntl.php"), (200, "pcntl on".to_string()));
    s.assert_bystander_unharmed();
}

#[test]
fn setsid_grandchild_does_not_outlive_fpmd_stop() {
    let mut s = Arena::start(&["security.pcntl = true"]);
    let (status, body) = s.get_a("/setsid_grandchild.php");
    assert_eq!(status, 200, "{body}");
    let grandchild: i32 = s.dir.mark("grandchild").unwrap().trim().parse().unwrap();
    assert!(procs::alive(grandchild));
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
    // The grandchild is in pool a's cgroup, in every hierarchy.
    let cgroup = std::fs::read_to_string(format!("/proc/{grandchild}/cgroup")).unwrap();
    let name = format!("/fpmd-{}.a", s.fpmd.pid());
    for controller in ["memory", "pids", "cpu", "freezer"] {
        assert!(
            cgroup
                .lines()
                .any(|l| l.split(':').nth(1) == Some(controller) && l.ends_with(&name)),
            "{controller}: {cgroup}"
        );
    }
    let offset = s.fpmd.log_len();
    s.fpmd.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(s.fpmd.wait_exit(LONG).is_some(), "fpmd did not stop");
    wait_for(LONG, "the setsid() grandchild to be gone", || {
        !procs::alive(grandchild)
    });
    let log = s.fpmd.log_since(offset);
    assert!(
        log.lines().any(|l| l.contains("still in the pool's cgroup")
            && l.contains("pool=a")
            && l.contains(&grandchild.to_string())),
        "{log}"
    );
    let left = s.tagged_alive();
    assert!(
        left.is_empty(),
        "processes of the pools outlived fpmd: {}",
        procs::describe(&procs::tagged(&s.dir.tag()))
    );
}

#[test]
fn setsid_grandchild_dies_with_its_pool_removed_by_reload() {
    let mut s = Arena::start(&["security.pcntl = true"]);
    let (status, body) = s.get_a("/setsid_grandchild.php");
    assert_eq!(status, 200, "{body}");
    let grandchild: i32 = s.dir.mark("grandchild").unwrap().trim().parse().unwrap();
    // Pool a is removed; b stays and its loop goes on.
    s.fpmd
        .rewrite(&FpmdConfig::new().pool(Pool::new("b").max_children(2)));
    s.fpmd.reload_ok();
    wait_for(
        LONG,
        "the removed pool's setsid() grandchild to be gone",
        || !procs::alive(grandchild),
    );
    s.assert_bystander_unharmed();
}

#[test]
fn memory_max_kills_a_runaway_script_and_the_pool_recovers() {
    let mut s = Arena::start(&["cgroup.memory_max = \"256M\""]);
    let offset = s.fpmd.log_len();
    let (status, body) = s.get_a("/eat_memory.php");
    assert!(
        status == 502 || status == 500 || status == 0,
        "the runaway script got {status} {body}"
    );
    wait_for(LONG, "the OOM kill to be logged", || {
        s.fpmd
            .log_since(offset)
            .contains("killed by the pool's cgroup memory limit (cgroup.memory_max = 256M)")
    });
    let line = s
        .fpmd
        .log_lines_since(offset)
        .into_iter()
        .find(|l| l.contains("cgroup memory limit"))
        .unwrap();
    assert!(line.contains("pool=a"), "{line}");
    s.fpmd.assert_running();
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
}

#[test]
fn pids_max_contains_a_fork_bomb() {
    let mut s = Arena::start(&["security.pcntl = true", "cgroup.pids_max = 30"]);
    let (status, body) = s.get_a("/fork_bomb.php");
    assert_eq!(status, 200, "{body}");
    let numbers: Vec<u32> = body
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (ok, failed) = (numbers[0], numbers[1]);
    eprintln!("fork bomb: {ok} forks, {failed} refused");
    assert!(ok < 30, "{body}");
    assert!(failed > 0, "{body}");
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
    // The forks are gone after the request (they lived 1.5 s).
    wait_for(LONG, "the forks to be gone", || {
        let php = procs::tagged_php(&s.dir.tag()).len();
        // a: 3 children (+ the pre-fork parent), b: 2 (+ parent).
        php <= if prefork() { 7 } else { 5 }
    });
}
