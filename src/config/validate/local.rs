//! What fpmd answers itself and what may run: `pm.status_path`,
//! `ping.path`, `ping.response`, `pm.status_listen`, and
//! `security.limit_extensions`.

use crate::config::model::{ListenAddress, LocalEndpoints};

/// `security.limit_extensions`: unset is php-fpm's default; each string
/// is split at spaces and tabs (php-fpm's `strtok(…, " \t")`), so
/// `".php .phar"` is two endings. Errors: an ending holding a NUL byte
/// (no path can contain one).
pub(super) fn limit_extensions(
    raw: Option<crate::config::raw::StrList>,
) -> Result<Vec<String>, String> {
    let Some(crate::config::raw::StrList(list)) = raw else {
        return Ok(crate::config::model::DEFAULT_LIMIT_EXTENSIONS
            .map(String::from)
            .to_vec());
    };
    let mut out: Vec<String> = Vec::new();
    for s in &list {
        for ext in s.split([' ', '\t']).filter(|e| !e.is_empty()) {
            if ext.contains('\0') {
                return Err(format!(
                    "the extension {:?} contains a NUL byte: no script path can end with it",
                    ext
                ));
            }
            if !out.iter().any(|e| e == ext) {
                out.push(ext.to_string());
            }
        }
    }
    Ok(out)
}
/// `pm.status_path`, `ping.path` and `ping.response`, checked as php-fpm
/// checks them (`fpm_conf_process_all_pools` in php-src
/// `sapi/fpm/fpm/fpm_conf.c`). Errors: the key and the message.
pub(super) fn local_endpoints(
    status_path: Option<String>,
    ping: crate::config::raw::RawPing,
    status_listen: Option<ListenAddress>,
) -> Result<LocalEndpoints, (Vec<&'static str>, String)> {
    let own_listener = status_listen.is_some();
    let check = |what: &str, p: &str| {
        if !p.starts_with('/') {
            return Err(format!("the {what} path '{p}' must start with a '/'"));
        }
        // "/" is allowed for the status page of its own listener.
        if p.len() < 2 && !(what == "status" && own_listener) {
            return Err(format!("the {what} path '{p}' is not long enough"));
        }
        if !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-_.~".contains(c))
        {
            return Err(format!(
                "the {what} path '{p}' must contain only the following characters '[alphanum]/_-.~'"
            ));
        }
        Ok(())
    };
    // An empty value is unset, as in php-fpm; with a status listener of
    // its own, the status page is at "/" unless set.
    let status_path = status_path
        .filter(|p| !p.is_empty())
        .or_else(|| own_listener.then(|| "/".to_string()));
    if let Some(p) = &status_path {
        check("status", p).map_err(|m| (vec!["pm", "status_path"], m))?;
    }
    let ping_path = ping.path.filter(|p| !p.is_empty());
    if let Some(p) = &ping_path {
        check("ping", p).map_err(|m| (vec!["ping", "path"], m))?;
    }
    let ping_response = match ping.response {
        Some(r) if r.is_empty() => {
            return Err((
                vec!["ping", "response"],
                "the ping response page '' is not long enough".into(),
            ))
        }
        Some(r) => r,
        None => "pong".into(),
    };
    if status_path.is_some() && status_path == ping_path {
        return Err((
            vec!["ping", "path"],
            "ping.path is the same as pm.status_path".into(),
        ));
    }
    Ok(LocalEndpoints {
        status_path,
        ping_path,
        ping_response,
        status_listen,
    })
}
