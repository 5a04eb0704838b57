//! Where things are by default, and paths as a chrooted child sees them:
//! the configuration file fpmd reads without `-c`, the control socket of a
//! configuration that sets none, and a path inside a pool's `chroot` as a
//! host path.
//!
//! Must not touch: the file system beyond looking (nothing is created).

use std::path::{Component, Path, PathBuf};

/// `./fpmd.toml` if it exists, else `/etc/fpmd/fpmd.toml` if it exists.
pub fn find_default_config() -> Option<PathBuf> {
    ["fpmd.toml", PACKAGED_CONFIG]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// The main configuration file of the packaged service, whose control
/// socket is [`PACKAGED_SOCKET`].
pub const PACKAGED_CONFIG: &str = "/etc/fpmd/fpmd.toml";
/// The packaged service's control socket.
pub const PACKAGED_SOCKET: &str = "/run/fpmd/fpmd.sock";

/// The default control socket of the daemon started on `main_config` with
/// the pid file `pid` (if any), as root (`root`) or not:
/// - root, a main file in `/etc/fpmd` (the packaged service's directory):
///   `/run/fpmd/fpmd.sock` for `/etc/fpmd/fpmd.toml`, else
///   `/run/fpmd/STEM-HASH.sock`, STEM the file's name without extension
///   and HASH 8 hex digits of its canonical path (FNV-1a), so that two
///   daemons there never share one;
/// - any other file, with a pid file: beside it, named after it
///   (`/run/php/php8.2-fpm.pid` → `/run/php/php8.2-fpm.ctl`), so that a
///   second daemon, a scratch copy or a test keeps to its own directory
///   instead of the system's `/run/fpmd`;
/// - any other file without one: `fpmd.sock` beside the main file (under
///   the prefix with `-p`, whose default main file is there).
pub fn default_path_as(main_config: &Path, pid: Option<&Path>, root: bool) -> PathBuf {
    let canonical = std::fs::canonicalize(main_config)
        .or_else(|_| std::path::absolute(main_config))
        .unwrap_or_else(|_| main_config.to_path_buf());
    if root && canonical.starts_with(PACKAGED_DIR) {
        if canonical == Path::new(PACKAGED_CONFIG) {
            return PathBuf::from(PACKAGED_SOCKET);
        }
        use std::os::unix::ffi::OsStrExt;
        let hash = canonical
            .as_os_str()
            .as_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        let stem = canonical
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "fpmd".into());
        return PathBuf::from(format!("/run/fpmd/{stem}-{:08x}.sock", hash as u32));
    }
    match pid {
        Some(pid) => pid.with_extension("ctl"),
        None => main_config
            .parent()
            .unwrap_or(Path::new("."))
            .join("fpmd.sock"),
    }
}

/// [`default_path_as`] for this process's effective user.
pub fn default_path(main_config: &Path, pid: Option<&Path>) -> PathBuf {
    default_path_as(main_config, pid, nix::unistd::Uid::effective().is_root())
}

/// The packaged service's configuration directory: as root, a main file
/// in it has its control socket in `/run/fpmd` (see [`default_path_as`]).
pub const PACKAGED_DIR: &str = "/etc/fpmd";

/// `inside` (absolute, as a chrooted child sees it) as a path under the
/// host directory `root`, lexically (`/` is `root` itself).
pub fn host_path(root: &Path, inside: &Path) -> PathBuf {
    let mut out = root.to_path_buf();
    for c in inside.components() {
        if let Component::Normal(n) = c {
            out.push(n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_paths_differ_per_configuration() {
        assert_eq!(
            default_path_as(Path::new(PACKAGED_CONFIG), None, true),
            PathBuf::from(PACKAGED_SOCKET)
        );
        let a = default_path_as(Path::new("/etc/fpmd/a.toml"), None, true);
        let b = default_path_as(Path::new("/etc/fpmd/b.toml"), None, true);
        assert_ne!(a, b);
        assert!(a.starts_with("/run/fpmd") && a.to_string_lossy().contains("/a-"));
        assert_eq!(
            a,
            default_path_as(Path::new("/etc/fpmd/a.toml"), None, true)
        );
        // Outside /etc/fpmd, root or not: beside the pid file, else beside
        // the main file; never in the system's /run/fpmd.
        let pid = Path::new("/run/php/php8.2-fpm.pid");
        for root in [true, false] {
            assert_eq!(
                default_path_as(Path::new("/etc/php/8.2/fpm/php-fpm.conf"), Some(pid), root),
                PathBuf::from("/run/php/php8.2-fpm.ctl")
            );
            assert_eq!(
                default_path_as(Path::new("/srv/x/fpmd.toml"), None, root),
                PathBuf::from("/srv/x/fpmd.sock")
            );
        }
        assert_eq!(
            default_path_as(
                Path::new("/srv/x/fpmd.toml"),
                Some(Path::new("/srv/x/run/pid")),
                true
            ),
            PathBuf::from("/srv/x/run/pid.ctl")
        );
    }
}
