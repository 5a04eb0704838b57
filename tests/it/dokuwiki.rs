//! Issue 2, item 8: Debian's dokuwiki package renders through nginx → fpmd.

use crate::harness::*;

#[test]
fn dokuwiki_start_page() {
    require_dokuwiki();
    let cfg = FpmdConfig::new().pool(Pool::www().user("www-data", "www-data"));
    let s = Stack::start_with(cfg, NginxOpts::default().dokuwiki());
    let r = get(&s.url("/doku.php"));
    let text = r.text();
    assert_eq!(
        r.status,
        200,
        "doku.php: {}",
        text.chars().take(2000).collect::<String>()
    );
    let title = text
        .split_once("<title>")
        .and_then(|(_, rest)| rest.split_once("</title>"))
        .map(|(t, _)| t.to_string())
        .unwrap_or_else(|| {
            panic!(
                "no <title> in doku.php: {}",
                text.chars().take(2000).collect::<String>()
            )
        });
    eprintln!("doku.php title: {title:?}");
    assert!(title.contains("DokuWiki"), "title {title:?}");
}
