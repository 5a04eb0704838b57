//! Pools across a reload: changing one pool leaves the other's children
//! and socket alone (item 3); a removed pool finishes its request, then
//! its socket and children are gone (item 10).

use super::helpers::*;
use crate::harness::*;

// ---------------------------------------------------------------------------
// Item 3: two pools, one changed
// ---------------------------------------------------------------------------

#[test]
fn reload_changing_one_pool_leaves_the_other_pools_children_and_socket() {
    let cfg = |a: &str| FpmdConfig::new().pool(pool("a", a)).pool(pool("b", "64M"));
    let dir = TestDir::new();
    let mut fpmd = Fpmd::start(&dir, cfg("64M"));
    let na = Nginx::start(
        &dir,
        NginxOpts::default()
            .upstream(fpmd.upstream(0))
            .name("nginx-a"),
    );
    let nb = Nginx::start(
        &dir,
        NginxOpts::default()
            .upstream(fpmd.upstream(1))
            .name("nginx-b"),
    );
    wait_for(LONGER, "4 workers in each pool", || {
        pool_workers(&fpmd, "a").len() == 4 && pool_workers(&fpmd, "b").len() == 4
    });
    let (a_before, b_before) = (pool_workers(&fpmd, "a"), pool_workers(&fpmd, "b"));
    let (a_sock, b_sock) = (sock_path(&fpmd.addr(0)), sock_path(&fpmd.addr(1)));
    let (a_ino, b_ino) = (inode(&a_sock), inode(&b_sock));
    assert_eq!(memory_limit(&na), "64M");
    assert_eq!(memory_limit(&nb), "64M");

    fpmd.rewrite(&cfg("96M"));
    let line = fpmd.reload_ok();
    eprintln!("{line}");
    assert_eq!(memory_limit(&na), "96M");
    assert_eq!(memory_limit(&nb), "64M");
    wait_for(LONGER, "pool a's children all replaced", || {
        let w = pool_workers(&fpmd, "a");
        w.len() == 4 && w.iter().all(|p| !a_before.contains(p))
    });
    assert_eq!(
        pool_workers(&fpmd, "b"),
        b_before,
        "pool b's children changed"
    );
    assert_eq!(inode(&b_sock), b_ino, "pool b's socket was replaced");
    assert_eq!(inode(&a_sock), a_ino, "pool a's socket was replaced");
    for i in 0..8 {
        let pid = get_pid(&nb);
        assert!(
            b_before.contains(&pid),
            "request {i} on b went to {pid}, not one of {b_before:?}"
        );
    }
    assert_eq!(pool_workers(&fpmd, "b"), b_before);
}

// ---------------------------------------------------------------------------
// Item 10: a pool removed while a request runs
// ---------------------------------------------------------------------------

#[test]
fn removed_pool_finishes_its_request_then_its_socket_is_gone() {
    let both = FpmdConfig::new()
        .pool(pool("www", "64M"))
        .pool(pool("gone", "64M"));
    let dir = TestDir::new();
    let mut fpmd = Fpmd::start(&dir, both);
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    let ngone = Nginx::start(
        &dir,
        NginxOpts::default()
            .upstream(fpmd.upstream(1))
            .name("nginx-gone"),
    );
    wait_for(LONGER, "4 workers in each pool", || {
        pool_workers(&fpmd, "www").len() == 4 && pool_workers(&fpmd, "gone").len() == 4
    });
    let www = pool_workers(&fpmd, "www");
    let gone_sock = sock_path(&fpmd.addr(1));
    let long = get_async(ngone.url("/usleep.php?ms=5000&kb=64&mark=gone"));
    wait_for(LONGER, "the 5 s request running", || {
        dir.mark("gone").is_some()
    });
    let victim = dir.marked_pid("gone");
    fpmd.rewrite(&FpmdConfig::new().pool(pool("www", "64M")));
    let line = fpmd.reload_ok();
    eprintln!("{line}");
    assert!(!long.is_finished(), "the request ended with the reload");
    assert!(procs::alive(victim));
    let (r, took) = long.join().unwrap();
    check_usleep(&r, 5000, 64, "the request of the removed pool");
    eprintln!("the removed pool's request: 200 after {took:?}");
    wait_for(LONGER, "the removed pool's socket file gone", || {
        !gone_sock.exists()
    });
    assert!(!Addr::Unix(gone_sock.clone()).accepts());
    wait_for(LONGER, "the removed pool's children gone", || {
        pool_workers(&fpmd, "gone").is_empty() && !procs::alive(victim)
    });
    assert_eq!(
        pool_workers(&fpmd, "www"),
        www,
        "pool www's children changed"
    );
    let r = get(&nginx.url("/pid.php"));
    assert_eq!(r.status, 200);
}
