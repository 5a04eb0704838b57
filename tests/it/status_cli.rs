//! `fpmd status [POOL] [--json] [--once]`: the control socket's status
//! document (JSON), the one frame printed when stdout is no terminal, and
//! the top-like view in a real terminal (tmux): it shows every pool and
//! child, follows a running request, and quits on `q` or Ctrl-C with the
//! terminal as it was. An unknown pool, and a daemon that is not running,
//! are errors that say so.

use crate::harness::fpmd::cli;
use crate::harness::http::{agent_with_timeout, try_get_with};
use crate::harness::tmux::Tmux;
use crate::harness::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Two static pools: `www` (2 children, nginx's upstream) and `api` (1).
fn two_pools() -> FpmdConfig {
    FpmdConfig::new()
        .pool(Pool::www().max_children(2))
        .pool(Pool::new("api").max_children(1))
}

/// `fpmd status ARGS --json`, parsed; panics unless it exits 0 with JSON.
fn status_json(fpmd: &Fpmd, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["status"];
    all.extend_from_slice(args);
    all.push("--json");
    let r = fpmd.cli(&all);
    assert_eq!(r.code(), Some(0), "{r}");
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {r}"))
}

fn pool<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["pools"]
        .as_array()
        .expect("pools is an array")
        .iter()
        .find(|p| p["pool"] == name)
        .unwrap_or_else(|| panic!("no pool {name} in {doc}"))
}

fn processes(pool: &serde_json::Value) -> &Vec<serde_json::Value> {
    pool["processes"].as_array().expect("processes is an array")
}

/// A URI no other test asks for.
fn unique_uri() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/sleep.php?ms=3000&x={}-{nanos}", std::process::id())
}

/// GETs `url` again and again, one request at a time, until stopped: a
/// request that is running whenever a look comes, however slow the look.
struct Repeating {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Result<Resp, String>>>,
}

impl Repeating {
    fn start(url: String) -> Repeating {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let agent = agent_with_timeout(Duration::from_secs(60));
            let mut got = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                got.push(try_get_with(&agent, &url));
            }
            got
        });
        Repeating { stop, thread }
    }

    /// Stops after the request under way; every request was answered 200.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let got = self.thread.join().unwrap();
        assert!(!got.is_empty());
        for r in got {
            let r = r.unwrap_or_else(|e| panic!("a sleep.php request failed: {e}"));
            assert_eq!(r.status, 200, "{}", r.text());
            assert!(r.text().ends_with(" done"), "{}", r.text());
        }
    }
}

/// The child rows of a frame: lines whose third column is a state.
fn child_rows(frame: &str) -> Vec<Vec<&str>> {
    frame
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() >= 3 && (w[2] == "Idle" || w[2] == "Running"))
        .collect()
}

/// `--json`: the daemon's pid, version and phase; every pool with its
/// fields and one row per child; a request's URI, method and script while
/// it runs, on the row of the child that serves it; `status POOL` only
/// that pool. The frame printed to a pipe shows the same.
#[test]
fn json_shows_every_pool_and_child_and_the_running_request() {
    let mut s = Stack::start_with(two_pools(), NginxOpts::default());
    s.fpmd.wait_control_socket(LONG);
    // A pre-fork leader's children come just after fpmd is ready.
    let mut doc = serde_json::Value::Null;
    wait_for(LONG, "status --json to show the 3 children", || {
        doc = status_json(&s.fpmd, &[]);
        let n: usize = doc["pools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| processes(p).len())
            .sum();
        n == 3 || {
            std::thread::sleep(Duration::from_millis(100));
            false
        }
    });
    assert_eq!(doc["fpmd"]["pid"], s.fpmd.pid(), "{doc}");
    assert_eq!(doc["fpmd"]["version"], env!("CARGO_PKG_VERSION"), "{doc}");
    assert_eq!(doc["fpmd"]["phase"], "ready", "{doc}");
    let names: Vec<&str> = doc["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pool"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["api", "www"], "{doc}");
    for (name, n) in [("api", 1), ("www", 2)] {
        let p = pool(&doc, name);
        assert_eq!(p["process manager"], "static", "{p}");
        assert_eq!(p["max children"], n, "{p}");
        assert_eq!(p["total processes"], n, "{p}");
        assert_eq!(p["generation"], 1, "{p}");
        assert_eq!(processes(p).len(), n, "{p}");
        for c in processes(p) {
            assert_eq!(c["state"], "Idle", "{c}");
            assert_eq!(c["generation"], 1, "{c}");
        }
    }

    let uri = unique_uri();
    let load = Repeating::start(s.url(&uri));
    let mut running = serde_json::Value::Null;
    wait_for(
        LONG,
        &format!("status --json to show {uri} running"),
        || {
            let doc = status_json(&s.fpmd, &[]);
            let found = processes(pool(&doc, "www"))
                .iter()
                .find(|c| c["state"] == "Running" && c["request uri"] == uri.as_str())
                .cloned();
            match found {
                Some(c) => {
                    assert!(
                        pool(&doc, "www")["active processes"].as_u64() >= Some(1),
                        "{doc}"
                    );
                    running = c;
                    true
                }
                None => {
                    std::thread::sleep(Duration::from_millis(100));
                    false
                }
            }
        },
    );
    assert_eq!(running["request method"], "GET", "{running}");
    assert!(
        running["script"]
            .as_str()
            .unwrap()
            .ends_with("/docroot/sleep.php"),
        "{running}"
    );
    let pid = running["pid"].as_i64().unwrap() as i32;
    assert!(
        s.fpmd.workers().contains(&pid),
        "the running row's pid {pid} is no php-cgi of fpmd's: {:?}",
        s.fpmd.workers()
    );

    // The same for a person: one frame, as stdout is no terminal.
    wait_for(
        LONG,
        "the printed frame to show the request running",
        || {
            let r = s.fpmd.cli(&["status"]);
            assert_eq!(r.code(), Some(0), "{r}");
            assert!(r.stdout.contains("pool www  static"), "{r}");
            assert!(r.stdout.contains("pool api  static"), "{r}");
            assert_eq!(child_rows(&r.stdout).len(), 3, "{r}");
            let shown = child_rows(&r.stdout)
                .iter()
                .any(|w| w[2] == "Running" && w.len() >= 8 && w[6] == uri);
            shown || {
                std::thread::sleep(Duration::from_millis(100));
                false
            }
        },
    );

    let api = status_json(&s.fpmd, &["api"]);
    let only: Vec<&serde_json::Value> = api["pools"].as_array().unwrap().iter().collect();
    assert_eq!(only.len(), 1, "{api}");
    assert_eq!(only[0]["pool"], "api", "{api}");
    assert_eq!(api["fpmd"]["pid"], s.fpmd.pid(), "{api}");
    load.stop();
}

/// The view in a real terminal (tmux, 200 × 50): every pool and child is
/// shown; a request shows up as Running with its URI within seconds; `q`
/// ends it with exit 0 and the terminal back as it was (normal screen,
/// cooked mode). `status www` shows only www and Ctrl-C ends it too;
/// `--once` prints one frame on the terminal and exits.
#[test]
fn view_in_a_terminal_follows_requests_and_quits_on_q() {
    crate::harness::tmux::require_tmux();
    let mut s = Stack::start_with(two_pools(), NginxOpts::default());
    s.fpmd.wait_control_socket(LONG);
    let dir = &s.dir;
    let bin = FPMD_BIN;
    let conf = s.fpmd.conf().display().to_string();
    let tmux = Tmux::start(
        dir,
        "view",
        200,
        50,
        &format!(
            "'{bin}' status -c '{conf}'; code=$?; stty -a > stty.after; \
             echo \"fpmd status exited $code\"; echo $code > view.exit; sleep 600"
        ),
    );
    let screen = tmux.wait_screen(LONG, "both pools and their 3 children", |t| {
        t.contains("pool www  static") && t.contains("pool api  static") && child_rows(t).len() == 3
    });
    assert!(
        screen.contains(&format!("pid {} - ready", s.fpmd.pid())),
        "{screen}"
    );
    assert!(screen.contains("(q: quit)"), "{screen}");
    assert!(
        screen
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["PID", "GEN", "STATE", "REQS", "DURATION", "METHOD", "URI", "SCRIPT"]),
        "{screen}"
    );

    let uri = unique_uri();
    let load = Repeating::start(s.url(&uri));
    let screen = tmux.wait_screen(LONG, &format!("{uri} running"), |t| {
        child_rows(t)
            .iter()
            .any(|w| w[2] == "Running" && w.len() >= 8 && w[5] == "GET" && w[6] == uri)
    });
    let row = child_rows(&screen)
        .into_iter()
        .find(|w| w[2] == "Running")
        .map(|w| w.join(" "))
        .unwrap();
    assert!(row.ends_with("/docroot/sleep.php"), "{row}");
    eprintln!("the view with a request running:\n{screen}");
    load.stop();

    tmux.send_keys(&["q"]);
    let exit = dir.join("view.exit");
    wait_for(LONG, "fpmd status to exit after q", || exit.exists());
    wait_for(LONG, "the exit status to be written", || {
        std::fs::read_to_string(&exit).is_ok_and(|t| t.ends_with('\n'))
    });
    assert_eq!(std::fs::read_to_string(&exit).unwrap().trim(), "0");
    let screen = tmux.wait_screen(LONG, "the shell's screen again", |t| {
        t.contains("fpmd status exited 0")
    });
    assert!(
        !screen.contains("pool www"),
        "the alternate screen was not left:\n{screen}"
    );
    let stty = std::fs::read_to_string(dir.join("stty.after")).unwrap();
    let modes: Vec<&str> = stty.split_whitespace().collect();
    for mode in ["icanon", "echo", "isig", "opost"] {
        assert!(
            modes.contains(&mode),
            "the terminal was left without {mode} (raw mode):\n{stty}"
        );
    }

    // One pool, and Ctrl-C.
    let one = Tmux::start(
        dir,
        "one",
        200,
        50,
        &format!("'{bin}' status www -c '{conf}'; echo $? > one.exit; sleep 600"),
    );
    let screen = one.wait_screen(LONG, "pool www and its 2 children", |t| {
        t.contains("pool www  static") && child_rows(t).len() == 2
    });
    assert!(!screen.contains("pool api"), "{screen}");
    one.send_keys(&["C-c"]);
    let exit = dir.join("one.exit");
    wait_for(LONG, "fpmd status to exit after Ctrl-C", || {
        std::fs::read_to_string(&exit).is_ok_and(|t| t.ends_with('\n'))
    });
    assert_eq!(std::fs::read_to_string(&exit).unwrap().trim(), "0");

    // --once on a terminal: one frame, then the shell.
    let once = Tmux::start(
        dir,
        "once",
        200,
        50,
        &format!("'{bin}' status --once -c '{conf}'; echo \"once exited $?\"; sleep 600"),
    );
    let screen = once.wait_screen(LONG, "one frame and the exit", |t| {
        t.contains("once exited 0")
    });
    assert!(screen.contains("pool api  static"), "{screen}");
    assert_eq!(child_rows(&screen).len(), 3, "{screen}");
    assert!(!screen.contains("(q: quit)"), "{screen}");
}

/// `status POOL` for a pool fpmd does not have: exit 1, and the message
/// names the pools it has (with and without `--json`).
#[test]
fn unknown_pool_is_an_error_that_names_the_pools() {
    let dir = TestDir::new();
    let mut fpmd = Fpmd::start(&dir, two_pools());
    fpmd.wait_control_socket(LONG);
    for args in [&["status", "nope"][..], &["status", "nope", "--json"]] {
        let r = fpmd.cli(args);
        assert_eq!(r.code(), Some(1), "{r}");
        assert!(r.stdout.is_empty(), "{r}");
        assert!(
            r.stderr
                .contains("fpmd: status: no pool named 'nope'; the pools are: api, www"),
            "{r}"
        );
    }
}

/// No fpmd runs with this configuration: exit 1, saying which socket
/// nobody answers on (with and without `--json`).
#[test]
fn status_without_a_daemon_is_an_error() {
    let dir = TestDir::new();
    let conf = two_pools().write(&dir);
    let socket = dir.join("ctl.sock");
    for args in [&["status", "--json"][..], &["status"]] {
        let r = cli(dir.path(), &conf, &dir.tag(), args);
        assert_eq!(r.code(), Some(1), "{r}");
        assert!(r.stdout.is_empty(), "{r}");
        assert!(
            r.stderr.contains(&format!(
                "fpmd: status: cannot reach fpmd at {}",
                socket.display()
            )),
            "{r}"
        );
        assert!(r.stderr.contains("is fpmd running"), "{r}");
    }
}
