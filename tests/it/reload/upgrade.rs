//! Item 9: binary upgrade. An upgrade to an invalid file is refused and
//! the old daemon serves on; the real one hands over under load, with a
//! request in flight, without a failed request.

use super::helpers::*;
use crate::harness::fpmd::describe_status;
use crate::harness::*;
use std::time::Duration;

#[test]
fn binary_upgrade_under_load_hands_over_without_a_failed_request() {
    let dir = TestDir::new();
    let cfg = |p: Pool| FpmdConfig::new().global(control_socket(&dir)).pool(p);
    let mut fpmd = Fpmd::start(&dir, cfg(pool("www", "64M")));
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    let old = fpmd.wait_workers(4, LONGER);
    let old_pid = fpmd.pid();
    assert_eq!(fpmd.pid_file(), Some(old_pid));

    // An upgrade whose configuration is invalid: the old daemon serves on.
    let broken = pool("www", "64M").line("pm.max_childs = 4");
    let at = format!(
        "www.toml:{}",
        line_of(&broken.toml(dir.path(), &dir.tag()), "pm.max_childs")
    );
    fpmd.rewrite(&cfg(broken));
    let r = fpmd.cli(&["upgrade"]);
    eprintln!("upgrade with an invalid file: {r}");
    assert_eq!(r.code(), Some(EX_CONFIG), "{r}");
    assert!(
        r.stderr.contains(&at),
        "the refusal does not name {at}: {r}"
    );
    fpmd.assert_running();
    assert_eq!(fpmd.pid_file(), Some(old_pid));
    assert_eq!(fpmd.workers(), old);
    assert_eq!(memory_limit(&nginx), "64M");

    // The real one, under load, with a request in flight.
    fpmd.rewrite(&cfg(pool("www", "64M")));
    let load = Load::start(8, nginx.url("/sleep.php?ms=50"), Duration::ZERO);
    let t0 = load.started;
    let long = get_async(nginx.url("/usleep.php?ms=3000&kb=64&mark=long"));
    wait_for(LONGER, "the long request running", || {
        dir.mark("long").is_some()
    });
    let r = fpmd.cli(&["upgrade"]);
    eprintln!("upgrade: {r}");
    assert_eq!(r.code(), Some(0), "{r}");
    let mut new_pid = None;
    wait_for(LONGER, "the pid file to name the new fpmd", || {
        new_pid = fpmd.pid_file().filter(|p| *p != old_pid);
        new_pid.is_some()
    });
    let new_pid = new_pid.unwrap();
    assert!(
        procs::alive(new_pid),
        "the new fpmd {new_pid} is not running"
    );
    wait_for(
        LONGER,
        "a request served by a child of the new fpmd",
        || {
            let pid = get_pid(&nginx);
            procs::descendants(new_pid).iter().any(|p| p.pid == pid)
        },
    );
    let (r, _) = long.join().unwrap();
    check_usleep(&r, 3000, 64, "the request in flight during the upgrade");
    let st = fpmd
        .wait_exit(LONGER)
        .expect("the old fpmd still runs 60 s after the upgrade");
    eprintln!("old fpmd {old_pid} exited: {}", describe_status(&st));
    assert_eq!(st.code(), Some(0));
    run_for_pid(new_pid, Duration::from_millis(500));
    let samples = load.stop();
    assert_no_failure(&samples, t0, "requests across the upgrade");
    wait_for(LONGER, "4 workers under the new fpmd", || {
        procs::workers_among(&procs::descendants(new_pid)).len() == 4
    });
}

fn run_for_pid(pid: i32, period: Duration) {
    assert!(holds_for(period, || procs::alive(pid)), "fpmd {pid} died");
}
