//! Issue 10, the sandbox: `chroot` in a private mount namespace with PHP's
//! runtime mounted read-only, two pools as two users, `rlimit_files`,
//! `rlimit_core`, `process.priority`, `no_new_privs`, Landlock — each seen
//! from inside, by the PHP script itself, through real nginx and php-cgi.

use crate::harness::*;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The script every chrooted site holds as its `index.php` (and the
/// default docroot as `isolation_probe.php`): runs the check named by
/// `?t=` and prints its result as JSON.
const PROBE: &str = include_str!("../php/isolation_probe.php");

const EPERM: i64 = 1;

/// A site directory (`dir`/`name`) holding only `index.php` and an empty
/// `tmp/`, owned by `user`, mode `mode`.
fn make_site(dir: &Path, name: &str, owner: (u32, u32), mode: u32) -> PathBuf {
    let site = dir.join(name);
    std::fs::create_dir(&site).unwrap();
    std::fs::write(site.join("index.php"), PROBE).unwrap();
    std::fs::create_dir(site.join("tmp")).unwrap();
    for (p, m) in [
        (&site, mode),
        (&site.join("tmp"), 0o770),
        (&site.join("index.php"), 0o640),
    ] {
        std::os::unix::fs::chown(p, Some(owner.0), Some(owner.1)).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    site
}

fn ids(user: &str) -> (u32, u32) {
    let u = nix::unistd::User::from_name(user).unwrap().unwrap();
    (u.uid.as_raw(), u.gid.as_raw())
}

/// Every path under `root` with its owner, group and mode (the listing a
/// test compares before and after).
fn listing(root: &Path) -> BTreeMap<PathBuf, (u32, u32, u32)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let md = std::fs::symlink_metadata(&p).unwrap();
        out.insert(
            p.strip_prefix(root).unwrap().to_path_buf(),
            (md.uid(), md.gid(), md.mode()),
        );
        if md.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
        }
    }
    out
}

struct Site {
    nginx: Nginx,
}

impl Site {
    fn get(&self, query: &str) -> serde_json::Value {
        let r = get(&self.nginx.url(&format!("/index.php?{query}")));
        assert_eq!(r.status, 200, "{query}: {}", r.text());
        serde_json::from_str(&r.text()).unwrap_or_else(|e| panic!("{query}: {e}: {}", r.text()))
    }
}

fn chroot_pool(name: &str, user: (&str, &str), site: &Path) -> Pool {
    Pool::new(name)
        .user(user.0, user.1)
        .max_children(2)
        .lines(&[
            &format!("chroot = {:?}", site.display().to_string()),
            r#"php_admin_value."date.timezone" = "Europe/Paris""#,
        ])
}

fn start_nginx(dir: &TestDir, fpmd: &Fpmd, i: usize, site: &Path) -> Site {
    let opts = NginxOpts::default()
        .chroot(site)
        .name(&format!("nginx{i}"))
        .upstream(fpmd.upstream(i));
    Site {
        nginx: Nginx::start(dir, opts),
    }
}

/// Must show 1: a pool chrooted into a directory holding only `index.php`
/// and an empty `tmp/`.
#[test]
fn chroot_serves_sees_only_the_site_and_a_read_only_runtime() {
    let dir = TestDir::new();
    let www = ids("www-data");
    let site = make_site(dir.path(), "site", www, 0o750);
    let other = make_site(dir.path(), "other", www, 0o750);
    std::fs::write(other.join("secret.txt"), "other site's secret").unwrap();
    let before = listing(&site);
    let fpmd = Fpmd::start(
        &dir,
        FpmdConfig::new().pool(chroot_pool("www", ("www-data", "www-data"), &site)),
    );
    let s = start_nginx(&dir, &fpmd, 0, &site);

    // The script is /index.php, its cwd /, and time zones work.
    let w = s.get("t=where");
    assert_eq!(w[0], "/index.php", "{w}");
    assert_eq!(w[1], "/index.php", "{w}");
    assert_eq!(w[2], "/", "{w}");
    assert_eq!(w[4], "Europe/Paris", "{w}");
    let date = w[3].as_str().unwrap();
    assert!(
        date.ends_with("+01:00") || date.ends_with("+02:00"),
        "date('c') in Europe/Paris: {date}"
    );

    // fpmd's SAPI works in the chroot: fpm_get_status() reads the pool's
    // socket mounted there; fastcgi_finish_request() is defined (issue 22).
    let sapi = s.get("t=sapi");
    assert_eq!(sapi[0], "www", "{sapi}");
    assert!(sapi[1].as_u64().unwrap() >= 1, "{sapi}");
    assert_eq!(sapi[2], true, "{sapi}");

    // What / holds: the site's entries and the runtime, nothing else.
    let root: Vec<String> = serde_json::from_value(s.get("t=ls&path=/")).unwrap();
    for name in ["index.php", "tmp", "usr", "etc", "dev", "lib64"] {
        assert!(root.contains(&name.to_string()), "/ lacks {name}: {root:?}");
    }
    for name in ["root", "home", "proc", "var", "run", "srv", "other"] {
        assert!(!root.contains(&name.to_string()), "/ has {name}: {root:?}");
    }
    let etc: Vec<String> = serde_json::from_value(s.get("t=ls&path=/etc")).unwrap();
    assert!(
        !etc.contains(&"shadow".to_string()) && !etc.contains(&"passwd".to_string()),
        "{etc:?}"
    );
    assert!(etc.contains(&"php".to_string()), "{etc:?}");

    // Nothing outside: /etc/shadow, the other site (by its host path too).
    assert_eq!(s.get("t=read&path=/etc/shadow"), false);
    let other_secret = other.join("secret.txt").display().to_string();
    assert_eq!(s.get(&format!("t=read&path={other_secret}")), false);
    assert_eq!(s.get("t=read&path=/proc/self/status"), false);

    // The runtime is read-only: the binary's dir, the extension dir, ini.
    for p in [
        "/usr/bin/x",
        "/usr/lib/php/x",
        "/etc/php/x",
        "/etc/hosts",
        "/new-top-level-file",
    ] {
        assert_eq!(s.get(&format!("t=write&path={p}")), false, "wrote {p}");
    }
    // Devices work.
    assert_eq!(s.get("t=dev"), serde_json::json!([16, 1, 4]));

    // /tmp is the site's tmp/; the site's files are writable by the site.
    assert_eq!(s.get("t=write&path=/tmp/from-php&data=hello"), 5);
    assert_eq!(
        std::fs::read_to_string(site.join("tmp/from-php")).unwrap(),
        "hello"
    );
    assert_eq!(s.get("t=read&path=/tmp/from-php"), "hello");

    drop(s);
    drop(fpmd);
    // The site is unchanged but for what the script wrote.
    let mut after = listing(&site);
    let written = after.remove(Path::new("tmp/from-php"));
    assert!(written.is_some());
    assert_eq!(after, before, "the site directory changed");
}

/// Must show 2: two pools as two users, each with its own 0750 site
/// owned by its user: neither reads the other's files nor signals the
/// other's children. With `chroot`, the other site is not even there; without,
/// the file modes keep it out.
fn two_users(chroot: bool, shared: bool) {
    let dir = TestDir::new();
    let a = make_site(dir.path(), "a", ids("www-data"), 0o750);
    let b = make_site(dir.path(), "b", ids("nobody"), 0o750);
    std::fs::write(b.join("secret.txt"), "b's secret").unwrap();
    std::fs::write(a.join("secret.txt"), "a's secret").unwrap();
    let pool = |name: &str, user: (&str, &str), site: &Path| {
        if chroot {
            chroot_pool(name, user, site)
        } else {
            let p = Pool::new(name).user(user.0, user.1).max_children(2);
            match shared {
                true => p.line("pm.spawn = \"shared\""),
                false => p,
            }
        }
    };
    let fpmd = Fpmd::start(
        &dir,
        FpmdConfig::new()
            .pool(pool("a", ("www-data", "www-data"), &a))
            .pool(pool("b", ("nobody", "nogroup"), &b)),
    );
    let nginx = |i: usize, site: &Path| {
        if chroot {
            start_nginx(&dir, &fpmd, i, site)
        } else {
            let opts = NginxOpts::default()
                .root(site)
                .name(&format!("nginx{i}"))
                .upstream(fpmd.upstream(i));
            Site {
                nginx: Nginx::start(&dir, opts),
            }
        }
    };
    let sa = nginx(0, &a);
    let sb = nginx(1, &b);
    let own = |site: &Path| {
        if chroot {
            "/secret.txt".to_string()
        } else {
            site.join("secret.txt").display().to_string()
        }
    };
    assert_eq!(sa.get(&format!("t=read&path={}", own(&a))), "a's secret");
    assert_eq!(sb.get(&format!("t=read&path={}", own(&b))), "b's secret");
    for (s, other) in [(&sa, &b), (&sb, &a)] {
        let p = other.join("secret.txt").display().to_string();
        assert_eq!(s.get(&format!("t=read&path={p}")), false, "read {p}");
        let p = other.display().to_string();
        assert_eq!(s.get(&format!("t=ls&path={p}")), false, "listed {p}");
    }
    let pid_a = sa.get("t=pid").as_i64().unwrap();
    let pid_b = sb.get("t=pid").as_i64().unwrap();
    assert_eq!(
        sa.get(&format!("t=kill&pid={pid_b}")),
        serde_json::json!([false, EPERM])
    );
    assert_eq!(
        sb.get(&format!("t=kill&pid={pid_a}")),
        serde_json::json!([false, EPERM])
    );
    // Its own pid it may signal (0: a check only; posix_get_last_error()
    // keeps the last failure, so only the result counts).
    assert_eq!(sa.get(&format!("t=kill&pid={pid_a}"))[0], true);
    if shared {
        // Forked by one parent, which neither may signal.
        let parent = |pid: i64| i64::from(procs::info(pid as i32).unwrap().ppid);
        let root = parent(pid_a);
        assert_eq!(parent(pid_b), root, "one shared parent");
        assert_ne!(root, i64::from(fpmd.pid()));
        for s in [&sa, &sb] {
            assert_eq!(
                s.get(&format!("t=kill&pid={root}")),
                serde_json::json!([false, EPERM])
            );
        }
    }
}

#[test]
fn two_pools_two_users_cannot_reach_each_other() {
    two_users(true, false);
}

#[test]
fn two_pools_two_users_cannot_reach_each_other_without_chroot() {
    two_users(false, false);
}

/// The same, the two pools' children forked by one shared php-cgi parent
/// (`pm.spawn = "shared"`, which runs as root): each child is its pool's
/// user, and neither can signal the parent.
#[test]
fn two_pools_two_users_cannot_reach_each_other_under_a_shared_parent() {
    two_users(false, true);
}

/// `rlimit_files`, `rlimit_core`, `process.priority`, `no_new_privs`,
/// as the child reads them from /proc/self.
#[test]
fn rlimits_priority_no_new_privs_seen_from_inside() {
    rlimits_priority_no_new_privs(None);
}

/// The same for a child of a shared php-cgi parent, which applies them
/// after its fork (`pm.spawn = "shared"`).
#[test]
fn rlimits_priority_no_new_privs_seen_from_inside_shared() {
    rlimits_priority_no_new_privs(Some("pm.spawn = \"shared\""));
}

fn rlimits_priority_no_new_privs(spawn: Option<&str>) {
    let mut lines = vec![
        "rlimit_files = 777",
        r#"rlimit_core = "unlimited""#,
        "process.priority = 7",
        "no_new_privs = true",
    ];
    lines.extend(spawn);
    let pool = Pool::www().max_children(1).lines(&lines);
    let s = Stack::start(pool);
    let read = |f: &str| {
        let r = get(&s.url(&format!("/isolation_probe.php?t=proc&f={f}")));
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_str::<String>(&r.text()).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
    };
    let status = read("status");
    assert!(
        status
            .lines()
            .any(|l| l.split_whitespace().eq(["NoNewPrivs:", "1"])),
        "{status}"
    );
    let limits = read("limits");
    let row = |name: &str| {
        limits
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name}: {limits}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        row("Max open files").starts_with("Max open files 777 777 files"),
        "{limits}"
    );
    assert!(
        row("Max core file size").starts_with("Max core file size unlimited unlimited"),
        "{limits}"
    );
    let stat = read("stat");
    // Field 19 is the nice value; comm (field 2) is in parentheses.
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let nice = after_comm.split_whitespace().nth(16).unwrap();
    assert_eq!(nice, "7", "{stat}");
}

/// Issue 20, item 2: by default a setgid helper run from a script gets
/// its group, as under php-fpm (PHP's `mail()` runs sendmail, whose
/// Postfix `postdrop` is setgid `postdrop`, exim4 setuid root):
/// `no_new_privs` is off unless asked for.
#[test]
fn setgid_helper_keeps_its_group_as_under_php_fpm() {
    let t = TestDir::new();
    let helper = t.join("id-mail");
    std::fs::copy("/usr/bin/id", &helper).unwrap();
    let mail = nix::unistd::Group::from_name("mail")
        .unwrap()
        .expect("group mail");
    nix::unistd::chown(&helper, Some(nix::unistd::Uid::from_raw(0)), Some(mail.gid)).unwrap();
    chmod(&helper, 0o2755);
    let query = format!("bin={}", helper.display());
    let egid = |addr: std::net::SocketAddr| {
        let (status, body) = fcgi::get_script(addr, &t.docroot(), "setid.php", &query);
        assert_eq!(status, 200, "{body}");
        body
    };
    let fpm = PhpFpm::start_with(&t, PhpFpmOpts::default().tcp(free_port()));
    let theirs = egid(fpm.addr().tcp());
    drop(fpm);
    assert!(
        theirs.contains("egid=8(mail)"),
        "php-fpm's script does not get the helper's group (is {} mounted nosuid?): {theirs}",
        t.path().display()
    );
    let port = free_port();
    let cfg = |extra: &[&str]| {
        FpmdConfig::new().pool(
            Pool::www()
                .tcp(format!("127.0.0.1:{port}"))
                .max_children(1)
                .lines(extra),
        )
    };
    let f = Fpmd::start(&t, cfg(&[]));
    let ours = egid(f.addr(0).tcp());
    assert!(
        ours.contains("egid=8(mail)"),
        "fpmd: {ours}; php-fpm: {theirs}"
    );
    drop(f);
    // Hardened on request: the helper runs with the script's group only.
    let f = Fpmd::start(&t, cfg(&["no_new_privs = true"]));
    let hardened = egid(f.addr(0).tcp());
    assert!(
        !hardened.contains("(mail)") && hardened.contains("gid=33(www-data)"),
        "{hardened}"
    );
}

/// Landlock without chroot: the script reads only `landlock.read` (its
/// docroot) and the runtime, writes only `landlock.write` (`docroot/run`).
#[test]
fn landlock_limits_reads_and_writes() {
    landlock_limits(None);
}

/// The same for a child of a shared php-cgi parent, which restricts
/// itself after its fork (`pm.spawn = "shared"`).
#[test]
fn landlock_limits_reads_and_writes_shared() {
    landlock_limits(Some("pm.spawn = \"shared\""));
}

fn landlock_limits(spawn: Option<&str>) {
    let dir = TestDir::new();
    let docroot = dir.docroot();
    let run = docroot.join("run");
    std::fs::write(dir.path().join("outside.txt"), "outside").unwrap();
    chmod(&dir.path().join("outside.txt"), 0o644);
    let pool = Pool::www().max_children(1).lines(&[
        &format!("landlock.read = [{:?}]", docroot.display().to_string()),
        &format!("landlock.write = [{:?}]", run.display().to_string()),
        // opcache creates its lock file in /tmp by default.
        &format!(
            "php_admin_value.\"opcache.lockfile_path\" = {:?}",
            run.display().to_string()
        ),
        spawn.unwrap_or_default(),
    ]);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(pool));
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    let probe = |q: &str| {
        let r = get(&nginx.url(&format!("/isolation_probe.php?{q}")));
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        serde_json::from_str::<serde_json::Value>(&r.text()).unwrap()
    };
    // Readable: the docroot, the runtime (date() needs zoneinfo).
    assert!(probe("t=where")[3].is_string());
    assert!(probe(&format!("t=read&path={}/hello.php", docroot.display())).is_string());
    // Not readable though the file mode allows it: outside the lists.
    let outside = dir.path().join("outside.txt").display().to_string();
    assert_eq!(probe(&format!("t=read&path={outside}")), false);
    assert_eq!(probe("t=read&path=/etc/passwd"), false);
    // Writable only below landlock.write: not /tmp, whose mode allows it.
    assert_eq!(
        probe(&format!("t=write&path={}/landlock&data=ok", run.display())),
        2
    );
    assert_eq!(std::fs::read_to_string(run.join("landlock")).unwrap(), "ok");
    assert_eq!(probe("t=write&path=/tmp/fpmd-landlock-test"), false);
    assert!(!Path::new("/tmp/fpmd-landlock-test").exists());
    assert_eq!(probe("t=read&path=/proc/self/status"), false);
}

/// Landlock inside a chroot: paths are the child's; a site entry that is
/// mounted is still out of reach when no rule covers it.
#[test]
fn landlock_inside_a_chroot() {
    let dir = TestDir::new();
    let www = ids("www-data");
    let site = make_site(dir.path(), "site", www, 0o750);
    std::fs::create_dir(site.join("data")).unwrap();
    std::fs::write(site.join("data/secret.txt"), "secret").unwrap();
    for p in [site.join("data"), site.join("data/secret.txt")] {
        std::os::unix::fs::chown(&p, Some(www.0), Some(www.1)).unwrap();
    }
    let pool = chroot_pool("www", ("www-data", "www-data"), &site).lines(&[
        r#"landlock.read = ["/index.php"]"#,
        r#"landlock.write = ["/tmp"]"#,
    ]);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(pool));
    let s = start_nginx(&dir, &fpmd, 0, &site);
    assert_eq!(s.get("t=where")[0], "/index.php");
    assert_eq!(s.get("t=read&path=/data/secret.txt"), false);
    assert_eq!(s.get("t=write&path=/data/new"), false);
    assert_eq!(s.get("t=write&path=/tmp/ok&data=yes"), 3);
    assert_eq!(std::fs::read_to_string(site.join("tmp/ok")).unwrap(), "yes");
}

/// The value of attribute `name` in the tag text `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

/// The hidden fields of the form whose tag has `id="FORM_ID"` in `html`.
fn hidden_fields(html: &str, form_id: &str) -> Vec<(String, String)> {
    let at = html.find(&format!("id=\"{form_id}\"")).unwrap_or_else(|| {
        panic!(
            "no form {form_id}: {}",
            html.chars().take(3000).collect::<String>()
        )
    });
    let end = html[at..].find("</form>").map_or(html.len(), |e| at + e);
    let mut fields = Vec::new();
    for tag in html[at..end].split("<input").skip(1) {
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        if attr(tag, "type") == Some("hidden") {
            if let (Some(n), Some(v)) = (attr(tag, "name"), attr(tag, "value")) {
                fields.push((n.to_string(), v.replace("&amp;", "&")));
            }
        }
    }
    fields
}

/// A browser's minimum: a cookie jar, no redirect followed (so that every
/// Set-Cookie is seen).
struct Browser {
    agent: ureq::Agent,
    cookies: BTreeMap<String, String>,
}

impl Browser {
    fn new() -> Browser {
        Browser {
            agent: ureq::AgentBuilder::new()
                .redirects(0)
                .timeout(Duration::from_secs(120))
                .build(),
            cookies: BTreeMap::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// (status, body) of GET `url` (`form` empty) or POST `form`.
    fn send(&mut self, url: &str, form: &[(String, String)]) -> (u16, String) {
        let req = if form.is_empty() {
            self.agent.get(url)
        } else {
            self.agent.post(url)
        }
        .set("Cookie", &self.cookie_header());
        let r = if form.is_empty() {
            req.call()
        } else {
            let f: Vec<(&str, &str)> = form.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            req.send_form(&f)
        };
        let r = match r {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{url}: {e}"),
        };
        for c in r.all("set-cookie") {
            let pair = c.split(';').next().unwrap();
            if let Some((k, v)) = pair.split_once('=') {
                if v == "deleted" || v.is_empty() {
                    self.cookies.remove(k);
                } else {
                    self.cookies.insert(k.to_string(), v.to_string());
                }
            }
        }
        let status = r.status();
        (status, r.into_string().unwrap_or_default())
    }
}

/// Debian's DokuWiki, copied into a site directory (symlinks resolved,
/// its configuration in `conf/`, its data in `data/`), runs chrooted: a
/// user logs in (a PHP session in the chroot's private `/tmp`), opens the
/// editor and saves a page with the form's sectok; the page's text file
/// appears in the site's `data/pages`.
#[test]
fn dokuwiki_chrooted_saves_a_page() {
    require_dokuwiki();
    let dir = TestDir::new();
    let site = dir.path().join("wiki");
    let cp = |from: &str, to: &Path| {
        let st = std::process::Command::new("cp")
            .arg("-rL")
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(st.success(), "cp -rL {from} {}", to.display());
    };
    cp(DOKUWIKI_ROOT, &site);
    cp("/etc/dokuwiki", &site.join("conf"));
    cp("/var/lib/dokuwiki/data", &site.join("data"));
    assert!(site.join("lib").is_dir(), "DokuWiki has a top-level lib/");
    assert!(!site.join("tmp").exists(), "the private /tmp is used");
    // Paths as the chrooted wiki sees them: its configuration in /conf,
    // its data in /data. One user, in group "user" (Debian's ACL lets it
    // edit); password "s3cret" (bcrypt).
    let preload = site.join("inc/preload.php");
    let text = std::fs::read_to_string(&preload).unwrap();
    std::fs::write(
        &preload,
        text.replace("/etc/dokuwiki/", "/conf/")
            .replace("/etc/dokuwiki", "/conf"),
    )
    .unwrap();
    let mut local = std::fs::read_to_string(site.join("conf/local.php")).unwrap();
    local.push_str("\n$conf['savedir'] = '/data';\n");
    std::fs::write(site.join("conf/local.php"), local).unwrap();
    std::fs::write(
        site.join("conf/users.auth.php"),
        "fpmd:$2y$10$3vkjGEFDtAMPoTOBpXtul.FWMfPcbcCTVims7K9qxJMxy/12rfEEa:FPMD Test:fpmd@example.com:user\n",
    )
    .unwrap();
    let st = std::process::Command::new("chown")
        .args(["-R", "www-data:www-data"])
        .arg(site.join("data"))
        .arg(site.join("conf"))
        .status()
        .unwrap();
    assert!(st.success());

    let pool = Pool::www()
        .user("www-data", "www-data")
        .max_children(2)
        .lines(&[
            &format!("chroot = {:?}", site.display().to_string()),
            r#"php_admin_value."session.save_path" = "/tmp""#,
        ]);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(pool));
    let nginx = Nginx::start(
        &dir,
        NginxOpts::default()
            .chroot(&site)
            .upstream(fpmd.upstream(0)),
    );
    let mut b = Browser::new();

    // Log in.
    let (status, html) = b.send(&nginx.url("/doku.php?id=start&do=login"), &[]);
    assert_eq!(
        status,
        200,
        "{}",
        html.chars().take(2000).collect::<String>()
    );
    let mut login = hidden_fields(&html, "dw__login");
    login.retain(|(n, _)| n != "do");
    for (n, v) in [("u", "fpmd"), ("p", "s3cret"), ("do", "login")] {
        login.push((n.into(), v.into()));
    }
    let (status, html) = b.send(&nginx.url("/doku.php?id=start&do=login"), &login);
    assert!(status < 400, "login answered {status}: {html}");
    let (_, html) = b.send(&nginx.url("/doku.php?id=start"), &[]);
    assert!(
        html.contains("FPMD Test"),
        "not logged in: {}",
        html.chars().take(3000).collect::<String>()
    );

    // Edit and save, with the form's sectok.
    let page = "fpmd_chroot_test";
    let (status, html) = b.send(&nginx.url(&format!("/doku.php?id={page}&do=edit")), &[]);
    assert_eq!(
        status,
        200,
        "{}",
        html.chars().take(2000).collect::<String>()
    );
    let mut fields = hidden_fields(&html, "dw__editform");
    assert!(
        fields.iter().any(|(n, v)| n == "sectok" && !v.is_empty()),
        "no sectok in the edit form: {fields:?}"
    );
    let body = "Saved by a chrooted DokuWiki under fpmd.";
    fields.retain(|(n, _)| n != "do");
    fields.push(("wikitext".into(), body.into()));
    fields.push(("summary".into(), "fpmd test".into()));
    fields.push(("do[save]".into(), "1".into()));
    let (status, html) = b.send(&nginx.url("/doku.php"), &fields);
    assert!(status < 400, "save answered {status}: {html}");
    let saved = site.join(format!("data/pages/{page}.txt"));
    wait_for(Duration::from_secs(30), "the saved page", || {
        saved.is_file()
    });
    assert_eq!(std::fs::read_to_string(&saved).unwrap().trim(), body);
    // The wiki shows it; the session lives in the pool's private /tmp, not
    // in the site.
    let (status, html) = b.send(&nginx.url(&format!("/doku.php?id={page}")), &[]);
    assert_eq!(status, 200);
    assert!(html.contains(body), "{html}");
    assert!(!site.join("tmp").exists());
}

/// A sandbox step that fails in the child stops that spawn with the step,
/// the path and errno in fpmd's log; the pool keeps trying, and serves
/// once the step can succeed.
#[test]
fn failing_sandbox_step_is_logged_with_its_name() {
    let dir = TestDir::new();
    let site = make_site(dir.path(), "site", ids("www-data"), 0o755);
    std::fs::create_dir(site.join("pub")).unwrap();
    let pool = chroot_pool("www", ("www-data", "www-data"), &site).lines(&[r#"chdir = "/pub""#]);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(pool));
    let first = fpmd.wait_workers(2, Duration::from_secs(60));
    // The working directory disappears after the check of `fpmd -t`; the
    // next children cannot chdir into it.
    std::fs::remove_dir(site.join("pub")).unwrap();
    let mark = fpmd.log_len();
    for p in fpmd.children().iter().filter(|p| p.ppid == fpmd.pid()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let want = "sandbox step failed: chdir /pub: errno 2";
    wait_for(Duration::from_secs(60), want, || {
        fpmd.log_since(mark).contains(want)
    });
    let log = fpmd.log_since(mark);
    let line = log.lines().find(|l| l.contains(want)).unwrap();
    assert!(line.contains("pool=www"), "{line}");
    wait_for(
        Duration::from_secs(60),
        "the killed children to be gone",
        || fpmd.workers().iter().all(|p| !first.contains(p)),
    );
    // The directory back, the pool serves again: no failed spawn took the
    // spawner down (std's spawn once panicked when fpmd's reaper had
    // collected the failed child first).
    std::fs::create_dir(site.join("pub")).unwrap();
    fpmd.wait_workers(2, Duration::from_secs(60));
    let log = fpmd.log_since(mark);
    assert!(
        !log.contains("panic") && !log.contains("spawner thread"),
        "{log}"
    );
}

/// `fpmd` and `fpmd -t` refuse bad isolation keys with exit 78 and a
/// message naming the file, the line and the key.
#[test]
fn bad_isolation_keys_are_refused_with_file_line_key() {
    use crate::config_errors::invalid_pool_key;
    invalid_pool_key(
        "chroot",
        "\"srv/site\"",
        &["chroot must be an absolute path: srv/site"],
    );
    invalid_pool_key(
        "chroot",
        "\"/nonexistent/site\"",
        &["chroot directory does not exist or is not a directory: /nonexistent/site"],
    );
    invalid_pool_key("process.priority", "-20", &["must be between -19 and 20"]);
    invalid_pool_key(
        "rlimit_core",
        "\"big\"",
        &["expected a number or \"unlimited\""],
    );
    invalid_pool_key("rlimit_files", "0", &["rlimit_files must be at least 1"]);
    invalid_pool_key(
        "landlock.write",
        "[\"tmp\"]",
        &["landlock.write paths must be absolute"],
    );
}

/// The nice value of process `pid` (field 19 of /proc/PID/stat); `None`
/// once it is gone.
fn nice_of(pid: i32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 2..];
    after_comm.split_whitespace().nth(16)?.parse().ok()
}

/// A reload that changes an isolation key starts a new generation of
/// chrooted children that has it, and the pool keeps serving from the
/// chroot.
#[test]
fn reload_changing_process_priority_of_a_chrooted_pool() {
    let dir = TestDir::new();
    let site = make_site(dir.path(), "site", ids("www-data"), 0o755);
    let pool = chroot_pool("www", ("www-data", "www-data"), &site);
    let mut fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(pool.clone()));
    let s = start_nginx(&dir, &fpmd, 0, &site);
    assert_eq!(s.get("t=where")[0], "/index.php");
    let old = fpmd.wait_workers(2, Duration::from_secs(60));
    // Inherited from fpmd (which may itself run under `nice`).
    let inherited = nice_of(fpmd.pid()).unwrap();
    assert!(old.iter().all(|p| nice_of(*p) == Some(inherited)));
    let wanted = if inherited == 15 { 16 } else { 15 };

    fpmd.rewrite(&FpmdConfig::new().pool(pool.line(format!("process.priority = {wanted}"))));
    fpmd.reload_ok();
    let mut new = Vec::new();
    wait_for(
        Duration::from_secs(60),
        "children of the new generation",
        || {
            // The old generation's children go as it drains: wait for only
            // the new generation's to be left.
            new = fpmd.workers();
            new.len() == 2
                && new.iter().all(|p| !old.contains(p))
                && new.iter().all(|p| nice_of(*p) == Some(wanted))
        },
    );
    assert!(new.iter().all(|p| nice_of(*p) == Some(wanted)), "{new:?}");
    let w = s.get("t=where");
    assert_eq!(w[0], "/index.php", "{w}");
    assert!(new.contains(&(s.get("t=pid").as_i64().unwrap() as i32)));
}

/// The descriptors of process `pid` that fpmd's sandbox could have leaked
/// into it: `O_PATH` ones (the site's entries, their mount trees) and
/// directories (the site's directory), as `(fd, flags, target)`.
fn leaked_fds(pid: i32) -> Vec<(String, String, String)> {
    const O_PATH: u32 = 0o10000000;
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for e in dir.flatten() {
        let fd = e.file_name().to_string_lossy().into_owned();
        let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| f.trim().to_string())
            .unwrap_or_default();
        let o_path = u32::from_str_radix(&flags, 8).unwrap_or(0) & O_PATH != 0;
        let is_dir = std::fs::metadata(e.path())
            .map(|m| m.is_dir())
            .unwrap_or(false);
        if o_path || is_dir {
            let target = std::fs::read_link(e.path())
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            out.push((fd, flags, target));
        }
    }
    out
}

/// The site's top-level entries are mounted from descriptors fpmd opened
/// before the fork (see `sandbox::open_site`): a top-level symlink to `/`
/// is recreated as a symlink and resolves inside the chroot, never to the
/// host's root; a top-level directory is the site's; and none of those
/// descriptors reaches php-cgi (every php-cgi of the pool, the pre-fork
/// parent too, has no `O_PATH` and no directory descriptor).
#[test]
fn chroot_symlink_to_root_stays_inside_and_no_sandbox_fd_reaches_php_cgi() {
    let dir = TestDir::new();
    let www = ids("www-data");
    let site = make_site(dir.path(), "site", www, 0o755);
    std::fs::create_dir(site.join("data")).unwrap();
    std::fs::write(site.join("data/marker"), "site data").unwrap();
    std::os::unix::fs::symlink("/", site.join("hostroot")).unwrap();
    let fpmd = Fpmd::start(
        &dir,
        FpmdConfig::new().pool(chroot_pool("www", ("www-data", "www-data"), &site)),
    );
    let s = start_nginx(&dir, &fpmd, 0, &site);

    // /hostroot -> / is the chroot's own root.
    let ls: Vec<String> = serde_json::from_value(s.get("t=ls&path=/hostroot/")).unwrap();
    for name in ["index.php", "data", "hostroot", "usr", "tmp"] {
        assert!(
            ls.contains(&name.to_string()),
            "/hostroot lacks {name}: {ls:?}"
        );
    }
    for name in ["root", "home", "proc", "var", "srv"] {
        assert!(
            !ls.contains(&name.to_string()),
            "/hostroot has {name}: {ls:?}"
        );
    }
    assert_eq!(s.get("t=read&path=/hostroot/data/marker"), "site data");
    assert_eq!(s.get("t=read&path=/data/marker"), "site data");
    assert_eq!(s.get("t=read&path=/hostroot/etc/shadow"), false);

    // No sandbox descriptor in any php-cgi of the pool.
    fpmd.wait_workers(2, Duration::from_secs(60));
    let procs = fpmd.children();
    assert!(!procs.is_empty());
    for p in &procs {
        let leaked = leaked_fds(p.pid);
        assert!(leaked.is_empty(), "php-cgi {} holds {leaked:?}", p.pid);
    }
}

/// The path of the unix socket that is fd 0 of process `pid` (a child's
/// listening socket), from `/proc/net/unix`.
fn fd0_socket_path(pid: i32) -> Option<PathBuf> {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/0")).ok()?;
    let inode = link
        .to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .to_string();
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(6) == Some(&inode.as_str()))
            .then(|| f.get(7).map(PathBuf::from))
            .flatten()
    })
}

/// In a chroot without a `tmp/` of the site: `sys_getloadavg()` works
/// (glibc reads it with `sysinfo()`, not from `/proc`), the pool's private
/// `/tmp` is writable by the pool's user, and fpmd's runtime directory,
/// which holds the children's sockets and that private `/tmp`, is 0700
/// and root's.
#[test]
fn chroot_loadavg_private_tmp_and_a_0700_runtime_directory() {
    let dir = TestDir::new();
    let www = ids("www-data");
    let site = make_site(dir.path(), "site", www, 0o755);
    std::fs::remove_dir(site.join("tmp")).unwrap();
    let fpmd = Fpmd::start(
        &dir,
        FpmdConfig::new().pool(chroot_pool("www", ("www-data", "www-data"), &site)),
    );
    let s = start_nginx(&dir, &fpmd, 0, &site);

    let la = s.get("t=loadavg");
    let la = la
        .as_array()
        .unwrap_or_else(|| panic!("sys_getloadavg(): {la}"));
    assert_eq!(la.len(), 3, "{la:?}");
    assert!(
        la.iter().all(|v| v.as_f64().is_some_and(|x| x >= 0.0)),
        "{la:?}"
    );
    assert_eq!(s.get("t=proc&f=status"), false, "/proc is absent");

    assert_eq!(s.get("t=write&path=/tmp/sess&data=abc"), 3);
    assert_eq!(s.get("t=read&path=/tmp/sess"), "abc");

    let workers = fpmd.wait_workers(2, Duration::from_secs(60));
    let sock = fd0_socket_path(workers[0]).expect("a child's fd 0 is a named unix socket");
    let runtime = sock.parent().unwrap();
    let md = std::fs::metadata(runtime).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o700, "{}", runtime.display());
    assert_eq!(md.uid(), 0, "{}", runtime.display());
    // The private /tmp is in it, and is what the script wrote to.
    assert_eq!(
        std::fs::read_to_string(runtime.join("tmp/www/sess")).unwrap(),
        "abc"
    );
}
