//! A real nginx in the foreground (`daemon off; master_process off;`) with
//! its config, logs and temp paths inside the test dir, on a free port
//! (run by [`WebServer`]): configured by [`NginxOpts`] for most tests, or
//! with Debian's own PHP snippet for the web-server matrix ([`start_sites`]).

use super::webserver::{ConfigFn, Launch, Site, Stop, WebServer};
use super::{TestDir, DOKUWIKI_ROOT, NGINX_BIN};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const NGINX_HINT: &str =
    "install it with `apt-get install nginx` (or run `make test`, which does it)";
/// Debian's PHP snippet for nginx.
pub const DEBIAN_SNIPPET: &str = "/etc/nginx/snippets/fastcgi-php.conf";
const DEBIAN_FASTCGI_CONF: &str = "/etc/nginx/fastcgi.conf";

#[derive(Clone, Debug, Default)]
pub struct NginxOpts {
    /// Upstream server as nginx writes it: `unix:/path`, `127.0.0.1:9000`, `[::1]:9000`.
    /// `Stack` fills it with the first pool's address when left empty.
    pub upstream: Option<String>,
    /// `keepalive 8;` in the upstream and `fastcgi_keep_conn on;`.
    pub keepalive: bool,
    /// `fastcgi_bind ADDRESS;` (source address of nginx's connections to the upstream).
    pub bind: Option<String>,
    /// Document root; default: the test's docroot.
    pub root: Option<PathBuf>,
    /// Name of the sub directory for this instance (several nginx in one test).
    pub name: Option<String>,
    /// `fastcgi_request_buffering off;`: the body goes to FastCGI as it
    /// arrives (a chunked body then has no CONTENT_LENGTH).
    pub request_buffering_off: bool,
    /// Leave out `try_files $uri =404;`: nginx passes requests for missing
    /// scripts on to FastCGI.
    pub no_try_files: bool,
    /// The location of Debian's `snippets/fastcgi-php.conf`: `~ [^/]\.php(/|$)`
    /// split by `fastcgi_split_path_info`, with PATH_INFO passed on
    /// (`/server_vars.php/foo/bar` runs server_vars.php, PATH_INFO `/foo/bar`).
    pub path_info: bool,
    /// php-fpm's usual status and ping location, `location ~
    /// ^/(status|ping)$`, passed to FastCGI without `try_files` (the
    /// paths are no files): `SCRIPT_NAME` is `/status` or `/ping`.
    pub status: bool,
    /// Within the plain `location ~ \.php$`: `fastcgi_split_path_info
    /// ^(.+?\.php)(/.*)$;` and `fastcgi_param PATH_INFO
    /// $fastcgi_path_info;` (case C17's configuration, the classic upload
    /// hole when combined with `no_try_files`).
    pub split_path_info: bool,
    /// The pool is chrooted into `root`: SCRIPT_FILENAME is
    /// `$fastcgi_script_name` and DOCUMENT_ROOT `/`, the paths inside the
    /// chroot (as php-fpm's `chroot` wants them); nginx still checks the
    /// script under `root`.
    pub chroot: bool,
    /// More `server` lines of the upstream, after `upstream`, as nginx
    /// writes them (`10.0.0.2:9000`); with them, `fastcgi_next_upstream
    /// error timeout` is written out (nginx's default).
    pub more_servers: Vec<String>,
}

impl NginxOpts {
    /// One more server of the upstream (see [`NginxOpts::more_servers`]).
    pub fn server(mut self, u: impl Into<String>) -> Self {
        self.more_servers.push(u.into());
        self
    }
    pub fn upstream(mut self, u: impl Into<String>) -> Self {
        self.upstream = Some(u.into());
        self
    }
    pub fn keepalive(mut self) -> Self {
        self.keepalive = true;
        self
    }
    pub fn bind(mut self, addr: &str) -> Self {
        self.bind = Some(addr.into());
        self
    }
    pub fn root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = Some(root.into());
        self
    }
    pub fn chroot(mut self, root: impl Into<PathBuf>) -> Self {
        self.chroot = true;
        self.root(root)
    }
    pub fn dokuwiki(self) -> Self {
        self.root(DOKUWIKI_ROOT)
    }
    pub fn name(mut self, n: &str) -> Self {
        self.name = Some(n.into());
        self
    }
    pub fn request_buffering_off(mut self) -> Self {
        self.request_buffering_off = true;
        self
    }
    pub fn no_try_files(mut self) -> Self {
        self.no_try_files = true;
        self
    }
    pub fn status(mut self) -> Self {
        self.status = true;
        self
    }
    pub fn path_info(mut self) -> Self {
        self.path_info = true;
        self
    }
    pub fn split_path_info(mut self) -> Self {
        self.split_path_info = true;
        self
    }
}

/// A running nginx (see [`NginxOpts`]).
pub struct Nginx {
    server: WebServer,
    pub port: u16,
    pub dir: PathBuf,
}

/// How nginx is run: `-p DIR -c CONF`, its logs in DIR.
fn launch<'a>(config: ConfigFn<'a>, ports: usize) -> Launch<'a> {
    Launch {
        name: "nginx",
        bin: NGINX_BIN,
        hint: NGINX_HINT,
        conf_file: "nginx.conf",
        ports,
        config,
        args: &|dir, conf| vec!["-p".into(), dir.into(), "-c".into(), conf.into()],
        env: None,
        logs: &["error.log", "access.log"],
        stop: Stop::Kill,
    }
}

impl Nginx {
    pub fn start(t: &TestDir, opts: NginxOpts) -> Nginx {
        let name = opts.name.clone().unwrap_or_else(|| "nginx".into());
        let server = WebServer::start(
            t,
            &name,
            &launch(&|dir, ports| config(dir, ports[0], t, &opts), 1),
        );
        Nginx {
            port: server.port(),
            dir: server.dir.clone(),
            server,
        }
    }

    pub fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    pub fn error_log(&self) -> String {
        self.server.read("error.log")
    }

    pub fn access_log(&self) -> String {
        self.server.read("access.log")
    }
}

/// nginx in front of each site on a port of its own, each `server` as
/// Debian's default site enables PHP, with the `location` of nginx's PHP
/// FastCGI example so that `/script.php/extra/path` reaches PHP too:
///
/// ```text
/// location ~ [^/]\.php(/|$) {
///     include snippets/fastcgi-php.conf;
///     fastcgi_pass unix:SOCK;
/// }
/// ```
///
/// Debian's own files are included (the snippet splits PATH_INFO, answers
/// 404 itself for a missing script with `try_files`, and includes
/// `fastcgi.conf`, found beside nginx.conf through a link); only
/// `client_max_body_size` is raised (to 100m) for the 20 MiB upload.
pub fn start_sites(t: &TestDir, sites: &[Site]) -> WebServer {
    for f in [DEBIAN_SNIPPET, DEBIAN_FASTCGI_CONF] {
        if !Path::new(f).is_file() {
            panic!("{f} is missing: Debian's nginx-common ships it; {NGINX_HINT}");
        }
    }
    let dir = t.join("nginx-sites");
    std::fs::create_dir_all(&dir).unwrap();
    // `include fastcgi.conf;` in the snippet is relative to nginx.conf's directory.
    let _ = std::os::unix::fs::symlink(DEBIAN_FASTCGI_CONF, dir.join("fastcgi.conf"));
    let config = |dir: &Path, ports: &[u16]| {
        let d = dir.display();
        let mut s = String::new();
        writeln!(s, "daemon off;\nmaster_process off;\nworker_processes 1;").unwrap();
        writeln!(s, "pid {d}/nginx.pid;\nerror_log {d}/error.log info;").unwrap();
        writeln!(s, "events {{ worker_connections 1024; }}\nhttp {{").unwrap();
        writeln!(
            s,
            "  include /etc/nginx/mime.types;\n  access_log {d}/access.log;"
        )
        .unwrap();
        for p in ["client_body", "fastcgi", "proxy", "uwsgi", "scgi"] {
            writeln!(s, "  {p}_temp_path {d}/{p}_temp;").unwrap();
        }
        writeln!(s, "  client_max_body_size 100m;").unwrap();
        for (port, site) in ports.iter().zip(sites) {
            writeln!(s, "  server {{\n    listen 127.0.0.1:{port};").unwrap();
            writeln!(s, "    root {};\n    index index.php;", site.root.display()).unwrap();
            writeln!(s, "    location ~ [^/]\\.php(/|$) {{").unwrap();
            writeln!(s, "      include {DEBIAN_SNIPPET};").unwrap();
            writeln!(s, "      fastcgi_pass {};", site.upstream.nginx()).unwrap();
            writeln!(s, "    }}\n  }}").unwrap();
        }
        writeln!(s, "}}").unwrap();
        s
    };
    WebServer::start(t, "nginx-sites", &launch(&config, sites.len()))
}

fn config(dir: &Path, port: u16, t: &TestDir, o: &NginxOpts) -> String {
    let d = dir.display();
    let root = o.root.clone().unwrap_or_else(|| t.docroot());
    let upstream = o
        .upstream
        .as_deref()
        .expect("NginxOpts.upstream is not set");
    let mut s = String::new();
    writeln!(s, "daemon off;\nmaster_process off;\nworker_processes 1;").unwrap();
    writeln!(s, "pid {d}/nginx.pid;\nerror_log {d}/error.log info;").unwrap();
    writeln!(s, "events {{ worker_connections 1024; }}").unwrap();
    writeln!(s, "http {{").unwrap();
    writeln!(s, "  access_log {d}/access.log;").unwrap();
    for p in ["client_body", "fastcgi", "proxy", "uwsgi", "scgi"] {
        writeln!(s, "  {p}_temp_path {d}/{p}_temp;").unwrap();
    }
    writeln!(s, "  client_max_body_size 100m;").unwrap();
    writeln!(s, "  default_type application/octet-stream;").unwrap();
    writeln!(s, "  upstream php {{\n    server {upstream};").unwrap();
    for more in &o.more_servers {
        writeln!(s, "    server {more};").unwrap();
    }
    if o.keepalive {
        writeln!(s, "    keepalive 8;").unwrap();
    }
    writeln!(s, "  }}").unwrap();
    writeln!(
        s,
        "  server {{\n    listen 127.0.0.1:{port};\n    root {};",
        root.display()
    )
    .unwrap();
    writeln!(s, "    index index.php doku.php;").unwrap();
    if o.status {
        writeln!(s, "    location ~ ^/(status|ping)$ {{").unwrap();
        writeln!(s, "      include /etc/nginx/fastcgi_params;").unwrap();
        writeln!(
            s,
            "      fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;"
        )
        .unwrap();
        writeln!(s, "      fastcgi_pass php;").unwrap();
        if o.keepalive {
            writeln!(s, "      fastcgi_keep_conn on;").unwrap();
        }
        writeln!(s, "    }}").unwrap();
    }
    if o.path_info {
        writeln!(s, "    location ~ [^/]\\.php(/|$) {{").unwrap();
        writeln!(s, "      fastcgi_split_path_info ^(.+?\\.php)(/.*)$;").unwrap();
        if !o.no_try_files {
            writeln!(s, "      try_files $fastcgi_script_name =404;").unwrap();
        }
        // try_files resets $fastcgi_path_info (nginx ticket 321).
        writeln!(s, "      set $path_info $fastcgi_path_info;").unwrap();
        writeln!(s, "      fastcgi_param PATH_INFO $path_info;").unwrap();
    } else {
        writeln!(s, "    location ~ \\.php$ {{").unwrap();
        if !o.no_try_files {
            writeln!(s, "      try_files $uri =404;").unwrap();
        }
        if o.split_path_info {
            writeln!(s, "      fastcgi_split_path_info ^(.+?\\.php)(/.*)$;").unwrap();
            writeln!(s, "      fastcgi_param PATH_INFO $fastcgi_path_info;").unwrap();
        }
    }
    if o.chroot {
        // /etc/nginx/fastcgi_params without DOCUMENT_ROOT (a repeated
        // fastcgi_param is sent twice).
        for (k, v) in [
            ("QUERY_STRING", "$query_string"),
            ("REQUEST_METHOD", "$request_method"),
            ("CONTENT_TYPE", "$content_type"),
            ("CONTENT_LENGTH", "$content_length"),
            ("SCRIPT_NAME", "$fastcgi_script_name"),
            ("REQUEST_URI", "$request_uri"),
            ("DOCUMENT_URI", "$document_uri"),
            ("DOCUMENT_ROOT", "/"),
            ("SERVER_PROTOCOL", "$server_protocol"),
            ("REQUEST_SCHEME", "$scheme"),
            ("GATEWAY_INTERFACE", "CGI/1.1"),
            ("SERVER_SOFTWARE", "nginx/$nginx_version"),
            ("REMOTE_ADDR", "$remote_addr"),
            ("REMOTE_PORT", "$remote_port"),
            ("SERVER_ADDR", "$server_addr"),
            ("SERVER_PORT", "$server_port"),
            ("SERVER_NAME", "$server_name"),
            ("REDIRECT_STATUS", "200"),
            ("SCRIPT_FILENAME", "$fastcgi_script_name"),
        ] {
            writeln!(s, "      fastcgi_param {k} {v};").unwrap();
        }
    } else {
        writeln!(s, "      include /etc/nginx/fastcgi_params;").unwrap();
        writeln!(
            s,
            "      fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;"
        )
        .unwrap();
    }
    writeln!(s, "      fastcgi_pass php;").unwrap();
    writeln!(s, "      fastcgi_read_timeout 120s;").unwrap();
    if !o.more_servers.is_empty() {
        writeln!(s, "      fastcgi_next_upstream error timeout;").unwrap();
    }
    if o.keepalive {
        writeln!(s, "      fastcgi_keep_conn on;").unwrap();
    }
    if o.request_buffering_off {
        writeln!(s, "      fastcgi_request_buffering off;").unwrap();
    }
    if let Some(b) = &o.bind {
        writeln!(s, "      fastcgi_bind {b};").unwrap();
    }
    writeln!(s, "    }}\n  }}\n}}").unwrap();
    s
}
