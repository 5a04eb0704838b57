use super::*;
use crate::config::paths::host_path;
use std::path::{Path, PathBuf};

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
