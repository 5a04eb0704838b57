//! Keeps the man pages in step with the code (a test module of the
//! binary, where the real command line is): `man/fpmd.8` against the clap
//! command line of `main.rs`, `man/fpmd.toml.5` against the parser's key
//! registry (`crate::config::registry`), both ways; and both pages render
//! with groff without a warning.
//!
//! The pages are written by hand in man(7) (not generated: the command
//! line and the registry carry no defaults, php-fpm names or the prose a
//! page needs), so the checks read their structure: every `.TP` entry of
//! the OPTIONS and COMMANDS sections of fpmd.8, and every `.TP` entry
//! `KEY = TYPE` of the GLOBAL SETTINGS and POOL SETTINGS sections of
//! fpmd.toml.5, whose next line must give `Default:` and `php-fpm:`.

use std::collections::BTreeSet;

use clap::CommandFactory;

const FPMD_8: &str = include_str!("../../man/fpmd.8");
const FPMD_TOML_5: &str = include_str!("../../man/fpmd.toml.5");

/// One `.TP` entry: its tag as text (fonts and escapes removed) and the
/// lines of its body, as text too.
#[derive(Debug)]
struct Entry {
    tag: String,
    body: Vec<String>,
}

/// The `.TP` entries of the section `.SH NAME` of `page` (nested ones,
/// inside `.RS`/`.RE`, included).
fn entries(page: &str, section: &str) -> Vec<Entry> {
    let mut in_section = false;
    let mut out: Vec<Entry> = Vec::new();
    let mut lines = page.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(name) = line.strip_prefix(".SH ") {
            in_section = name.trim().trim_matches('"') == section;
            continue;
        }
        if !in_section {
            continue;
        }
        if line.trim_end() == ".TP" {
            if let Some(tag) = lines.next() {
                out.push(Entry {
                    tag: text(tag),
                    body: Vec::new(),
                });
            }
        } else if let Some(entry) = out.last_mut() {
            entry.body.push(text(line));
        }
    }
    assert!(!out.is_empty(), "no .TP entry in section {section:?}");
    out
}

/// A roff line as the reader sees its words: font macros' arguments
/// (alternating ones joined as man(7) joins them), escapes resolved.
fn text(line: &str) -> String {
    let joined = match line.split_once(' ') {
        Some((m, rest)) if m.starts_with('.') => {
            let args = macro_args(rest);
            match m {
                ".B" | ".I" | ".SM" => args.join(" "),
                ".BR" | ".RB" | ".BI" | ".IB" | ".IR" | ".RI" => args.concat(),
                _ => String::new(),
            }
        }
        _ if line.starts_with('.') => String::new(),
        _ => line.to_string(),
    };
    unescape(&joined)
}

/// Macro arguments: split at spaces, a double-quoted one kept whole.
fn macro_args(rest: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let Some(&c) = chars.peek() else { break };
        let mut arg = String::new();
        if c == '"' {
            chars.next();
            for c in chars.by_ref() {
                if c == '"' {
                    break;
                }
                arg.push(c);
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                arg.push(c);
                chars.next();
            }
        }
        args.push(arg);
    }
    args
}

/// Resolves the escapes the pages use: fonts (`\fB`, `\fR`, …) and `\&`
/// vanish, `\-` is `-`, `\(dq` `"`, `\(aq` `'`, `\e` a backslash.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('f') => {
                chars.next();
            }
            Some('&') | None => {}
            Some('-') => out.push('-'),
            Some('e') => out.push('\\'),
            Some('(') => {
                let name: String = chars.by_ref().take(2).collect();
                out.push_str(match name.as_str() {
                    "dq" => "\"",
                    "aq" => "'",
                    "em" => "—",
                    "<=" => "≤",
                    _ => "?",
                });
            }
            Some(other) => out.push(other),
        }
    }
    out
}

/// The options a tag names: `-c`, `--config` (words that are one).
fn options_in(tag: &str) -> Vec<String> {
    tag.split([' ', ',', '[', ']', '|'])
        .filter(|w| {
            let name = w.trim_start_matches('-');
            let dashes = w.len() - name.len();
            let ok =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            (dashes == 1 && name.chars().count() == 1 && ok) || (dashes == 2 && ok)
        })
        .map(str::to_string)
        .collect()
}

/// Every spelling of a command-line argument: `-c`, `-y`, `--config`,
/// `--fpm-config` (`visible`: only those `--help` shows).
fn spellings(arg: &clap::Arg, visible: bool) -> Vec<String> {
    let mut out = Vec::new();
    let shorts = if visible {
        arg.get_visible_short_aliases()
    } else {
        arg.get_all_short_aliases()
    };
    for c in arg
        .get_short()
        .into_iter()
        .chain(shorts.unwrap_or_default())
    {
        out.push(format!("-{c}"));
    }
    let longs = if visible {
        arg.get_visible_aliases()
    } else {
        arg.get_all_aliases()
    };
    for l in arg.get_long().into_iter().chain(longs.unwrap_or_default()) {
        out.push(format!("--{l}"));
    }
    out
}

fn command() -> clap::Command {
    let mut cmd = super::Cli::command();
    cmd.build();
    cmd
}

#[test]
fn fpmd_8_describes_every_option_and_command() {
    let cmd = command();
    let options = entries(FPMD_8, "OPTIONS");
    let described: BTreeSet<String> = options.iter().flat_map(|e| options_in(&e.tag)).collect();
    let commands = entries(FPMD_8, "COMMANDS");
    let (sub_options, command_tags): (Vec<_>, Vec<_>) =
        commands.iter().partition(|e| e.tag.starts_with('-'));
    let described_sub: BTreeSet<String> = sub_options
        .iter()
        .flat_map(|e| options_in(&e.tag))
        .collect();
    let described_commands: BTreeSet<&str> = command_tags
        .iter()
        .filter_map(|e| e.tag.split_whitespace().next())
        .collect();

    let mut missing = Vec::new();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        for s in spellings(arg, true) {
            if !described.contains(&s) {
                missing.push(format!("option {s} (OPTIONS)"));
            }
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        for name in std::iter::once(sub.get_name()).chain(sub.get_visible_aliases()) {
            if !described_commands.contains(name) {
                missing.push(format!("command {name} (COMMANDS)"));
            }
        }
        let own = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_global_set() && a.get_id() != "help");
        for arg in own {
            for s in spellings(arg, true) {
                if !described_sub.contains(&s) {
                    missing.push(format!("option {s} of {} (COMMANDS)", sub.get_name()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "man/fpmd.8 does not describe: {}",
        missing.join(", ")
    );

    // And nothing the command line does not have.
    let real: BTreeSet<String> = cmd
        .get_arguments()
        .flat_map(|a| spellings(a, false))
        .collect();
    let real_sub: BTreeSet<String> = cmd
        .get_subcommands()
        .flat_map(|s| s.get_arguments().flat_map(|a| spellings(a, false)))
        .collect();
    let real_commands: BTreeSet<&str> = cmd
        .get_subcommands()
        .flat_map(|s| std::iter::once(s.get_name()).chain(s.get_all_aliases()))
        .collect();
    let mut unknown: Vec<String> = described
        .iter()
        .filter(|s| !real.contains(*s))
        .map(|s| format!("option {s}"))
        .collect();
    unknown.extend(
        described_sub
            .iter()
            .filter(|s| !real_sub.contains(*s))
            .map(|s| format!("command option {s}")),
    );
    unknown.extend(
        described_commands
            .iter()
            .filter(|c| !real_commands.contains(*c))
            .map(|c| format!("command {c}")),
    );
    assert!(
        unknown.is_empty(),
        "man/fpmd.8 describes what fpmd does not have: {}",
        unknown.join(", ")
    );
}

/// The `KEY = TYPE` entries of a section of fpmd.toml.5, each checked for
/// its `Default:` and `php-fpm:`; the keys as written (`env.NAME`).
fn documented_keys(section: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for e in entries(FPMD_TOML_5, section) {
        let Some((key, _type)) = e.tag.split_once(" = ") else {
            continue;
        };
        let first = e.body.iter().find(|l| !l.is_empty()).map_or("", |l| l);
        assert!(
            first.starts_with("Default: ") && first.contains("; php-fpm: "),
            "fpmd.toml.5, {section}, {key}: the line after the tag must be \"Default: ...; php-fpm: ...\", not {first:?}"
        );
        assert!(keys.insert(key.to_string()), "{key} is described twice");
    }
    keys
}

#[test]
fn fpmd_toml_5_describes_every_key_of_the_registry() {
    let global = documented_keys("GLOBAL SETTINGS");
    let pool = documented_keys("POOL SETTINGS");
    let as_written = |k: &crate::config::RegistryKey| {
        if k.map {
            format!("{}.NAME", k.name)
        } else {
            k.name.to_string()
        }
    };
    let mut missing = Vec::new();
    let mut known = BTreeSet::new();
    for k in crate::config::registry() {
        let (section, keys) = if k.global {
            ("GLOBAL SETTINGS", &global)
        } else {
            ("POOL SETTINGS", &pool)
        };
        let written = as_written(&k);
        if !keys.contains(&written) {
            missing.push(format!("{written} ({section})"));
        }
        known.insert((k.global, written));
    }
    assert!(
        missing.is_empty(),
        "man/fpmd.toml.5 does not describe: {}",
        missing.join(", ")
    );
    let unknown: Vec<String> = global
        .iter()
        .map(|k| (true, k))
        .chain(pool.iter().map(|k| (false, k)))
        .filter(|&(g, k)| !known.contains(&(g, k.clone())))
        .map(|(g, k)| format!("{}{k}", if g { "global." } else { "" }))
        .collect();
    assert!(
        unknown.is_empty(),
        "man/fpmd.toml.5 describes keys the parser does not know: {}",
        unknown.join(", ")
    );
}

/// `groff -man -ww` (every warning) renders both pages silently.
#[test]
fn man_pages_render_without_warnings() {
    for page in ["man/fpmd.8", "man/fpmd.toml.5"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
        let out = std::process::Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run groff ({e}): apt-get install groff-base (make test-deps does)")
            });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "groff warns about {page}: {stderr}"
        );
    }
}

#[test]
fn the_roff_reader_reads_what_the_pages_use() {
    assert_eq!(
        text(r"\fB\-c\fR, \fB\-\-config\fR \fIfile\fR"),
        "-c, --config file"
    );
    assert_eq!(text(r#".BR SIGUSR2 ", " SIGHUP"#), "SIGUSR2, SIGHUP");
    assert_eq!(text(".B reload"), "reload");
    assert_eq!(text(".RS"), "");
    assert_eq!(
        text(r"\fBenv.\fINAME\fR = \fIstring\fR"),
        "env.NAME = string"
    );
    assert_eq!(options_in("-v, -V, --version"), ["-v", "-V", "--version"]);
    assert_eq!(options_in("-d, --define name=value"), ["-d", "--define"]);
    assert_eq!(options_in("status [pool]"), Vec::<String>::new());
}
