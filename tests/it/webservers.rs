//! Issue 11: every common web server, tested for real, against fpmd and
//! php-fpm 8.2 side by side; first, what such a server found in fpmd.

use crate::harness::phpfpm::PhpFpm;
use crate::harness::*;

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
