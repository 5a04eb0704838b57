//! The prepared plan applied in the forked child, between fork and exec, in
//! the order written in the module's header: raw system calls on data
//! prepared before the fork, nothing else ([`Prepared::apply`],
//! [`Prepared::apply_priority`], [`Prepared::apply_unprivileged`]).

use super::*;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// Writes a failing step's report (`what`, `path`, errno) to the pipe and
/// returns the error. Async-signal-safe.
pub(super) fn fail(report: RawFd, what: &[u8], path: Option<&CString>) -> io::Error {
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
