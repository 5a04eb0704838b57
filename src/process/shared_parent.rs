//! php-cgi parents shared by pools (`pm.spawn = "shared"`): php-fpm's
//! model, one loaded PHP that forks every pool's children.
//!
//! Pools whose children would start the same php-cgi (binary, php.ini,
//! `-d` ini values, `PHP_INI_SCAN_DIR`, `LD_PRELOAD`: the [`Key`]) share
//! one parent, started by the first of them to need one and stopped
//! (SIGTERM) when the last one lets go of it. It is a php-cgi with the
//! fork server preloaded ([`crate::process::fork_server`]), run as fpmd's
//! own user with a neutral environment (no pool's `env[…]` values: a
//! child could read them in `/proc/self/environ`), with
//! `opcache.validate_root` and `opcache.validate_permission` on, since its
//! opcache is shared by pools of different users. Each order carries the
//! pool's [`crate::process::fork_server::ChildSetup`], which the forked
//! child applies before it serves.
//!
//! The parent's reports go to the pool that ordered: forks in the order
//! the orders went (one queue for all pools), exits by the child's pid.
//! Its own exit is told to every pool attached.
//!
//! Must not touch: when children are wanted (each pool's supervisor
//! decides); what a pool does with a report.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tracing::{debug, info, warn};

use crate::process::fork_server::{ChildSetup, Orders, Report};
use crate::process::reap::{Exit, ExitKind};
use crate::process::spawn::{ChildSpec, Spawner};

/// What a pool hears from the shared parent it is attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// A report about the pool's own orders and children (`Ready` is told
    /// to every pool, and at once to one that attaches to a ready parent).
    Report(Report),
    /// The parent itself exited: the pool's children it forked are
    /// orphans, nobody reports their exits any more.
    ParentExited(ExitKind),
}

/// Where a pool hears from its shared parent; returns false once the pool
/// is gone.
pub type Sink = Box<dyn Fn(Heard) -> bool + Send + Sync>;

/// Which pools share a parent: its program, arguments and environment
/// (those of [`root_spec`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(OsString, OsString)>,
}

/// Ids of attachments start here, above any pid (`pid_max` is at most
/// 2^22): a pool keeps its attachment among its php-cgi processes under
/// this id, and a signal sent to it by mistake finds no process.
pub const ID_BASE: i32 = 1 << 30;

static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// A new attachment id (see [`ID_BASE`]).
pub fn next_id() -> i32 {
    ID_BASE + (NEXT_ID.fetch_add(1, Ordering::Relaxed) % (1 << 29)) as i32
}

/// One running shared parent.
pub struct SharedParent {
    /// The php-cgi parent's pid.
    pub pid: i32,
    key: Key,
    orders: Orders,
    state: Mutex<State>,
    /// An order waits in [`State::backlog`].
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    ready: bool,
    gone: bool,
    sinks: HashMap<i32, Arc<Sink>>,
    /// The attachment of each order sent and not yet forked, oldest first.
    in_flight: VecDeque<i32>,
    /// The attachment each forked child belongs to.
    owners: HashMap<i32, i32>,
    /// Orders not sent yet: the socket's queue was full (a unix
    /// `SOCK_SEQPACKET` socket queues `net.unix.max_dgram_qlen`, 10 by
    /// default, and hundreds of pools may order at once).
    backlog: VecDeque<Waiting>,
}

struct Waiting {
    id: i32,
    listener: OwnedFd,
    setup: Arc<ChildSetup>,
}

type Registry = tokio::sync::Mutex<HashMap<Key, Weak<SharedParent>>>;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// A pool's hold on a shared parent. Dropping it detaches the pool; the
/// last one to go stops the parent.
pub struct Attachment {
    parent: Arc<SharedParent>,
    id: i32,
    started_here: bool,
}

/// The spec of the shared parent for a pool whose children would be
/// `pool` (built by [`crate::process::spec::child_spec`] for
/// `pm.spawn = "shared"`), with the fork server `library` preloaded:
/// fpmd's user, no sandbox, a neutral environment, opcache's checks for
/// shared hosting first so that a pool's own ini values can still set
/// them.
pub fn root_spec(pool: &ChildSpec, library: PathBuf, endpoint: PathBuf) -> ChildSpec {
    let mut env: Vec<(OsString, OsString)> = vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("PHP_FCGI_CHILDREN".into(), "1".into()),
        ("PHP_FCGI_MAX_REQUESTS".into(), "0".into()),
    ];
    env.extend(
        pool.env
            .iter()
            .filter(|(k, _)| k == "PHP_INI_SCAN_DIR" || k == "LD_PRELOAD")
            .cloned(),
    );
    let mut args = vec![
        "-d".to_string(),
        "opcache.validate_root=1".to_string(),
        "-d".to_string(),
        "opcache.validate_permission=1".to_string(),
    ];
    args.extend(pool.args.iter().cloned());
    ChildSpec {
        program: pool.program.clone(),
        arg0: "php-cgi: shared parent".to_string(),
        args,
        env,
        // Confined by nothing: each child confines itself.
        sandbox: crate::process::sandbox::SandboxPlan::of(
            "shared",
            &crate::config::Isolation::default(),
            std::path::Path::new("/"),
        ),
        uid: nix::unistd::geteuid().as_raw(),
        gid: nix::unistd::getegid().as_raw(),
        groups: Vec::new(),
        endpoint,
        backlog: 1,
        death_signal: libc::SIGTERM,
        catch_workers_output: false,
        cgroup_procs: Vec::new(),
        fork_server: Some(library),
    }
}

impl Attachment {
    /// Attaches the pool whose attachment id is `id` ([`next_id`]) to the
    /// shared parent `spec` ([`root_spec`]) describes, starting it with
    /// `spawner` if none runs. `sink` hears the parent's reports for this
    /// pool (at once `Ready` if the parent is ready). `output` gets the
    /// readers of a parent started here (its start-up output) with its pid.
    ///
    /// Errors: the parent could not be started (as
    /// [`Spawner::spawn`]).
    pub async fn attach(
        id: i32,
        spec: ChildSpec,
        spawner: &Spawner,
        sink: Sink,
        output: impl FnOnce(i32, crate::process::output::Readers),
    ) -> io::Result<Attachment> {
        let key = Key {
            program: spec.program.clone(),
            args: spec.args.clone(),
            env: spec.env.clone(),
        };
        let mut map = registry().lock().await;
        let running = map
            .get(&key)
            .and_then(Weak::upgrade)
            .filter(|p| !p.state.lock().unwrap().gone);
        let started_here = running.is_none();
        let parent = match running {
            Some(p) => p,
            None => {
                let (exits_tx, exits_rx) = tokio::sync::mpsc::unbounded_channel();
                let endpoint = spec.endpoint.clone();
                let spawned = spawner.spawn(spec, exits_tx).await?;
                let _ = std::fs::remove_file(&endpoint);
                let Some(fd) = spawned.orders else {
                    return Err(io::Error::other(
                        "the shared php-cgi parent has no order socket",
                    ));
                };
                let orders = Orders::new(fd)?;
                output(spawned.pid, spawned.output);
                let parent = Arc::new(SharedParent {
                    pid: spawned.pid,
                    key: key.clone(),
                    orders,
                    state: Mutex::new(State::default()),
                    wake: tokio::sync::Notify::new(),
                });
                info!(pid = parent.pid, "shared php-cgi parent started");
                tokio::spawn(listen(parent.clone(), exits_rx));
                map.insert(key, Arc::downgrade(&parent));
                parent
            }
        };
        let sink = Arc::new(sink);
        let ready = {
            let mut st = parent.state.lock().unwrap();
            st.sinks.insert(id, sink.clone());
            st.ready
        };
        if ready {
            sink(Heard::Report(Report::Ready));
        }
        Ok(Attachment {
            parent,
            id,
            started_here,
        })
    }

    /// The shared parent's pid.
    pub fn pid(&self) -> i32 {
        self.parent.pid
    }

    /// This attachment started the parent (so its pool pages it out once
    /// it is loaded, `page_out_parent`).
    pub fn started_here(&self) -> bool {
        self.started_here
    }

    /// Orders one child for this pool: `listener` is its socket, `setup`
    /// what it applies. An order that meets a full queue waits, in order,
    /// until the parent reads (a failure then comes back as
    /// [`Report::Failed`]). Errors: the parent is gone, or the send failed
    /// (as [`Orders::order_shared`]).
    pub fn order(&self, listener: &impl AsFd, setup: &Arc<ChildSetup>) -> io::Result<()> {
        // Under the lock, so that the queue's order is the socket's.
        let mut st = self.parent.state.lock().unwrap();
        if st.gone {
            return Err(io::Error::other("the shared php-cgi parent is gone"));
        }
        if st.backlog.is_empty() {
            match self.parent.orders.order_shared(listener, setup) {
                Ok(()) => {
                    st.in_flight.push_back(self.id);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        st.backlog.push_back(Waiting {
            id: self.id,
            listener: listener.as_fd().try_clone_to_owned()?,
            setup: setup.clone(),
        });
        self.parent.wake.notify_one();
        Ok(())
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let last = {
            let mut st = self.parent.state.lock().unwrap();
            st.sinks.remove(&self.id);
            st.sinks.is_empty() && !st.gone
        };
        if !last {
            return;
        }
        // Nobody can attach to it any more (the registry only hands out a
        // parent with a pool attached, under its lock, which may be held
        // now: then the entry is replaced when the parent is gone).
        if let Ok(mut map) = registry().try_lock() {
            if map
                .get(&self.parent.key)
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&self.parent)))
            {
                map.remove(&self.parent.key);
            }
        }
        self.parent.state.lock().unwrap().gone = true;
        debug!(
            pid = self.parent.pid,
            "shared php-cgi parent has no pool left: stopping it"
        );
        // SIGCONT after it: a stopped parent would keep the SIGTERM
        // pending and outlive fpmd.
        for sig in [
            nix::sys::signal::Signal::SIGTERM,
            nix::sys::signal::Signal::SIGCONT,
        ] {
            let _ = crate::process::signal::send(
                "shared",
                nix::unistd::Pid::from_raw(self.parent.pid),
                sig,
            );
        }
    }
}

/// Reads the parent's reports and hands each to the pool it is for, until
/// the parent exits; then tells every pool still attached.
async fn listen(parent: Arc<SharedParent>, mut exits: tokio::sync::mpsc::UnboundedReceiver<Exit>) {
    let mut open = true;
    let kind = loop {
        let waiting = !parent.state.lock().unwrap().backlog.is_empty();
        tokio::select! {
            r = parent.orders.next(), if open => match r {
                Some(r) => dispatch(&parent, r),
                None => open = false,
            },
            () = parent.wake.notified(), if !waiting => {}
            () = parent.orders.when_writable(|| send_waiting(&parent)), if waiting && open => {}
            e = exits.recv() => break e.map(|e| e.kind),
        }
    };
    let sinks: Vec<Arc<Sink>> = {
        let mut st = parent.state.lock().unwrap();
        st.gone = true;
        st.in_flight.clear();
        st.owners.clear();
        st.backlog.clear();
        st.sinks.values().cloned().collect()
    };
    let kind = kind.unwrap_or(ExitKind::Code(0));
    if !sinks.is_empty() {
        warn!(
            pid = parent.pid,
            "shared php-cgi parent {kind} while {} pool(s) used it",
            sinks.len()
        );
    } else {
        debug!(pid = parent.pid, "shared php-cgi parent {kind}");
    }
    for s in sinks {
        s(Heard::ParentExited(kind));
    }
}

/// Sends the orders that waited, in order, until the queue is full again
/// (returns true) or none is left. An order whose pool let go is dropped;
/// one that cannot be sent is told to its pool as a failed fork.
fn send_waiting(parent: &SharedParent) -> bool {
    let mut failed = Vec::new();
    let full = {
        let mut st = parent.state.lock().unwrap();
        loop {
            let Some(w) = st.backlog.pop_front() else {
                break false;
            };
            if !st.sinks.contains_key(&w.id) {
                continue;
            }
            match parent.orders.order_shared(&w.listener, &w.setup) {
                Ok(()) => st.in_flight.push_back(w.id),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    st.backlog.push_front(w);
                    break true;
                }
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
                    failed.extend(st.sinks.get(&w.id).cloned().map(|s| (s, errno)));
                }
            }
        }
    };
    for (sink, errno) in failed {
        sink(Heard::Report(Report::Failed { errno }));
    }
    full
}

fn dispatch(parent: &SharedParent, report: Report) {
    let mut st = parent.state.lock().unwrap();
    let to: Vec<Arc<Sink>> = match report {
        Report::Ready => {
            st.ready = true;
            debug!(
                pid = parent.pid,
                "shared php-cgi parent loaded PHP: it forks children on order"
            );
            st.sinks.values().cloned().collect()
        }
        Report::Forked { pid } => match st.in_flight.pop_front() {
            Some(id) => {
                st.owners.insert(pid, id);
                st.sinks.get(&id).cloned().into_iter().collect()
            }
            None => Vec::new(),
        },
        Report::Failed { .. } => match st.in_flight.pop_front() {
            Some(id) => st.sinks.get(&id).cloned().into_iter().collect(),
            None => Vec::new(),
        },
        Report::Exited { pid, .. } => match st.owners.remove(&pid) {
            Some(id) => st.sinks.get(&id).cloned().into_iter().collect(),
            None => Vec::new(),
        },
    };
    drop(st);
    let orphan = match report {
        Report::Forked { pid } if to.is_empty() => Some(pid),
        _ => None,
    };
    for s in to {
        s(Heard::Report(report));
    }
    if let Some(pid) = orphan {
        // Its pool let go of the parent before the fork was reported.
        let _ = crate::process::signal::send(
            "shared",
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
