//! Starting php-cgi children: the one seam every spawn strategy goes through.
//!
//! Owns: the spawner thread, the fork/exec of php-cgi and the per-child
//! private listening socket that becomes the child's fd 0. What runs
//! between fork and exec (chroot, limits, credentials, Landlock) follows
//! the order written at the top of [`crate::process::sandbox`]. Its fd 1 and
//! fd 2 come from [`crate::process::output::open`]. Must not touch: dispatch state,
//! FastCGI, what becomes of the children's output (`crate::process::output`), or the
//! decision of when to spawn (the supervisor decides; this module only
//! does).
//!
//! Every fork happens on one dedicated thread that lives as long as the
//! daemon, because `PR_SET_PDEATHSIG` fires when the *thread* that forked
//! exits (design.md, "Children never outlive fpmd").

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc as std_mpsc;

use nix::unistd::{Gid, Uid};
use tokio::sync::oneshot;

use crate::process::reap::{Exit, Reaper};
use crate::process::sandbox::SandboxPlan;

/// Everything needed to start one php-cgi child, built before the fork so
/// that only async-signal-safe calls run between fork and exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSpec {
    /// Absolute path of the php-cgi binary.
    pub program: PathBuf,
    /// argv[0], what `ps` shows first: `php-cgi: pool NAME`, as php-fpm's
    /// children show `php-fpm: pool NAME` (see [`process_title`]).
    pub arg0: String,
    /// Arguments after argv[0]: `-d name=value` pairs.
    pub args: Vec<String>,
    /// The complete environment of the child (nothing else is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// How the child is confined, its working directory included
    /// (`chroot`, `chdir`, limits; see [`crate::process::sandbox`]).
    pub sandbox: SandboxPlan,
    /// Credentials the child drops to before exec.
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (from the user's group list).
    pub groups: Vec<u32>,
    /// Path of the child's private listening socket, in fpmd's 0700
    /// runtime directory: fpmd connects here, nobody else can.
    pub endpoint: PathBuf,
    /// Listen backlog of that socket (connections, not bytes).
    pub backlog: i32,
    /// Signal the child gets when fpmd dies (`PR_SET_PDEATHSIG`): SIGKILL
    /// for an exec'd child; SIGTERM for a pre-fork parent, whose handler
    /// then signals its whole process group (php-cgi's `fastcgi_cleanup`).
    pub death_signal: i32,
    /// `catch_workers_output`: the child's stdout is caught too (else it is
    /// `/dev/null`); see [`crate::process::output::open`].
    pub catch_workers_output: bool,
    /// The `cgroup.procs` files of the pool's cgroup, one per hierarchy
    /// ([`crate::process::cgroup::PoolCgroup::procs_files`]); empty without one.
    /// They are opened before the fork and the child writes `0` (itself)
    /// to each in `pre_exec`, so nothing it starts escapes the cgroup.
    pub cgroup_procs: Vec<PathBuf>,
    /// `pm.spawn = "prefork"`: the fork server library as the parent sees
    /// it (its path, or [`crate::process::fork_server::IN_CHROOT`]),
    /// preloaded first in `LD_PRELOAD`, and the parent gets its end of the
    /// order socket as [`crate::process::fork_server::FPMD_FORK_FD`].
    pub fork_server: Option<PathBuf>,
}

impl ChildSpec {
    /// The child changes its credentials (setgroups as root, setgid,
    /// setuid): fpmd is root, or the child's user or group is not fpmd's.
    pub fn switches_user(&self) -> bool {
        let uid = Uid::effective();
        uid.is_root() || uid.as_raw() != self.uid || Gid::effective().as_raw() != self.gid
    }
}

/// The argv[0] of a pool's php-cgi processes: `php-cgi: pool NAME`, so
/// that `ps` and `pgrep -f "pool NAME"` find a pool's processes as they
/// find php-fpm's (`fpm_env_init_child` sets the title `pool NAME`). A
/// pre-fork parent and its children share it (php-cgi forks them without
/// an exec; `ps --forest` shows which is the parent). php-cgi reads argv[0]
/// only to find its own binary: with no `/` in it, `PHP_BINARY` is empty
/// and no php.ini is looked for beside the binary (php-fpm's `PHP_BINARY`
/// names php-fpm, which cannot run scripts either).
pub fn process_title(pool: &str) -> String {
    format!("php-cgi: pool {pool}")
}

/// A started child.
#[derive(Debug)]
pub struct Spawned {
    pub pid: i32,
    /// fpmd's ends of the child's fd 1 and fd 2 (shared by its pre-forked
    /// children), for [`crate::process::output::forward`].
    pub output: crate::process::output::Readers,
    /// fpmd's end of a pre-fork parent's order socket
    /// ([`crate::process::fork_server::Orders`]).
    pub orders: Option<OwnedFd>,
}

struct Job {
    spec: ChildSpec,
    owner: tokio::sync::mpsc::UnboundedSender<Exit>,
    reply: oneshot::Sender<io::Result<Spawned>>,
}

/// Handle to the spawner thread. Cheap to clone.
#[derive(Clone)]
pub struct Spawner {
    jobs: std_mpsc::Sender<Job>,
}

impl Spawner {
    /// Starts the spawner thread. The thread lives until the process exits;
    /// `reaper` learns of every child the moment it is forked, so an exit
    /// that comes before the caller hears of the pid is not lost.
    pub fn start(reaper: std::sync::Arc<Reaper>) -> io::Result<Spawner> {
        let (tx, rx) = std_mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("fpmd-spawner".into())
            .spawn(move || {
                // php-cgi gets the default policy, whatever fpmd's own
                // (`sched_batch`) was when this thread was started.
                if let Err(e) = crate::sys::sched::set_batch(false) {
                    tracing::debug!("spawner thread: SCHED_OTHER: {e}");
                }
                // Keep the thread alive for the whole life of the daemon, even
                // when every sender is gone, so that PDEATHSIG does not fire
                // early: it only returns when the process exits.
                while let Ok(job) = rx.recv() {
                    let result = spawn_child(&job.spec);
                    if let Ok(child) = &result {
                        reaper.register(child.pid, job.owner.clone());
                    }
                    let _ = job.reply.send(result);
                }
                loop {
                    std::thread::park();
                }
            })?;
        Ok(Spawner { jobs: tx })
    }

    /// Starts one child as `spec` says; its exit will be sent to `owner`.
    /// Errors: the socket could not be bound, the pipe or fork failed, or
    /// exec failed (binary missing, not executable, credentials refused).
    pub async fn spawn(
        &self,
        spec: ChildSpec,
        owner: tokio::sync::mpsc::UnboundedSender<Exit>,
    ) -> io::Result<Spawned> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job { spec, owner, reply })
            .map_err(|_| io::Error::other("spawner thread is gone"))?;
        rx.await
            .map_err(|_| io::Error::other("spawner thread dropped the job"))?
    }
}

/// Binds the child's private listening socket (mode 0600 inside fpmd's 0700
/// runtime directory).
fn bind_endpoint(spec: &ChildSpec) -> io::Result<OwnedFd> {
    listening_socket(&spec.endpoint, spec.backlog)
}

/// A unix stream socket bound at `path` (replacing a stale file) and
/// listening with `backlog`: a child's own socket, which it accepts on as
/// its fd 0 (exec'd children get it as stdin, forked ones with their
/// order, [`crate::process::fork_server`]).
pub fn listening_socket(path: &std::path::Path, backlog: i32) -> io::Result<OwnedFd> {
    let _ = std::fs::remove_file(path);
    let sock = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    sock.bind(&socket2::SockAddr::unix(path)?)?;
    sock.listen(backlog)?;
    Ok(sock.into())
}

/// The pool's `cgroup.procs` files ([`ChildSpec::cgroup_procs`]) opened
/// for writing, before a fork: a child joins the cgroup by writing `0`.
/// Errors name the file that cannot be opened.
pub fn open_cgroup_procs(paths: &[PathBuf]) -> io::Result<Vec<OwnedFd>> {
    paths
        .iter()
        .map(|p| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .map(OwnedFd::from)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        })
        .collect()
}

fn spawn_child(spec: &ChildSpec) -> io::Result<Spawned> {
    let listener = bind_endpoint(spec)?;
    let (stdio, output) = crate::process::output::open(spec.catch_workers_output)?;

    // In a chroot the binary is exec'd by its canonical path, the one the
    // new root has (Debian's /usr/bin/php-cgi is a symlink through
    // /etc/alternatives, which the root has not).
    let program = match spec.sandbox.root {
        Some(_) => std::fs::canonicalize(&spec.program)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", spec.program.display())))?,
        None => spec.program.clone(),
    };
    let runtime_dir = spec.endpoint.parent().unwrap_or(std::path::Path::new("/"));
    let (sandbox, report) =
        crate::process::sandbox::prepare(&spec.sandbox, &program, runtime_dir, spec.uid, spec.gid)?;

    let orders = match &spec.fork_server {
        Some(_) => Some(crate::process::fork_server::pair()?),
        None => None,
    };
    let mut cmd = Command::new(&program);
    cmd.arg0(&spec.arg0)
        .args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::from(listener))
        .stdout(Stdio::from(stdio.stdout))
        .stderr(Stdio::from(stdio.stderr))
        // Own process group: a Ctrl-C on fpmd's terminal reaches fpmd only,
        // and a php-cgi that signals its group never reaches fpmd.
        .process_group(0);
    let parent_end = orders.as_ref().map(|(_, theirs)| theirs.as_raw_fd());
    if let (Some(library), Some(fd)) = (&spec.fork_server, parent_end) {
        // First, before what the pool's environment preloads (the library
        // takes itself out of LD_PRELOAD once loaded).
        let mut preload = library.as_os_str().to_os_string();
        if let Some((_, theirs)) = spec.env.iter().find(|(k, _)| k == "LD_PRELOAD") {
            if !theirs.is_empty() {
                preload.push(":");
                preload.push(theirs);
            }
        }
        cmd.env("LD_PRELOAD", preload)
            .env(crate::process::fork_server::FPMD_FORK_FD, fd.to_string());
    }

    let uid = Uid::from_raw(spec.uid);
    let gid = Gid::from_raw(spec.gid);
    let groups: Vec<Gid> = spec.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    let switch_user = spec.switches_user();
    let parent = nix::unistd::getpid();
    let death_signal = spec.death_signal as libc::c_ulong;
    let cgroup_procs = open_cgroup_procs(&spec.cgroup_procs)?;
    // SAFETY: the closure runs in the forked child before exec; it only makes
    // async-signal-safe system calls (those of `Prepared::apply`, write,
    // setgroups, setgid, setuid, prctl, getppid) on data prepared before the
    // fork, and allocates nothing. The order is the one written at the top
    // of `crate::process::sandbox`.
    unsafe {
        cmd.pre_exec(move || {
            // A failed step ends the child here, its report written, and
            // never returns the error to std: std would then wait(2) for
            // the child, which fpmd's reaper (waitpid(-1)) may have reaped
            // first, and std panics on that ("wait() should either return
            // Ok or panic"), which took the spawner thread down with it.
            // The report pipe tells the spawner instead.
            let steps = || -> io::Result<()> {
                if let Some(fd) = parent_end {
                    if !crate::process::fork_server::inheritable(fd) {
                        return Err(sandbox.fail_step(b"pass the fork server's socket"));
                    }
                }
                // Limits, chroot (mount namespace, pivot_root), chdir.
                sandbox.apply()?;
                // Join the pool's cgroup (pid 0: the writer, in v1 and v2)
                // while still root, before the credentials change.
                for fd in &cgroup_procs {
                    if libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                        return Err(sandbox.fail_step(b"join the pool's cgroup"));
                    }
                }
                sandbox.apply_priority()?;
                if switch_user {
                    if Uid::effective().is_root() && nix::unistd::setgroups(&groups).is_err() {
                        return Err(sandbox.fail_step(b"setgroups"));
                    }
                    if nix::unistd::setgid(gid).is_err() {
                        return Err(sandbox.fail_step(b"setgid"));
                    }
                    if nix::unistd::setuid(uid).is_err() {
                        return Err(sandbox.fail_step(b"setuid"));
                    }
                }
                // Dumpable, no_new_privs, Landlock: after the credential change.
                sandbox.apply_unprivileged()?;
                // After the credential change, which clears it.
                if libc::prctl(libc::PR_SET_PDEATHSIG, death_signal, 0, 0, 0) != 0 {
                    return Err(sandbox.fail_step(b"prctl(PR_SET_PDEATHSIG)"));
                }
                Ok(())
            };
            if steps().is_err() {
                libc::_exit(127);
            }
            if nix::unistd::getppid() != parent {
                // fpmd died between fork and prctl.
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    // `cmd` (and with it our copies of the listening socket, of the pipe's
    // write end and of the sandbox's report pipe) is dropped here: the
    // child's death must close its socket.
    drop(cmd);
    // A step that failed before exec wrote its name to the report pipe
    // (and the child exited 127). std's spawn returns once the child has
    // exec'd or exited, so every write end is closed by now: the read
    // cannot block.
    let mut step = String::new();
    let _ = std::io::Read::read_to_string(&mut std::fs::File::from(report), &mut step);
    let child = spawned
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", spec.program.display())))?;
    if !step.is_empty() {
        // Its exit is reaped as that of a process fpmd does not know.
        return Err(io::Error::other(format!(
            "{}: sandbox step failed: {step}",
            spec.program.display()
        )));
    }
    let pid = child.id() as i32;
    // The reaper waits for the pid; std's Child is never waited on.
    drop(child);
    Ok(Spawned {
        pid,
        output,
        orders: orders.map(|(ours, _)| ours),
    })
}
