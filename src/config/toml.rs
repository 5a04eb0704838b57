//! How fpmd writes TOML back: strings, keys, dotted keys and durations as
//! `fpmd -t`, `fpmd convert` and the error messages spell them.

pub(super) fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

pub(super) fn toml_duration(d: std::time::Duration) -> String {
    toml_str(&humantime::format_duration(d).to_string())
}

pub(super) fn toml_key(s: &str) -> String {
    toml_edit::Key::new(s).to_string()
}

/// Joins key segments into a dotted key, quoting segments that are not bare.
pub(super) fn dotted(segs: &[String]) -> String {
    segs.iter()
        .map(|s| toml_key(s))
        .collect::<Vec<_>>()
        .join(".")
}
