//! The plan prepared on the spawner thread, before the fork ([`prepare`]):
//! every path a `CString`, the site's entries opened and their mounts
//! cloned ([`open_site`]), the Landlock ruleset an fd: what [`Prepared`]
//! holds for the child.

use super::*;
use crate::config::paths::host_path;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

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
pub(super) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
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

pub(super) const OPEN_TREE_CLONE: libc::c_uint = 1;

pub(super) const AT_RECURSIVE: libc::c_uint = 0x8000;

pub(super) const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// A detached copy of the mount tree at `fd` (`open_tree(fd, "",
/// OPEN_TREE_CLONE|AT_RECURSIVE|AT_EMPTY_PATH)`, close-on-exec): a bind
/// mount waiting to be attached with `move_mount`.
pub(super) fn open_tree(fd: &OwnedFd) -> io::Result<OwnedFd> {
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
pub(super) fn open_at(dir: RawFd, name: &CString, flags: libc::c_int) -> io::Result<OwnedFd> {
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
pub(super) enum Op {
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
pub(super) struct Root {
    pub(super) staging: CString,
    pub(super) ops: Vec<Op>,
    pub(super) old_root: CString,
    pub(super) old_root_inside: CString,
}

/// A plan made ready for [`Prepared::apply`]: everything allocated and
/// opened, on the spawner thread, before the fork.
pub struct Prepared {
    pub(super) rlimit_files: Option<u64>,
    pub(super) rlimit_core: Option<u64>,
    pub(super) root: Option<Root>,
    pub(super) cwd: CString,
    pub(super) priority: Option<i32>,
    pub(super) dumpable: bool,
    pub(super) no_new_privs: bool,
    pub(super) landlock: Option<OwnedFd>,
    /// Write end of the pipe that carries a failing step's name to the
    /// spawner (close-on-exec).
    pub(super) report: OwnedFd,
}

pub(super) fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("path contains a NUL byte: {}", p.display()),
        )
    })
}

/// `MS_*` flags that a bind remount must keep from its source's mount
/// (else remounting would clear, say, `noexec`).
pub(super) fn kept_flags(source: &Path, fd: Option<&OwnedFd>) -> io::Result<libc::c_ulong> {
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
pub(super) fn host_of(steps: &[Step], inside: &Path) -> Option<PathBuf> {
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
    let mut runtime = host_runtime(program);
    // The pool's status socket for fpm_get_status(), once the daemon made
    // it (a child started before that has none: the function returns
    // false there).
    if let Some(sapi) = crate::process::sapi::installed() {
        let dir = sapi.path.parent().unwrap_or(Path::new("/"));
        let source = crate::process::sapi::status_socket(dir, &plan.pool);
        if plan.root.is_some() && source.exists() {
            runtime.push(RuntimePath {
                path: PathBuf::from(crate::process::sapi::STATUS_IN_CHROOT),
                source,
                kind: Kind::File,
                device: false,
            });
        }
    }
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

/// The Landlock ruleset of a plan without `chroot`, for a child forked by
/// a shared php-cgi parent ([`crate::process::shared_parent`]), which
/// restricts itself with it after its credential change; `None` without
/// `landlock.*`. A ruleset fd serves any number of children. Errors: the
/// kernel has no Landlock, or a path cannot be opened.
pub fn landlock_fd(plan: &SandboxPlan, program: &Path) -> io::Result<Option<OwnedFd>> {
    match &plan.landlock {
        None => Ok(None),
        Some(l) => landlock_ruleset(&host_runtime(program), &l.read, &l.write).map(Some),
    }
}

/// The Landlock ruleset (an fd, not yet enforced): every filesystem access
/// of ABI 3 handled; `read` and the runtime readable and executable;
/// `write` fully allowed; the device nodes readable and writable.
pub(super) fn landlock_ruleset(
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
