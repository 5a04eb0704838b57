//! Issue 2, items 1 and 2: requests and responses pass through whole;
//! statuses and headers set by PHP reach the client; a fatal error looks
//! exactly as it does under php-fpm.

use crate::harness::fcgi::noise;
use crate::harness::phpfpm::PhpFpm;
use crate::harness::*;

/// The default pool with PHP's POST limit raised above the biggest body we send.
fn pool() -> Pool {
    Pool::www().line(r#"php_admin_value.post_max_size = "128M""#)
}

#[test]
fn get_with_query_string() {
    let s = Stack::start(pool());
    let r = get(&s.url("/hello.php?name=fpmd&x=a%20b&y="));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "hello fpmd\nQUERY_STRING=name=fpmd&x=a%20b&y=\n");
    assert_eq!(r.header("content-type"), Some("text/plain;charset=UTF-8"));
}

#[test]
fn post_bodies_arrive_whole() {
    let s = Stack::start(pool());
    for (i, len) in [0usize, 1, 65_535, 65_536, 1 << 20, 64 << 20]
        .into_iter()
        .enumerate()
    {
        let body = noise(i as u64 + 7, len);
        let t0 = std::time::Instant::now();
        let r = post(&s.url("/body.php"), &body);
        eprintln!("POST {len} bytes: {} in {:?}", r.status, t0.elapsed());
        assert_eq!(r.status, 200, "POST of {len} bytes: {}", r.text());
        assert_eq!(
            r.text(),
            format!("{len} {}", md5_hex(&body)),
            "POST of {len} bytes arrived changed"
        );
    }
}

#[test]
fn big_response_arrives_whole() {
    let s = Stack::start(pool());
    let r = get(&s.url("/big.php?mb=5"));
    assert_eq!(r.status, 200);
    // big.php: line i is 1023 times chr(97 + i % 26), then "\n".
    let mut expected = Vec::with_capacity(5 << 20);
    for i in 0..5 * 1024 {
        expected.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, 1023));
        expected.push(b'\n');
    }
    assert_eq!(r.body.len(), expected.len(), "5 MiB response length");
    assert!(
        r.body == expected,
        "5 MiB response content differs (md5 {} vs {})",
        md5_hex(&r.body),
        md5_hex(&expected)
    );
}

#[test]
fn status_from_php_passes_through() {
    let s = Stack::start(pool());
    let r = get(&s.url("/status404.php"));
    assert_eq!(r.status, 404);
    assert_eq!(r.text(), "nothing here\n");
    assert_eq!(r.header("x-fpmd-test"), Some("yes"));
}

#[test]
fn redirect_keeps_location() {
    let s = Stack::start(pool());
    let r = get(&s.url("/redirect.php"));
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/hello.php?name=redirected"));
}

#[test]
fn several_set_cookie_headers() {
    let s = Stack::start(pool());
    let r = get(&s.url("/cookies.php"));
    assert_eq!(r.status, 200);
    let cookies = r.headers_all("set-cookie");
    assert_eq!(cookies.len(), 3, "Set-Cookie headers: {cookies:?}");
    assert_eq!(cookies[0], "a=1");
    assert!(
        cookies[1].starts_with("b=2; path=/x") && cookies[1].contains("HttpOnly"),
        "{}",
        cookies[1]
    );
    assert_eq!(cookies[2], "c=3");
}

/// php-fpm with its own nginx, beside the stack, on the same docroot.
fn php_fpm_beside(s: &Stack) -> (PhpFpm, Nginx) {
    let fpm = PhpFpm::start(&s.dir);
    let nginx = Nginx::start(
        &s.dir,
        NginxOpts::default()
            .upstream(fpm.upstream())
            .name("nginx-php-fpm"),
    );
    (fpm, nginx)
}

#[test]
fn fatal_error_looks_like_php_fpm() {
    let s = Stack::start(pool());
    let (fpm, fpm_nginx) = php_fpm_beside(&s);

    let ours = get(&s.url("/fatal.php"));
    let theirs = get(&fpm_nginx.url("/fatal.php"));
    eprintln!(
        "fpmd: {} {:?}; php-fpm: {} {:?}",
        ours.status,
        ours.text(),
        theirs.status,
        theirs.text()
    );
    assert_eq!(theirs.status, 500, "php-fpm itself: {}", fpm.log());
    assert_eq!(ours.status, theirs.status, "status differs from php-fpm's");
    assert_eq!(ours.text(), theirs.text(), "body differs from php-fpm's");
    assert_eq!(ours.header("content-type"), theirs.header("content-type"));
    // The message reaches nginx as FastCGI STDERR, as with php-fpm.
    wait_for(
        std::time::Duration::from_secs(5),
        "nginx logs the PHP fatal error",
        || {
            let l = s.nginx.error_log();
            l.contains("FastCGI sent in stderr") && l.contains("fpmd_this_function_does_not_exist")
        },
    );
}

/// The texts nginx logged as `FastCGI sent in stderr: "…"` (in order; a
/// text may span lines).
fn stderr_texts(error_log: &str) -> Vec<String> {
    const START: &str = "FastCGI sent in stderr: \"";
    let mut out = Vec::new();
    let mut rest = error_log;
    while let Some(at) = rest.find(START) {
        rest = &rest[at + START.len()..];
        let Some(end) = rest.find("\" while") else {
            break;
        };
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    out
}

#[test]
fn php_messages_reach_nginx_framed_as_php_fpm_frames_them() {
    let s = Stack::start(pool());
    let (_fpm, fpm_nginx) = php_fpm_beside(&s);
    let ours = get(&s.url("/messages.php"));
    let theirs = get(&fpm_nginx.url("/messages.php"));
    assert_eq!(ours.status, theirs.status, "status differs from php-fpm's");
    let mut texts = (Vec::new(), Vec::new());
    wait_for(
        std::time::Duration::from_secs(5),
        "both nginx logs hold the three messages",
        || {
            texts = (
                stderr_texts(&s.nginx.error_log()),
                stderr_texts(&fpm_nginx.error_log()),
            );
            [&texts.0, &texts.1]
                .iter()
                .all(|t| t.concat().contains("third fpmd_msg"))
        },
    );
    eprintln!("fpmd: {:#?}\nphp-fpm: {:#?}", texts.0, texts.1);
    assert!(
        texts
            .1
            .concat()
            .starts_with("PHP message: PHP Warning:  first fpmd_msg"),
        "php-fpm itself: {:?}",
        texts.1
    );
    assert_eq!(texts.0, texts.1, "the STDERR text differs from php-fpm's");
}

/// With `fpm_sapi = false` (php-cgi as it is) an unguarded call is a
/// fatal error, and fpmd says why once per pool; by default the function
/// is there (see `sapi.rs`).
#[test]
fn unguarded_fastcgi_finish_request_fails_and_fpmd_says_why_once() {
    let s = Stack::start(pool());
    let r = get(&s.url("/finish_request.php"));
    assert_eq!((r.status, r.text().as_str()), (200, "early\n"));
    drop(s);
    let s = Stack::start(pool().line("fpm_sapi = false"));
    for _ in 0..2 {
        let r = get(&s.url("/finish_request.php"));
        assert_eq!(r.status, 500, "{}", r.text());
    }
    let needle = "called fastcgi_finish_request(), which php-cgi does not have";
    wait_for(
        std::time::Duration::from_secs(5),
        "fpmd logs the missing SAPI function",
        || s.fpmd.log().contains(needle),
    );
    assert_eq!(
        s.fpmd.log().matches(needle).count(),
        1,
        "logged once per pool"
    );
    assert!(s.fpmd.log().contains("finish_request.php"));
}
