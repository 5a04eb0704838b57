//! The plan of a child's confinement, pure: [`SandboxPlan`] from the pool's
//! configuration, and the mount steps of a chroot ([`mount_steps`]) from the
//! site's top-level entries and PHP's runtime on the host ([`host_runtime`]).

use crate::config::{Isolation, Landlock};
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

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
pub(super) const OLD_ROOT: &str = ".fpmd-old-root";

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
/// (canonical) when no runtime directory holds it, and fpmd's `sapi.php`
/// and fork server once installed (at [`crate::process::sapi::IN_CHROOT`]
/// and [`crate::process::fork_server::IN_CHROOT`]).
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
    // fpmd's own `auto_prepend_file` (see `crate::process::sapi`): at a
    // fixed path in a chroot, readable under Landlock.
    if let Some(sapi) = crate::process::sapi::installed() {
        out.push(RuntimePath {
            path: PathBuf::from(crate::process::sapi::IN_CHROOT),
            source: sapi.path.clone(),
            kind: Kind::File,
            device: false,
        });
    }
    // The fork server a pre-fork parent preloads, likewise.
    if let Some(library) = crate::process::fork_server::installed() {
        out.push(RuntimePath {
            path: PathBuf::from(crate::process::fork_server::IN_CHROOT),
            source: library.to_path_buf(),
            kind: Kind::File,
            device: false,
        });
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
