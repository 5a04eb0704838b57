//! A real h2o 2.2 (Debian's h2o) in the foreground, with its config, pid
//! file and logs inside the test dir, one port per site (run by
//! [`WebServer`]). Each site is the PHP setup of h2o's documentation
//! (`file.custom-handler`, FastCGI directives):
//!
//! ```yaml
//! hosts:
//!   "127.0.0.1:PORT":
//!     listen: {host: 127.0.0.1, port: PORT}
//!     paths:
//!       "/":
//!         file.dir: ROOT
//!         file.custom-handler:
//!           extension: .php
//!           fastcgi.connect:
//!             port: SOCK
//!             type: unix
//! ```
//!
//! The file handler serves a `.php` file that exists through FastCGI (and
//! `/script.php/extra/path` with PATH_INFO); anything else it answers itself.
//! Started as root, h2o runs as `www-data` (`user:`), as on a Debian
//! server, so that it can reach the pools' sockets as the web server does.

use super::webserver::{Launch, Site, Stop, WebServer};
use super::TestDir;
use std::fmt::Write as _;
use std::path::Path;

pub const H2O_BIN: &str = "/usr/bin/h2o";
const H2O_HINT: &str = "install it with `apt-get install h2o` (or run `make test`, which does it)";

/// h2o in front of each site on a port of its own (see the module's comment).
pub fn start_sites(t: &TestDir, sites: &[Site]) -> WebServer {
    let config = |dir: &Path, ports: &[u16]| {
        let d = dir.display();
        let mut s = String::new();
        // No pid file: h2o writes it after it became www-data.
        writeln!(s, "user: www-data").unwrap();
        writeln!(s, "error-log: {d}/error.log\naccess-log: {d}/access.log").unwrap();
        writeln!(s, "hosts:").unwrap();
        for (port, site) in ports.iter().zip(sites) {
            writeln!(s, "  \"127.0.0.1:{port}\":").unwrap();
            writeln!(s, "    listen:\n      host: 127.0.0.1\n      port: {port}").unwrap();
            writeln!(s, "    paths:\n      \"/\":").unwrap();
            writeln!(s, "        file.dir: {}", site.root.display()).unwrap();
            writeln!(s, "        file.custom-handler:\n          extension: .php").unwrap();
            writeln!(s, "          fastcgi.connect:").unwrap();
            writeln!(s, "            port: {}", site.socket().display()).unwrap();
            writeln!(s, "            type: unix").unwrap();
        }
        s
    };
    WebServer::start(
        t,
        "h2o",
        &Launch {
            name: "h2o",
            bin: H2O_BIN,
            hint: H2O_HINT,
            conf_file: "h2o.conf",
            ports: sites.len(),
            config: &config,
            args: &|_, conf| vec!["-c".into(), conf.into()],
            env: None,
            logs: &["error.log", "access.log"],
            stop: Stop::Kill,
        },
    )
}
