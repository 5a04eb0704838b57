//! A real terminal for terminal programs: a tmux server of the test's own
//! (its socket in the test dir, no user configuration), one detached
//! session running a shell command, `send-keys` to type and
//! `capture-pane` to read the screen. The server is killed on drop.

use super::{find_in_path, TestDir};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Fails the test (never skips) when tmux is missing.
pub fn require_tmux() -> PathBuf {
    find_in_path("tmux").unwrap_or_else(|| {
        panic!("tmux is not installed: this test runs `fpmd status` in a real terminal; install it with `apt-get install tmux` (or run `make test`, which does it)")
    })
}

pub struct Tmux {
    bin: PathBuf,
    socket: PathBuf,
    session: String,
}

impl Tmux {
    /// Starts `command` (run by `sh -c`, in the test dir) in a detached
    /// session `session` of `width` × `height` on this test's tmux server
    /// (started with its first session; it ends with its last).
    pub fn start(dir: &TestDir, session: &str, width: u16, height: u16, command: &str) -> Tmux {
        let bin = require_tmux();
        let t = Tmux {
            bin,
            socket: dir.join("tmux.sock"),
            session: session.to_string(),
        };
        t.new_session(dir, session, width, height, command);
        t
    }

    fn new_session(&self, dir: &TestDir, session: &str, width: u16, height: u16, command: &str) {
        let (w, h) = (width.to_string(), height.to_string());
        let dir = dir.path().display().to_string();
        self.run(&[
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            &w,
            "-y",
            &h,
            "-c",
            &dir,
            command,
        ]);
    }

    /// `tmux -S SOCKET ARGS`; panics unless it succeeds. Returns stdout.
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(&self.bin)
            .arg("-f")
            .arg("/dev/null")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .output()
            .unwrap_or_else(|e| panic!("cannot run tmux: {e}"));
        assert!(
            out.status.success(),
            "tmux {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the session's pane shows now, as text.
    pub fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", &self.session])
    }

    /// Types `keys` as `tmux send-keys` names them (`q`, `C-c`, `Enter`).
    pub fn send_keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", self.session.as_str()];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// Waits until the screen satisfies `cond` (looking every 50 ms);
    /// returns that screen. Panics with `what` and the last screen after
    /// `timeout`.
    pub fn wait_screen(
        &self,
        timeout: Duration,
        what: &str,
        mut cond: impl FnMut(&str) -> bool,
    ) -> String {
        let t0 = Instant::now();
        loop {
            let screen = self.screen();
            if cond(&screen) {
                return screen;
            }
            if t0.elapsed() > timeout {
                panic!("timed out after {timeout:?} waiting for the terminal to show {what}; it shows:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new(&self.bin)
            .arg("-S")
            .arg(&self.socket)
            .args(["kill-session", "-t", &self.session])
            .output();
    }
}
