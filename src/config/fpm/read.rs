//! Reading php-fpm's files into [`Reading`]: each file's lines scanned
//! (`scan.rs`), each statement applied to the global section or the
//! current pool as `fpm_conf_ini_parser_*` does, `include` globs read in
//! place.
//!
//! Must not touch: the TOML document (that is `emit.rs`'s).

use std::path::{Path, PathBuf};

use super::directives::{self, Action};
use super::scan::{self, Statement};
use super::values::{boolean, is_string};
use super::{error, own_words, place, ConfigError, Origin, PoolIni, Reading, Val};

impl Reading<'_> {
    /// Reads `path` (an include at most 5 deep), line by line, applying
    /// each statement in order. Errors: the file cannot be read, a syntax
    /// error, a statement php-fpm refuses.
    pub(super) fn read_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        if self.depth >= 5 {
            return Err(ConfigError::file_only(
                path,
                "failed to include more than 5 files recursively",
            ));
        }
        let text = self.reader.read_text(path)?;
        self.files.push(path.to_path_buf());
        self.depth += 1;
        for (i, line) in text.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            let at = |directive: &str| Origin {
                file: path.to_path_buf(),
                line: i + 1,
                directive: directive.to_string(),
            };
            let pool = self.current.map(|c| self.pools[c].name.clone());
            let scanned = scan::scan_line(line, &|name| std::env::var(name).ok())
                .map_err(|m| error(&at(""), pool.as_deref(), None, m))?;
            for name in &scanned.unknown_constants {
                let notice = format!(
                    "{}: WARNING: '{name}' is kept as written: php-fpm would replace it by the PHP constant of that name, whose value fpmd cannot know (quote it to mean the text)",
                    place(&at(""))
                );
                // Once per line and name (the scanner may meet it twice).
                if !self.notices.contains(&notice) {
                    self.notices.push(notice);
                }
            }
            for statement in scanned.statements {
                if let Statement::Array { key, .. } = &statement {
                    for (name, value) in &scanned.replaced_constants {
                        if value == key {
                            self.notices.push(format!(
                                "{}: WARNING: the key [{name}] is the PHP constant {name}, which php-fpm replaces by its value: this is [{value}], as in php-fpm; write ['{name}'] to mean the name",
                                place(&at(""))
                            ));
                        }
                    }
                }
                self.statement(statement, &at)?;
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// One statement of the current file; `at` makes its origin from the
    /// directive's name.
    fn statement(
        &mut self,
        statement: Statement,
        at: &dyn Fn(&str) -> Origin,
    ) -> Result<(), ConfigError> {
        let pool_name = self.current.map(|c| self.pools[c].name.clone());
        let pool = pool_name.as_deref();
        match statement {
            Statement::Section(name) => self.section(name, at),
            Statement::NoValue(name) => {
                return Err(error(&at(&name), pool, Some(&name), "value is NULL for a ZEND_INI_PARSER_ENTRY (php-fpm's words: a directive needs '= value')"));
            }
            Statement::Entry { name, value } if name == "include" => {
                self.include(&value, &at("include"))?;
            }
            Statement::Entry { name, value } => {
                let origin = at(&name);
                self.entry(name, value, origin, pool)?;
            }
            Statement::Array { name, key, value } => {
                let origin = at(&format!("{name}[{key}]"));
                self.array(name, key, value, origin, pool)?;
            }
        }
        Ok(())
    }

    /// `[name]`: `[global]` (any case), a pool of that name again
    /// (compared case-insensitively), or a new pool opened at `at`.
    fn section(&mut self, name: String, at: &dyn Fn(&str) -> Origin) {
        if name.eq_ignore_ascii_case("global") {
            self.current = None;
        } else if let Some(i) = self
            .pools
            .iter()
            .position(|p| p.name.eq_ignore_ascii_case(&name))
        {
            self.current = Some(i);
        } else {
            self.pools.push(PoolIni {
                at: at(&format!("[{name}]")),
                name,
                scalars: Vec::new(),
                arrays: Vec::new(),
                suppress: Vec::new(),
            });
            self.current = Some(self.pools.len() - 1);
        }
    }

    /// `name = value` in the current section, at `origin`: the directive
    /// looked up in its section's table (an unknown one is an error that
    /// says where it belongs or what was meant), `$pool` replaced, and
    /// stored under its canonical name, the last value winning.
    fn entry(
        &mut self,
        name: String,
        value: String,
        origin: Origin,
        pool: Option<&str>,
    ) -> Result<(), ConfigError> {
        let (table, other, other_name) = match self.current {
            None => (directives::GLOBAL, directives::POOL, "a pool"),
            Some(_) => (directives::POOL, directives::GLOBAL, "the [global]"),
        };
        let Some((canonical, _)) = directives::find(table, &name) else {
            let hint = if directives::find(other, &name).is_some() {
                format!(" ('{name}' belongs in {other_name} section)")
            } else if directives::ARRAYS.contains(&name.as_str()) {
                format!(" (write {name}[NAME] = value)")
            } else if let Some(s) =
                super::super::structure::closest(&name, table.iter().map(|(n, _)| *n))
            {
                format!(" (did you mean '{s}'?)")
            } else {
                String::new()
            };
            return Err(own_words(
                &origin,
                pool,
                Some(&name),
                format!("unknown entry '{name}'{hint}"),
            ));
        };
        let value = match pool {
            Some(p) => value.replace("$pool", p),
            None if value.contains("$pool")
                && matches!(directives::find(table, &name), Some((_, Action::To(_, k) | Action::PoolDefault(_, k) | Action::Notice(k, _))) if is_string(k)) =>
            {
                return Err(own_words(
                    &origin,
                    None,
                    Some(&name),
                    "Can't use '$pool' when the pool is not defined",
                ));
            }
            None => value,
        };
        let entry = (canonical.to_string(), Val { value, at: origin });
        let list = match self.current {
            None => &mut self.global,
            Some(c) => &mut self.pools[c].scalars,
        };
        list.retain(|(k, _)| *k != entry.0);
        list.push(entry);
        Ok(())
    }

    /// `name[key] = value` in the current pool, at `origin`: php-fpm's
    /// checks of the key and value, `*_flag` made `1`/`0`, `$pool`
    /// replaced; the first value of a key wins (a later one is a warning).
    fn array(
        &mut self,
        name: String,
        key: String,
        value: String,
        origin: Origin,
        pool: Option<&str>,
    ) -> Result<(), ConfigError> {
        if name == "access.suppress_path" {
            if !key.is_empty() {
                return Err(own_words(
                    &origin,
                    pool,
                    Some(&origin.directive),
                    "Keys provided to field 'access.suppress_path' are ignored",
                ));
            }
            if !value.starts_with('/') {
                return Err(own_words(
                    &origin,
                    pool,
                    Some(&origin.directive),
                    "Values provided to field 'access.suppress_path' must begin with '/'",
                ));
            }
        } else if key.is_empty() {
            return Err(own_words(
                &origin,
                pool,
                Some(&origin.directive),
                format!("You must provide a key for field '{name}'"),
            ));
        }
        let Some(c) = self.current else {
            return Err(own_words(
                &origin,
                None,
                Some(&origin.directive),
                "Array are not allowed in the global section",
            ));
        };
        let family = match name.as_str() {
            "env" => "env",
            "php_value" | "php_flag" => "php_value",
            "php_admin_value" | "php_admin_flag" => "php_admin_value",
            "access.suppress_path" => {
                let p = &mut self.pools[c];
                p.suppress.push(Val { value, at: origin });
                return Ok(());
            }
            _ => {
                return Err(error(
                    &origin,
                    pool,
                    Some(&name),
                    format!("unknown directive '{name}'"),
                ));
            }
        };
        let value = if name.ends_with("_flag") {
            match boolean(&value) {
                Some(b) => if b { "1" } else { "0" }.to_string(),
                None => {
                    return Err(error(
                        &origin,
                        pool,
                        Some(&origin.directive),
                        format!("error while parsing '{name}[{key}]' : invalid boolean value"),
                    ))
                }
            }
        } else {
            if family == "env" && value.is_empty() {
                return Err(error(&origin, pool, Some(&origin.directive), "empty value"));
            }
            value.replace("$pool", &self.pools[c].name)
        };
        let p = &mut self.pools[c];
        if let Some((_, _, first)) = p.arrays.iter().find(|(f, k, _)| *f == family && *k == key) {
            self.notices.push(format!(
                "{}: WARNING: [{}] {} has no effect: php-fpm applies the first value of {family}[{key}] (at {}), and so does fpmd",
                place(&origin), p.name, origin.directive, place(&first.at)
            ));
        } else {
            p.arrays.push((family, key, Val { value, at: origin }));
        }
        Ok(())
    }

    /// `include = PATTERN`: the files it matches, read in order, continuing
    /// the current section.
    fn include(&mut self, value: &str, at: &Origin) -> Result<(), ConfigError> {
        let pool = self.current.map(|c| self.pools[c].name.clone());
        let full = if value.starts_with('/') {
            value.to_string()
        } else {
            format!(
                "{}/{value}",
                glob::Pattern::escape(&self.prefix.to_string_lossy()).trim_end_matches('/')
            )
        };
        let pattern = glob::Pattern::new(&full).map_err(|e| {
            error(
                at,
                pool.as_deref(),
                Some("include"),
                format!("invalid glob pattern '{value}': {e}"),
            )
        })?;
        let mut matched = self
            .reader
            .glob(&pattern)
            .map_err(|m| error(at, pool.as_deref(), Some("include"), m))?;
        matched.sort();
        self.include_globs.push(full.clone());
        if matched.is_empty() {
            let wildcard = full.contains(['*', '?', '[']);
            let dir: PathBuf = Path::new(&full)
                .components()
                .take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?', '[']))
                .collect();
            let dir = if wildcard {
                dir
            } else {
                dir.parent().map(Path::to_path_buf).unwrap_or_default()
            };
            if wildcard && self.reader.canonicalize(&dir).is_none() {
                return Err(own_words(at, pool.as_deref(), Some("include"), format!(
                    "Unable to globalize '{full}' (ret=2) (php-fpm's words: the directory {} does not exist)", dir.display()
                )));
            }
            self.notices.push(format!(
                "{}: WARNING: Nothing matches the include pattern '{full}'",
                place(at)
            ));
        }
        for file in matched {
            self.read_file(&file)?;
        }
        Ok(())
    }
}
