//! A real Caddy 2 (Debian's caddy) in the foreground (`caddy run`), with
//! its Caddyfile, logs and data (`$HOME`, `$XDG_*`) inside the test dir, no
//! admin endpoint and no automatic HTTPS, one port per site (run by
//! [`WebServer`]). Each site is Caddy's documented PHP site:
//!
//! ```text
//! http://127.0.0.1:PORT {
//!     root * ROOT
//!     php_fastcgi unix//SOCK
//!     file_server
//! }
//! ```
//!
//! `php_fastcgi` expands to Caddy's own rules: `try_files {path}
//! {path}/index.php index.php`, PATH_INFO split at `.php`, and a
//! `reverse_proxy` with the FastCGI transport. Caddy has no request body
//! limit of its own.

use super::webserver::{Launch, Site, Stop, WebServer};
use super::TestDir;
use std::fmt::Write as _;
use std::path::Path;

pub const CADDY_BIN: &str = "/usr/bin/caddy";
const CADDY_HINT: &str =
    "install it with `apt-get install caddy` (or run `make test`, which does it)";

/// Caddy in front of each site on a port of its own (see the module's comment).
pub fn start_sites(t: &TestDir, sites: &[Site]) -> WebServer {
    let config = |dir: &Path, ports: &[u16]| {
        let d = dir.display();
        let mut s = String::new();
        // No admin endpoint (its port 2019 would be shared by every
        // test), no certificates.
        writeln!(s, "{{\n  admin off\n  auto_https off").unwrap();
        writeln!(s, "  storage file_system {d}/data").unwrap();
        writeln!(
            s,
            "  log {{\n    output file {d}/error.log\n    level INFO\n  }}\n}}"
        )
        .unwrap();
        for (port, site) in ports.iter().zip(sites) {
            writeln!(s, "http://127.0.0.1:{port} {{\n  bind 127.0.0.1").unwrap();
            writeln!(s, "  root * {}", site.root.display()).unwrap();
            writeln!(s, "  php_fastcgi unix/{}", site.socket().display()).unwrap();
            writeln!(s, "  file_server\n}}").unwrap();
        }
        s
    };
    WebServer::start(
        t,
        "caddy",
        &Launch {
            name: "caddy",
            bin: CADDY_BIN,
            hint: CADDY_HINT,
            conf_file: "Caddyfile",
            ports: sites.len(),
            config: &config,
            args: &|_, conf| {
                vec![
                    "run".into(),
                    "--adapter".into(),
                    "caddyfile".into(),
                    "--config".into(),
                    conf.into(),
                ]
            },
            // Caddy keeps its state below $HOME / $XDG_DATA_HOME: the test dir's.
            env: Some(&|dir| {
                let d = dir.display().to_string();
                vec![
                    ("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into()),
                    ("HOME".into(), d.clone()),
                    ("XDG_DATA_HOME".into(), format!("{d}/data")),
                    ("XDG_CONFIG_HOME".into(), format!("{d}/config")),
                ]
            }),
            logs: &["error.log"],
            stop: Stop::Kill,
        },
    )
}
