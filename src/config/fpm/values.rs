//! php-fpm's readings of a directive's value (`fpm_conf_set_boolean`,
//! `_integer`, `_time`), the php values it expands as paths, and the
//! kernel's backlog its -1 means.

use super::directives::Kind;

pub(super) fn is_string(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Str | Kind::Text | Kind::Path | Kind::Listen | Kind::Chroot | Kind::ErrorLog
    )
}

/// php-fpm's `FPM_PHP_INI_TO_EXPAND` (`sapi/fpm/fpm/fpm_php.h`): php
/// values that are paths, made absolute against the prefix.
pub(super) const INI_TO_EXPAND: &[&str] = &[
    "error_log",
    "extension_dir",
    "mime_magic.magicfile",
    "sendmail_path",
    "session.cookie_path",
    "session_pgsql.sem_file_name",
    "soap.wsdl_cache_dir",
    "uploadprogress.file.filename_template",
    "xdebug.output_dir",
    "xdebug.profiler_output_dir",
    "xdebug.trace_output_dir",
    "xmms.path",
    "axis2.client_home",
    "blenc.key_file",
    "coin_acceptor.device",
];

/// `fpm_conf_set_boolean`'s values (after the scanner made yes/on/true
/// `1` and no/off/false/none empty).
pub(super) fn boolean(v: &str) -> Option<bool> {
    match v {
        "1" | "yes" | "true" | "on" => Some(true),
        "" | "0" | "no" | "none" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// `fpm_conf_set_integer`: an optional leading `-` and digits (empty is 0).
pub(super) fn integer(v: &str) -> Option<i64> {
    let digits = v.strip_prefix('-').unwrap_or(v);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.is_empty() {
        return Some(0);
    }
    v.parse().ok()
}

/// `fpm_conf_set_time`: seconds.
pub(super) fn time(v: &str) -> Result<i64, &'static str> {
    let atoi = |s: &str| -> i64 {
        let t = s.trim_start();
        let end = t
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
            .map_or(t.len(), |(i, _)| i);
        t[..end].parse().unwrap_or(0)
    };
    let Some(last) = v.chars().last() else {
        return Err("invalid time value");
    };
    let body = &v[..v.len() - last.len_utf8()];
    Ok(match last {
        's' => atoi(body),
        'm' => 60 * atoi(body),
        'h' => 3600 * atoi(body),
        'd' => 86400 * atoi(body),
        c if c.is_ascii_digit() => atoi(v),
        _ => return Err("unknown suffix used in time value"),
    })
}

/// The kernel's largest `listen(2)` backlog (what php-fpm's -1 gets).
pub(super) fn somaxconn() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096)
}
