//! Issue 11: every common web server, tested for real. Each server runs as
//! its documentation or Debian's default snippet configures it for php-fpm
//! (see [`Kind`] and each harness file), with two sites: one in front of
//! php-fpm 8.2, one in front of fpmd, configured alike on the same
//! document root. Every cell of the matrix (server × what is asked) is a
//! test of its own that sends the same request to both sites and asserts
//! that fpmd's answer (status, the headers that matter, the body) is
//! php-fpm's, and that php-fpm's is the one the cell is about (so that a
//! server that never reached PHP cannot pass by accident).
//!
//! Test names: `webservers::<server>::<cell>`, servers `nginx`, `apache`,
//! `caddy`, `lighttpd_check_local`, `lighttpd_no_check_local`, `h2o`;
//! cells `get`, `post_20mib`, `chunked_post`, `response_2mib`, `path_info`,
//! `status_and_headers`, `missing_script`, `dokuwiki`.

use crate::harness::fcgi::noise;
use crate::harness::phpfpm::{PhpFpm, PhpFpmOpts};
use crate::harness::*;
use std::path::PathBuf;

/// The headers compared between the two backends (lower case); others
/// (Date, Server, X-Powered-By's version, …) may differ.
const HEADERS: [&str; 6] = [
    "content-type",
    "content-length",
    "transfer-encoding",
    "location",
    "set-cookie",
    "x-a",
];

/// One answer as the cells compare it: status, the headers of [`HEADERS`]
/// in order (repeated ones kept), and the body (or its length and hash
/// when it is over 64 KiB).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    headers: Vec<String>,
    body: String,
}

impl Answer {
    fn of(r: &Resp) -> Answer {
        let headers = HEADERS
            .iter()
            .flat_map(|h| {
                r.headers_all(h)
                    .into_iter()
                    .map(move |v| format!("{h}: {v}"))
            })
            .collect();
        let body = if r.body.len() > 64 << 10 {
            format!("{} bytes, md5 {}", r.body.len(), md5_hex(&r.body))
        } else {
            r.text()
        };
        Answer {
            status: r.status,
            headers,
            body,
        }
    }

    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("{name}: ")))
            .collect()
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "    status {}", self.status)?;
        for h in &self.headers {
            writeln!(f, "    {h}")?;
        }
        for l in self.body.lines() {
            writeln!(f, "    | {l}")?;
        }
        Ok(())
    }
}

/// php-fpm and fpmd, each behind its own site of one web server.
struct Pair {
    kind: Kind,
    server: WebServer,
    agent: ureq::Agent,
    // Dropped after the server, in this order.
    fpmd: Fpmd,
    _fpm: PhpFpm,
    _dir: TestDir,
}

/// The site of each backend in the server's configuration.
const PHP_FPM: usize = 0;
const FPMD: usize = 1;

impl Pair {
    /// Both backends (two children each, post_max_size raised), then the
    /// server with both sites on `root` (default: the test's docroot).
    fn start(kind: Kind, root: Option<PathBuf>) -> Pair {
        let dir = TestDir::new();
        let fpm = PhpFpm::start_with(
            &dir,
            PhpFpmOpts::default()
                .max_children(2)
                .line(format!("php_admin_value[post_max_size] = {POST_MAX_SIZE}")),
        );
        let fpmd = Fpmd::start(
            &dir,
            FpmdConfig::new().pool(
                Pool::www()
                    .max_children(2)
                    .line(format!("php_admin_value.post_max_size = {POST_MAX_SIZE:?}")),
            ),
        );
        let root = root.unwrap_or_else(|| dir.docroot());
        let sites = [Site::new(&root, fpm.addr()), Site::new(&root, fpmd.addr(0))];
        let server = kind.start(&dir, &sites);
        Pair {
            kind,
            server,
            agent: http::agent(),
            fpmd,
            _fpm: fpm,
            _dir: dir,
        }
    }

    /// The same request to both sites: (php-fpm's answer, fpmd's).
    fn both(
        &self,
        what: &str,
        req: impl Fn(&ureq::Agent, &str) -> Result<Resp, String>,
    ) -> (Answer, Answer) {
        let one = |site: usize, name: &str| {
            let base = self.server.url_at(site, "");
            let r = req(&self.agent, &base).unwrap_or_else(|e| {
                panic!(
                    "{:?}, {what} through {name}'s site ({base}): {e}",
                    self.kind
                )
            });
            Answer::of(&r)
        };
        (one(PHP_FPM, "php-fpm"), one(FPMD, "fpmd"))
    }

    fn get_both(&self, path: &str) -> (Answer, Answer) {
        self.both(&format!("GET {path}"), |a, base| {
            http::try_get_with(a, &format!("{base}{path}"))
        })
    }

    /// Panics unless php-fpm's answer passes `check` (the cell's point)
    /// and fpmd's is the same as php-fpm's.
    fn assert(
        &self,
        what: &str,
        (fpm, ours): (Answer, Answer),
        check: impl Fn(&Answer) -> Result<(), String>,
    ) {
        eprintln!("{:?}, {what}: php-fpm:\n{fpm}", self.kind);
        if let Err(e) = check(&fpm) {
            panic!(
                "{:?}, {what}: php-fpm itself does not give the answer this test is about ({e}):\n{fpm}\
                 (fpmd:\n{ours})",
                self.kind
            );
        }
        assert!(
            ours == fpm,
            "{:?}, {what}: fpmd's answer differs from php-fpm's behind the same server\n  php-fpm:\n{fpm}  fpmd:\n{ours}\
             fpmd's log:\n{}",
            self.kind,
            self.fpmd.log()
        );
    }
}

/// `Ok` when `cond`, else `Err(msg)`.
fn ensure(cond: bool, msg: &str) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg.to_string())
    }
}

fn get(kind: Kind) {
    let p = Pair::start(kind, None);
    let path = "/hello.php?name=a%20b&x=1";
    p.assert("GET of a script", p.get_both(path), |a| {
        ensure(a.status == 200, "status 200")?;
        ensure(
            a.body == "hello a b\nQUERY_STRING=name=a%20b&x=1\n",
            "hello.php's greeting and query string",
        )
    });
}

fn post_20mib(kind: Kind) {
    let p = Pair::start(kind, None);
    let body = noise(11, POST_LEN);
    let expected = format!("{POST_LEN} {}", md5_hex(&body));
    let answers = p.both("POST of 20 MiB", |a, base| {
        http::try_post_with(a, &format!("{base}/body.php"), &body)
    });
    p.assert("POST of 20 MiB to body.php", answers, |a| {
        ensure(a.status == 200, "status 200")?;
        ensure(a.body == expected, &format!("body.php echoing {expected}"))
    });
}

/// A POST with `Transfer-Encoding: chunked` and no Content-Length (what
/// the issue asks of Caddy, asked of every server). nginx, lighttpd and
/// h2o buffer the body and send its CONTENT_LENGTH. Apache streams it
/// without CONTENT_LENGTH: PHP reads no body, under php-fpm as under fpmd.
/// Caddy 2.6.2 (Debian 12) streams it with `CONTENT_LENGTH=-1`: PHP then
/// reads STDIN to its end and on, past the empty STDIN record, so php-fpm
/// hangs until Caddy gives up (caddy#5236, fixed by buffering in Caddy
/// 2.6.3); there is no php-fpm answer to compare with, and php-fpm is not
/// asked. fpmd half-closes the child's connection at the end of STDIN
/// (README, "What fpmd sends to php-cgi"): the script reads the whole body.
/// After the upload, fpmd's site still serves (the child that read it was
/// not reused on a connection it could read on from).
fn chunked_post(kind: Kind) {
    let p = Pair::start(kind, None);
    let body = noise(12, 300_000);
    let whole = format!("{} {}", body.len(), md5_hex(&body));
    let expected = match kind {
        Kind::Apache => format!("0 {}", md5_hex(b"")),
        _ => whole,
    };
    let post = |a: &ureq::Agent, base: &str| {
        http::try_post_chunked_with(a, &format!("{base}/body.php"), &body)
    };
    let check = |a: &Answer| {
        ensure(a.status == 200, "status 200")?;
        ensure(a.body == expected, &format!("body.php echoing {expected}"))
    };
    let what = "chunked POST of 300000 bytes to body.php";
    if kind == Kind::Caddy {
        let base = p.server.url_at(FPMD, "");
        let ours = Answer::of(
            &post(&p.agent, &base).unwrap_or_else(|e| panic!("{what} through fpmd's site: {e}")),
        );
        if let Err(e) = check(&ours) {
            panic!("Caddy, {what}: fpmd does not give PHP the whole body ({e}):\n{ours}fpmd's log:\n{}", p.fpmd.log());
        }
    } else {
        p.assert(what, p.both("chunked POST", post), check);
    }
    p.assert(
        "GET after the chunked POST",
        p.get_both("/hello.php"),
        |a| {
            ensure(
                a.status == 200 && a.body.starts_with("hello world\n"),
                "hello.php",
            )
        },
    );
}

fn response_2mib(kind: Kind) {
    let p = Pair::start(kind, None);
    // big.php: line i is 1023 times chr(97 + i % 26) and "\n".
    let want: Vec<u8> = (0..2 * 1024)
        .flat_map(|i| {
            let mut l = vec![b'a' + (i % 26) as u8; 1023];
            l.push(b'\n');
            l
        })
        .collect();
    let expected = format!("{} bytes, md5 {}", want.len(), md5_hex(&want));
    p.assert("a 2 MiB response", p.get_both("/big.php?mb=2"), |a| {
        ensure(a.status == 200, "status 200")?;
        ensure(a.body == expected, &format!("big.php's {expected}"))
    });
}

/// `/server_vars.php/extra/path`: what PHP sees as PATH_INFO and
/// SCRIPT_NAME (and the rest of server_vars.php) must be php-fpm's.
fn path_info(kind: Kind) {
    let p = Pair::start(kind, None);
    let want = expected_path_info(kind);
    p.assert(
        "PATH_INFO",
        p.get_both("/server_vars.php/extra/path?q=1"),
        |a| {
            ensure(a.status == 200, "status 200")?;
            for w in want {
                ensure(a.body.lines().any(|l| l == *w), w)?;
            }
            Ok(())
        },
    );
}

/// What php-fpm shows for `/server_vars.php/extra/path` behind each
/// server's stock configuration: the same behind all of them.
fn expected_path_info(_kind: Kind) -> &'static [&'static str] {
    &["PATH_INFO=/extra/path", "SCRIPT_NAME=/server_vars.php"]
}

fn status_and_headers(kind: Kind) {
    let p = Pair::start(kind, None);
    p.assert(
        "status 418, X-A and two Set-Cookie from PHP",
        p.get_both("/headers.php"),
        |a| {
            ensure(a.status == 418, "status 418")?;
            ensure(a.header("x-a") == ["b"], "X-A: b")?;
            ensure(
                a.header("set-cookie") == ["a=1; path=/", "b=2; path=/; HttpOnly"],
                "both Set-Cookie headers, in order",
            )?;
            ensure(a.body == "teapot\n", "headers.php's body")
        },
    );
    p.assert(
        "a Location redirect from PHP",
        p.get_both("/redirect.php"),
        |a| {
            ensure(a.status == 302, "status 302")?;
            ensure(
                a.header("location") == ["/hello.php?name=redirected"],
                "Location: /hello.php?name=redirected",
            )
        },
    );
}

/// A script that does not exist. nginx (the snippet's `try_files`),
/// lighttpd with `check-local` and h2o (its file handler) answer 404
/// themselves; Apache (Debian's SetHandler, without the commented-out
/// `-f` check), Caddy (its `try_files` falls through to the `.php` path)
/// and lighttpd without `check-local` hand it on, and php-fpm answers 404
/// `File not found.`: fpmd's site must answer the same, whoever answers.
fn missing_script(kind: Kind) {
    let p = Pair::start(kind, None);
    let passed_on = matches!(
        kind,
        Kind::Apache | Kind::Caddy | Kind::Lighttpd { check_local: false }
    );
    p.assert("a missing script", p.get_both("/no-such-script.php"), |a| {
        ensure(a.status == 404, "status 404")?;
        ensure(
            (a.body == "File not found.\n") == passed_on,
            if passed_on {
                "php-fpm's `File not found.`"
            } else {
                "the web server's own 404 page"
            },
        )
    });
}

fn dokuwiki(kind: Kind) {
    require_dokuwiki();
    let p = Pair::start(kind, Some(DOKUWIKI_ROOT.into()));
    let (fpm, ours) = p.get_both("/doku.php");
    // The page carries a fresh security token and session: compare its title.
    let title = |a: &Answer| Answer {
        body: a
            .body
            .split_once("<title>")
            .and_then(|(_, rest)| rest.split_once("</title>"))
            .map(|(t, _)| format!("title {t:?}"))
            .unwrap_or_else(|| {
                format!(
                    "no <title>: {}",
                    a.body.chars().take(300).collect::<String>()
                )
            }),
        headers: a
            .header("content-type")
            .iter()
            .map(|v| format!("content-type: {v}"))
            .collect(),
        status: a.status,
    };
    p.assert("DokuWiki's start page", (title(&fpm), title(&ours)), |a| {
        ensure(a.status == 200, "status 200")?;
        ensure(a.body.contains("DokuWiki"), "DokuWiki's title")
    });
}

/// fpmd answers a missing script itself once it has the PARAMS. A web
/// server that does not keep its connection (Apache without enablereuse)
/// still sends the empty STDIN record after that; php-fpm (`fcgi_close` in
/// php-src `main/fastcgi.c`) half-closes and reads on until the web server
/// closes. fpmd closed at once, so that Apache, writing its empty STDIN
/// after fpmd had closed, failed (AH01075 "Broken pipe … sending empty
/// stdin") and answered 503 instead of php-fpm's 404; found by
/// `webservers::apache::missing_script` under load. Over a unix socket a
/// write to a closed peer fails at once: no race in this check. php-fpm
/// first, then two pools of fpmd: without and with an access log (two
/// code paths).
#[test]
fn early_answer_reads_the_rest_of_the_request() {
    use crate::harness::fcgi;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let dir = TestDir::new();
    let log = dir.join("logged.access.log");
    let fpmd = Fpmd::start(
        &dir,
        FpmdConfig::new().pool(Pool::www().max_children(1)).pool(
            Pool::new("logged")
                .max_children(1)
                .line(format!("access.log = {:?}", log.display().to_string())),
        ),
    );
    let fpm = PhpFpm::start(&dir);
    for (who, addr) in [
        ("php-fpm", fpm.addr()),
        ("fpmd", fpmd.addr(0)),
        ("fpmd with an access log", fpmd.addr(1)),
    ] {
        let Addr::Unix(sock) = addr else {
            unreachable!("the pools listen on unix sockets")
        };
        let mut c = UnixStream::connect(&sock).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let params = fcgi::params_for(&dir.docroot(), "no-such-script.php", "", "GET", 0);
        let mut head = fcgi::begin_request(1, 0);
        head.extend(fcgi::stream(fcgi::PARAMS, 1, &fcgi::encode_params(&params)));
        c.write_all(&head).unwrap();
        // The whole answer, up to fpmd's end of writing.
        let mut answer = Vec::new();
        c.read_to_end(&mut answer)
            .unwrap_or_else(|e| panic!("{who}: reading the answer: {e}"));
        let text = String::from_utf8_lossy(&answer);
        assert!(text.contains("File not found."), "{who}: {text:?}");
        // What Apache sends next: fpmd must still be reading.
        if let Err(e) = c.write_all(&fcgi::record(fcgi::STDIN, 1, &[])) {
            panic!(
                "{who} closed the connection before the web server had sent the empty \
                 STDIN record ({e}); php-fpm reads it. fpmd's log:\n{}",
                fpmd.log()
            );
        }
        c.shutdown(std::net::Shutdown::Write).unwrap();
    }
}

/// One module of tests per server, one test per cell.
macro_rules! matrix {
    ($($server:ident => $kind:expr,)*) => {$(
        mod $server {
            use crate::harness::Kind;
            const KIND: Kind = $kind;
            #[test]
            fn get() {
                super::get(KIND)
            }
            #[test]
            fn post_20mib() {
                super::post_20mib(KIND)
            }
            #[test]
            fn chunked_post() {
                super::chunked_post(KIND)
            }
            #[test]
            fn response_2mib() {
                super::response_2mib(KIND)
            }
            #[test]
            fn path_info() {
                super::path_info(KIND)
            }
            #[test]
            fn status_and_headers() {
                super::status_and_headers(KIND)
            }
            #[test]
            fn missing_script() {
                super::missing_script(KIND)
            }
            #[test]
            fn dokuwiki() {
                super::dokuwiki(KIND)
            }
        }
    )*};
}

matrix! {
    nginx => Kind::Nginx,
    apache => Kind::Apache,
    caddy => Kind::Caddy,
    lighttpd_check_local => Kind::Lighttpd { check_local: true },
    lighttpd_no_check_local => Kind::Lighttpd { check_local: false },
    h2o => Kind::H2o,
}
