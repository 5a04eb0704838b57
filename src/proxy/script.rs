//! The primary script of a request, as php-fpm finds it: the glue between
//! the proxy and [`super::request_info`] (php-fpm's `init_request_info`,
//! emulated). Decides what fpmd changes in the PARAMS so that PHP under
//! php-cgi sees the CGI variables php-fpm would give it (Apache's
//! `proxy:fcgi://` forms above all), and answers itself, as php-fpm
//! answers, when there is no script to run.

use super::local::Local;
use super::request::Edit;
use super::request_info::{for_php_cgi, Action, ChrootFs, Edit as InfoEdit, RealFs, Vars};
use crate::config::PoolConfig;

/// The pool's settings that change how the script is found.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub info: super::request_info::Options,
    /// The status page and ping: requests for them are no scripts.
    pub local: crate::config::LocalEndpoints,
    /// `chroot`: SCRIPT_FILENAME is a path inside it (as with php-fpm),
    /// so fpmd looks for the script under it.
    pub root: Option<std::path::PathBuf>,
}

impl Options {
    /// `cgi.fix_pathinfo` and `cgi.discard_path` as the pool's
    /// `php_admin_value`/`php_value` set them (admin values win), else
    /// PHP's defaults (on, off). A value set only in a php.ini is not seen:
    /// set it in the pool too.
    pub fn of(config: &PoolConfig) -> Options {
        let flag = |name: &str, default: bool| {
            let v = config
                .php_admin_values
                .get(name)
                .or_else(|| config.php_values.get(name));
            match v.map(|v| v.trim().to_ascii_lowercase()) {
                Some(v) if matches!(v.as_str(), "1" | "on" | "yes" | "true") => true,
                Some(v) if matches!(v.as_str(), "0" | "off" | "no" | "false" | "none" | "") => {
                    false
                }
                _ => default,
            }
        };
        Options {
            info: super::request_info::Options {
                fix_pathinfo: flag("cgi.fix_pathinfo", true),
                discard_path: flag("cgi.discard_path", false),
            },
            local: config.local.clone(),
            root: config.isolation.chroot.clone(),
        }
    }
}

/// What to do with a request's PARAMS before they go to php-cgi.
#[derive(Debug, Default)]
pub struct Plan {
    /// Changes to the PARAMS (none in the common case).
    pub edits: Vec<Edit>,
    /// fpmd answers the request itself, as php-fpm would: there is no
    /// script to run.
    pub answer: Option<Local>,
    /// REDIRECT_URL was left out: php-cgi would otherwise undo PATH_INFO
    /// (see [`super::request_info::for_php_cgi`]).
    pub dropped_redirect_url: bool,
}

/// The plan for a request whose PARAMS hold `vars`. Costs one `stat` of
/// the script in the common case (nginx, the script exists), like
/// php-fpm's own `realpath`.
pub fn plan(vars: &Vars<'_>, opts: &Options) -> Plan {
    let p = match &opts.root {
        None => for_php_cgi(vars, &opts.info, &RealFs),
        Some(root) => for_php_cgi(vars, &opts.info, &ChrootFs(root)),
    };
    let answer = match p.action {
        Action::Forward => None,
        Action::ScriptUnknown => Some(Local::ScriptUnknown),
        // php-fpm refuses an empty script name with its default
        // security.limit_extensions (".php").
        Action::EmptyScript => Some(Local::AccessDenied),
        Action::NoInputFile => Some(Local::NoInputFile),
    };
    let edits = p
        .edits
        .iter()
        .map(|e| match e {
            InfoEdit::Set(var, value) => Edit {
                name: var.name().to_vec(),
                value: Some(value.to_vec()),
            },
            InfoEdit::Delete(var) => Edit {
                name: var.name().to_vec(),
                value: None,
            },
        })
        .collect();
    Plan {
        edits,
        answer,
        dropped_redirect_url: p.dropped_redirect_url,
    }
}
