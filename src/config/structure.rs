//! The shape of a configuration file before its values are read: which
//! top-level tables are pools and which is `[global]`, pool names, and every
//! key checked against the registry ([`super::keys`]): an unknown key is an
//! error naming the file, the line and the closest known key.

use toml_edit::{Item, TableLike};

use super::keys::{
    global_keys, is_global_key, is_global_prefix, is_pool_leaf, is_pool_map, is_pool_prefix,
    pool_leaves, pool_maps, PHP_FPM_RENAMES,
};
use super::source::SourceFile;
use super::toml::{dotted, toml_key};
use super::ConfigError;

/// The first key of a `[global]` table (`global.` + `prefix`) that is not
/// in the registry: its segments from `global` on and its item.
fn unknown_global_key<'t>(
    table: &'t dyn TableLike,
    prefix: &[String],
) -> Option<(Vec<String>, &'t Item)> {
    for (k, sub) in table.iter() {
        let mut segs = prefix.to_vec();
        segs.push(k.to_string());
        let key = segs[1..].join(".");
        if is_global_key(&key) {
            continue;
        }
        match sub.as_table_like() {
            Some(t) if is_global_prefix(&key) => {
                if let Some(found) = unknown_global_key(t, &segs) {
                    return Some(found);
                }
            }
            _ => return Some((segs, sub)),
        }
    }
    None
}

/// The closest candidate to `unknown`, when it is close enough.
pub(super) fn closest<'a>(
    unknown: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = unknown.to_ascii_lowercase();
    let mut best: Option<(&str, f64)> = None;
    for cand in candidates {
        let score = strsim::normalized_damerau_levenshtein(&lower, cand);
        if !matches!(best, Some((_, s)) if s >= score) {
            best = Some((cand, score));
        }
    }
    // Jaro-Winkler over-rewards the shared namespace (`listen.acl_users` vs
    // `listen.address`); an edit distance of at most ~30% of the length does not.
    best.filter(|&(_, s)| s >= 0.7).map(|(c, _)| c)
}

/// The known pool key closest to `unknown` (pool-relative, dotted).
fn suggest_pool_key(unknown: &str) -> Option<String> {
    if let Some((_, new)) = PHP_FPM_RENAMES.iter().find(|(old, _)| *old == unknown) {
        return Some(new.to_string());
    }
    let mut candidates: Vec<String> = pool_leaves().map(str::to_string).collect();
    if let Some((_, rest)) = unknown.split_once('.') {
        candidates.extend(pool_maps().map(|m| format!("{m}.{rest}")));
    }
    closest(unknown, candidates.iter().map(|s| s.as_str())).map(str::to_string)
}

/// The known global key closest to `unknown` (`global.X`).
fn suggest_global_key(unknown: &str) -> Option<String> {
    let candidates: Vec<String> = global_keys().map(|g| format!("global.{g}")).collect();
    // A table of keys given a value (`metrics = 9253`): its key.
    let table = format!("{unknown}.");
    if let Some(key) = candidates.iter().find(|c| c.starts_with(&table)) {
        return Some(key.clone());
    }
    closest(unknown, candidates.iter().map(|s| s.as_str())).map(str::to_string)
}

/// Checks the shape of a file; returns the names of the pools it defines.
pub(super) fn check_structure(src: &SourceFile, is_main: bool) -> Result<Vec<String>, ConfigError> {
    let root = src.doc.as_table();
    let mut pools = Vec::new();
    for (name, item) in root.iter() {
        let line = src.find_line(&[name]);
        let err = |pool: Option<&str>, key: Option<String>, message: String| ConfigError {
            file: src.path.clone(),
            line,
            pool: pool.map(str::to_string),
            key,
            message,
            php_fpm: None,
        };
        if name == "global" {
            if !is_main {
                return Err(err(
                    None,
                    None,
                    "[global] is only allowed in the main configuration file".into(),
                ));
            }
            let Some(table) = item.as_table_like() else {
                return Err(err(
                    None,
                    Some("global".into()),
                    "global must be a table: [global]".into(),
                ));
            };
            if let Some((segs, sub)) = unknown_global_key(table, &["global".to_string()]) {
                let (segs, key_line) = first_leaf(src, segs, sub);
                let full = dotted(&segs);
                let message = match suggest_global_key(&full) {
                    Some(s) => format!("unknown key (did you mean '{s}'?)"),
                    None => format!(
                        "unknown key (global keys are: {})",
                        global_keys().collect::<Vec<_>>().join(", ")
                    ),
                };
                return Err(ConfigError {
                    file: src.path.clone(),
                    line: key_line,
                    pool: None,
                    key: Some(full),
                    message,
                    php_fpm: None,
                });
            }
            continue;
        }
        match item {
            Item::ArrayOfTables(_) => {
                // Named as the pool only when it could be one: `[[""]]`
                // showed as the pool `[]`.
                return Err(err(
                    validate_pool_name(name).is_ok().then_some(name),
                    None,
                    format!(
                        "a pool must be a table [{0}], not an array of tables [[{0}]]",
                        toml_key(name)
                    ),
                ));
            }
            Item::Table(_) | Item::Value(toml_edit::Value::InlineTable(_)) => {}
            _ => {
                let message = if is_main && is_global_key(name) {
                    format!("unknown top-level key (did you mean 'global.{name}'? global keys go in the [global] table)")
                } else {
                    "a top-level key must be inside a pool table such as [www] (or [global] in the main file)".to_string()
                };
                // As TOML spells it, as every other key in a message: an
                // empty or spaced name is quoted (`key '""'`, not `key ''`).
                return Err(err(None, Some(toml_key(name)), message));
            }
        }
        validate_pool_name(name).map_err(|m| err(None, None, m))?;
        let table = item.as_table_like().expect("checked above");
        check_pool_keys(src, name, table, &mut Vec::new())?;
        pools.push(name.to_string());
    }
    Ok(pools)
}

fn validate_pool_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a pool name must not be empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "invalid pool name {}: character {c:?} is not allowed (use letters, digits, '.', '_' and '-')",
            toml_key(name)
        ));
    }
    Ok(())
}

/// Follows the first entry of nested tables down to a leaf; returns its full
/// key segments and the line of its key.
fn first_leaf(
    src: &SourceFile,
    mut segs: Vec<String>,
    mut item: &Item,
) -> (Vec<String>, Option<usize>) {
    while let Some((k, sub)) = item.as_table_like().and_then(|t| t.iter().next()) {
        segs.push(k.to_string());
        item = sub;
    }
    let refs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
    let line = src.find_line(&refs);
    (segs, line)
}

fn check_pool_keys(
    src: &SourceFile,
    pool: &str,
    table: &dyn TableLike,
    prefix: &mut Vec<String>,
) -> Result<(), ConfigError> {
    for (k, item) in table.iter() {
        prefix.push(k.to_string());
        let key = prefix.join(".");
        let known = is_pool_leaf(&key) || (prefix.len() == 1 && is_pool_map(k));
        if !known {
            if is_pool_prefix(&key) && item.is_table_like() {
                check_pool_keys(src, pool, item.as_table_like().expect("table-like"), prefix)?;
            } else {
                let mut path = vec![pool.to_string()];
                path.extend(prefix.iter().cloned());
                let (segs, line) = first_leaf(src, path, item);
                let rel = dotted(&segs[1..]);
                let looks_like_pool = prefix.len() == 1
                    && item.as_table_like().is_some_and(|t| {
                        t.iter().any(|(k2, _)| {
                            is_pool_leaf(k2) || is_pool_prefix(k2) || is_pool_map(k2)
                        })
                    });
                let message = if looks_like_pool {
                    format!(
                        "unknown key (a pool name that contains a dot must be quoted: [\"{pool}.{k}\"])"
                    )
                } else {
                    match suggest_pool_key(&segs[1..].join(".")) {
                        Some(s) => format!("unknown key (did you mean '{s}'?)"),
                        None => "unknown key".to_string(),
                    }
                };
                return Err(ConfigError {
                    file: src.path.clone(),
                    line,
                    pool: Some(pool.to_string()),
                    key: Some(rel),
                    message,
                    php_fpm: None,
                });
            }
        }
        prefix.pop();
    }
    Ok(())
}
