//! [`Translation`] after the TOML pipeline: an error or a place in a
//! message mapped back to the php-fpm file and line, the loaded
//! configuration told where each value came from, and `fpmd convert`'s
//! annotated document.

use super::super::{Config, ConfigError};
use super::{Origin, Translation};

impl Translation {
    fn origin_of(&self, line: usize) -> Option<&Origin> {
        self.lines.get(line.checked_sub(1)?)?.as_ref()
    }

    /// An error of the TOML pipeline, located in the php-fpm files.
    pub(in crate::config) fn map_error(&self, e: ConfigError) -> ConfigError {
        if e.file != self.main {
            return e;
        }
        let message = self.map_places(&e.message);
        let origin = e
            .line
            .and_then(|l| self.origin_of(l))
            .filter(|o| !o.directive.starts_with('['))
            .or_else(|| e.pool.as_ref().and_then(|p| self.sections.get(p)))
            .or_else(|| e.line.and_then(|l| self.origin_of(l)));
        match origin {
            Some(o) => ConfigError {
                file: o.file.clone(),
                line: Some(o.line),
                key: match &e.key {
                    Some(_) if !o.directive.starts_with('[') => Some(o.directive.clone()),
                    k => k.clone(),
                },
                pool: e.pool,
                message,
                php_fpm: e.php_fpm,
            },
            None => ConfigError {
                line: None,
                message,
                ..e
            },
        }
    }

    /// `MAIN:LINE` in a message → the php-fpm file and line.
    fn map_places(&self, message: &str) -> String {
        let needle = format!("{}:", self.main.display());
        let mut out = String::new();
        let mut rest = message;
        while let Some(i) = rest.find(&needle) {
            out.push_str(&rest[..i]);
            let after = &rest[i + needle.len()..];
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            match after[..digits]
                .parse::<usize>()
                .ok()
                .and_then(|l| self.origin_of(l))
            {
                Some(o) => out.push_str(&format!("{}:{}", o.file.display(), o.line)),
                None => out.push_str(&rest[i..i + needle.len() + digits]),
            }
            rest = &after[digits..];
        }
        out.push_str(rest);
        out
    }

    /// The loaded configuration, told where each value really came from.
    pub(in crate::config) fn fix_up(&self, config: &mut Config) {
        for pool in &mut config.pools {
            if let Some(at) = self.sections.get(&pool.name) {
                std::sync::Arc::make_mut(pool).file = at.file.clone();
            }
        }
        for keys in config.origins.0.values_mut() {
            let mapped = std::mem::take(keys)
                .into_iter()
                .filter_map(|(k, (_, line))| {
                    self.origin_of(line).map(|o| (k, (o.file.clone(), o.line)))
                })
                .collect();
            *keys = mapped;
        }
        config.sources.files = self.files.clone();
        config.sources.include_globs = self.include_globs.clone();
        config.notices = self.notices.clone();
    }

    /// `fpmd convert`'s output: the document with where each line came
    /// from as a comment (`# www.conf:12 pm.max_children`).
    pub(in crate::config) fn annotated(&self) -> String {
        let mut out = format!(
            "# fpmd configuration converted from {}\n# Paths are absolute; values php-fpm has by default that fpmd's defaults differ from are written out.\n",
            self.main.display()
        );
        for n in &self.notices {
            out.push_str(&format!("# {n}\n"));
        }
        out.push('\n');
        for (i, line) in self.text.lines().enumerate() {
            out.push_str(line);
            match self.lines.get(i).and_then(|o| o.as_ref()) {
                Some(o) if line.starts_with('[') => {
                    out.push_str(&format!(" # {}:{}", o.file.display(), o.line))
                }
                Some(o) => out.push_str(&format!(
                    " # {}:{} {}",
                    o.file.display(),
                    o.line,
                    o.directive
                )),
                None if line.starts_with("listen.backlog") => {
                    out.push_str(" # php-fpm's default -1: the kernel's maximum")
                }
                None if line.starts_with("control_socket") => {
                    out.push_str(" # the default of the daemon started on the php-fpm configuration")
                }
                None if line.starts_with("php_ini") => {
                    out.push_str(" # what php-fpm reads: the php.ini beside its configuration, else its compiled-in one")
                }
                None => {}
            }
            out.push('\n');
        }
        out
    }
}
