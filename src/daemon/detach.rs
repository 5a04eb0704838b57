//! `daemonize = yes` and `-D`: detaching from the terminal as php-fpm does
//! (php-src `sapi/fpm/fpm/fpm_unix.c`, `fpm_unix_init_main`): fork; the
//! parent waits on a pipe until the daemon says it serves, then exits 0,
//! or, when the daemon dies first, exits with the daemon's status; the
//! daemon calls `setsid` and, once ready, puts `/dev/null` on its stdin,
//! stdout and stderr.
//!
//! Owns: that fork, the readiness pipe and the daemon's standard
//! descriptors. Must not touch anything else. [`detach`] must run before
//! any thread starts (the tokio runtime included): after a fork only the
//! calling thread exists in the child.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

/// The daemon's end of the readiness pipe: [`Ready::notify`] tells the
/// waiting parent to exit 0.
#[derive(Debug)]
pub struct Ready(std::fs::File);

impl Ready {
    /// Redirects stdin, stdout and stderr to `/dev/null` (the terminal is
    /// the parent's), then tells the parent the daemon serves (so that
    /// the daemon holds none of the parent's descriptors once it has
    /// exited). The parent is told even when `/dev/null` fails. Errors:
    /// `/dev/null` or the pipe fails (the daemon serves on; the caller
    /// logs).
    pub fn notify(mut self) -> io::Result<()> {
        let redirected = to_dev_null();
        let told = self.0.write_all(b"1");
        redirected.and(told)
    }
}

/// `/dev/null` on fds 0, 1 and 2.
fn to_dev_null() -> io::Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for fd in 0..=2 {
        // SAFETY: dup2 of an open descriptor onto a standard one.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Forks. In the daemon (the child, now leader of a new session) returns
/// its [`Ready`]; the calling process never returns: it exits 0 once the
/// daemon calls [`Ready::notify`], else with the daemon's exit status
/// (128 + signal when it was killed) as soon as it exits. Errors (in the
/// caller, nothing forked): more than one thread runs (forking would leave
/// the others' locks held in the child), or `pipe`/`fork` fails.
pub fn detach() -> io::Result<Ready> {
    if let Some(n) = threads().filter(|&n| n > 1) {
        return Err(io::Error::other(format!(
            "cannot detach: {n} threads run already (detaching must come first)"
        )));
    }
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: one thread (checked above): the child may run any code.
    match unsafe { fork() }? {
        ForkResult::Child => {
            drop(read_end);
            nix::unistd::setsid()?;
            Ok(Ready(std::fs::File::from(write_end)))
        }
        ForkResult::Parent { child } => {
            drop(write_end);
            std::process::exit(wait_for_daemon(read_end, child))
        }
    }
}

/// The parent's side: 0 when the daemon says it is ready, else the
/// daemon's exit status once it exits.
fn wait_for_daemon(read_end: OwnedFd, child: nix::unistd::Pid) -> i32 {
    let mut byte = [0u8; 1];
    let mut pipe = std::fs::File::from(read_end);
    loop {
        match pipe.read(&mut byte) {
            Ok(1) => return 0,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            _ => break,
        }
    }
    // The pipe closed without a word: the daemon is exiting.
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, sig, _)) => return 128 + sig as i32,
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                eprintln!("fpmd: cannot learn how the daemon exited: {e}");
                return 1;
            }
        }
    }
}

/// Threads of this process (`Threads:` of `/proc/self/status`), if known.
fn threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test runs on a thread of its own beside the harness's main
    /// thread: detaching is refused there, before any fork.
    #[test]
    fn refuses_to_fork_with_threads() {
        assert!(threads().unwrap() >= 2);
        let e = detach().unwrap_err();
        assert!(e.to_string().contains("threads run already"), "{e}");
    }
}
