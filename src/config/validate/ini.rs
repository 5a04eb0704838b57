//! The children's PHP settings and environment: `env.*`, `php_value.*`,
//! `php_flag.*`, `php_admin_value.*`, `php_admin_flag.*` with the command
//! line's `-d`, `php_ini` and `php_ini_scan_dir`, and the bound on the size
//! of php-cgi's command line and environment.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::PoolCtx;
use crate::config::model::{ini_list, Global, PhpIni, PoolConfig, ADDITIVE_INI};
use crate::config::php::ReadsCache;
use crate::config::raw::{EnvValue, IniScalar, IniTable, RawPool};
use crate::config::source::SourceFile;
use crate::config::{ConfigError, LoadOptions};

/// Ini values by name (`memory_limit` → `128M`).
pub(super) type IniValues = BTreeMap<String, String>;

/// `env.*`: names a shell could set, values without NUL, `$NAME` taken
/// from fpmd's environment ([`expand_env_value`]).
pub(super) fn env(
    ctx: &PoolCtx<'_>,
    raw: Option<BTreeMap<String, EnvValue>>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut env = BTreeMap::new();
    for (var, EnvValue(value)) in raw.unwrap_or_default() {
        if var.is_empty() || var.contains('=') || var.contains('\0') {
            return Err(ctx.err(
                &["env", &var],
                format!("invalid environment variable name '{var}'"),
            ));
        }
        if value.contains('\0') {
            return Err(ctx.err(&["env", &var], "environment value contains a NUL byte"));
        }
        env.insert(var, expand_env_value(&value));
    }
    Ok(env)
}

/// The pool's plain and admin ini values (`php_value`/`php_flag`,
/// `php_admin_value`/`php_admin_flag`), merged with the command line's
/// `-d` (see [`merge_ini_values`]).
pub(super) fn php_values(
    ctx: &PoolCtx<'_>,
    raw: &mut RawPool,
    options: &LoadOptions,
) -> Result<(IniValues, IniValues), ConfigError> {
    let plain = ini_values(
        ctx,
        "php_value",
        raw.php_value.take(),
        "php_flag",
        raw.php_flag.take(),
    )?;
    let admin = ini_values(
        ctx,
        "php_admin_value",
        raw.php_admin_value.take(),
        "php_admin_flag",
        raw.php_admin_flag.take(),
    )?;
    Ok(merge_ini_values(plain, admin, &options.php_defines))
}

/// A pool's plain and admin ini values with the command line's `-d`
/// (`defines`): an admin value wins over a plain one of the same name, and
/// both over `-d` (a later -d of one name wins over an earlier one), as
/// php-fpm layers them; except the [`ADDITIVE_INI`] names, whose values
/// from all three are joined into one list (kept as the admin value when
/// there is one), since php-fpm disables each of them on top of the
/// others.
pub(super) fn merge_ini_values(
    plain: BTreeMap<String, String>,
    mut admin: BTreeMap<String, String>,
    defines: &[(String, String)],
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let joined: Vec<(&str, String)> = ADDITIVE_INI
        .iter()
        .filter_map(|name| {
            let lists: Vec<&str> = defines
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .chain(plain.get(*name).map(String::as_str))
                .chain(admin.get(*name).map(String::as_str))
                .collect();
            let mut names: Vec<&str> = Vec::new();
            for f in lists.iter().flat_map(|v| ini_list(v)) {
                if !names.contains(&f) {
                    names.push(f);
                }
            }
            (!lists.is_empty()).then(|| (*name, names.join(",")))
        })
        .collect();
    let mut plain: BTreeMap<String, String> = plain
        .into_iter()
        .filter(|(k, _)| !admin.contains_key(k))
        .collect();
    let own: Vec<String> = plain.keys().cloned().collect();
    for (name, value) in defines {
        if !own.contains(name) && !admin.contains_key(name) {
            plain.insert(name.clone(), value.clone());
        }
    }
    for (name, list) in joined {
        match admin.get_mut(name) {
            Some(v) => *v = list,
            None => {
                plain.insert(name.to_string(), list);
            }
        }
    }
    (plain, admin)
}
/// Linux's bound on one argument or environment string, its NUL included
/// (`MAX_ARG_STRLEN`: 32 pages of 4 KiB; execve(2) fails with `E2BIG`
/// beyond it, whatever the stack limit).
pub(super) const MAX_ARG_STRLEN: usize = 32 * 4096;
/// The pool's php-cgi can be exec'd: no argument (`-d name=value` of a
/// `php_value`/`php_admin_value`) or environment string (`env.NAME`, or
/// fpmd's own variables with `clear_env = false`) is longer than
/// [`MAX_ARG_STRLEN`], and all of them (as [`crate::pool`] builds the
/// child's argv and environment) fit in `arg_max` bytes. Otherwise
/// execve(2) fails with `E2BIG` (`Argument list too long`) at every
/// spawn. The error is at the key of the string too long, or for the
/// total at the largest contributor.
pub(super) fn check_exec_size(
    ctx: &PoolCtx<'_>,
    pool: &PoolConfig,
    arg_max: usize,
) -> Result<(), ConfigError> {
    // (key, what it is, bytes with its NUL)
    let mut items: Vec<(Vec<String>, String, usize)> = Vec::new();
    let seg = |a: &str, b: &str| vec![a.to_string(), b.to_string()];
    if !pool.clear_env {
        for (k, v) in std::env::vars_os() {
            if !pool.env.contains_key(&*k.to_string_lossy()) {
                let what = format!(
                    "fpmd's own environment variable {} (passed on by clear_env = false)",
                    k.to_string_lossy()
                );
                items.push((vec!["clear_env".into()], what, k.len() + v.len() + 2));
            }
        }
    }
    for (k, v) in &pool.env {
        items.push((seg("env", k), format!("env.{k}"), k.len() + v.len() + 2));
    }
    for (table, values) in [
        ("php_value", &pool.php_values),
        ("php_admin_value", &pool.php_admin_values),
    ] {
        for (k, v) in values {
            let what = format!("{table}.{k} (php-cgi's -d {k}=…)");
            items.push((seg(table, k), what, k.len() + v.len() + 2));
        }
    }
    fn key(segs: &[String]) -> Vec<&str> {
        segs.iter().map(String::as_str).collect()
    }
    for (segs, what, bytes) in &items {
        if *bytes > MAX_ARG_STRLEN {
            return Err(ctx.err(&key(segs), format!(
                "{what} is {bytes} bytes, more than Linux passes to a program in one string (MAX_ARG_STRLEN, {MAX_ARG_STRLEN} bytes): php-cgi could not be started (execve: Argument list too long)"
            )));
        }
    }
    // argv: the binary, "-d" before each value, "-n"; the environment:
    // the two PHP_FCGI_* variables fpmd sets; each string has a pointer.
    let fixed = pool.php_cgi.as_os_str().len() + 1 + 3 + 2 * 32;
    let strings = items.len() + pool.php_values.len() + pool.php_admin_values.len() + 4;
    let total = fixed
        + items.iter().map(|(_, _, b)| b).sum::<usize>()
        + 3 * (pool.php_values.len() + pool.php_admin_values.len())
        + (strings + 2) * std::mem::size_of::<usize>();
    if total > arg_max {
        let largest = items.iter().max_by_key(|(_, _, b)| *b);
        let (segs, what) = match largest {
            Some((segs, what, bytes)) => (
                key(segs),
                format!("; the largest is {what} ({bytes} bytes)"),
            ),
            None => (vec!["php_cgi"], String::new()),
        };
        return Err(ctx.err(&segs, format!(
            "php-cgi's arguments and environment together are {total} bytes, more than ARG_MAX ({arg_max} bytes: a quarter of the stack limit, at most 6 MiB): php-cgi could not be started (execve: Argument list too long){what}"
        )));
    }
    if pool.pm.spawn == crate::config::Spawn::Shared {
        // The environment goes to each child in its order, with the
        // groups, the working directory, the title and a 137-byte header;
        // 512 bytes for USER, HOME, FPMD_STATUS_SOCKET and the rest.
        let env: Vec<_> = items
            .iter()
            .filter(|(s, _, _)| s[0] != "php_value" && s[0] != "php_admin_value")
            .collect();
        let total = env.iter().map(|(_, _, b)| b).sum::<usize>()
            + 4 * pool.user.groups.len()
            + pool.chdir.as_os_str().len()
            + pool.name.len()
            + 137
            + 512;
        if total > crate::config::SHARED_ORDER_MAX {
            let largest = env.iter().max_by_key(|(_, _, b)| *b);
            let (segs, what) = match largest {
                Some((segs, what, bytes)) => (
                    key(segs),
                    format!("; the largest is {what} ({bytes} bytes)"),
                ),
                None => (vec!["user"], String::new()),
            };
            return Err(ctx.err(&segs, format!(
                "under pm.spawn = \"shared\" the pool's environment and groups go to each child in one order of at most {} bytes; they take about {total}{what}",
                crate::config::SHARED_ORDER_MAX
            )));
        }
    }
    Ok(())
}
/// `php_ini_scan_dir`: `:`-separated directories, each relative to the
/// file's directory unless absolute (empty: none).
pub(super) fn scan_dirs(src: &SourceFile, value: &str) -> String {
    value
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| src.resolve(d).to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":")
}
/// A pool's [`PhpIni`]: its keys or the global defaults, checked (the file
/// or directory exists; a chroot pool's files are under `/etc/php`, the
/// part of the host's `/etc` its children see), with the files PHP reads
/// (from `reads`, this load's).
pub(super) fn resolve_php_ini(
    ctx: &PoolCtx<'_>,
    (raw_file, raw_scan): (Option<&str>, Option<&str>),
    global: &Global,
    (php_cgi, reads): (&Path, &mut ReadsCache),
    env: &BTreeMap<String, String>,
    chroot: Option<&Path>,
) -> Result<PhpIni, ConfigError> {
    let file = match raw_file {
        Some("") => None,
        Some(p) => {
            let p = ctx.src.resolve(p);
            if !p.exists() {
                return Err(ctx.err(
                    &["php_ini"],
                    format!("php.ini file or directory does not exist: {}", p.display()),
                ));
            }
            Some(p)
        }
        None => global.php_ini.clone(),
    };
    let scan_dir = match raw_scan {
        Some(d) => Some(scan_dirs(ctx.src, d)),
        None => global.php_ini_scan_dir.clone(),
    };
    if scan_dir.is_some() && env.contains_key("PHP_INI_SCAN_DIR") {
        return Err(ctx.err(
            &["env", "PHP_INI_SCAN_DIR"],
            "set php_ini_scan_dir or env.PHP_INI_SCAN_DIR, not both (php_ini_scan_dir is the one fpmd checks and prints)",
        ));
    }
    if chroot.is_some() {
        let dirs = scan_dir
            .iter()
            .flat_map(|d| d.split(':'))
            .map(PathBuf::from);
        for p in file.iter().cloned().chain(dirs) {
            if !p.starts_with("/etc/php") {
                let key = if Some(&p) == file.as_ref() {
                    "php_ini"
                } else {
                    "php_ini_scan_dir"
                };
                return Err(ctx.err(
                    &[key],
                    format!("{} is outside /etc/php, the only part of the host's /etc a chroot pool's children see: move it under /etc/php", p.display()),
                ));
            }
        }
    }
    let (reads, open_basedir) = reads.reads(php_cgi, file.as_deref(), scan_dir.as_deref());
    Ok(PhpIni {
        file,
        scan_dir,
        reads,
        open_basedir,
    })
}
/// `$NAME` (the whole value) → fpmd's `NAME` (empty when unset); anything
/// else is taken literally.
pub(super) fn expand_env_value(value: &str) -> String {
    match value.strip_prefix('$') {
        Some(var)
            if !var.is_empty()
                && !var.starts_with(|c: char| c.is_ascii_digit())
                && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
        {
            std::env::var_os(var)
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default()
        }
        _ => value.to_string(),
    }
}
/// Normalizes a flag: booleans, 1/0 and on/off, yes/no, true/false (any case).
pub(super) fn normalize_flag(v: &IniScalar) -> Option<&'static str> {
    match v {
        IniScalar::Bool(true) | IniScalar::Int(1) => Some("1"),
        IniScalar::Bool(false) | IniScalar::Int(0) => Some("0"),
        IniScalar::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
            "on" | "yes" | "true" | "1" => Some("1"),
            "off" | "no" | "false" | "0" => Some("0"),
            _ => None,
        },
        _ => None,
    }
}
pub(super) fn normalize_value(v: &IniScalar) -> String {
    match v {
        IniScalar::Str(s) => s.clone(),
        IniScalar::Int(n) => n.to_string(),
        IniScalar::Float(x) => x.to_string(),
        IniScalar::Bool(b) => if *b { "1" } else { "0" }.to_string(),
    }
}
/// Merges a `*_value` and a `*_flag` table into normalized `name → value`.
pub(super) fn ini_values(
    ctx: &PoolCtx<'_>,
    value_table: &str,
    values: Option<IniTable>,
    flag_table: &str,
    flags: Option<IniTable>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut origin: HashMap<String, String> = HashMap::new();
    for (table, entries, is_flag) in [(value_table, values, false), (flag_table, flags, true)] {
        for (segs, v) in entries.map(|t| t.0).unwrap_or_default() {
            let name = segs.join(".");
            let mut key: Vec<&str> = vec![table];
            key.extend(segs.iter().map(|s| s.as_str()));
            if name.is_empty()
                || name.contains(['=', '\0', '\n', '\r'])
                || name.chars().any(char::is_whitespace)
            {
                return Err(ctx.err(&key, format!("invalid ini setting name '{name}'")));
            }
            let value = if is_flag {
                match normalize_flag(&v) {
                    Some(f) => f.to_string(),
                    None => {
                        let shown = match &v {
                            IniScalar::Str(s) => format!("\"{s}\""),
                            other => normalize_value(other),
                        };
                        return Err(ctx.err(&key, format!("invalid flag value {shown} (expected on/off, yes/no, true/false or 1/0)")));
                    }
                }
            } else {
                normalize_value(&v)
            };
            if value.contains(['\0', '\n', '\r']) {
                return Err(ctx.err(
                    &key,
                    "an ini value must not contain a line break or NUL byte",
                ));
            }
            if let Some(first) = origin.get(&name) {
                return Err(ctx.err(&key, format!("'{name}' is already set in {first}")));
            }
            origin.insert(name.clone(), table.to_string());
            out.insert(name, value);
        }
    }
    Ok(out)
}
