//! What Debian's packages read of php-fpm, read of fpmd (issue 25, item
//! 3). Looked through: fail2ban 1.0.2's filters, logcheck-database
//! 1.4.2's rules, munin-plugins-core/-extra 2.0.73, zabbix-agent/-agent2
//! 6.0.14 and zabbix-frontend-php 6.0.14's templates. What reads php-fpm:
//!
//! - fail2ban `filter.d/apache-noscript.conf`: `AH01071: Got error
//!   'Primary script unknown'`, Apache's line for php-fpm's FastCGI
//!   STDERR about a missing script (run here with Debian's own
//!   `fail2ban-regex` on both Apaches' error logs);
//! - zabbix-frontend-php's "PHP-FPM by HTTP" and "PHP-FPM by Zabbix agent"
//!   templates: the status page's JSON fields (JSONPath), the ping page's
//!   reply and its `X-Powered-By: PHP/…` header (regular expressions).
//!
//! logcheck and Munin ship no rule or plugin for php-fpm (nor do
//! fail2ban's other filters: `php-url-fopen` reads the web server's access
//! log, `suhosin` lighttpd's). Each test runs php-fpm beside fpmd and
//! wants what the package's patterns find in fpmd's output to be what
//! they find in php-fpm's.

use crate::harness::*;
use std::path::Path;
use std::time::Duration;

const FAIL2BAN_REGEX: &str = "/usr/bin/fail2ban-regex";
const NOSCRIPT_FILTER: &str = "/etc/fail2ban/filter.d/apache-noscript.conf";
const ZABBIX_TEMPLATES: &str = "/usr/share/doc/zabbix-frontend-php/templates/app";

fn require(path: &str, package: &str) {
    assert!(
        Path::new(path).exists(),
        "{path} is missing: install Debian's {package} (`make test-deps` does: apt-get install --no-install-recommends {package})"
    );
}

/// `fail2ban-regex LOG FILTER`'s count of matched lines.
fn fail2ban_matches(log: &Path, filter: &str) -> usize {
    let out = std::process::Command::new(FAIL2BAN_REGEX)
        .arg(log)
        .arg(filter)
        .output()
        .expect("run fail2ban-regex");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "fail2ban-regex failed:\n{text}");
    // "Lines: 3 lines, 0 ignored, 1 matched, 2 missed"
    let line = text
        .lines()
        .find(|l| l.starts_with("Lines: "))
        .unwrap_or_else(|| panic!("no Lines: summary in\n{text}"));
    line.split(", ")
        .find_map(|p| p.strip_suffix(" matched"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no matched count in {line:?}"))
}

#[test]
fn fail2ban_apache_noscript_finds_fpmds_missing_scripts_as_php_fpms() {
    require(FAIL2BAN_REGEX, "fail2ban");
    require(NOSCRIPT_FILTER, "fail2ban");
    let dir = TestDir::new();
    let fpm = PhpFpm::start_with(&dir, PhpFpmOpts::default().tcp(free_port()));
    let fpmd = Fpmd::start(
        &dir,
        FpmdConfig::new().pool(
            Pool::www()
                .max_children(1)
                .tcp(format!("127.0.0.1:{}", free_port())),
        ),
    );
    let style = FcgiStyle::ProxyPassMatchTcp;
    let theirs = Apache::start(
        &dir,
        ApacheOpts::new(style, fpm.addr()).name("apache-php-fpm"),
    );
    let ours = Apache::start(
        &dir,
        ApacheOpts::new(style, fpmd.addr(0)).name("apache-fpmd"),
    );
    let mut counts = Vec::new();
    for (name, apache) in [("php-fpm", &theirs), ("fpmd", &ours)] {
        for path in ["/no-such-script.php", "/wp-login.php", "/hello.php"] {
            let r = get(&apache.url(path));
            eprintln!("{name}: {path} {}", r.status);
        }
        wait_for(
            Duration::from_secs(10),
            &format!("{name}'s \"Primary script unknown\" in its Apache's error log"),
            || apache.error_log().matches("Primary script unknown").count() == 2,
        );
        let log = dir.join(format!("{name}-apache-error.log"));
        std::fs::write(&log, apache.error_log()).unwrap();
        let matched = fail2ban_matches(&log, NOSCRIPT_FILTER);
        eprintln!(
            "{name}: apache-noscript matched {matched} lines of\n{}",
            apache.error_log()
        );
        counts.push(matched);
    }
    assert_eq!(counts[0], 2, "php-fpm: one match per missing script");
    assert_eq!(counts[1], counts[0], "fpmd's lines match as php-fpm's do");
}

/// The parameters of every `JSONPATH` and `REGEX` preprocessing step of a
/// Zabbix template (YAML export: `type:` then `parameters:` then `- '…'`).
fn template_steps(yaml: &str) -> Vec<(String, String)> {
    let mut steps = Vec::new();
    let mut kind: Option<String> = None;
    for line in yaml.lines().map(str::trim) {
        if let Some(k) = line.strip_prefix("type: ") {
            kind = matches!(k, "JSONPATH" | "REGEX").then(|| k.to_string());
        } else if let (Some(k), Some(p)) = (&kind, line.strip_prefix("- '")) {
            let p = p.strip_suffix('\'').unwrap_or(p).replace("''", "'");
            steps.push((k.clone(), p));
            kind = None;
        }
    }
    steps
}

/// `$.pool` / `$.['accepted conn']` → the field's name.
fn json_field(path: &str) -> &str {
    let rest = path.strip_prefix("$.").unwrap_or(path);
    rest.strip_prefix("['")
        .and_then(|r| r.strip_suffix("']"))
        .unwrap_or(rest)
}

#[test]
fn zabbix_php_fpm_templates_read_fpmds_status_and_ping_as_php_fpms() {
    let http = format!("{ZABBIX_TEMPLATES}/php-fpm_http/template_app_php-fpm_http.yaml");
    let agent = format!("{ZABBIX_TEMPLATES}/php-fpm_agent/template_app_php-fpm_agent.yaml");
    require(&http, "zabbix-frontend-php");
    require(&agent, "zabbix-frontend-php");
    let mut steps = template_steps(&std::fs::read_to_string(&http).unwrap());
    steps.extend(template_steps(&std::fs::read_to_string(&agent).unwrap()));
    let fields: std::collections::BTreeSet<&str> = steps
        .iter()
        .filter(|(k, _)| k == "JSONPATH")
        .map(|(_, p)| json_field(p))
        .collect();
    assert!(
        fields.len() >= 10,
        "the templates' status fields: {fields:?}"
    );
    let regexes: Vec<String> = steps
        .iter()
        .filter(|(k, _)| k == "REGEX")
        .map(|(_, p)| p.replace("{$PHP_FPM.PING.REPLY}", "pong"))
        .collect();
    assert!(
        !regexes.is_empty(),
        "the templates' ping and version patterns"
    );

    let s = Stack::start_with(
        FpmdConfig::new().pool(
            Pool::www()
                .max_children(2)
                .line("pm.status_path = \"/status\"")
                .line("ping.path = \"/ping\""),
        ),
        NginxOpts::default().status(),
    );
    let fpm = PhpFpm::start_with(
        &s.dir,
        PhpFpmOpts::default()
            .max_children(2)
            .line("pm.status_path = /status")
            .line("ping.path = /ping"),
    );
    let ref_nginx = Nginx::start(
        &s.dir,
        NginxOpts::default()
            .status()
            .name("nginx-php-fpm")
            .upstream(fpm.upstream()),
    );
    let mut found = Vec::new();
    for (name, url) in [("php-fpm", ref_nginx.url("")), ("fpmd", s.url(""))] {
        let status = get(&format!("{url}/status?json"));
        assert_eq!(status.status, 200, "{name}: {}", status.text());
        let json: serde_json::Value = serde_json::from_str(&status.text())
            .unwrap_or_else(|e| panic!("{name}'s status JSON: {e}\n{}", status.text()));
        for field in &fields {
            assert!(
                json.get(field).is_some(),
                "{name}'s status JSON has no {field:?} (Zabbix's JSONPath): {json}"
            );
        }
        // Zabbix's HTTP agent with retrieve_mode BOTH: headers, a blank
        // line, the body (header names as the HTTP client gives them, the
        // same for both).
        let ping = get(&format!("{url}/ping"));
        let mut both = format!("HTTP/1.1 {} OK\r\n", ping.status);
        for (k, v) in &ping.headers {
            both.push_str(&format!("{k}: {v}\r\n"));
        }
        both.push_str("\r\n");
        both.push_str(&ping.text());
        // The agent template's `({.+})` takes the JSON out of the status
        // page's whole response; the others read the ping page.
        let status_both = format!("HTTP/1.1 200 OK\r\n\r\n{}", status.text());
        let hits: Vec<bool> = regexes
            .iter()
            .map(|re| match re.contains("({") {
                true => regex_matches(re, &status_both),
                false => regex_matches(re, &both),
            })
            .collect();
        eprintln!("{name}: {hits:?} for {regexes:?} in\n{both}");
        found.push(hits);
    }
    let ping = regexes
        .iter()
        .position(|re| re.starts_with("pong"))
        .expect("the ping reply pattern");
    assert!(
        found[0][ping] && found[1][ping],
        "the ping reply is found in both"
    );
    assert_eq!(
        found[1], found[0],
        "the templates' patterns find in fpmd's ping page what they find in php-fpm's"
    );
}

/// Whether the PCRE-style `re` of a Zabbix template matches `text`
/// (the templates' two patterns are in the common subset of PCRE and the
/// regex crate's syntax).
fn regex_matches(re: &str, text: &str) -> bool {
    // PCRE reads a `{` that begins no repetition as a literal; the regex
    // crate wants it escaped.
    let mut pcre = String::new();
    let mut literal_braces = 0;
    let mut chars = re.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                pcre.push(c);
                pcre.extend(chars.next());
            }
            '{' if !chars.peek().is_some_and(char::is_ascii_digit) => {
                literal_braces += 1;
                pcre.push_str("\\{");
            }
            '}' if literal_braces > 0 => {
                literal_braces -= 1;
                pcre.push_str("\\}");
            }
            _ => pcre.push(c),
        }
    }
    regex::Regex::new(&pcre)
        .unwrap_or_else(|e| panic!("the template's pattern {re:?}: {e}"))
        .is_match(text)
}
