//! [`ConfigError`]: what is wrong with a configuration, and where (file,
//! line, pool, key), as every layer of `config` reports it, with how
//! php-fpm reports the same refusal ([`PhpFpmWords`], set where the error
//! is made); and [`EXIT_CONFIG`], the exit status it makes.

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
    /// How php-fpm reports the same refusal, for a php-fpm configuration
    /// ([`ConfigError::php_fpm_lines`]); `None`: php-fpm refuses nothing
    /// like it, or in words fpmd does not copy, and fpmd's message is
    /// given in php-fpm's framing. (Boxed: most errors have none, and
    /// `Result<_, ConfigError>` stays small.)
    pub php_fpm: Option<Box<PhpFpmWords>>,
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
    /// The lines php-fpm 8.2 logs for this error, each with its level and
    /// without its time stamp, for a php-fpm configuration under
    /// `log_format = "php-fpm"`: the first as [`ConfigError::php_fpm`]
    /// says (fpmd's message in php-fpm's framing when it says nothing),
    /// then what its stage adds (`failed to load configuration file
    /// 'MAIN'`, `failed to post process the configuration`, or nothing),
    /// last `FPM initialization failed` (`fpm_conf.c`, `fpm.c`). E.g.
    /// `(Alert, "[pool www] pm.max_children must be a positive value")`,
    /// `(Error, "failed to post process the configuration")`, `(Error,
    /// "FPM initialization failed")`; framed: `[FILE:LINE] [pool www] key
    /// 'pm': invalid process manager 'x' …`, then `failed to load
    /// configuration file 'MAIN'`. `main_file`: the configuration file as
    /// given (`-y`).
    pub fn php_fpm_lines(&self, main_file: &Path) -> Vec<(PhpFpmLevel, String)> {
        let framed;
        let words = match &self.php_fpm {
            Some(words) => words,
            None => {
                framed = PhpFpmWords::read(self.framed_message());
                &framed
            }
        };
        let mut first = String::new();
        if words.located {
            match self.line {
                Some(line) => first.push_str(&format!("[{}:{line}] ", self.file.display())),
                None => first.push_str(&format!("[{}] ", self.file.display())),
            }
        }
        first.push_str(&words.text);
        let mut lines = vec![(words.level, first)];
        match words.stage {
            PhpFpmStage::Read => lines.push((
                PhpFpmLevel::Error,
                format!(
                    "failed to load configuration file '{}'",
                    main_file.display()
                ),
            )),
            PhpFpmStage::PostProcess => lines.push((
                PhpFpmLevel::Error,
                "failed to post process the configuration".into(),
            )),
            PhpFpmStage::Init => {}
        }
        lines.push((PhpFpmLevel::Error, "FPM initialization failed".into()));
        lines
    }

    /// fpmd's message with its pool and key, as php-fpm frames an error
    /// it has no words of its own for: `[pool POOL] key 'KEY': MESSAGE`.
    fn framed_message(&self) -> String {
        let mut text = String::new();
        if let Some(pool) = &self.pool {
            text.push_str(&format!("[pool {pool}] "));
        }
        if let Some(key) = &self.key {
            text.push_str(&format!("key '{key}': "));
        }
        text.push_str(&self.message);
        text
    }

    /// This error, reported under a php-fpm configuration in `words`.
    pub(super) fn with_php_fpm(self, words: PhpFpmWords) -> Self {
        ConfigError {
            php_fpm: Some(Box::new(words)),
            ..self
        }
    }

    pub(super) fn file_only(file: &Path, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            line: None,
            pool: None,
            key: None,
            message: message.into(),
            php_fpm: None,
        }
    }
}

/// How php-fpm 8.2 reports an error that fpmd refuses for the same
/// reason: its words, their level, when in its start it finds it, and
/// whether the line names the file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhpFpmWords {
    /// The level php-fpm logs the words at.
    pub level: PhpFpmLevel,
    /// The words, without time stamp, level or `[FILE:LINE] `.
    pub text: String,
    /// Whether `[FILE:LINE] ` (`[FILE] ` without a line) comes first, as
    /// in the errors php-fpm finds as it reads the file.
    pub located: bool,
    /// When php-fpm finds it, which says the line after the words.
    pub stage: PhpFpmStage,
}

impl PhpFpmWords {
    /// An `ERROR` found as the files are read (`fpm_conf.c`'s ini
    /// parser), at its file and line: `[FILE:LINE] TEXT`.
    pub fn read(text: impl Into<String>) -> Self {
        PhpFpmWords {
            level: PhpFpmLevel::Error,
            text: text.into(),
            located: true,
            stage: PhpFpmStage::Read,
        }
    }

    /// Found after the files are read (`fpm_conf_post_process`), at
    /// `level`, naming no file.
    pub fn post_process(level: PhpFpmLevel, text: impl Into<String>) -> Self {
        PhpFpmWords {
            level,
            text: text.into(),
            located: false,
            stage: PhpFpmStage::PostProcess,
        }
    }

    /// An `ERROR` found later in `fpm_init` (`fpm_unix_init_main`,
    /// `fpm_sockets_init_main`), naming no file.
    pub fn init(text: impl Into<String>) -> Self {
        PhpFpmWords {
            level: PhpFpmLevel::Error,
            text: text.into(),
            located: false,
            stage: PhpFpmStage::Init,
        }
    }
}

/// A level of php-fpm's log (`zlog.h`) that configuration errors use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhpFpmLevel {
    /// `ZLOG_ERROR`.
    Error,
    /// `ZLOG_ALERT`.
    Alert,
}

impl PhpFpmLevel {
    /// As php-fpm writes it before the text: `ERROR`, `ALERT`.
    pub fn as_str(self) -> &'static str {
        match self {
            PhpFpmLevel::Error => "ERROR",
            PhpFpmLevel::Alert => "ALERT",
        }
    }
}

/// When php-fpm finds a configuration error, which decides the line it
/// logs after the error's own (`fpm.c`: `fpm_init`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhpFpmStage {
    /// As the files are read (`fpm_conf_load_ini_file`): then
    /// `failed to load configuration file 'MAIN'`.
    Read,
    /// After they are read (`fpm_conf_post_process`): then `failed to
    /// post process the configuration`.
    PostProcess,
    /// Later in `fpm_init`: nothing more before `FPM initialization
    /// failed`.
    Init,
}
