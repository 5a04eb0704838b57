//! Facts about php-cgi that validation needs: where a `php_cgi` value
//! points (a path, or a name on `PATH`), the Debian version of a binary
//! and the php.ini files it reads, and how large its command line may be.
//!
//! Must not touch: processes (nothing is run).

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::source::{absolutize, normalize};

pub(super) fn is_executable_file(p: &Path) -> Result<(), String> {
    match std::fs::metadata(p) {
        Err(_) => Err(format!("php-cgi binary not found: {}", p.display())),
        Ok(m) if !m.is_file() => Err(format!(
            "php-cgi binary not found: {} is not a regular file",
            p.display()
        )),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Err(format!(
            "php-cgi binary not found: {} is not executable",
            p.display()
        )),
        Ok(_) => Ok(()),
    }
}

/// `php_cgi`: a path (containing `/`, relative to the file's directory) or a
/// bare name looked up on `path_env` (default `/usr/local/bin:/usr/bin:/bin`).
pub(super) fn resolve_php_cgi(
    value: Option<&str>,
    dir: &Path,
    path_env: Option<OsString>,
) -> Result<PathBuf, String> {
    let name = value.unwrap_or("php-cgi");
    if name.is_empty() {
        return Err("php_cgi must not be empty".into());
    }
    if name.contains('/') {
        let p = normalize(&dir.join(name));
        is_executable_file(&p)?;
        return Ok(p);
    }
    let path_env = path_env.unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for d in std::env::split_paths(&path_env) {
        if d.as_os_str().is_empty() {
            continue;
        }
        let candidate = match absolutize(&d) {
            Ok(d) => d.join(name),
            Err(_) => continue,
        };
        if is_executable_file(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "php-cgi binary not found: '{name}' is not in PATH ({})",
        path_env.to_string_lossy()
    ))
}

/// The `X.Y` of a Debian php-cgi (`/usr/bin/php-cgi8.2`, or a symlink to
/// it), whose compiled-in configuration is `/etc/php/X.Y/cgi`.
pub(super) fn debian_php_version(php_cgi: &Path) -> Option<String> {
    let real = std::fs::canonicalize(php_cgi).ok()?;
    let v = real
        .file_name()?
        .to_str()?
        .strip_prefix("php-cgi")?
        .to_string();
    (!v.is_empty() && Path::new(&format!("/etc/php/{v}/cgi")).is_dir()).then_some(v)
}

/// The files PHP reads (see [`PhpIni::reads`]), as php-src's
/// `main/php_ini.c` finds them: `-c DIR` → `DIR/php-cgi-fcgi.ini`, else
/// `DIR/php.ini`; `-c FILE` → FILE; then the `*.ini` regular files of each
/// scan directory, sorted by name.
pub(super) fn php_ini_reads(
    php_cgi: &Path,
    file: Option<&Path>,
    scan: Option<&str>,
) -> Option<Vec<PathBuf>> {
    let version = debian_php_version(php_cgi);
    let compiled = version
        .as_ref()
        .map(|v| PathBuf::from(format!("/etc/php/{v}/cgi")));
    let in_dir = |d: &Path| {
        ["php-cgi-fcgi.ini", "php.ini"]
            .iter()
            .map(|n| d.join(n))
            .find(|f| f.is_file())
    };
    let ini = match file {
        Some(p) if p.is_dir() => in_dir(p),
        Some(p) => Some(p.to_path_buf()),
        None => in_dir(compiled.as_ref()?),
    };
    let dirs: Vec<PathBuf> = match scan {
        Some(s) => s
            .split(':')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect(),
        None => vec![compiled.as_ref()?.join("conf.d")],
    };
    let mut out: Vec<PathBuf> = ini.into_iter().collect();
    for d in dirs {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "ini") && p.is_file())
            .collect();
        found.sort();
        out.extend(found);
    }
    Some(out)
}

/// [`php_ini_reads`] once per (php-cgi, `php_ini`, `php_ini_scan_dir`)
/// in one load of the configuration: every pool with the same three shares
/// one list (with hundreds of pools on Debian's php.ini and `conf.d`, ~2
/// KiB and 60 file-system calls a pool otherwise). Made anew by each load,
/// so a reload sees the files as they are then.
#[derive(Default)]
pub(super) struct ReadsCache(ReadsByInputs);

/// The files, and the `open_basedir` they set ([`ini_file_value`]).
type Reads = (Option<Arc<[PathBuf]>>, Option<String>);
type ReadsByInputs = HashMap<(PathBuf, Option<PathBuf>, Option<String>), Reads>;

impl ReadsCache {
    /// [`php_ini_reads`] of these, found earlier in this load or now, with
    /// the non-empty `open_basedir` they set.
    pub(super) fn reads(
        &mut self,
        php_cgi: &Path,
        file: Option<&Path>,
        scan: Option<&str>,
    ) -> Reads {
        let key = (
            php_cgi.to_path_buf(),
            file.map(Path::to_path_buf),
            scan.map(str::to_string),
        );
        self.0
            .entry(key)
            .or_insert_with(|| {
                let reads: Option<Arc<[PathBuf]>> =
                    php_ini_reads(php_cgi, file, scan).map(Arc::from);
                let basedir = reads
                    .as_deref()
                    .and_then(|r| ini_file_value(r, "open_basedir"))
                    .filter(|v| !v.is_empty());
                (reads, basedir)
            })
            .clone()
    }
}

/// The value `files` (php.ini files, in PHP's order) give the ini entry
/// `name`: its last assignment outside a `[PATH=…]` or `[HOST=…]` section
/// (those apply per directory or host), with a trailing `;` comment and
/// surrounding quotes removed. PHP's own reader (`zend_ini_scanner`) also
/// expands `${…}` and constants; a value using them is taken as written.
/// Unreadable files are skipped, as PHP skips them.
pub(super) fn ini_file_value(files: &[PathBuf], name: &str) -> Option<String> {
    let mut value = None;
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let mut scoped = false;
        for line in text.lines() {
            let line = line.trim();
            if let Some(section) = line.strip_prefix('[') {
                let s = section.to_ascii_uppercase();
                scoped = s.starts_with("PATH=") || s.starts_with("HOST=");
                continue;
            }
            if scoped || line.starts_with(';') || line.starts_with('#') {
                continue;
            }
            let Some((key, v)) = line.split_once('=') else {
                continue;
            };
            if key.trim() != name {
                continue;
            }
            let v = v.trim();
            let v = match v.strip_prefix('"') {
                Some(rest) => rest.split('"').next().unwrap_or(""),
                None => v.split(';').next().unwrap_or("").trim(),
            };
            value = Some(v.to_string());
        }
    }
    value
}

/// The bound on the argument and environment strings of an execve(2)
/// together, with their pointers: `sysconf(_SC_ARG_MAX)` (a quarter of
/// the stack limit, at least 128 KiB; 2 MiB when unknown), but never more
/// than the kernel's own cap of 6 MiB (`bprm_stack_limits` in
/// `fs/exec.c`: three quarters of `_STK_LIM`), which applies even with an
/// unlimited stack (where sysconf says more).
pub(super) fn arg_max() -> usize {
    const KERNEL_CAP: usize = (8 << 20) / 4 * 3;
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(2 << 20)
        .min(KERNEL_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last assignment outside `[PATH=]`/`[HOST=]` sections, across
    /// files in order; comments and quotes off.
    #[test]
    fn ini_file_value_is_the_last_global_assignment() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("php.ini");
        let b = dir.path().join("20-site.ini");
        std::fs::write(
            &a,
            "[PHP]\nopen_basedir = /srv ; sites\n;open_basedir = /commented\n[PATH=/srv/x]\nopen_basedir = /scoped\n",
        )
        .unwrap();
        assert_eq!(
            ini_file_value(std::slice::from_ref(&a), "open_basedir").as_deref(),
            Some("/srv")
        );
        std::fs::write(
            &b,
            "[Host=example.com]\nopen_basedir=/h\n[opcache]\nopen_basedir = \"/srv:/tmp;x\"\n",
        )
        .unwrap();
        let missing = dir.path().join("none.ini");
        assert_eq!(
            ini_file_value(&[a.clone(), missing, b], "open_basedir").as_deref(),
            Some("/srv:/tmp;x")
        );
        assert_eq!(ini_file_value(&[a], "memory_limit"), None);
    }
}
