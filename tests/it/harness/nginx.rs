//! A real nginx in the foreground (`daemon off; master_process off;`) with
//! its config, logs and temp paths inside the test dir, on a free port.

use super::{free_port, tcp_connectable, TestDir, DOKUWIKI_ROOT, NGINX_BIN};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

pub struct Nginx {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
}

impl Nginx {
    pub fn start(t: &TestDir, opts: NginxOpts) -> Nginx {
        let name = opts.name.clone().unwrap_or_else(|| "nginx".into());
        let dir = t.join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut last_err = String::new();
        // A free port can be taken by a parallel test between our probe and
        // nginx's bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let conf = config(&dir, port, t, &opts);
            let conf_path = dir.join("nginx.conf");
            std::fs::write(&conf_path, conf).unwrap();
            let out = std::fs::File::create(dir.join("nginx.out")).unwrap();
            let child = Command::new(NGINX_BIN)
                .arg("-p")
                .arg(&dir)
                .arg("-c")
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot run {NGINX_BIN}: {e}; install it with `apt-get install nginx`")
                });
            let mut n = Nginx {
                child: Some(child),
                port,
                dir: dir.clone(),
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let t0 = Instant::now();
            loop {
                if let Some(st) = n.child.as_mut().unwrap().try_wait().unwrap() {
                    n.child = None;
                    last_err = format!(
                        "nginx exited ({st}):\n{}\n{}",
                        std::fs::read_to_string(dir.join("nginx.out")).unwrap_or_default(),
                        n.error_log()
                    );
                    break;
                }
                if tcp_connectable(addr) {
                    return n;
                }
                if t0.elapsed() > Duration::from_secs(20) {
                    panic!(
                        "nginx does not answer on {addr} after 20 s:\n{}",
                        n.error_log()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if !last_err.contains("Address already in use") {
                break;
            }
        }
        panic!("cannot start nginx: {last_err}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- nginx error log ({}) ----\n{}",
                self.dir.display(),
                self.error_log()
            );
        }
    }
}

fn config(dir: &std::path::Path, port: u16, t: &TestDir, o: &NginxOpts) -> String {
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
