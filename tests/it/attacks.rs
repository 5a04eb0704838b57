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

/// Twice [`LONG`]: what these tests wait for happens while a script
/// attacks its own pool (fork bombs, runaway memory, killed or stopped
/// parents) and the bystander pool's request loop runs alongside.
const LONGER: Duration = Duration::from_secs(60);

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
        // Every child of both pools is up before the attack (a script that
        // counts its siblings must find them all).
        fpmd.wait_workers(5, LONGER);
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
        wait_for(LONGER, "the bystander pool's loop to get going", || {
            arena.loop_b.as_ref().unwrap().ok.load(Ordering::Relaxed) >= 5
        });
        arena
    }

    /// GET on pool `a`: status (0: no response within 60 s) and body.
    fn get_a(&self, path: &str) -> (u16, String) {
        let agent = agent_with_timeout(LONGER);
        match try_get_with(&agent, &self.a.url(path)) {
            Ok(r) => (r.status, r.text()),
            Err(e) => (0, e),
        }
    }

    /// Pool `a` answers 200 again (a few requests in a row, so that every
    /// child slot was tried).
    fn wait_a_recovers(&self) {
        wait_for(LONGER, "pool a to serve 200 again", || {
            (0..6).all(|_| self.get_a("/pid.php").0 == 200)
        });
    }

    /// Ends the bystander's loop: it must have had 0 failures.
    fn assert_bystander_unharmed(&mut self) {
        let b = self.loop_b.take().expect("bystander loop");
        // A few more requests after the attack, too.
        let base = b.ok.load(Ordering::Relaxed);
        wait_for(LONGER, "the bystander pool's loop to go on", || {
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
        "fork_return.php",
        r#"<?php
$pid = pcntl_fork();
if ($pid == 0) { echo "child copy returns\n"; return; }
echo "parent: forked $pid\n";
"#,
    ),
    ("who.php", "<?php echo 'who ', $_SERVER['REQUEST_URI'];\n"),
    (
        "leave_and_die.php",
        r#"<?php
// A background process inherits php-cgi's end of fpmd's connection (fd 4
// or so: php-cgi does not set close-on-exec on it), then the child dies.
shell_exec('setsid sh -c "sleep 1234 </dev/null >/dev/null 2>&1 &"');
echo "left\n";
flush();
posix_kill(getmypid(), SIGKILL);
"#,
    ),
    (
        "setsid_grandchild.php",
        r#"<?php
$pid = pcntl_fork();
if ($pid === 0) {
    posix_setsid();
    file_put_contents(__DIR__ . '/run/grandchild.tmp', (string)getmypid());
    rename(__DIR__ . '/run/grandchild.tmp', __DIR__ . '/run/grandchild');
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
        "kill_parent.php",
        r#"<?php
$sig = $_GET['sig'] === 'TERM' ? SIGTERM : SIGKILL;
$ok = posix_kill(posix_getppid(), $sig);
echo $ok ? 'sent' : 'refused: ' . posix_strerror(posix_get_last_error());
"#,
    ),
    (
        "kill_siblings.php",
        r#"<?php
// Every other process of this pool (same cgroup) but the parent.
$mine = file_get_contents('/proc/self/cgroup');
$me = getmypid(); $parent = posix_getppid(); $n = 0;
foreach (glob('/proc/[0-9]*') as $d) {
    $pid = (int)basename($d);
    if ($pid === $me || $pid === $parent) continue;
    if (@file_get_contents("$d/cgroup") !== $mine) continue;
    if (posix_kill($pid, SIGKILL)) $n++;
}
echo "killed $n";
"#,
    ),
    (
        "stop_parent.php",
        r#"<?php
echo posix_kill(posix_getppid(), SIGSTOP) ? 'stopped' : 'refused';
"#,
    ),
    (
        "stop_self.php",
        r#"<?php
posix_kill(getmypid(), SIGSTOP);
echo 'continued';
"#,
    ),
    (
        "close_fds.php",
        r#"<?php
// Outside the CLI, php://fd/N is refused and php://stdout, php://stdin
// are dup()s of fd 1 and fd 0 (php-src ext/standard/php_fopen_wrapper.c):
// closing them closes the copy only.
$fd = @fopen('php://fd/1', 'w');
fclose(fopen('php://stdout', 'w'));
fclose(fopen('php://stdin', 'r'));
file_put_contents('php://stdout', "garbage on fd 1\n");
$out = fopen('php://stdout', 'w');
echo ($fd === false ? 'fd refused, ' : 'fd opened, ') . (is_resource($out) ? 'still open' : 'closed');
"#,
    ),
    (
        "fork_exit.php",
        r#"<?php
// The forked copy ends its request as php-cgi does (exit ends the
// request, not the process) on the connection it shares.
$pid = pcntl_fork();
if ($pid === 0) {
    echo "from the copy ";
    exit(0);
}
pcntl_waitpid($pid, $status);
echo "from the worker ";
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
    assert!(s.fpmd.wait_exit(LONGER).is_some(), "fpmd did not stop");
    wait_for(LONGER, "the setsid() grandchild to be gone", || {
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
    let own = cgroup_dir(std::process::id() as i32, "pids");
    assert!(
        !own.join(format!("fpmd-{}.a", s.fpmd.pid())).exists()
            || std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").is_file(),
        "pool a's cgroup is left"
    );
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
        LONGER,
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
    wait_for(LONGER, "the OOM kill to be logged", || {
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
    wait_for(LONGER, "the forks to be gone", || {
        let php = procs::tagged_php(&s.dir.tag()).len();
        // a: 3 children (+ the pre-fork parent), b: 2 (+ parent).
        php <= if prefork() { 7 } else { 5 }
    });
}

/// Under prefork the parent is the pool's php-cgi parent; under exec it
/// is fpmd (root), which a www-data script cannot signal.
fn kill_parent(sig: &str) {
    let mut s = Arena::start(&[]);
    let offset = s.fpmd.log_len();
    let (_status, body) = s.get_a(&format!("/kill_parent.php?sig={sig}"));
    if prefork() {
        wait_for(LONGER, "the parent's death to be logged", || {
            s.fpmd
                .log_lines_since(offset)
                .iter()
                .any(|l| l.contains("pool=a") && l.contains("exited"))
        });
    } else {
        assert_eq!(body, "refused: Operation not permitted");
    }
    s.fpmd.assert_running();
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
}

#[test]
fn script_sigkills_its_parent() {
    kill_parent("KILL");
}

#[test]
fn script_sigterms_its_parent() {
    kill_parent("TERM");
}

/// A child dies while a process its script left behind holds its end of
/// fpmd's connection: the request gets its 502 at once (what the child
/// wrote before is forwarded), the slot is not wedged for as long as the
/// leftover lives, three times in a row (every child of the pool), and
/// the leftovers go with the pool's cgroup at stop.
#[test]
fn child_dying_with_a_leftover_holding_its_connection_ends_its_request() {
    let mut s = Arena::start(&[]);
    let offset = s.fpmd.log_len();
    for round in 0..3 {
        let t0 = std::time::Instant::now();
        let (status, body) = s.get_a("/leave_and_die.php");
        assert_eq!(
            status,
            502,
            "round {round}: {body:?} after {:?}\nfpmd log:\n{}",
            t0.elapsed(),
            s.fpmd.log_since(offset)
        );
        s.wait_a_recovers();
    }
    let leftovers: Vec<i32> = s
        .tagged_alive()
        .into_iter()
        .filter(|p| procs::cmdline(*p).join(" ").contains("sleep 1234"))
        .collect();
    assert_eq!(leftovers.len(), 3, "the three sleeps are still there");
    s.assert_bystander_unharmed();
}

#[test]
fn script_kills_its_siblings() {
    let mut s = Arena::start(&[]);
    let offset = s.fpmd.log_len();
    let (status, body) = s.get_a("/kill_siblings.php");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "killed 2", "the two other children of pool a");
    wait_for(LONGER, "the siblings' deaths to be logged", || {
        s.fpmd
            .log_lines_since(offset)
            .iter()
            .filter(|l| l.contains("pool=a") && l.contains("signal 9"))
            .count()
            >= 2
    });
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
}

#[test]
fn script_stops_its_parent() {
    if !prefork() {
        // Its parent is fpmd, which it cannot signal (see kill_parent).
        let mut s = Arena::start(&[]);
        assert_eq!(s.get_a("/stop_parent.php"), (200, "refused".into()));
        s.assert_bystander_unharmed();
        return;
    }
    let mut s = Arena::start(&[]);
    let offset = s.fpmd.log_len();
    assert_eq!(s.get_a("/stop_parent.php"), (200, "stopped".into()));
    // A stopped parent forks no child: the siblings die too.
    let (status, body) = s.get_a("/kill_siblings.php");
    assert_eq!(status, 200, "{body}");
    wait_for(LONGER, "the stopped parent to be found and killed", || {
        s.fpmd
            .log_lines_since(offset)
            .iter()
            .any(|l| l.contains("pool=a") && l.contains("is stopped (SIGSTOP)"))
    });
    // A new parent forks all three children again: three requests held
    // at once are served by three pids.
    wait_for(LONGER, "pool a to have three children again", || {
        let url = s.a.url("/sleep.php?ms=500");
        let out = crate::harness::http::concurrent(3, 1, move |a, _, _| try_get_with(a, &url));
        let pids: std::collections::BTreeSet<String> = out
            .iter()
            .filter(|o| o.status() == 200)
            .map(|o| o.text().split_whitespace().next().unwrap_or("").to_string())
            .collect();
        pids.len() == 3
    });
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
}

fn stop_self(lines: &[&str]) {
    let mut s = Arena::start(lines);
    let offset = s.fpmd.log_len();
    let (status, body) = s.get_a("/stop_self.php");
    assert!(
        status == 502 || status == 504,
        "a stopped script got {status} {body}"
    );
    // Killed by whichever comes first: the stopped-process check or
    // request_terminate_timeout; logged with pool and pid either way.
    wait_for(LONGER, "the stopped child's end to be logged", || {
        s.fpmd.log_lines_since(offset).iter().any(|l| {
            l.contains("pool=a")
                && l.contains("pid=")
                && (l.contains("is stopped (SIGSTOP)") || l.contains("request_terminate_timeout"))
        })
    });
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
}

#[test]
fn script_stops_itself_with_request_terminate_timeout() {
    stop_self(&["request_terminate_timeout = \"3s\""]);
}

#[test]
fn script_stops_itself_without_timeouts() {
    stop_self(&[]);
}

#[test]
fn closing_stdout_and_stdin_closes_copies_only() {
    let mut s = Arena::start(&["catch_workers_output = true"]);
    let (status, body) = s.get_a("/close_fds.php");
    assert_eq!((status, body.as_str()), (200, "fd refused, still open"));
    wait_for(LONGER, "fd 1's text in fpmd's log", || {
        s.fpmd.log().contains("garbage on fd 1")
    });
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
}

#[test]
fn forked_copy_that_ends_its_request_does_not_confuse_the_pool() {
    let mut s = Arena::start(&["security.pcntl = true"]);
    let offset = s.fpmd.log_len();
    let (status, body) = s.get_a("/fork_exit.php");
    assert_eq!(status, 200, "{body}");
    // Whichever copy's response came first, it is one response, not a mix.
    assert!(
        body == "from the copy " || body == "from the worker ",
        "{body:?}"
    );
    // Every later request gets its own answer, from a tracked child.
    for _ in 0..30 {
        let (status, body) = s.get_a("/pid.php");
        assert_eq!(status, 200, "{body}");
        assert!(body.parse::<i32>().is_ok(), "{body:?}");
    }
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
    wait_for(LONGER, "no php-cgi but the pools' own", || {
        procs::tagged_php(&s.dir.tag()).len() <= if prefork() { 7 } else { 5 }
    });
    // The copy is killed when its parent's request ends (or, had it
    // outlived that, by the once-a-second health check).
    let log = s.fpmd.log_since(offset);
    assert!(
        log.lines().any(|l| l.contains("pool=a")
            && (l.contains("they share the child's connection, so the child is replaced")
                || l.contains("went back to serving FastCGI"))),
        "{log}"
    );
}

/// The trial's case: a `pcntl_fork` copy that returns goes on in php-cgi's
/// FastCGI loop on the connection it shares with its parent. Its records
/// must never reach another request: every later visitor gets exactly its
/// own answer.
#[test]
fn forked_copy_never_answers_another_visitor() {
    let mut s = Arena::start(&["security.pcntl = true"]);
    let offset = s.fpmd.log_len();
    let (status, body) = s.get_a("/fork_return.php");
    assert_eq!(status, 200, "{body}");
    for visitor in 1..=10 {
        let uri = format!("/who.php?visitor={visitor}");
        let (status, body) = s.get_a(&uri);
        assert_eq!(
            (status, body.as_str()),
            (200, format!("who {uri}").as_str()),
            "visitor {visitor}\nfpmd log:\n{}",
            s.fpmd.log_since(offset)
        );
    }
    s.wait_a_recovers();
    s.assert_bystander_unharmed();
}

/// The directory of `pid`'s cgroup for `controller` (cgroup v1), or its
/// unified cgroup (v2; `controller` ignored).
fn cgroup_dir(pid: i32, controller: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let root = std::path::Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").is_file() {
        let path = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
        return root.join(path.trim_start_matches('/'));
    }
    let path = text
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let _ = f.next();
            let c = f.next()?;
            let p = f.next()?;
            c.split(',').any(|c| c == controller).then_some(p)
        })
        .unwrap_or_else(|| panic!("no {controller} line in {text}"));
    root.join(controller).join(path.trim_start_matches('/'))
}

#[test]
fn cgroup_limits_change_live_on_reload_and_the_cgroup_goes_with_its_pool() {
    let mut s = Arena::start(&["cgroup.pids_max = 30", "cgroup.cpu_weight = 50"]);
    let (_, body) = s.get_a("/pid.php");
    let child: i32 = body.parse().unwrap();
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").is_file();
    let read = |controller: &str, file: &str| {
        std::fs::read_to_string(cgroup_dir(child, controller).join(file))
            .unwrap()
            .trim()
            .to_string()
    };
    let pids = cgroup_dir(child, "pids");
    assert!(
        pids.ends_with(format!("fpmd-{}.a", s.fpmd.pid())),
        "{}",
        pids.display()
    );
    assert_eq!(read("pids", "pids.max"), "30");
    if v2 {
        assert_eq!(read("cpu", "cpu.weight"), "50");
    } else {
        assert_eq!(read("cpu", "cpu.shares"), "512");
        assert_eq!(
            read("memory", "memory.limit_in_bytes"),
            "9223372036854771712"
        );
    }
    // New limits, same children.
    let cfg = |lines: &[&str]| {
        FpmdConfig::new()
            .pool(Pool::new("a").max_children(3).lines(lines))
            .pool(Pool::new("b").max_children(2))
    };
    s.fpmd.rewrite(&cfg(&[
        "cgroup.pids_max = 40",
        "cgroup.memory_max = \"300M\"",
    ]));
    s.fpmd.reload_ok();
    assert!(procs::alive(child), "the reload kept the children");
    assert_eq!(read("pids", "pids.max"), "40");
    if v2 {
        assert_eq!(read("memory", "memory.max"), (300u64 << 20).to_string());
        assert_eq!(read("cpu", "cpu.weight"), "100");
    } else {
        assert_eq!(
            read("memory", "memory.limit_in_bytes"),
            (300u64 << 20).to_string()
        );
        assert_eq!(read("cpu", "cpu.shares"), "1024");
    }
    // Pool a removed: its cgroup goes, in every hierarchy.
    let dirs: Vec<_> = ["memory", "pids", "cpu", "freezer"]
        .iter()
        .map(|c| cgroup_dir(child, c))
        .collect();
    s.fpmd
        .rewrite(&FpmdConfig::new().pool(Pool::new("b").max_children(2)));
    s.fpmd.reload_ok();
    wait_for(LONGER, "pool a's cgroup to be removed", || {
        dirs.iter().all(|d| !d.exists())
    });
    s.assert_bystander_unharmed();
}
