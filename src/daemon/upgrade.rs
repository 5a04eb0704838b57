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
//! 2. old → new: every listener ([`crate::listen::transfer`]), those
//!    systemd passed tagged `systemd:NAME` (their `FileDescriptorName=`):
//!    the new process adopts them as systemd's, as if passed to it;
//! 3. new → old: `ready PID` once its pools have started; the old one then
//!    stops accepting (without unlinking a socket file), drains its
//!    requests, stops its children and exits.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::listen::{transfer, Activation, Inherited, ListenKey, ListenerTable};

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

/// The tag of a socket systemd passed (`SYSTEMD_TAG` + its
/// `FileDescriptorName=`): the new process adopts it as systemd's, and
/// matches it to pools by that name, as if systemd had passed it there.
const SYSTEMD_TAG: &str = "systemd:";

/// One listener to hand over: its key, its tag (empty, or systemd's name
/// of the socket) and a duplicate of its fd.
pub type Handed = (ListenKey, String, OwnedFd);

/// Old process: duplicates of every listener of `table`, to hand over from
/// a blocking thread; those systemd passed (`activation`) are tagged as
/// systemd's, with their names.
pub fn listeners_of(table: &ListenerTable, activation: &Activation) -> io::Result<Vec<Handed>> {
    table
        .fds()
        .into_iter()
        .map(|(k, fd)| {
            let tag = match table.inherited(&k) {
                Some(Inherited::Systemd) => {
                    let name = activation
                        .sockets()
                        .iter()
                        .find(|s| s.key == k)
                        .map_or("unknown", |s| s.name.as_str());
                    format!("{SYSTEMD_TAG}{name}")
                }
                _ => String::new(),
            };
            Ok((k, tag, fd.try_clone_to_owned()?))
        })
        .collect()
}

/// New process: splits what arrived into fpmd's own sockets (by key) and
/// systemd's (by `FileDescriptorName=`, to be adopted as systemd passed
/// them).
#[allow(clippy::type_complexity)]
pub fn split_handed(handed: Vec<Handed>) -> (Vec<(ListenKey, OwnedFd)>, Vec<(String, OwnedFd)>) {
    let mut own = Vec::new();
    let mut systemd = Vec::new();
    for (key, tag, fd) in handed {
        match tag.strip_prefix(SYSTEMD_TAG) {
            Some(name) => systemd.push((name.to_string(), fd)),
            None => own.push((key, fd)),
        }
    }
    (own, systemd)
}

/// Old process: starts `exe` on `config` (with the command line's `args`,
/// [`crate::config::LoadOptions::to_args`]) with the other end of a socket
/// pair, hands it `listeners` when it validated its configuration, and
/// waits until it serves. Blocking: run it off the runtime thread.
pub fn start_new(
    exe: &Path,
    config: &Path,
    args: &[std::ffi::OsString],
    listeners: Vec<Handed>,
) -> Outcome {
    match start_new_inner(exe, config, args, listeners) {
        Ok(o) => o,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

fn start_new_inner(
    exe: &Path,
    config: &Path,
    args: &[std::ffi::OsString],
    listeners: Vec<Handed>,
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
        .args(args)
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
        .map(|(k, tag, fd)| (k.clone(), tag.as_str(), fd.as_fd()))
        .collect();
    transfer::send_tagged(&ours, &borrowed).map_err(io::Error::other)?;
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
    /// listeners (split them with [`split_handed`]).
    pub fn accept(&mut self) -> io::Result<Vec<Handed>> {
        writeln!(self.stream, "ok")?;
        transfer::recv_tagged(&self.stream).map_err(io::Error::other)
    }

    /// Tells the old process this one serves: it stops accepting and
    /// drains.
    pub fn ready(mut self) -> io::Result<()> {
        writeln!(self.stream, "ready {}", std::process::id())
    }
}

impl super::Daemon {
    /// `fpmd upgrade`: starts the fpmd binary now on disk on the same
    /// configuration and hands it the listening sockets; once it serves,
    /// this one stops accepting (the caller then drains and exits). The
    /// answer says which happened.
    pub(super) async fn upgrade(&mut self) -> crate::control::socket::Answer {
        use crate::control::socket::Answer;
        use crate::control::systemd::Notify;
        use crate::observe::board::Phase;
        use tracing::{error, info};
        let Some(exe) = self.exe.clone() else {
            return Answer::Error("cannot tell which fpmd binary runs".into());
        };
        let listeners = match listeners_of(&self.listeners, &self.activation) {
            Ok(l) => l,
            Err(e) => return Answer::Error(format!("cannot hand over the listening sockets: {e}")),
        };
        info!(
            "upgrade: starting {} on {}",
            exe.display(),
            self.config.file.display()
        );
        let config = self.config.file.clone();
        let args = self.config.options.to_args(self.config.global.daemonize);
        self.board.set_phase(Phase::Upgrading);
        let outcome =
            tokio::task::spawn_blocking(move || start_new(&exe, &config, &args, listeners)).await;
        if !matches!(outcome, Ok(Outcome::Ready(_))) {
            self.board.set_phase(Phase::Ready);
        }
        match outcome {
            Ok(Outcome::Ready(pid)) => {
                info!("upgrade: the new fpmd (pid {pid}) serves; this one stops accepting, drains and exits");
                self.sd.send(&[Notify::MainPid(pid)]);
                Answer::Ok(format!(
                    "upgraded: the new fpmd has pid {pid}; the old one ({}) drains and exits",
                    std::process::id()
                ))
            }
            Ok(Outcome::ConfigError(e)) => {
                error!("upgrade refused: the new fpmd does not accept the configuration: {e}; this one serves on");
                Answer::ConfigError(e)
            }
            Ok(Outcome::Failed(e)) => {
                error!("upgrade failed: {e}; this one serves on");
                Answer::Error(e)
            }
            Err(e) => Answer::Error(format!("upgrade: {e}")),
        }
    }
}
