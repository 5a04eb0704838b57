//! [`ConfigError`]: what is wrong with a configuration, and where (file,
//! line, pool, key), as every layer of `config` reports it; and
//! [`EXIT_CONFIG`], the exit status it makes.

use std::path::{Path, PathBuf};

/// Exit status for an invalid configuration (`EX_CONFIG` of sysexits.h).
pub const EXIT_CONFIG: u8 = 78;

/// A configuration error, located as precisely as possible.
///
/// Displays as `FILE[:LINE]: [[POOL] ][key 'KEY': ]MESSAGE`, e.g.
/// `pool.d/www.toml:8: [www] key 'pm.max_children': pm.max_children must be at least 1`
/// or `fpmd.toml:4: key 'global.include': invalid glob pattern …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_error(self))]
pub struct ConfigError {
    /// The file the error is in (as given, or as found by `global.include`).
    pub file: PathBuf,
    /// 1-based line of the offending key or value, when there is one.
    pub line: Option<usize>,
    /// The pool the error is in (its table name), for errors inside a pool.
    pub pool: Option<String>,
    /// The dotted key: pool-relative for pool keys (`pm.max_children`),
    /// `global.X` for global keys.
    pub key: Option<String>,
    /// What is wrong, in lower case.
    pub message: String,
}

fn render_error(e: &ConfigError) -> String {
    let mut s = e.file.display().to_string();
    if let Some(line) = e.line {
        s.push_str(&format!(":{line}"));
    }
    s.push_str(": ");
    if let Some(pool) = &e.pool {
        s.push_str(&format!("[{pool}] "));
    }
    if let Some(key) = &e.key {
        s.push_str(&format!("key '{key}': "));
    }
    s.push_str(&e.message);
    s
}

impl ConfigError {
    /// The lines php-fpm 8.2 logs at `ERROR` for this error (each without
    /// its time stamp and level), for a php-fpm configuration under
    /// `log_format = "php-fpm"`: php-fpm's own words where both refuse
    /// the same thing, else fpmd's message in php-fpm's framing
    /// (`[FILE:LINE] ` first); then, for an error in a value as the file
    /// is read, `failed to load configuration file 'FILE'`; last `FPM
    /// initialization failed` (`fpm_conf.c`, `fpm_unix.c`,
    /// `fpm_sockets.c`, `fpm.c`). Where php-fpm's words name no file or
    /// line (`log_limit must be greater than 512`), the line naming them
    /// is dropped, as php-fpm does; where they name no key, fpmd's key is
    /// kept.
    pub fn php_fpm_lines(&self, main_file: &Path) -> Vec<String> {
        let at = match self.line {
            Some(line) => format!("[{}:{line}] ", self.file.display()),
            None => format!("[{}] ", self.file.display()),
        };
        let pool = self.pool.as_deref().unwrap_or("");
        let quoted = |prefix: &str| self.message.strip_prefix(prefix).map(str::to_string);
        let php_fpm = match self.key.as_deref() {
            // fpm_unix.c: fpm_unix_get_passwd / fpm_unix_get_group; the
            // listen ones are logged with ZLOG_SYSERROR (errno appended).
            Some("user") => quoted("unknown user ")
                .map(|n| format!("[pool {pool}] cannot get uid for user {n}")),
            Some("group") => quoted("unknown group ")
                .map(|n| format!("[pool {pool}] cannot get gid for group {n}")),
            Some("listen.owner") => quoted("unknown user ")
                .map(|n| format!("[pool {pool}] cannot get uid for user {n}: Success (0)")),
            Some("listen.group") => quoted("unknown group ")
                .map(|n| format!("[pool {pool}] cannot get gid for group {n}: Success (0)")),
            // fpm_conf.c, after the files are read.
            Some("global.log_limit" | "log_limit") => Some(self.message.clone()),
            // fpm_sockets.c, when the pool's socket is made.
            Some("listen.address" | "listen") => {
                self.message.find("invalid port value '").map(|i| {
                    let value = &self.message[i + "invalid port value '".len()..];
                    let end = value.find('\'').unwrap_or(value.len());
                    format!("invalid port value '{}'", &value[..end])
                })
            }
            _ => None,
        };
        let mut lines = Vec::with_capacity(3);
        match php_fpm {
            Some(text) if text.starts_with("log_limit ") => {
                // Checked after the files are read (fpm_conf_post_process).
                lines.push(text);
                lines.push("failed to post process the configuration".into());
            }
            Some(text) => lines.push(text),
            None => {
                // php-fpm's own words for these are fpmd's message as it is
                // (fpm_conf_set_array: "You must provide a key for field …").
                let own_words = self.message.starts_with(|c: char| c.is_ascii_uppercase())
                    || self.message.starts_with("unknown entry '");
                let mut text = at;
                if !own_words {
                    if let Some(pool) = &self.pool {
                        text.push_str(&format!("[pool {pool}] "));
                    }
                    if let Some(key) = &self.key {
                        text.push_str(&format!("key '{key}': "));
                    }
                }
                text.push_str(&self.message);
                lines.push(text);
                lines.push(format!(
                    "failed to load configuration file '{}'",
                    main_file.display()
                ));
            }
        }
        lines.push("FPM initialization failed".into());
        lines
    }

    pub(super) fn file_only(file: &Path, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            line: None,
            pool: None,
            key: None,
            message: message.into(),
        }
    }
}
