//! The primary script of a request, as php-fpm finds it (its
//! `init_request_info`): what fpmd tells php-cgi so that PHP sees the CGI
//! variables php-fpm would give it, and whether there is a script at all.

use super::request::Edit;
use crate::config::PoolConfig;

/// The pool's settings that change how the script is found.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `cgi.fix_pathinfo` (PHP's default: on).
    pub fix_pathinfo: bool,
}

impl Options {
    pub fn of(_config: &PoolConfig) -> Options {
        Options { fix_pathinfo: true }
    }
}

/// What to do with a request's PARAMS before they go to php-cgi.
#[derive(Debug, Default)]
pub struct Plan {
    pub edits: Vec<Edit>,
    /// No script to run: php-fpm's 404.
    pub missing: bool,
}

/// The plan for the PARAMS stream `raw`.
pub fn plan(_raw: &[u8], _opts: &Options) -> Plan {
    Plan::default()
}
