//! The part of php-fpm's SAPI that fpmd gives stock php-cgi: the PHP file
//! every request of a pool runs first (`sapi.php`, as `auto_prepend_file`),
//! where it is installed, and the ini arguments that make php-cgi run it.
//!
//! php-cgi has no `fastcgi_finish_request()`, no `fastcgi.error_header`
//! and keeps no per-request figures; php-fpm's SAPI has them
//! (`sapi/fpm/fpm/fpm_main.c`, `fpm_request.c`). `sapi.php` defines the
//! function, sets the error header (read with `get_cfg_var()`) after a
//! fatal error, and reports, as one
//! line each on the request's FastCGI STDERR stream, the call and the
//! request's peak memory and CPU times at its end; the proxy
//! (`crate::proxy::sapi`) removes those lines and acts on them. The pool's
//! own `auto_prepend_file` (php.ini, the scan directory, `php_value`) is
//! passed as `fpmd.auto_prepend_file` and included at the end of
//! `sapi.php`, so it still runs, in the global scope, before the script.
//! Before it, `sapi.php` sets back the pool's admin values a `.user.ini`
//! changed ([`admin_names`]), as php-fpm locks them.
//!
//! Must not touch: the FastCGI stream (the proxy reads the lines).

use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::config::PoolConfig;

/// The PHP file, as compiled into fpmd.
pub const SAPI_PHP: &str = include_str!("sapi.php");

/// The FastCGI parameter that carries a request's token to `sapi.php`
/// (32 lowercase hex digits, random per request) and, as its 33rd byte,
/// the [`Report`] fpmd wants; fpmd replaces any pair of that name a web
/// server sends.
pub const TOKEN_PARAM: &[u8] = b"FPMD_SAPI";

/// What a request's `sapi.php` reports when its script ends: the last
/// byte of [`TOKEN_PARAM`]'s value.
///
/// The figures cost the child a few µs a request (a shutdown function,
/// `posix_times()`, one STDERR line), so fpmd asks for them only when
/// something shows them: an `access.format` with `%M` or `%C`, or, from
/// the first time one is read, the per-child rows (status page `full`,
/// metrics, `fpm_get_status()`, `fpmd status`).
///
/// The CPU times are taken at `sapi.php`'s start and when the script
/// ends, in every request that reports: counting from the previous
/// request's report instead (one `posix_times()` less) put that request's
/// teardown, freeing its memory, into the next one's `%C` (5,000 % for a
/// hello world after a 48 MiB request).
///
/// The response code is reported only when it changed after PHP sent the
/// head (`http_response_code(500)` after output: the client got the
/// first, php-fpm's access log `%s` the last); watching for it costs a
/// header callback and the shutdown function, so fpmd asks for it only
/// when an access log shows `%s` or suppresses paths (which php-fpm
/// decides on that code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    /// Peak memory, and the CPU times at the start and at the end.
    pub figures: bool,
    /// The response code, if it changed after the head was sent.
    pub code: bool,
}

impl Report {
    /// Nothing: "n".
    pub const NOTHING: Report = Report {
        figures: false,
        code: false,
    };

    /// Its byte in [`TOKEN_PARAM`]'s value: "n" nothing, "s" the figures,
    /// "c" the code, "a" both.
    pub fn byte(self) -> u8 {
        match (self.figures, self.code) {
            (false, false) => b'n',
            (true, false) => b's',
            (false, true) => b'c',
            (true, true) => b'a',
        }
    }
}

/// The ini name `sapi.php` reads the pool's own `auto_prepend_file` from
/// (`get_cfg_var`: a name php-cgi does not know stays in its configuration
/// table).
pub const ORIGINAL_PREPEND: &str = "fpmd.auto_prepend_file";

/// Where a chrooted child finds the file (mounted read-only there with
/// PHP's runtime, `crate::process::sandbox::plan::host_runtime`).
pub const IN_CHROOT: &str = "/etc/fpmd/sapi.php";

/// Where a chrooted child finds its pool's status socket.
pub const STATUS_IN_CHROOT: &str = "/etc/fpmd/status.sock";

/// The ini name `sapi.php`'s `fpm_get_status()` reads the pool's status
/// socket from.
pub const STATUS_SOCKET: &str = "fpmd.status_socket";

/// The ini name `sapi.php` reads the names of the pool's
/// `php_admin_value`/`php_admin_flag` from (space-separated: an ini name
/// has no white space, `crate::config` refuses one), to set back at each
/// request's start what a `.user.ini` changed of them (see
/// [`admin_names`]).
pub const ADMIN_VALUES: &str = "fpmd.admin_values";

/// The environment variable that names the status socket to a child of a
/// shared php-cgi parent (`pm.spawn = "shared"`), whose `-d` values are
/// the same for every pool: `sapi.php` reads it when [`STATUS_SOCKET`] is
/// not set.
pub const STATUS_SOCKET_ENV: &str = "FPMD_STATUS_SOCKET";

/// The status socket of pool `pool` in the directory `dir` of
/// `sapi.php` (`status-HASH.sock`: short, whatever the pool's name; a unix
/// socket path holds at most 107 bytes).
pub fn status_socket(dir: &Path, pool: &str) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    pool.hash(&mut h);
    dir.join(format!("status-{:016x}.sock", h.finish()))
}

/// Where [`install`] put the file, and whether every user can read it.
static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// The installed file.
#[derive(Debug, Clone)]
pub struct Installed {
    /// Absolute path of `sapi.php`.
    pub path: PathBuf,
    /// Every directory above it can be searched by any user and the file
    /// read by any user: children of any pool user reach it. When false,
    /// only pools that run as fpmd's own user get it.
    pub for_everyone: bool,
}

/// Writes `sapi.php` into `dir` as `fpmd-sapi-HASH.php` (mode 0644; the
/// name changes with the content) and remembers where, for [`ini_args`].
/// Called once at start; a second call returns the first result.
///
/// Errors: `dir` cannot be created or written; the pools then run without
/// it (the caller logs why).
pub fn install(dir: &Path) -> io::Result<&'static Installed> {
    if let Some(i) = INSTALLED.get() {
        return Ok(i);
    }
    let path = write_for_everyone(dir, "fpmd-sapi", "php", SAPI_PHP.as_bytes())?;
    let for_everyone = searchable_by_all(dir);
    Ok(INSTALLED.get_or_init(|| Installed { path, for_everyone }))
}

/// Writes `bytes` into `dir` as `PREFIX-HASH.EXT` (HASH: of the bytes, so
/// the name changes with the content), mode 0644, unless that file is
/// there with these bytes already (another fpmd of the same build); a
/// temporary file renamed into place, so that no child reads half of it.
/// Returns its path. Errors: `dir` cannot be created or written.
pub fn write_for_everyone(
    dir: &Path,
    prefix: &str,
    ext: &str,
    bytes: &[u8],
) -> io::Result<PathBuf> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    let path = dir.join(format!("{prefix}-{:016x}.{ext}", h.finish()));
    if std::fs::read(&path).ok().as_deref() != Some(bytes) {
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".{prefix}-{}.tmp", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        drop(f);
        std::fs::rename(&tmp, &path)?;
    }
    Ok(path)
}

/// Where `sapi.php` was installed, if it was.
pub fn installed() -> Option<&'static Installed> {
    INSTALLED.get()
}

/// Every directory from `/` down to `dir` has the search bit for others.
fn searchable_by_all(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// The php-cgi arguments that make `config`'s children run `sapi.php`:
/// `-d fpmd.status_socket=SOCKET -d fpmd.auto_prepend_file=ORIGINAL -d
/// auto_prepend_file=SAPI`, in that order (SOCKET: [`status_socket`]),
/// then `-d fpmd.admin_values=NAME NAME …` when [`admin_names`] has any;
/// after [`PoolConfig::ini_args`] (a later `-d` of a name wins). ORIGINAL
/// is the pool's `php_admin_value`/`php_value` `auto_prepend_file`, else
/// `${auto_prepend_file}`, which PHP's ini parser expands to php.ini's
/// (and the scan directory's) value. None when the pool turned it off
/// (`fpm_sapi = false`), when it was not installed, or when the pool's
/// user cannot reach it.
pub fn ini_args(config: &PoolConfig) -> Option<Vec<String>> {
    if !config.fpm_sapi {
        return None;
    }
    ini_args_with(config, installed()?)
}

/// [`ini_args`] with `sapi.php` installed as `installed`.
fn ini_args_with(config: &PoolConfig, installed: &Installed) -> Option<Vec<String>> {
    if !installed.for_everyone && config.user.uid != nix::unistd::geteuid().as_raw() {
        return None;
    }
    let original = config
        .php_admin_values
        .get("auto_prepend_file")
        .or_else(|| config.php_values.get("auto_prepend_file"))
        .cloned()
        .unwrap_or_else(|| {
            if config.no_php_ini {
                String::new()
            } else {
                "${auto_prepend_file}".to_string()
            }
        });
    let chrooted = config.isolation.chroot.is_some();
    let status = match chrooted {
        true => PathBuf::from(STATUS_IN_CHROOT),
        false => status_socket(
            installed.path.parent().unwrap_or(Path::new("/")),
            &config.name,
        ),
    };
    let sapi = match chrooted {
        true => Path::new(IN_CHROOT),
        false => installed.path.as_path(),
    };
    let mut args = vec![
        "-d".to_string(),
        format!("{STATUS_SOCKET}={}", status.display()),
        "-d".to_string(),
        format!("{ORIGINAL_PREPEND}={original}"),
        "-d".to_string(),
        format!("auto_prepend_file={}", sapi.display()),
    ];
    let admin = admin_names(config);
    if !admin.is_empty() {
        args.push("-d".to_string());
        args.push(format!("{ADMIN_VALUES}={}", admin.join(" ")));
    }
    if let Some(basedir) = open_basedir(config) {
        // Else PHP refuses to open sapi.php (every request a 500) and
        // fpm_get_status() its socket.
        args.push("-d".to_string());
        args.push(format!(
            "open_basedir={basedir}:{}:{}",
            sapi.display(),
            status.display()
        ));
    }
    Some(args)
}

/// The `open_basedir` a pool's children get, before fpmd adds `sapi.php`
/// and the pool's status socket to it (each as an exact path: PHP 8 takes
/// every entry as a directory, and `/dir/file/` admits `/dir/file`
/// itself): the pool's `php_admin_value`/`php_value`, else what its
/// php.ini files set ([`crate::config::PhpIni::open_basedir`], as
/// `${open_basedir}`, PHP's expansion of it). `None`: no `open_basedir`,
/// nothing to add (an empty value turns it off).
fn open_basedir(config: &PoolConfig) -> Option<String> {
    let pool = config
        .php_admin_values
        .get("open_basedir")
        .or_else(|| config.php_values.get("open_basedir"));
    match pool {
        Some(v) => (!v.is_empty()).then(|| v.clone()),
        None if config.no_php_ini => None,
        None => config
            .php_ini
            .open_basedir
            .as_ref()
            .map(|_| "${open_basedir}".to_string()),
    }
}

/// The pool's admin names `sapi.php` keeps against `.user.ini` files:
/// every `php_admin_value`/`php_admin_flag` name but `auto_prepend_file`
/// (fpmd's own `-d` replaces it, and a `.user.ini` that changes it keeps
/// `sapi.php` from running at all) and the [`ADDITIVE_INI`] names
/// (PHP_INI_SYSTEM: no `.user.ini` changes them). php-fpm makes each
/// admin value PHP_INI_SYSTEM in the child (`fpm_php_zend_ini_alter_master`
/// in php-src `sapi/fpm/fpm/fpm_php.c`); php-cgi has no such lock and
/// applies a script's `.user.ini` before `sapi.php` runs.
///
/// [`ADDITIVE_INI`]: crate::config::ADDITIVE_INI
pub fn admin_names(config: &PoolConfig) -> Vec<&str> {
    config
        .php_admin_values
        .keys()
        .map(String::as_str)
        .filter(|n| *n != "auto_prepend_file" && !crate::config::ADDITIVE_INI.contains(n))
        .collect()
}

/// A request's figures, as php-fpm's scoreboard keeps them
/// (`fpm_request_end` in `sapi/fpm/fpm/fpm_request.c`: taken when the
/// script ends, before its shutdown functions run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// `memory_get_peak_usage(true)` when the script ended, in bytes.
    pub memory: u64,
    /// User and system CPU time of the child (and of the children it
    /// waited for) from `sapi.php`'s start to the end of the script
    /// (php-fpm counts from reading the request on). None when php-cgi
    /// has neither `posix_times()` nor `getrusage()`.
    pub cpu: Option<(Duration, Duration)>,
}

/// What `sapi.php` said when a script ended ([`Report`]): CPU times are
/// the process's totals since it started, in µs (user, system).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct End {
    /// `memory_get_peak_usage(true)`, bytes.
    pub memory: u64,
    /// The totals when the script ended; None when unknown.
    pub cpu: Option<(u64, u64)>,
    /// The totals when `sapi.php` started.
    pub started: Option<(u64, u64)>,
}

impl End {
    /// The request's [`Usage`]: CPU from `started` to `cpu`; unknown
    /// without either, or if the totals went back.
    pub fn usage(&self) -> Usage {
        let cpu = match (self.cpu, self.started) {
            (Some((u, s)), Some((u0, s0))) if u >= u0 && s >= s0 => {
                Some((Duration::from_micros(u - u0), Duration::from_micros(s - s0)))
            }
            _ => None,
        };
        Usage {
            memory: self.memory,
            cpu,
        }
    }
}

impl Usage {
    /// CPU time as a percentage of `duration` (php-fpm's `%C` and `last
    /// request cpu`: user + system over the request's duration); `part`
    /// picks user (`Some(true)`), system (`Some(false)`) or both.
    pub fn cpu_percent(&self, duration: Duration, part: Option<bool>) -> Option<f64> {
        let (user, system) = self.cpu?;
        let used = match part {
            None => user + system,
            Some(true) => user,
            Some(false) => system,
        };
        let secs = duration.as_secs_f64();
        Some(if secs > 0.0 {
            used.as_secs_f64() / secs * 100.0
        } else {
            0.0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_writes_the_file_once_readable_by_all() {
        let dir = tempfile::tempdir().unwrap();
        let i = install(dir.path()).unwrap();
        // The first install of the process wins (a global); whichever
        // directory it was, the file is there, 0644, with the content.
        let meta = std::fs::metadata(&i.path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        assert_eq!(std::fs::read_to_string(&i.path).unwrap(), SAPI_PHP);
        assert!(i
            .path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("fpmd-sapi-"));
    }

    /// The pool's admin names reach `sapi.php` as one `-d`, after fpmd's
    /// own three, space-separated; not `auto_prepend_file` (fpmd's) nor
    /// the additive lists; no `-d` without admin values.
    #[test]
    fn admin_names_are_one_d_after_the_others() {
        let installed = Installed {
            path: "/run/fpmd/fpmd-sapi-0.php".into(),
            for_everyone: true,
        };
        let mut c = crate::pool::tests::test_config();
        c.php_values
            .insert("date.timezone".into(), "Europe/London".into());
        let args = ini_args_with(&c, &installed).unwrap();
        assert_eq!(args.len(), 6);
        assert_eq!(args[5], "auto_prepend_file=/run/fpmd/fpmd-sapi-0.php");
        for (name, value) in [
            ("memory_limit", "32M"),
            ("log_errors", "1"),
            ("upload_max_filesize", "3M"),
            ("auto_prepend_file", "/srv/prepend.php"),
            ("disable_functions", "system"),
        ] {
            c.php_admin_values.insert(name.into(), value.into());
        }
        let args = ini_args_with(&c, &installed).unwrap();
        assert_eq!(args[3], "fpmd.auto_prepend_file=/srv/prepend.php");
        assert_eq!(
            args[6..],
            [
                "-d",
                "fpmd.admin_values=log_errors memory_limit upload_max_filesize"
            ]
        );
    }
}
