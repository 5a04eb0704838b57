//! Confining a php-cgi child: `chroot` in a private mount namespace,
//! resource limits, priority, `no_new_privs`, Landlock.
//!
//! Owns: the plan (pure, from the pool's configuration: [`SandboxPlan`],
//! and the mount steps of a chroot, [`mount_steps`]), its preparation on
//! the spawner thread before the fork ([`prepare`]: every path a
//! `CString`, the Landlock ruleset an fd, the site's directory read) and
//! its application in the forked child ([`Prepared::apply`]). Must not
//! touch: credentials, `PR_SET_PDEATHSIG` (the spawner does them, see
//! [`crate::process::spawn`]), the decision of when to spawn.
//!
//! ## The order of `apply()` (between fork and exec)
//!
//! 1. `setrlimit(RLIMIT_NOFILE)`, `setrlimit(RLIMIT_CORE)` (php-fpm's
//!    `fpm_unix_init_child` order: limits first).
//! 2. With `chroot`: `unshare(CLONE_NEWNS)` → `/` made `MS_PRIVATE|MS_REC`
//!    → a tmpfs on the staging directory → the mount steps (directories,
//!    empty files and symlinks made in the tmpfs; the site's top-level
//!    entries bind-mounted read-write, `nosuid,nodev`, each attached
//!    (`move_mount`) from a detached copy of its mount made before the fork
//!    (`open_tree` on an `O_PATH|O_NOFOLLOW` fd opened relative to an fd of
//!    the site's directory: nothing of the site is looked up by path in
//!    the child, so an entry swapped for a symlink is not followed); PHP's runtime
//!    bind-mounted then remounted read-only, `nosuid`, `nodev` except for
//!    the device nodes) → `pivot_root` into the tmpfs, the old root
//!    detached → the tmpfs itself remounted read-only.
//! 3. `chdir(chdir)`, inside the new root. (`Command::current_dir` is not
//!    used: std runs it before `pre_exec`, so it would leave the working
//!    directory outside the new root.)
//! 4. (The spawner, between `apply()` and `apply_priority()`: joining the
//!    pool's cgroup goes here.)
//! 5. [`Prepared::apply_priority`]: `setpriority(PRIO_PROCESS)` (before the
//!    credential change: a negative nice value needs root, as in php-fpm).
//! 6. The spawner's `setgroups`/`setgid`/`setuid`, then
//!    [`Prepared::apply_unprivileged`]:
//! 7. `PR_SET_DUMPABLE` (after the credential change, which clears it, as
//!    php-fpm does; but see [`SandboxPlan::dumpable`]).
//! 8. `PR_SET_NO_NEW_PRIVS`.
//! 9. `landlock_restrict_self` on the ruleset fd prepared before the fork.
//!
//! Everything in `apply` is a raw system call on data prepared before the
//! fork: no allocation, no lock (async-signal-safe, as a fork of a
//! multi-threaded process requires). A failing step writes its name and
//! path to a pipe the spawner reads, so the spawn error says which step.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use crate::config::paths::host_path;
use crate::config::{Isolation, Landlock};

/// The confinement of one pool's children, from its configuration (pure;
/// part of the spawn template, so that any change needs new children).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    /// The pool (names its private `/tmp`).
    pub pool: String,
    /// `chroot`: the site's host directory that becomes `/`.
    pub root: Option<PathBuf>,
    /// `chdir`: the working directory, inside `root` when there is one.
    pub cwd: PathBuf,
    /// `rlimit_files` (descriptors) and `rlimit_core` (bytes,
    /// `u64::MAX` for unlimited).
    pub rlimit_files: Option<u64>,
    pub rlimit_core: Option<u64>,
    /// `process.priority` (nice value).
    pub priority: Option<i32>,
    /// `process.dumpable`. Note: `execve` of a binary the user can read
    /// makes the process dumpable again whatever was set before it
    /// (kernel `begin_new_exec`), so an exec'd php-cgi is dumpable either
    /// way; `false` only matters before the exec.
    pub dumpable: bool,
    /// `no_new_privs`.
    pub no_new_privs: bool,
    /// `landlock.*`, paths as the child sees them.
    pub landlock: Option<Landlock>,
}

impl SandboxPlan {
    /// The plan of `pool`'s children.
    pub fn of(pool: &str, iso: &Isolation, chdir: &Path) -> SandboxPlan {
        SandboxPlan {
            pool: pool.to_string(),
            root: iso.chroot.clone(),
            cwd: chdir.to_path_buf(),
            rlimit_files: iso.rlimit_files,
            rlimit_core: iso.rlimit_core,
            priority: iso.process_priority,
            dumpable: iso.process_dumpable,
            no_new_privs: iso.no_new_privs,
            landlock: iso.landlock.clone(),
        }
    }
}

/// A top-level entry of the site's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteEntry {
    pub name: OsString,
    pub kind: Kind,
}

/// What a path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    /// A regular file, a device, a socket, a FIFO: bound onto an empty
    /// file.
    File,
    /// A symlink, recreated with this target.
    Symlink(PathBuf),
}

/// A path of PHP's runtime, at the same place inside the root as on the
/// host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimePath {
    /// Absolute; on the host, already free of symlinks unless `kind` is
    /// [`Kind::Symlink`].
    pub path: PathBuf,
    /// Where it comes from on the host (`path` itself, or the target of a
    /// symlinked file such as `/etc/localtime`).
    pub source: PathBuf,
    pub kind: Kind,
    /// A device node: mounted without `nodev`.
    pub device: bool,
}

/// One step of building the new root, on paths inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Mkdir(PathBuf),
    /// An empty file, as the mount point of a file bind mount.
    Touch(PathBuf),
    Symlink {
        target: PathBuf,
        link: PathBuf,
    },
    /// Bind `source` (host) on `target` (inside), then remount it with
    /// `nosuid`, `nodev` unless `device`, read-only when `read_only`.
    Bind {
        source: PathBuf,
        target: PathBuf,
        read_only: bool,
        device: bool,
    },
}

/// Top-level names the runtime cannot do without: a site entry of that
/// name is hidden. `lib64` holds the ELF interpreter
/// (`/lib64/ld-linux-x86-64.so.2`); `bin`, `lib` and `sbin` are not
/// needed (ld.so falls back from its cache's `/lib/...` to `/usr/lib/...`),
/// so a site's own `lib/` (DokuWiki) wins over them.
pub const RUNTIME_NAMES: &[&str] = &["usr", "etc", "dev", "lib64", OLD_ROOT];

/// Where the old root is put by `pivot_root`, then detached and removed.
const OLD_ROOT: &str = ".fpmd-old-root";

/// The steps that build a chrooted child's `/`: every site entry except
/// [`RUNTIME_NAMES`] bind-mounted read-write; every runtime path whose
/// top-level name the site does not take (or that is a runtime name)
/// bind-mounted read-only or recreated as a symlink; `/tmp` the site's
/// own `tmp` when it has one, else `private_tmp`.
pub fn mount_steps(
    site: &[SiteEntry],
    root: &Path,
    runtime: &[RuntimePath],
    private_tmp: &Path,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut made: Vec<PathBuf> = Vec::new();
    let taken = |name: &OsStr| {
        site.iter().any(|e| e.name == name) && !RUNTIME_NAMES.iter().any(|r| OsStr::new(r) == name)
    };
    let mkdirs = |steps: &mut Vec<Step>, made: &mut Vec<PathBuf>, dir: &Path| {
        let mut p = PathBuf::from("/");
        for c in dir.components().skip(1) {
            p.push(c);
            if !made.contains(&p) {
                made.push(p.clone());
                steps.push(Step::Mkdir(p.clone()));
            }
        }
    };
    for e in site {
        if RUNTIME_NAMES.iter().any(|r| OsStr::new(r) == e.name) {
            continue;
        }
        let target = Path::new("/").join(&e.name);
        let source = root.join(&e.name);
        match &e.kind {
            Kind::Symlink(t) => steps.push(Step::Symlink {
                target: t.clone(),
                link: target,
            }),
            kind => {
                steps.push(if *kind == Kind::Dir {
                    made.push(target.clone());
                    Step::Mkdir(target.clone())
                } else {
                    Step::Touch(target.clone())
                });
                steps.push(Step::Bind {
                    source,
                    target,
                    read_only: false,
                    device: false,
                });
            }
        }
    }
    for r in runtime {
        let Some(Component::Normal(top)) = r.path.components().nth(1) else {
            continue;
        };
        if taken(top) {
            continue;
        }
        if let Some(parent) = r.path.parent() {
            mkdirs(&mut steps, &mut made, parent);
        }
        match &r.kind {
            Kind::Symlink(t) => steps.push(Step::Symlink {
                target: t.clone(),
                link: r.path.clone(),
            }),
            kind => {
                steps.push(if *kind == Kind::Dir {
                    made.push(r.path.clone());
                    Step::Mkdir(r.path.clone())
                } else {
                    Step::Touch(r.path.clone())
                });
                steps.push(Step::Bind {
                    source: r.source.clone(),
                    target: r.path.clone(),
                    read_only: true,
                    device: r.device,
                });
            }
        }
    }
    if !site.iter().any(|e| e.name == "tmp") {
        steps.push(Step::Mkdir("/tmp".into()));
        steps.push(Step::Bind {
            source: private_tmp.to_path_buf(),
            target: "/tmp".into(),
            read_only: false,
            device: false,
        });
    }
    steps
}

/// Directories of PHP's runtime mounted read-only in a chroot (those that
/// exist on the host).
pub const RUNTIME_DIRS: &[&str] = &["/usr", "/etc/php", "/etc/ssl", "/etc/ca-certificates"];

/// Files of PHP's runtime mounted read-only in a chroot (those that exist;
/// a symlink is mounted as the file it names).
pub const RUNTIME_FILES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/mime.types",
];

/// Device nodes mounted in a chroot (read-only mounts: they can still be
/// written, a device is no file of the mount).
pub const RUNTIME_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Top-level directories of the host that merged-`/usr` systems make
/// symlinks into `/usr` (`/bin -> usr/bin`): recreated as the same
/// symlinks, or mounted read-only where they are real directories;
/// `/lib64` is a directory whose files (the ELF interpreter) are mounted
/// one by one.
pub const RUNTIME_TOP: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/libx32", "/lib64"];

/// The runtime as found on this host, plus the php-cgi binary `program`
/// (canonical) when no runtime directory holds it.
pub fn host_runtime(program: &Path) -> Vec<RuntimePath> {
    let mut out = Vec::new();
    for p in RUNTIME_TOP {
        let path = PathBuf::from(p);
        if *p == "/lib64" {
            // The ELF interpreter's directory: its entries mounted one by
            // one as the files they resolve to, because Debian's
            // /lib64/ld-linux-x86-64.so.2 is a symlink through /lib, which
            // a site may have taken (DokuWiki's lib/).
            for e in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                if let Ok(source) = std::fs::canonicalize(e.path()) {
                    if source.is_file() {
                        out.push(RuntimePath {
                            path: path.join(e.file_name()),
                            source,
                            kind: Kind::File,
                            device: false,
                        });
                    }
                }
            }
            continue;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(t) = std::fs::read_link(&path) {
                    out.push(RuntimePath {
                        source: path.clone(),
                        path,
                        kind: Kind::Symlink(t),
                        device: false,
                    });
                }
            }
            Ok(m) if m.is_dir() => out.push(RuntimePath {
                source: path.clone(),
                path,
                kind: Kind::Dir,
                device: false,
            }),
            _ => {}
        }
    }
    for p in RUNTIME_DIRS {
        let path = PathBuf::from(p);
        if let Ok(source) = std::fs::canonicalize(&path) {
            if source.is_dir() {
                out.push(RuntimePath {
                    path,
                    source,
                    kind: Kind::Dir,
                    device: false,
                });
            }
        }
    }
    for (list, device) in [(RUNTIME_FILES, false), (RUNTIME_DEVICES, true)] {
        for p in list {
            let path = PathBuf::from(p);
            if let Ok(source) = std::fs::canonicalize(&path) {
                if !source.is_dir() {
                    out.push(RuntimePath {
                        path,
                        source,
                        kind: Kind::File,
                        device,
                    });
                }
            }
        }
    }
    if !out
        .iter()
        .any(|r| r.kind == Kind::Dir && program.starts_with(&r.path))
    {
        out.push(RuntimePath {
            path: program.to_path_buf(),
            source: program.to_path_buf(),
            kind: Kind::File,
            device: false,
        });
    }
    out
}

/// A top-level entry of the site's directory, opened before the fork.
pub struct OpenEntry {
    /// Its name and what `fstat` on `fd` says it is.
    pub entry: SiteEntry,
    /// `O_PATH|O_NOFOLLOW|O_CLOEXEC`, opened relative to the site's
    /// directory fd: the entry itself (a symlink is the link, never what
    /// it names). A bind mount is made from this fd, never from the
    /// entry's path, so an entry swapped for a symlink after it was read
    /// (a customer with SFTP access replacing `data/` by `data -> /`)
    /// cannot get the host's `/` mounted in the chroot.
    pub fd: OwnedFd,
}

/// `fd` moved above the standard descriptors (std's `Command` `dup2`s the
/// child's stdio onto 0, 1 and 2 before `pre_exec`, which would replace
/// an fd of ours that happened to be one of them), close-on-exec.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl on a valid fd; the result is a new fd we own.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `n` is a fresh fd nobody else owns.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(n) })
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// A detached copy of the mount tree at `fd` (`open_tree(fd, "",
/// OPEN_TREE_CLONE|AT_RECURSIVE|AT_EMPTY_PATH)`, close-on-exec): a bind
/// mount waiting to be attached with `move_mount`.
fn open_tree(fd: &OwnedFd) -> io::Result<OwnedFd> {
    let flags = OPEN_TREE_CLONE
        | libc::O_CLOEXEC as libc::c_uint
        | AT_RECURSIVE
        | libc::AT_EMPTY_PATH as libc::c_uint;
    // SAFETY: a valid fd and an empty C string; the result is a new fd.
    let n = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), c"".as_ptr(), flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `n` is a fresh fd nobody else owns.
    above_stdio(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(n as RawFd) })
}

/// `openat(dir, name, flags)` as an owned fd (close-on-exec added).
fn open_at(dir: RawFd, name: &CString, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a valid dirfd and C string; the result is a new fd we own.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh fd nobody else owns.
    above_stdio(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// The top-level entries of the site's directory `root`, sorted by name,
/// each opened (see [`OpenEntry`]). `root` is opened once
/// (`O_PATH|O_DIRECTORY|O_NOFOLLOW`: a `chroot` that is a symlink is
/// refused with `ELOOP`/`ENOTDIR`), listed through that fd, and every entry
/// is opened relative to it: nothing below is looked up by path again.
/// What an entry is comes from `fstat` on its fd, not from `readdir`
/// (which may be stale by then): what is mounted is what was checked.
pub fn open_site(root: &Path) -> io::Result<Vec<OpenEntry>> {
    let dir = open_at(
        libc::AT_FDCWD,
        &cstr(root)?,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    )?;
    let mut out = Vec::new();
    // Listed through the fd (the magic link names the directory opened
    // above, whatever `root` names by now).
    for e in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        let name = e?.file_name();
        let cname = CString::new(name.as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "NUL in a file name"))?;
        let fd = match open_at(dir.as_raw_fd(), &cname, libc::O_PATH | libc::O_NOFOLLOW) {
            Ok(fd) => fd,
            // Removed since it was listed: not there.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        // SAFETY: fstat on a valid fd into a valid out pointer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                // The target of the very link opened (readlinkat with an
                // empty path reads an O_PATH fd's link).
                let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
                // SAFETY: a valid fd, an empty C string, a buffer of that size.
                let n = unsafe {
                    libc::readlinkat(
                        fd.as_raw_fd(),
                        c"".as_ptr(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                    )
                };
                if n < 0 {
                    return Err(io::Error::last_os_error());
                }
                buf.truncate(n as usize);
                Kind::Symlink(PathBuf::from(OsString::from_vec(buf)))
            }
            libc::S_IFDIR => Kind::Dir,
            _ => Kind::File,
        };
        out.push(OpenEntry {
            entry: SiteEntry { name, kind },
            fd,
        });
    }
    out.sort_by(|a, b| a.entry.name.cmp(&b.entry.name));
    Ok(out)
}

/// A step ready to run in the child: paths as C strings, flags computed.
enum Op {
    Mkdir(CString),
    Touch(CString),
    Symlink(CString, CString),
    Bind {
        /// A host path (the runtime, the private `/tmp`); unused for a
        /// site entry, which is attached from `fd`.
        source: CString,
        target: CString,
        remount: libc::c_ulong,
        /// For a site entry: a detached copy of its mount tree
        /// (`open_tree(OPEN_TREE_CLONE)` on [`OpenEntry::fd`], made before
        /// the fork), which the child attaches with `move_mount` and
        /// closes; close-on-exec, so php-cgi never has it.
        fd: Option<OwnedFd>,
        /// The source's host path, for the report of a failure.
        shown: CString,
    },
}

/// The chroot part, prepared.
struct Root {
    staging: CString,
    ops: Vec<Op>,
    old_root: CString,
    old_root_inside: CString,
}

/// A plan made ready for [`Prepared::apply`]: everything allocated and
/// opened, on the spawner thread, before the fork.
pub struct Prepared {
    rlimit_files: Option<u64>,
    rlimit_core: Option<u64>,
    root: Option<Root>,
    cwd: CString,
    priority: Option<i32>,
    dumpable: bool,
    no_new_privs: bool,
    landlock: Option<OwnedFd>,
    /// Write end of the pipe that carries a failing step's name to the
    /// spawner (close-on-exec).
    report: OwnedFd,
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("path contains a NUL byte: {}", p.display()),
        )
    })
}

/// `MS_*` flags that a bind remount must keep from its source's mount
/// (else remounting would clear, say, `noexec`).
fn kept_flags(source: &Path, fd: Option<&OwnedFd>) -> io::Result<libc::c_ulong> {
    let c = cstr(source)?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string or fd and a valid out pointer.
    let r = match fd {
        Some(fd) => unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) },
        None => unsafe { libc::statvfs(c.as_ptr(), &mut st) },
    };
    if r != 0 {
        return Err(io::Error::new(
            io::Error::last_os_error().kind(),
            format!(
                "statvfs {}: {}",
                source.display(),
                io::Error::last_os_error()
            ),
        ));
    }
    let mut f = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_RDONLY, libc::MS_RDONLY),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            f |= ms_flag;
        }
    }
    Ok(f)
}

/// Where a path as the child sees it lies on the host, given the mount
/// steps (the deepest bind whose target holds it).
fn host_of(steps: &[Step], inside: &Path) -> Option<PathBuf> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Bind { source, target, .. } => inside.strip_prefix(target).ok().map(|rest| {
                let host = if rest.as_os_str().is_empty() {
                    source.clone()
                } else {
                    source.join(rest)
                };
                (target.components().count(), host)
            }),
            _ => None,
        })
        .max_by_key(|(depth, _)| *depth)
        .map(|(_, p)| p)
}

/// Prepares `plan` for a child of php-cgi `program` (canonical path),
/// with fpmd's private runtime directory `runtime_dir` (holds the staging
/// mount point and the pools' private `/tmp`s) and the child's
/// credentials (owner of the private `/tmp`). Errors: the site's
/// directory cannot be read, a path has a NUL byte, a Landlock path cannot
/// be opened or the ruleset not created.
pub fn prepare(
    plan: &SandboxPlan,
    program: &Path,
    runtime_dir: &Path,
    uid: u32,
    gid: u32,
) -> io::Result<(Prepared, OwnedFd)> {
    let (read_end, report) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let runtime = host_runtime(program);
    let mut steps = Vec::new();
    let root = match &plan.root {
        None => None,
        Some(site) => {
            let staging = runtime_dir.join("sandbox-root");
            std::fs::create_dir_all(&staging)?;
            let private_tmp = runtime_dir.join("tmp").join(&plan.pool);
            if !private_tmp.is_dir() {
                std::fs::create_dir_all(&private_tmp)?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&private_tmp, std::fs::Permissions::from_mode(0o1770))?;
            }
            // Owned by the pool's user, also after a reload changed it.
            use std::os::unix::fs::MetadataExt;
            let md = std::fs::metadata(&private_tmp)?;
            if (md.uid(), md.gid()) != (uid, gid) {
                std::os::unix::fs::chown(&private_tmp, Some(uid), Some(gid))?;
            }
            let mut opened = open_site(site)
                .map_err(|e| io::Error::new(e.kind(), format!("chroot {}: {e}", site.display())))?;
            let entries: Vec<SiteEntry> = opened.iter().map(|o| o.entry.clone()).collect();
            steps = mount_steps(&entries, site, &runtime, &private_tmp);
            let mut ops = Vec::with_capacity(steps.len());
            for s in &steps {
                let inside = |p: &Path| cstr(&host_path(&staging, p));
                ops.push(match s {
                    Step::Mkdir(p) => Op::Mkdir(inside(p)?),
                    Step::Touch(p) => Op::Touch(inside(p)?),
                    Step::Symlink { target, link } => Op::Symlink(cstr(target)?, inside(link)?),
                    Step::Bind {
                        source,
                        target,
                        read_only,
                        device,
                    } => {
                        // A site entry: mounted from its fd, never by path.
                        let fd = match source.parent() == Some(site.as_path()) && !*read_only {
                            true => opened
                                .iter()
                                .position(|o| Some(o.entry.name.as_os_str()) == source.file_name())
                                .map(|i| opened.swap_remove(i).fd),
                            false => None,
                        };
                        let mut remount = libc::MS_BIND
                            | libc::MS_REMOUNT
                            | libc::MS_NOSUID
                            | kept_flags(source, fd.as_ref())?;
                        if !device {
                            remount |= libc::MS_NODEV;
                        }
                        if *read_only {
                            remount |= libc::MS_RDONLY;
                        }
                        // The site entry's mount, cloned now in fpmd's own
                        // namespace (a bind from an fd of another namespace
                        // is refused with EINVAL once the child unshared),
                        // attached by the child with move_mount.
                        let fd = fd.map(|fd| open_tree(&fd)).transpose().map_err(|e| {
                            io::Error::new(e.kind(), format!("open_tree {}: {e}", source.display()))
                        })?;
                        let bind_source = cstr(source)?;
                        Op::Bind {
                            source: bind_source,
                            target: inside(target)?,
                            remount,
                            fd,
                            shown: cstr(source)?,
                        }
                    }
                });
            }
            Some(Root {
                old_root: cstr(&staging.join(OLD_ROOT))?,
                old_root_inside: cstr(&Path::new("/").join(OLD_ROOT))?,
                staging: cstr(&staging)?,
                ops,
            })
        }
    };
    let landlock = match &plan.landlock {
        None => None,
        Some(l) => {
            let host = |p: &Path| match &plan.root {
                Some(_) => host_of(&steps, p).unwrap_or_else(|| p.to_path_buf()),
                None => p.to_path_buf(),
            };
            let read: Vec<PathBuf> = l.read.iter().map(|p| host(p)).collect();
            let write: Vec<PathBuf> = l.write.iter().map(|p| host(p)).collect();
            Some(landlock_ruleset(&runtime, &read, &write)?)
        }
    };
    Ok((
        Prepared {
            rlimit_files: plan.rlimit_files,
            rlimit_core: plan.rlimit_core,
            root,
            cwd: cstr(&plan.cwd)?,
            priority: plan.priority,
            dumpable: plan.dumpable,
            no_new_privs: plan.no_new_privs,
            landlock,
            report,
        },
        read_end,
    ))
}

/// The Landlock ruleset (an fd, not yet enforced): every filesystem access
/// of ABI 3 handled; `read` and the runtime readable and executable;
/// `write` fully allowed; the device nodes readable and writable.
fn landlock_ruleset(
    runtime: &[RuntimePath],
    read: &[PathBuf],
    write: &[PathBuf],
) -> io::Result<OwnedFd> {
    use landlock::{
        Access, AccessFs, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
        ABI,
    };
    let abi = ABI::V3;
    let err =
        |what: &str, e: &dyn std::fmt::Display| io::Error::other(format!("landlock: {what}: {e}"));
    let file_read = AccessFs::ReadFile | AccessFs::Execute;
    let mut rules: Vec<(&Path, BitFlags<AccessFs>)> = Vec::new();
    for r in runtime {
        if matches!(r.kind, Kind::Symlink(_)) {
            continue;
        }
        let access = match (&r.kind, r.device) {
            (_, true) => AccessFs::ReadFile | AccessFs::WriteFile,
            (Kind::Dir, _) => AccessFs::from_read(abi),
            _ => file_read,
        };
        rules.push((&r.source, access));
    }
    rules.extend(read.iter().map(|p| (p.as_path(), AccessFs::from_read(abi))));
    rules.extend(write.iter().map(|p| (p.as_path(), AccessFs::from_all(abi))));
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| err("ruleset", &e))?
        .create()
        .map_err(|e| err("ruleset", &e))?;
    for (path, access) in rules {
        // Directory rights (READ_DIR, MAKE_*, REMOVE_*) on a file are
        // refused by the kernel: a file gets the file rights only.
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        let fd = PathFd::new(path).map_err(|e| err(&path.display().to_string(), &e))?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| err(&path.display().to_string(), &e))?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| io::Error::other("landlock: this kernel does not support Landlock"))
}

/// Writes a failing step's report (`what`, `path`, errno) to the pipe and
/// returns the error. Async-signal-safe.
fn fail(report: RawFd, what: &[u8], path: Option<&CString>) -> io::Error {
    let e = io::Error::last_os_error();
    let errno = e.raw_os_error().unwrap_or(0);
    let mut num = [0u8; 12];
    let mut i = num.len();
    let mut n = errno.unsigned_abs();
    loop {
        i -= 1;
        num[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let put = |b: &[u8]| {
        // SAFETY: write(2) of a valid buffer.
        unsafe { libc::write(report, b.as_ptr().cast(), b.len()) };
    };
    put(what);
    if let Some(p) = path {
        put(b" ");
        put(p.as_bytes());
    }
    put(b": errno ");
    put(&num[i..]);
    e
}

impl Prepared {
    /// Reports a failed step `what` that is not the sandbox's own (the
    /// cgroup join, the credential change, `PR_SET_PDEATHSIG`) the way the
    /// sandbox reports its own, with the errno of the call that just
    /// failed. Async-signal-safe.
    ///
    /// # Safety
    /// Only between fork and exec, in the child.
    pub unsafe fn fail_step(&self, what: &[u8]) -> io::Error {
        fail(self.report.as_raw_fd(), what, None)
    }

    /// Steps 1 to 3 of the order at the top of this file: limits, the
    /// chroot, `chdir`. Runs in the forked child before the credential
    /// change.
    ///
    /// # Safety
    /// Only between fork and exec, in the child.
    pub unsafe fn apply(&self) -> io::Result<()> {
        let report = self.report.as_raw_fd();
        let rlim = |res: libc::__rlimit_resource_t, v: u64, what: &[u8]| {
            let v = if v == u64::MAX {
                libc::RLIM_INFINITY
            } else {
                v
            };
            let r = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            if libc::setrlimit(res, &r) != 0 {
                return Err(fail(report, what, None));
            }
            Ok(())
        };
        if let Some(n) = self.rlimit_files {
            rlim(
                libc::RLIMIT_NOFILE,
                n,
                b"setrlimit(RLIMIT_NOFILE) (rlimit_files)",
            )?;
        }
        if let Some(n) = self.rlimit_core {
            rlim(
                libc::RLIMIT_CORE,
                n,
                b"setrlimit(RLIMIT_CORE) (rlimit_core)",
            )?;
        }
        if let Some(root) = &self.root {
            self.enter_root(root)?;
        }
        if libc::chdir(self.cwd.as_ptr()) != 0 {
            return Err(fail(report, b"chdir", Some(&self.cwd)));
        }
        Ok(())
    }

    /// Step 5: `process.priority`, before the credential change (a
    /// negative nice value needs root).
    ///
    /// # Safety
    /// Only between fork and exec, in the child.
    pub unsafe fn apply_priority(&self) -> io::Result<()> {
        if let Some(n) = self.priority {
            if libc::setpriority(libc::PRIO_PROCESS, 0, n) != 0 {
                return Err(fail(
                    self.report.as_raw_fd(),
                    b"setpriority (process.priority)",
                    None,
                ));
            }
        }
        Ok(())
    }

    unsafe fn enter_root(&self, root: &Root) -> io::Result<()> {
        let report = self.report.as_raw_fd();
        let null = std::ptr::null::<libc::c_char>();
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(fail(report, b"unshare(CLONE_NEWNS)", None));
        }
        if libc::mount(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail(report, b"mount(/, MS_PRIVATE)", None));
        }
        if libc::mount(
            c"tmpfs".as_ptr(),
            root.staging.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=0755,size=1m".as_ptr().cast(),
        ) != 0
        {
            return Err(fail(report, b"mount tmpfs", Some(&root.staging)));
        }
        for op in &root.ops {
            match op {
                Op::Mkdir(p) => {
                    if libc::mkdir(p.as_ptr(), 0o755) != 0
                        && *libc::__errno_location() != libc::EEXIST
                    {
                        return Err(fail(report, b"mkdir", Some(p)));
                    }
                }
                Op::Touch(p) => {
                    let fd = libc::open(
                        p.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd < 0 {
                        return Err(fail(report, b"create mount point", Some(p)));
                    }
                    libc::close(fd);
                }
                Op::Symlink(target, link) => {
                    if libc::symlink(target.as_ptr(), link.as_ptr()) != 0 {
                        return Err(fail(report, b"symlink", Some(link)));
                    }
                }
                Op::Bind {
                    source,
                    target,
                    remount,
                    fd,
                    shown,
                } => {
                    if let Some(fd) = fd {
                        // A site entry: the tree cloned from the fd opened
                        // before the fork, never a path looked up now.
                        if libc::syscall(
                            libc::SYS_move_mount,
                            fd.as_raw_fd(),
                            c"".as_ptr(),
                            libc::AT_FDCWD,
                            target.as_ptr(),
                            MOVE_MOUNT_F_EMPTY_PATH,
                        ) != 0
                        {
                            return Err(fail(report, b"bind mount", Some(shown)));
                        }
                        // Close-on-exec anyway; the parent's copy is closed
                        // when the spawn is done.
                        libc::close(fd.as_raw_fd());
                        // Private like the rest of the namespace (the clone
                        // kept its source's propagation).
                        if libc::mount(
                            null,
                            target.as_ptr(),
                            null,
                            libc::MS_REC | libc::MS_PRIVATE,
                            std::ptr::null(),
                        ) != 0
                        {
                            return Err(fail(report, b"make private", Some(target)));
                        }
                    } else if libc::mount(
                        source.as_ptr(),
                        target.as_ptr(),
                        null,
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(fail(report, b"bind mount", Some(shown)));
                    }
                    if libc::mount(null, target.as_ptr(), null, *remount, std::ptr::null()) != 0 {
                        return Err(fail(report, b"remount", Some(target)));
                    }
                }
            }
        }
        if libc::mkdir(root.old_root.as_ptr(), 0o700) != 0 {
            return Err(fail(report, b"mkdir", Some(&root.old_root)));
        }
        if libc::syscall(
            libc::SYS_pivot_root,
            root.staging.as_ptr(),
            root.old_root.as_ptr(),
        ) != 0
        {
            return Err(fail(report, b"pivot_root", Some(&root.staging)));
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            return Err(fail(report, b"chdir /", None));
        }
        if libc::umount2(root.old_root_inside.as_ptr(), libc::MNT_DETACH) != 0 {
            return Err(fail(report, b"umount old root", None));
        }
        if libc::rmdir(root.old_root_inside.as_ptr()) != 0 {
            return Err(fail(report, b"rmdir old root", None));
        }
        // The root itself read-only: a new top-level file fails with
        // EROFS instead of vanishing with the tmpfs.
        let ro =
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
        if libc::mount(null, c"/".as_ptr(), null, ro, std::ptr::null()) != 0 {
            return Err(fail(report, b"remount / read-only", None));
        }
        Ok(())
    }

    /// Steps 7 to 9: dumpable, `no_new_privs`, Landlock. Runs in the
    /// forked child after the credential change.
    ///
    /// # Safety
    /// Only between fork and exec, in the child.
    pub unsafe fn apply_unprivileged(&self) -> io::Result<()> {
        let report = self.report.as_raw_fd();
        if self.dumpable && libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 {
            return Err(fail(
                report,
                b"prctl(PR_SET_DUMPABLE) (process.dumpable)",
                None,
            ));
        }
        if (self.no_new_privs || self.landlock.is_some())
            && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        {
            return Err(fail(report, b"prctl(PR_SET_NO_NEW_PRIVS)", None));
        }
        if let Some(fd) = &self.landlock {
            if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0 {
                return Err(fail(report, b"landlock_restrict_self", None));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(names: &[(&str, Kind)]) -> Vec<SiteEntry> {
        names
            .iter()
            .map(|(n, k)| SiteEntry {
                name: n.into(),
                kind: k.clone(),
            })
            .collect()
    }

    fn runtime() -> Vec<RuntimePath> {
        let rp = |p: &str, kind: Kind, device| RuntimePath {
            path: p.into(),
            source: p.into(),
            kind,
            device,
        };
        vec![
            rp("/lib", Kind::Symlink("usr/lib".into()), false),
            rp("/lib64", Kind::Symlink("usr/lib64".into()), false),
            rp("/usr", Kind::Dir, false),
            rp("/etc/php", Kind::Dir, false),
            rp("/etc/hosts", Kind::File, false),
            rp("/dev/null", Kind::File, true),
        ]
    }

    #[test]
    fn site_entries_are_writable_and_runtime_read_only() {
        let steps = mount_steps(
            &site(&[("index.php", Kind::File), ("tmp", Kind::Dir)]),
            Path::new("/srv/a"),
            &runtime(),
            Path::new("/run/fpmd/tmp/a"),
        );
        let bind = |s: &str, t: &str, ro: bool, dev: bool| Step::Bind {
            source: s.into(),
            target: t.into(),
            read_only: ro,
            device: dev,
        };
        assert_eq!(
            steps,
            vec![
                Step::Touch("/index.php".into()),
                bind("/srv/a/index.php", "/index.php", false, false),
                Step::Mkdir("/tmp".into()),
                bind("/srv/a/tmp", "/tmp", false, false),
                Step::Symlink {
                    target: "usr/lib".into(),
                    link: "/lib".into()
                },
                Step::Symlink {
                    target: "usr/lib64".into(),
                    link: "/lib64".into()
                },
                Step::Mkdir("/usr".into()),
                bind("/usr", "/usr", true, false),
                Step::Mkdir("/etc".into()),
                Step::Mkdir("/etc/php".into()),
                bind("/etc/php", "/etc/php", true, false),
                Step::Touch("/etc/hosts".into()),
                bind("/etc/hosts", "/etc/hosts", true, false),
                Step::Mkdir("/dev".into()),
                Step::Touch("/dev/null".into()),
                bind("/dev/null", "/dev/null", true, true),
            ]
        );
    }

    #[test]
    fn collisions_site_wins_where_the_runtime_can_do_without() {
        let steps = mount_steps(
            &site(&[
                ("lib", Kind::Dir),
                ("etc", Kind::Dir),
                ("lib64", Kind::Dir),
                ("data", Kind::Symlink("lib/data".into())),
            ]),
            Path::new("/srv/w"),
            &runtime(),
            Path::new("/run/fpmd/tmp/w"),
        );
        // The site's lib/ is mounted, the runtime's /lib symlink is not.
        assert!(steps.contains(&Step::Bind {
            source: "/srv/w/lib".into(),
            target: "/lib".into(),
            read_only: false,
            device: false
        }));
        assert!(!steps
            .iter()
            .any(|s| matches!(s, Step::Symlink { link, .. } if link == Path::new("/lib"))));
        // etc and lib64 are the runtime's: the site's are hidden.
        assert!(!steps.iter().any(
            |s| matches!(s, Step::Bind { source, .. } if source.starts_with("/srv/w/etc") || source.starts_with("/srv/w/lib64"))
        ));
        assert!(steps.contains(&Step::Symlink {
            target: "usr/lib64".into(),
            link: "/lib64".into()
        }));
        // A site symlink is recreated; no tmp in the site: the private one.
        assert!(steps.contains(&Step::Symlink {
            target: "lib/data".into(),
            link: "/data".into()
        }));
        assert!(steps.contains(&Step::Bind {
            source: "/run/fpmd/tmp/w".into(),
            target: "/tmp".into(),
            read_only: false,
            device: false
        }));
    }

    #[test]
    fn host_paths() {
        assert_eq!(
            host_path(Path::new("/srv/a"), Path::new("/")),
            Path::new("/srv/a")
        );
        assert_eq!(
            host_path(Path::new("/srv/a"), Path::new("/data/x")),
            Path::new("/srv/a/data/x")
        );
        let steps = mount_steps(
            &site(&[("data", Kind::Dir)]),
            Path::new("/srv/a"),
            &runtime(),
            Path::new("/run/t/a"),
        );
        assert_eq!(
            host_of(&steps, Path::new("/data/pages")),
            Some("/srv/a/data/pages".into())
        );
        assert_eq!(host_of(&steps, Path::new("/tmp")), Some("/run/t/a".into()));
        assert_eq!(
            host_of(&steps, Path::new("/usr/lib/php")),
            Some("/usr/lib/php".into())
        );
        assert_eq!(host_of(&steps, Path::new("/nothing")), None);
    }

    /// A scratch directory under the system's temporary directory.
    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fpmd-sandbox-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_chroot_that_is_a_symlink_is_refused() {
        let d = scratch("link");
        std::fs::create_dir(d.join("site")).unwrap();
        std::os::unix::fs::symlink(d.join("site"), d.join("link")).unwrap();
        let e = open_site(&d.join("link"))
            .err()
            .expect("a symlink was opened");
        // O_NOFOLLOW|O_DIRECTORY on a symlink: ENOTDIR (ELOOP without
        // O_DIRECTORY).
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)),
            "{e}"
        );
        assert_eq!(open_site(&d.join("site")).unwrap().len(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The symlink race: the site's `data/` is read as a directory, then
    /// swapped for `data -> /` before the child mounts it (what a customer
    /// with SFTP access could time). The child mounts what was opened, the
    /// site's directory, never the host's root; a symlink the site had
    /// from the start is recreated and resolves inside the new root.
    #[test]
    fn a_site_entry_swapped_for_a_symlink_after_prepare_mounts_what_was_opened() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: needs root (mount namespace)");
            return;
        }
        let d = scratch("swap");
        let site = d.join("site");
        std::fs::create_dir_all(site.join("data")).unwrap();
        std::fs::write(site.join("data/marker"), "site").unwrap();
        std::fs::write(site.join("index.php"), "<?php").unwrap();
        std::os::unix::fs::symlink("/", site.join("hostroot")).unwrap();
        let plan = SandboxPlan {
            pool: "t".into(),
            root: Some(site.clone()),
            cwd: "/".into(),
            rlimit_files: None,
            rlimit_core: None,
            priority: None,
            dumpable: false,
            no_new_privs: false,
            landlock: None,
        };
        let program = std::fs::canonicalize("/bin/true").unwrap();
        let (prepared, report) = prepare(&plan, &program, &d.join("run"), 0, 0).unwrap();
        // Site entries are bound from their fds, not their paths.
        let root = prepared.root.as_ref().unwrap();
        let binds: Vec<String> = root
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::Bind { source, fd, .. } if fd.is_some() => {
                    Some(source.to_string_lossy().into_owned())
                }
                _ => None,
            })
            .collect();
        assert_eq!(binds.len(), 2, "data and index.php: {binds:?}");
        assert!(
            binds
                .iter()
                .all(|b| b.ends_with("/data") || b.ends_with("/index.php")),
            "{binds:?}"
        );

        // The swap, after the listing and before the mount.
        std::fs::rename(site.join("data"), site.join("data.old")).unwrap();
        std::os::unix::fs::symlink("/", site.join("data")).unwrap();

        let exists = |p: &std::ffi::CStr| unsafe { libc::access(p.as_ptr(), libc::F_OK) == 0 };
        // SAFETY: the child makes only raw system calls, then _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = unsafe {
                if prepared.apply().is_err() {
                    10
                } else if !exists(c"/data/marker") {
                    11 // data/ is not the site's directory
                } else if exists(c"/data/proc") || exists(c"/data/root") {
                    12 // the host's root is mounted
                } else if !exists(c"/hostroot/index.php") || exists(c"/hostroot/proc") {
                    13 // the site's symlink does not resolve inside
                } else {
                    0
                }
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "status {status}");
        drop(prepared);
        let mut step = String::new();
        let _ = std::io::Read::read_to_string(&mut std::fs::File::from(report), &mut step);
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "see the codes in the child; failed step: {step}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
