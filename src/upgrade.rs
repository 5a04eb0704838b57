//! Binary upgrade: the running fpmd starts the fpmd binary now on disk and
//! hands it every listening socket, so that no connection is refused while
//! one process takes over from the other (as nginx's binary upgrade,
//! HAProxy's `-x` and pingora's upgrade do).
//!
//! Owns: the hand-over conversation on a unix socket pair between the old
//! process (which spawns the new one with `--upgrade-fd N`) and the new
//! one. Must not touch: pools, accept loops (the daemon stops its own once
//! the new process is ready).
//!
//! The conversation, one text line each way, then the sockets:
//! 1. new → old: `ok` (its configuration validates) or `error config MSG`
//!    (it exits 78; the old one serves on);
//! 2. old → new: every listener ([`crate::listen::transfer`]);
//! 3. new → old: `ready PID` once its pools have started; the old one then
//!    stops accepting (without unlinking a socket file), drains its
//!    requests, stops its children and exits.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::listen::{transfer, ListenKey, ListenerTable};

/// How long the old process waits for each step of the new one.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// What the old process learned from the new one.
#[derive(Debug)]
pub enum Outcome {
    /// The new process (this pid) serves.
    Ready(u32),
    /// Its configuration does not validate; it exited.
    ConfigError(String),
    /// It failed otherwise (exited, or said something unexpected).
    Failed(String),
}

/// Old process: duplicates of every listener of `table`, to hand over from
/// a blocking thread.
pub fn listeners_of(table: &ListenerTable) -> io::Result<Vec<(ListenKey, OwnedFd)>> {
    table
        .fds()
        .into_iter()
        .map(|(k, fd)| Ok((k, fd.try_clone_to_owned()?)))
        .collect()
}

/// Old process: starts `exe` on `config` (with the command line's
/// `options`, [`crate::config::LoadOptions::args`]) with the other end of
/// a socket pair, hands it `listeners` when it validated its
/// configuration, and waits until it serves. Blocking: run it off the
/// runtime thread.
pub fn start_new(
    exe: &Path,
    config: &Path,
    options: &[std::ffi::OsString],
    listeners: Vec<(ListenKey, OwnedFd)>,
) -> Outcome {
    match start_new_inner(exe, config, options, listeners) {
        Ok(o) => o,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

fn start_new_inner(
    exe: &Path,
    config: &Path,
    options: &[std::ffi::OsString],
    listeners: Vec<(ListenKey, OwnedFd)>,
) -> io::Result<Outcome> {
    let (ours, theirs) = UnixStream::pair()?;
    // The new process's end must survive its exec.
    nix::fcntl::fcntl(
        theirs.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )?;
    // -y: the configuration whatever its name ends in (-c would take a
    // name not ending in .toml or .conf for a php.ini).
    let mut child = std::process::Command::new(exe)
        .arg("-y")
        .arg(config)
        .args(options)
        .arg("--upgrade-fd")
        .arg(theirs.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot start {}: {e}", exe.display())))?;
    drop(theirs);
    ours.set_read_timeout(Some(STEP_TIMEOUT))?;
    let mut lines = BufReader::new(ours.try_clone()?);
    let exited = |child: &mut std::process::Child| match child.try_wait() {
        Ok(Some(st)) => format!("the new fpmd exited ({st})"),
        _ => "the new fpmd did not answer".to_string(),
    };
    let mut line = String::new();
    if lines.read_line(&mut line)? == 0 {
        let _ = child.wait();
        return Ok(Outcome::Failed(exited(&mut child)));
    }
    if let Some(msg) = line.trim_end().strip_prefix("error config ") {
        let _ = child.wait();
        return Ok(Outcome::ConfigError(msg.to_string()));
    }
    if line.trim_end() != "ok" {
        return Ok(Outcome::Failed(format!(
            "the new fpmd said {:?}",
            line.trim_end()
        )));
    }
    let borrowed: Vec<_> = listeners
        .iter()
        .map(|(k, fd)| (k.clone(), fd.as_fd()))
        .collect();
    transfer::send_listeners(&ours, &borrowed).map_err(io::Error::other)?;
    line.clear();
    if lines.read_line(&mut line)? == 0 {
        let _ = child.wait();
        return Ok(Outcome::Failed(exited(&mut child)));
    }
    // The new process outlives this one; it is reparented when this one
    // exits. Its exit is reaped here until then (it is our child).
    std::mem::forget(child);
    match line
        .trim_end()
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
    {
        Some(pid) => Ok(Outcome::Ready(pid)),
        None => Ok(Outcome::Failed(format!(
            "the new fpmd said {:?}",
            line.trim_end()
        ))),
    }
}

/// New process: the socket to the old one, from `--upgrade-fd`.
pub struct Handover {
    stream: UnixStream,
}

impl Handover {
    /// Takes the inherited fd. Errors: it is not a socket.
    pub fn from_fd(fd: i32) -> io::Result<Handover> {
        // SAFETY: the old fpmd passed this fd for us alone; nothing else in
        // this process uses it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        nix::fcntl::fcntl(
            owned.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )?;
        let stream = UnixStream::from(owned);
        stream.set_read_timeout(Some(STEP_TIMEOUT))?;
        Ok(Handover { stream })
    }

    /// Tells the old process that the configuration does not validate.
    pub fn refuse(mut self, why: &str) {
        let _ = writeln!(self.stream, "error config {}", why.replace('\n', " "));
    }

    /// Tells the old process the configuration validates and receives its
    /// listeners.
    pub fn accept(&mut self) -> io::Result<Vec<(ListenKey, OwnedFd)>> {
        writeln!(self.stream, "ok")?;
        transfer::recv_listeners(&self.stream).map_err(io::Error::other)
    }

    /// Tells the old process this one serves: it stops accepting and
    /// drains.
    pub fn ready(mut self) -> io::Result<()> {
        writeln!(self.stream, "ready {}", std::process::id())
    }
}
