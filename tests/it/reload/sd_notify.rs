//! Item 12: the sd_notify sequence across start, reloads (with new
//! children, adding a pool, refused) and stop.

use super::helpers::*;
use crate::harness::*;
use nix::sys::signal::Signal;

#[test]
fn sd_notify_sequence_across_start_reloads_and_stop() {
    let dir = TestDir::new();
    let (mut fpmd, sd, ready, _) = start_notified(
        &dir,
        FpmdConfig::new().pool(pool("www", "64M").max_children(2)),
    );
    assert_eq!(ready, "READY=1\nSTATUS=1 pool, up to 2 children");
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    assert_eq!(memory_limit(&nginx), "64M");
    assert_eq!(
        sd.pending(),
        Vec::<String>::new(),
        "datagrams while serving"
    );
    let env = |c: FpmdConfig| sd.env(c);

    // A reload with new children.
    fpmd.rewrite(&env(
        FpmdConfig::new().pool(pool("www", "96M").max_children(2))
    ));
    let mark = fpmd.log_len();
    fpmd.signal(Signal::SIGUSR2);
    let (_, ready) = sd.expect_reload(&mut fpmd, LONGER);
    assert_eq!(ready, "READY=1\nSTATUS=1 pool, up to 2 children");
    assert!(fpmd.wait_reload_end(mark, LONGER).contains("reload done"));
    assert_eq!(
        memory_limit(&nginx),
        "96M",
        "READY=1 before the reload was in force"
    );

    // A reload adding a pool: STATUS follows.
    fpmd.rewrite(&env(FpmdConfig::new()
        .pool(pool("www", "96M").max_children(2))
        .pool(pool("more", "64M").max_children(3))));
    fpmd.signal(Signal::SIGUSR2);
    let (_, ready) = sd.expect_reload(&mut fpmd, LONGER);
    assert_eq!(ready, "READY=1\nSTATUS=2 pools, up to 5 children");

    // A refused reload: RELOADING=1, then READY=1 with the running state.
    fpmd.rewrite(&env(FpmdConfig::new()
        .pool(pool("www", "96M").max_children(2).line("pm.max_childs = 1"))
        .pool(pool("more", "64M").max_children(3))));
    let mark = fpmd.log_len();
    fpmd.signal(Signal::SIGUSR2);
    let (_, ready) = sd.expect_reload(&mut fpmd, LONGER);
    assert_eq!(ready, "READY=1\nSTATUS=2 pools, up to 5 children");
    assert!(fpmd
        .wait_reload_end(mark, LONGER)
        .contains("reload refused"));
    assert_eq!(memory_limit(&nginx), "96M");
    assert_eq!(
        sd.pending(),
        Vec::<String>::new(),
        "datagrams while serving"
    );

    fpmd.signal(Signal::SIGQUIT);
    let msg = sd.next_from(&mut fpmd, LONGER, "STOPPING=1");
    assert_eq!(
        msg,
        "STOPPING=1\nSTATUS=graceful stop: waiting for in-flight requests"
    );
    let st = fpmd
        .wait_exit(LONGER)
        .expect("fpmd runs 60 s after SIGQUIT");
    assert_eq!(st.code(), Some(0));
    assert_eq!(
        sd.pending(),
        Vec::<String>::new(),
        "datagrams after STOPPING=1"
    );
}
