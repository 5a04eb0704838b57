//! One configuration file as read: its text, its `toml_edit` document (for
//! the line of a key) and its directory (for relative paths).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use toml_edit::{ImDocument, TableLike};

use super::keys::{self, PHP_FPM_RENAMES};
use super::ConfigError;

pub(super) struct SourceFile {
    /// The path as given or globbed (used in messages).
    pub(super) path: PathBuf,
    /// Absolute directory of the file (relative paths are resolved against it).
    pub(super) dir: PathBuf,
    pub(super) doc: ImDocument<String>,
}

impl SourceFile {
    /// A file whose text is already read (`path` names it in messages and
    /// gives its directory).
    pub(super) fn parse(path: &Path, text: String) -> Result<SourceFile, ConfigError> {
        let parent = path.parent().unwrap_or(Path::new(""));
        let dir = absolutize(parent)
            .map_err(|e| ConfigError::file_only(path, format!("cannot resolve directory: {e}")))?;
        let doc = ImDocument::parse(text.clone()).map_err(|e| {
            let (line, col) = match e.span() {
                Some(span) => {
                    let (l, c) = line_col(&text, span.start);
                    (Some(l), Some(c))
                }
                None => (None, None),
            };
            let msg = e.message().trim().replace('\n', "; ");
            ConfigError {
                file: path.to_path_buf(),
                line,
                pool: None,
                key: None,
                message: match col {
                    Some(c) => format!("syntax error at column {c}: {msg}{}", php_fpm_hint(&text)),
                    None => format!("syntax error: {msg}{}", php_fpm_hint(&text)),
                },
                php_fpm: None,
            }
        })?;
        Ok(SourceFile {
            path: path.to_path_buf(),
            dir,
            doc,
        })
    }

    pub(super) fn text(&self) -> &str {
        self.doc.raw()
    }

    pub(super) fn line_at(&self, offset: usize) -> usize {
        line_col(self.text(), offset).0
    }

    /// Line of the key at `segs` (from the document root), if present.
    pub(super) fn find_line(&self, segs: &[&str]) -> Option<usize> {
        let mut table: &dyn TableLike = self.doc.as_table();
        for (i, seg) in segs.iter().enumerate() {
            let (key, item) = table.get_key_value(seg)?;
            if i + 1 == segs.len() {
                return key
                    .span()
                    .or_else(|| item.span())
                    .map(|s| self.line_at(s.start));
            }
            table = item.as_table_like()?;
        }
        None
    }

    /// The string or integer at `segs` (from the document root) as text
    /// (an integer in decimal), if there is one.
    pub(super) fn value_text(&self, segs: &[&str]) -> Option<String> {
        let (last, tables) = segs.split_last()?;
        let mut table: &dyn TableLike = self.doc.as_table();
        for seg in tables {
            table = table.get(seg)?.as_table_like()?;
        }
        let value = table.get(last)?.as_value()?;
        match value {
            toml_edit::Value::String(s) => Some(s.value().clone()),
            toml_edit::Value::Integer(n) => Some(n.value().to_string()),
            _ => None,
        }
    }

    /// Whether the key at `segs` (from the document root) is set.
    pub(super) fn has_key(&self, segs: &[&str]) -> bool {
        let mut table: &dyn TableLike = self.doc.as_table();
        for (i, seg) in segs.iter().enumerate() {
            let Some(item) = table.get(seg) else {
                return false;
            };
            if i + 1 == segs.len() {
                return true;
            }
            let Some(t) = item.as_table_like() else {
                return false;
            };
            table = t;
        }
        false
    }

    pub(super) fn resolve(&self, p: &str) -> PathBuf {
        normalize(&self.dir.join(p))
    }
}

/// Every key (leaf) under `table` in `src`, dotted without quotes, with
/// its line: the keys of [`Origins`](super::Origins).
pub(super) fn key_lines(
    src: &SourceFile,
    table: &dyn TableLike,
) -> BTreeMap<String, (PathBuf, usize)> {
    fn walk(
        src: &SourceFile,
        t: &dyn TableLike,
        prefix: &mut Vec<String>,
        out: &mut BTreeMap<String, (PathBuf, usize)>,
    ) {
        for (key, item) in t.iter() {
            prefix.push(key.to_string());
            match item.as_table_like() {
                Some(sub) => walk(src, sub, prefix, out),
                None => {
                    let line = t
                        .get_key_value(key)
                        .and_then(|(k, i)| k.span().or_else(|| i.span()))
                        .map(|s| src.line_at(s.start));
                    if let Some(line) = line {
                        out.insert(origin_key(prefix), (src.path.clone(), line));
                    }
                }
            }
            prefix.pop();
        }
    }
    let mut out = BTreeMap::new();
    walk(src, table, &mut Vec::new(), &mut out);
    out
}

/// The key of [`Origins`](super::Origins) for the key segments `segs`:
/// joined with dots, a flag table named as its value table.
pub(super) fn origin_key(segs: &[String]) -> String {
    let mut segs = segs.to_vec();
    if let Some(first) = segs.first_mut() {
        match first.as_str() {
            "php_flag" => *first = "php_value".into(),
            "php_admin_flag" => *first = "php_admin_value".into(),
            _ => {}
        }
    }
    segs.join(".")
}

/// For a file that does not parse: the first line written in php-fpm's ini
/// syntax rather than fpmd's TOML, with how to write it (empty if none).
pub(super) fn php_fpm_hint(text: &str) -> String {
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let key = t.split(['=', '[', ' ', '\t']).next().unwrap_or("");
        let rename = PHP_FPM_RENAMES.iter().find(|(old, _)| *old == key);
        let hint = if t.starts_with(';') {
            Some("comments start with '#' in TOML, not ';'".to_string())
        } else if let Some((_, new)) =
            rename.filter(|_| t[key.len()..].trim_start().starts_with('='))
        {
            Some(format!("php-fpm's bare '{key}' is written '{new}' in fpmd"))
        } else if keys::pool_maps().any(|m| m == key) && t[key.len()..].starts_with('[') {
            Some(format!("php-fpm's '{key}[name]' is written '{key}.name' in fpmd (quote a name with dots: {key}.\"session.save_path\")"))
        } else {
            None
        };
        if let Some(h) = hint {
            return format!(
                " (line {} looks like php-fpm syntax: {h}; values are TOML: strings in quotes)",
                i + 1
            );
        }
    }
    String::new()
}

/// 1-based line and column of a byte offset.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    (line, offset - line_start + 1)
}

pub(super) fn absolutize(p: &Path) -> std::io::Result<PathBuf> {
    if p.is_absolute() {
        Ok(normalize(p))
    } else {
        Ok(normalize(&std::env::current_dir()?.join(p)))
    }
}

/// Drops `.` components (lexically; `..` is kept, symlinks are not resolved).
pub(super) fn normalize(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testutil::*;

    #[test]
    fn php_fpm_syntax_gets_a_hint() {
        assert!(php_fpm_hint("[www]\npm = dynamic\n").contains(
            "line 2 looks like php-fpm syntax: php-fpm's bare 'pm' is written 'pm.mode'"
        ));
        assert!(php_fpm_hint("listen = /run/x.sock").contains("'listen.address'"));
        assert!(
            php_fpm_hint("php_admin_value[memory_limit] = 128M").contains("'php_admin_value.name'")
        );
        assert!(php_fpm_hint("; a comment").contains("'#'"));
        assert_eq!(
            php_fpm_hint("[www]\npm.mode = \"static\"\nlisten.address = \"9000\"\n"),
            ""
        );
    }

    #[test]
    fn syntax_error() {
        let (dir, e) = load_err(
            INCLUDE_MAIN,
            &[(
                "pool.d/www.toml",
                "[www]\nuser = \"nobody\"\nlisten.address = /run/x.sock\n",
            )],
        );
        assert_eq!(e.file, dir.path().join("pool.d/www.toml"));
        assert_eq!(
            (e.line, e.key.as_deref(), e.pool.as_deref()),
            (Some(3), None, None)
        );
        assert!(e.message.starts_with("syntax error at column 18: "), "{e}");
        assert!(!e.message.contains('\n'));
        let (dir, e) = load_err("[www\n", &[]);
        assert_eq!(
            (e.file.clone(), e.line),
            (dir.path().join("fpmd.toml"), Some(1))
        );
    }
}
