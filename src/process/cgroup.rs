//! A cgroup per pool: what makes "nothing a script started outlives its
//! pool" exact, and where `cgroup.memory_max`, `cgroup.pids_max` and
//! `cgroup.cpu_weight` are applied.
//!
//! Owns: finding fpmd's own cgroups (`/proc/self/cgroup`, `/proc/self/mounts`),
//! creating a pool's cgroup under them, writing its limits, killing
//! everything left in it, and removing it. Must not touch: spawning (the
//! spawner opens the `cgroup.procs` files named by [`PoolCgroup::procs_files`]
//! before the fork, and the child writes `0` to them in `pre_exec`), or the
//! decision of when a pool starts or stops (the supervisor's).
//!
//! cgroup v2 is used where `/sys/fs/cgroup` is the unified hierarchy (it has
//! `cgroup.controllers`): the pool's cgroup gets `memory.max`, `pids.max`,
//! `cpu.weight`, and is emptied with `cgroup.kill`. Otherwise the v1
//! `memory`, `pids`, `cpu` and `freezer` hierarchies are used, each where it
//! is mounted: `memory.limit_in_bytes`, `pids.max`, `cpu.shares` (from the
//! weight as systemd maps it, `shares = weight * 1024 / 100`), and emptied by
//! freezing, SIGKILLing every pid in `cgroup.procs`, thawing, until empty.
//!
//! A pool's cgroup is `fpmd-<fpmd's pid>.<pool>` under fpmd's own cgroup in
//! each hierarchy, so that several fpmd on one host never share one; one
//! left by an fpmd that died (its pid gone) is emptied and removed when
//! the next fpmd starts ([`Layout::sweep_stale`]).
//!
//! Written as plain file writes rather than with the `cgroups-rs` crate:
//! the few writes fpmd needs are smaller than the crate (which brings
//! regex and a second nix), and it has no way to hand out `cgroup.procs`
//! files to open before a fork.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::CgroupLimits as Limits;

/// v1 `cpu.shares` for a v2 `cpu.weight`, as systemd maps it
/// (`shares = weight * 1024 / 100`, at least 2, v1's minimum).
pub fn shares_of_weight(weight: u32) -> u64 {
    (u64::from(weight) * 1024 / 100).max(2)
}

/// Where fpmd's own cgroups are, in whichever hierarchies exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// The unified hierarchy: fpmd's own cgroup directory.
    V2 { own: PathBuf },
    /// v1: fpmd's own cgroup directory in each controller's hierarchy
    /// that is mounted.
    V1 {
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
        cpu: Option<PathBuf>,
        freezer: Option<PathBuf>,
    },
}

impl Layout {
    /// The host's layout, read once; `None` when fpmd is not root or no
    /// usable hierarchy is mounted (pools then run without a cgroup).
    pub fn system() -> Option<&'static Layout> {
        static LAYOUT: std::sync::OnceLock<Option<Layout>> = std::sync::OnceLock::new();
        LAYOUT
            .get_or_init(|| {
                if !nix::unistd::Uid::effective().is_root() {
                    return None;
                }
                let cgroup = fs::read_to_string("/proc/self/cgroup").ok()?;
                let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
                Layout::detect(Path::new("/sys/fs/cgroup"), &cgroup, &mounts)
            })
            .as_ref()
    }

    /// The layout from `/proc/self/cgroup` and `/proc/self/mounts` texts:
    /// v2 when `root` (normally `/sys/fs/cgroup`) holds
    /// `cgroup.controllers`, else each v1 controller's mount point joined
    /// with fpmd's path in it. `None`: nothing usable.
    pub fn detect(root: &Path, proc_cgroup: &str, mounts: &str) -> Option<Layout> {
        if root.join("cgroup.controllers").is_file() {
            let path = proc_cgroup
                .lines()
                .find_map(|l| l.strip_prefix("0::"))?
                .trim();
            return Some(Layout::V2 {
                own: join_cgroup(root, path),
            });
        }
        let find = |controller: &str| -> Option<PathBuf> {
            let path = proc_cgroup.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let _id = parts.next()?;
                let controllers = parts.next()?;
                let path = parts.next()?;
                controllers
                    .split(',')
                    .any(|c| c == controller)
                    .then_some(path)
            })?;
            let mount = mounts.lines().find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == controller))
                    .then(|| PathBuf::from(f[1]))
            })?;
            let dir = join_cgroup(&mount, path.trim());
            dir.is_dir().then_some(dir)
        };
        let layout = Layout::V1 {
            memory: find("memory"),
            pids: find("pids"),
            cpu: find("cpu"),
            freezer: find("freezer"),
        };
        match &layout {
            Layout::V1 {
                memory: None,
                pids: None,
                cpu: None,
                freezer: None,
            } => None,
            _ => Some(layout),
        }
    }

    /// fpmd's own directories, one per hierarchy.
    fn own_dirs(&self) -> Vec<PathBuf> {
        match self {
            Layout::V2 { own } => vec![own.clone()],
            Layout::V1 {
                memory,
                pids,
                cpu,
                freezer,
            } => [memory, pids, cpu, freezer]
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
        }
    }

    /// Empties and removes the pool cgroups left by an fpmd that is gone
    /// (`fpmd-<pid>.<pool>` whose pid does not exist): what a SIGKILLed
    /// fpmd's scripts left running is killed now. Errors are logged.
    ///
    /// Across PID namespaces (containers sharing a cgroup) an fpmd's pid
    /// may not be visible from here although it runs: a cgroup holding a
    /// process this PID namespace cannot see (listed as pid 0) is left
    /// alone, and so is every pool cgroup under an own cgroup that holds
    /// one (their fpmd may be such a process).
    pub fn sweep_stale(&self) {
        for own in self.own_dirs() {
            if has_foreign_processes(&own) {
                tracing::info!(
                    "the cgroup {} holds processes of another PID namespace: the pool cgroups under it are left as they are (their fpmd may run there)",
                    own.display()
                );
                continue;
            }
            let Ok(entries) = fs::read_dir(&own) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(pid) = name
                    .strip_prefix("fpmd-")
                    .and_then(|r| r.split('.').next())
                    .and_then(|p| p.parse::<i32>().ok())
                else {
                    continue;
                };
                if pid == std::process::id() as i32 || Path::new(&format!("/proc/{pid}")).exists() {
                    continue;
                }
                let stale = PoolCgroup {
                    v2: matches!(self, Layout::V2 { .. }),
                    pool: name.clone(),
                    dirs: self.same_in_every_hierarchy(&name),
                };
                if stale.dirs.all().any(|d| has_foreign_processes(d)) {
                    tracing::info!(
                        "the cgroup {name} holds processes of another PID namespace: left as it is"
                    );
                    continue;
                }
                tracing::info!(
                    "removing the cgroup {name} left by an fpmd (pid {pid}) that is gone"
                );
                if let Err(e) = stale.kill_all_and_remove() {
                    tracing::warn!("cannot remove the stale cgroup {name}: {e}");
                }
            }
        }
    }

    fn same_in_every_hierarchy(&self, name: &str) -> Dirs {
        let j = |d: &Option<PathBuf>| d.as_ref().map(|d| d.join(name)).filter(|d| d.is_dir());
        match self {
            Layout::V2 { own } => Dirs {
                unified: Some(own.join(name)),
                ..Dirs::default()
            },
            Layout::V1 {
                memory,
                pids,
                cpu,
                freezer,
            } => Dirs {
                unified: None,
                memory: j(memory),
                pids: j(pids),
                cpu: j(cpu),
                freezer: j(freezer),
            },
        }
    }
}

/// `root` joined with a cgroup path from `/proc/self/cgroup` (absolute).
fn join_cgroup(root: &Path, path: &str) -> PathBuf {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Dirs {
    unified: Option<PathBuf>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
    freezer: Option<PathBuf>,
}

impl Dirs {
    fn all(&self) -> impl Iterator<Item = &PathBuf> {
        [
            &self.unified,
            &self.memory,
            &self.pids,
            &self.cpu,
            &self.freezer,
        ]
        .into_iter()
        .flatten()
    }
}

/// One pool's cgroup (a directory per hierarchy). Dropping it removes
/// nothing: the supervisor calls [`PoolCgroup::kill_all_and_remove`] when
/// the pool stops.
#[derive(Debug)]
pub struct PoolCgroup {
    v2: bool,
    /// The directory name, `fpmd-<pid>.<pool>`.
    pool: String,
    dirs: Dirs,
}

/// The name of a pool's cgroup: `fpmd-<pid>.<pool>`, the pool name with
/// anything but `[A-Za-z0-9_-]` (a `.` too) replaced by `_`.
pub fn cgroup_name(fpmd_pid: u32, pool: &str) -> String {
    let safe: String = pool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("fpmd-{fpmd_pid}.{safe}")
}

impl PoolCgroup {
    /// Creates the pool's cgroup `name` under fpmd's own in every
    /// hierarchy of `layout` (v2: enabling the `memory`, `pids` and `cpu`
    /// controllers for fpmd's subtree; when fpmd's own cgroup holds
    /// processes, which v2 then refuses, fpmd first moves itself into a
    /// leaf `fpmd-<pid>.daemon` beside the pools). Errors: a directory
    /// could not be created or a controller could not be enabled, with
    /// the path.
    pub fn create(layout: &Layout, name: &str) -> io::Result<PoolCgroup> {
        let dirs = match layout {
            Layout::V2 { own } => {
                enable_v2_controllers(own)?;
                let dir = own.join(name);
                mkdir(&dir)?;
                Dirs {
                    unified: Some(dir),
                    ..Dirs::default()
                }
            }
            Layout::V1 {
                memory,
                pids,
                cpu,
                freezer,
            } => {
                let make = |d: &Option<PathBuf>| -> io::Result<Option<PathBuf>> {
                    match d {
                        None => Ok(None),
                        Some(d) => {
                            let dir = d.join(name);
                            mkdir(&dir)?;
                            Ok(Some(dir))
                        }
                    }
                };
                Dirs {
                    unified: None,
                    memory: make(memory)?,
                    pids: make(pids)?,
                    cpu: make(cpu)?,
                    freezer: make(freezer)?,
                }
            }
        };
        Ok(PoolCgroup {
            v2: matches!(layout, Layout::V2 { .. }),
            pool: name.to_string(),
            dirs,
        })
    }

    /// The cgroup's name (`fpmd-<pid>.<pool>`).
    pub fn name(&self) -> &str {
        &self.pool
    }

    /// The `cgroup.procs` file of every hierarchy: a child writes `0` to
    /// each (itself) before exec, so it and everything it starts stay in
    /// the pool's cgroup.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.all().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Writes `limits` (every one, unset ones as the kernel's default, so
    /// that a reload that removes a key lifts its limit). Errors: the file
    /// and the kernel's refusal (a memory limit below what the pool uses
    /// now is refused with `EBUSY` by v1).
    pub fn apply(&self, limits: &Limits) -> io::Result<()> {
        if self.v2 {
            let dir = self.dirs.unified.as_ref().expect("v2 directory");
            write(
                &dir.join("memory.max"),
                &limits
                    .memory_max
                    .map_or("max".to_string(), |n| n.to_string()),
            )?;
            write(
                &dir.join("pids.max"),
                &limits.pids_max.map_or("max".to_string(), |n| n.to_string()),
            )?;
            write(
                &dir.join("cpu.weight"),
                &limits.cpu_weight.unwrap_or(100).to_string(),
            )?;
            return Ok(());
        }
        if let Some(d) = &self.dirs.memory {
            write(
                &d.join("memory.limit_in_bytes"),
                &limits
                    .memory_max
                    .map_or("-1".to_string(), |n| n.to_string()),
            )?;
        }
        if let Some(d) = &self.dirs.pids {
            write(
                &d.join("pids.max"),
                &limits.pids_max.map_or("max".to_string(), |n| n.to_string()),
            )?;
        }
        if let Some(d) = &self.dirs.cpu {
            write(
                &d.join("cpu.shares"),
                &shares_of_weight(limits.cpu_weight.unwrap_or(100)).to_string(),
            )?;
        }
        Ok(())
    }

    /// How many processes the memory controller has OOM-killed in this
    /// cgroup so far (v2 `memory.events`, v1 `memory.oom_control`, the
    /// `oom_kill` line); `None` without a memory controller.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = if self.v2 {
            self.dirs.unified.as_ref()?.join("memory.events")
        } else {
            self.dirs.memory.as_ref()?.join("memory.oom_control")
        };
        let text = fs::read_to_string(file).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }

    /// The pids in the cgroup now (the first hierarchy's `cgroup.procs`;
    /// every child joins all of them).
    pub fn pids(&self) -> Vec<i32> {
        let Some(dir) = self.dirs.all().next() else {
            return Vec::new();
        };
        read_pids(&dir.join("cgroup.procs"))
    }

    /// Kills every process still in the cgroup and removes it (every
    /// hierarchy's directory). v2 writes `1` to `cgroup.kill` (or, before
    /// Linux 5.14, SIGKILLs every pid until none is left); v1 freezes the
    /// `freezer` cgroup so nothing can fork while the pids are read, then
    /// SIGKILLs each, thaws, and repeats until the cgroup is empty. Blocks
    /// up to 10 s (killed processes must be reaped, by fpmd as their
    /// subreaper, before `rmdir` succeeds). Errors: what was still there.
    pub fn kill_all_and_remove(&self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids: Vec<i32> = {
                let mut all: Vec<i32> = self
                    .dirs
                    .all()
                    .flat_map(|d| read_pids(&d.join("cgroup.procs")))
                    .collect();
                all.sort_unstable();
                all.dedup();
                all
            };
            if pids.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "cgroup {}: processes {pids:?} still there after SIGKILL",
                    self.pool
                )));
            }
            self.kill_round();
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut last = Ok(());
        for d in self.dirs.all() {
            // The kernel may still be tearing down the last task.
            let until = Instant::now() + Duration::from_secs(5);
            loop {
                match fs::remove_dir(d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if Instant::now() < until && e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        last = Err(io::Error::new(
                            e.kind(),
                            format!("cannot remove {}: {e}", d.display()),
                        ));
                        break;
                    }
                }
            }
        }
        last
    }

    /// SIGKILL to each of `pids`, processes of this cgroup.
    fn kill_each(&self, pids: &[i32]) {
        for &pid in pids {
            let _ = crate::process::signal::send(
                &self.pool,
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// One round of killing.
    fn kill_round(&self) {
        if self.v2 {
            let dir = self.dirs.unified.as_ref().expect("v2 directory");
            if write(&dir.join("cgroup.kill"), "1").is_ok() {
                return;
            }
            self.kill_each(&read_pids(&dir.join("cgroup.procs")));
            return;
        }
        let freezer = self.dirs.freezer.as_ref();
        if let Some(f) = freezer {
            if write(&f.join("freezer.state"), "FROZEN").is_ok() {
                // FREEZING until every task has stopped; bounded wait.
                let until = Instant::now() + Duration::from_secs(1);
                while Instant::now() < until
                    && fs::read_to_string(f.join("freezer.state"))
                        .is_ok_and(|s| s.trim() != "FROZEN")
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        for d in self.dirs.all() {
            self.kill_each(&read_pids(&d.join("cgroup.procs")));
        }
        if let Some(f) = freezer {
            // SIGKILL is delivered once thawed.
            let _ = write(&f.join("freezer.state"), "THAWED");
        }
    }
}

/// The pids a `cgroup.procs` file lists, as this PID namespace sees them.
/// A process of a PID namespace fpmd cannot see is listed as 0 (the
/// kernel's `pid_vnr`): never one to signal (`kill(0)` is fpmd's own
/// process group), so left out here; [`has_foreign_processes`] tells.
fn read_pids(file: &Path) -> Vec<i32> {
    fs::read_to_string(file)
        .map(|t| {
            t.lines()
                .filter_map(|l| l.trim().parse().ok())
                .filter(|&pid: &i32| pid > 0)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the cgroup `dir` holds a process of a PID namespace fpmd cannot
/// see (its `cgroup.procs` lists it as 0).
fn has_foreign_processes(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|t| t.lines().any(|l| l.trim() == "0"))
}

fn mkdir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot create the cgroup {}: {e}", dir.display()),
        )),
    }
}

fn write(file: &Path, value: &str) -> io::Result<()> {
    fs::write(file, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot write {value:?} to {}: {e}", file.display()),
        )
    })
}

/// v2: makes `memory`, `pids` and `cpu` available to the pools' cgroups
/// under `own`. v2 refuses controllers in a cgroup that holds processes
/// (`EBUSY`): fpmd then moves itself (all its threads) into
/// `own/fpmd-<pid>.daemon` first.
fn enable_v2_controllers(own: &Path) -> io::Result<()> {
    let available = fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
    let wanted: Vec<&str> = ["memory", "pids", "cpu"]
        .into_iter()
        .filter(|c| available.split_whitespace().any(|a| a == *c))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let line = wanted
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    let control = own.join("cgroup.subtree_control");
    match fs::write(&control, &line) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            let leaf = own.join(format!("fpmd-{}.daemon", std::process::id()));
            mkdir(&leaf)?;
            write(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
            write(&control, &line)
        }
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot write {line:?} to {}: {e}", control.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool cgroup whose fpmd's pid is not visible is swept only when no
    /// process of another PID namespace (pid 0 in `cgroup.procs`) is in it
    /// or in fpmd's own cgroup; pid 0 is never a pid to signal.
    #[test]
    fn cgroups_of_another_pid_namespace_are_left_alone() {
        let own = tempfile::tempdir().unwrap();
        let layout = Layout::V2 {
            own: own.path().to_path_buf(),
        };
        let pool = |name: &str, procs: &str| {
            let d = own.path().join(name);
            fs::create_dir(&d).unwrap();
            fs::write(d.join("cgroup.procs"), procs).unwrap();
            fs::write(d.join("cgroup.kill"), "").unwrap();
            d
        };
        // i32::MAX: a pid the kernel never hands out, so "gone".
        let foreign = pool(&format!("fpmd-{}.www", i32::MAX), "0\n");
        assert_eq!(read_pids(&foreign.join("cgroup.procs")), Vec::<i32>::new());
        assert!(has_foreign_processes(&foreign));
        fs::write(own.path().join("cgroup.procs"), "0\n0\n").unwrap();
        let empty = pool(&format!("fpmd-{}.api", i32::MAX - 1), "");
        layout.sweep_stale();
        let killed = |d: &Path| fs::read_to_string(d.join("cgroup.kill")).unwrap() == "1";
        assert!(
            !killed(&foreign) && !killed(&empty),
            "swept under a shared own cgroup"
        );
        fs::write(own.path().join("cgroup.procs"), "").unwrap();
        layout.sweep_stale();
        assert!(
            !killed(&foreign),
            "a cgroup with another namespace's process was swept"
        );
    }

    const V1_CGROUP: &str = "9:name=systemd:/\n8:pids:/\n6:freezer:/\n4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n";

    fn v1_mounts(root: &Path) -> String {
        let r = root.display();
        format!(
            "tmpfs {r} tmpfs rw 0 0\ncgroup {r}/cpu cgroup rw,relatime,cpu 0 0\ncgroup {r}/cpuacct cgroup rw,cpuacct 0 0\ncgroup {r}/memory cgroup rw,relatime,memory 0 0\ncgroup {r}/freezer cgroup rw,freezer 0 0\ncgroup {r}/pids cgroup rw,pids 0 0\ncgroup2 {r}/unified cgroup2 rw 0 0\n"
        )
    }

    fn fake_v1() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for d in [
            "cpu",
            "memory/process_api/abc",
            "freezer",
            "pids",
            "unified",
        ] {
            fs::create_dir_all(t.path().join(d)).unwrap();
        }
        t
    }

    #[test]
    fn detects_v1_under_fpmds_own_cgroup() {
        let t = fake_v1();
        let l = Layout::detect(t.path(), V1_CGROUP, &v1_mounts(t.path())).unwrap();
        assert_eq!(
            l,
            Layout::V1 {
                memory: Some(t.path().join("memory/process_api/abc")),
                pids: Some(t.path().join("pids")),
                cpu: Some(t.path().join("cpu")),
                freezer: Some(t.path().join("freezer")),
            }
        );
    }

    #[test]
    fn detects_a_combined_cpu_cpuacct_mount() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("cpu,cpuacct/x")).unwrap();
        let mounts = format!(
            "cgroup {}/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n",
            t.path().display()
        );
        let l = Layout::detect(t.path(), "3:cpu,cpuacct:/x\n", &mounts).unwrap();
        assert_eq!(
            l,
            Layout::V1 {
                memory: None,
                pids: None,
                cpu: Some(t.path().join("cpu,cpuacct/x")),
                freezer: None,
            }
        );
    }

    #[test]
    fn nothing_mounted_is_no_layout() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(
            Layout::detect(t.path(), V1_CGROUP, "proc /proc proc rw 0 0\n"),
            None
        );
    }

    #[test]
    fn v1_pool_cgroup_gets_its_limits_and_is_removed() {
        let t = fake_v1();
        let l = Layout::detect(t.path(), V1_CGROUP, &v1_mounts(t.path())).unwrap();
        let name = cgroup_name(42, "www.example");
        assert_eq!(name, "fpmd-42.www_example");
        let cg = PoolCgroup::create(&l, &name).unwrap();
        let mem = t.path().join("memory/process_api/abc").join(&name);
        assert!(mem.is_dir());
        assert_eq!(
            cg.procs_files(),
            vec![
                mem.join("cgroup.procs"),
                t.path().join("pids").join(&name).join("cgroup.procs"),
                t.path().join("cpu").join(&name).join("cgroup.procs"),
                t.path().join("freezer").join(&name).join("cgroup.procs"),
            ]
        );
        cg.apply(&Limits {
            memory_max: Some(256 << 20),
            pids_max: Some(20),
            cpu_weight: Some(50),
        })
        .unwrap();
        let read = |p: PathBuf| fs::read_to_string(p).unwrap();
        assert_eq!(read(mem.join("memory.limit_in_bytes")), "268435456");
        assert_eq!(
            read(t.path().join("pids").join(&name).join("pids.max")),
            "20"
        );
        assert_eq!(
            read(t.path().join("cpu").join(&name).join("cpu.shares")),
            "512"
        );
        cg.apply(&Limits::default()).unwrap();
        assert_eq!(read(mem.join("memory.limit_in_bytes")), "-1");
        assert_eq!(
            read(t.path().join("pids").join(&name).join("pids.max")),
            "max"
        );
        assert_eq!(
            read(t.path().join("cpu").join(&name).join("cpu.shares")),
            "1024"
        );

        fs::write(
            mem.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        )
        .unwrap();
        assert_eq!(cg.oom_kills(), Some(3));
        assert!(cg.pids().is_empty());
        // A fake tree's directories hold the files written above, which a
        // real cgroupfs does not; remove them to test the rmdir.
        for d in cg.dirs.all() {
            for e in fs::read_dir(d).unwrap() {
                fs::remove_file(e.unwrap().path()).unwrap();
            }
        }
        cg.kill_all_and_remove().unwrap();
        assert!(!mem.exists());
        assert!(!t.path().join("freezer").join(&name).exists());
    }

    #[test]
    fn v2_enables_controllers_and_writes_v2_files() {
        let t = tempfile::tempdir().unwrap();
        let own = t.path().join("system.slice/fpmd.service");
        fs::create_dir_all(&own).unwrap();
        fs::write(
            t.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        fs::write(own.join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
        let l = Layout::detect(t.path(), "0::/system.slice/fpmd.service\n", "").unwrap();
        assert_eq!(l, Layout::V2 { own: own.clone() });
        let cg = PoolCgroup::create(&l, "fpmd-7.www").unwrap();
        assert_eq!(
            fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
            "+memory +pids +cpu"
        );
        let dir = own.join("fpmd-7.www");
        assert_eq!(cg.procs_files(), vec![dir.join("cgroup.procs")]);
        cg.apply(&Limits {
            memory_max: Some(1 << 30),
            pids_max: None,
            cpu_weight: Some(10000),
        })
        .unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("memory.max")).unwrap(),
            "1073741824"
        );
        assert_eq!(fs::read_to_string(dir.join("pids.max")).unwrap(), "max");
        assert_eq!(fs::read_to_string(dir.join("cpu.weight")).unwrap(), "10000");
        fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\noom_group_kill 0\n",
        )
        .unwrap();
        assert_eq!(cg.oom_kills(), Some(2));
    }

    #[test]
    fn shares_follow_systemd() {
        assert_eq!(shares_of_weight(100), 1024);
        assert_eq!(shares_of_weight(1), 10);
        assert_eq!(shares_of_weight(10000), 102400);
    }
}
