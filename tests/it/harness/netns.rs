//! A "host" of its own for a test: a network namespace joined to the root
//! namespace by a veth pair with a /30 of its own (`10.213.0.0/16`, one /30
//! per host: the root end `.1`, the namespace end `.2`). Names and subnets
//! are unique per test process and host, and taken only when no interface
//! has the address yet, so parallel runs do not collide. Everything is
//! removed on drop, also when the test fails (the processes inside must be
//! gone by then: drop them first).

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

const IP: &str = "/usr/sbin/ip";

pub struct NetNs {
    /// `ip netns` name.
    pub name: String,
    /// The veth end in the root namespace.
    pub veth: String,
    /// The namespace end's address (where a server inside listens).
    pub addr: Ipv4Addr,
    /// The root end's address.
    pub peer: Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new(IP).args(args).output().map_err(|e| {
        format!("cannot run {IP} ({e}): install it with `apt-get install iproute2`")
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetNs {
    /// Creates the namespace, its veth pair and addresses, and brings both
    /// ends and the namespace's loopback up. Panics (as root only; with
    /// what to install when `ip` is missing) when it cannot.
    pub fn new() -> NetNs {
        static N: AtomicU32 = AtomicU32::new(0);
        assert!(
            nix::unistd::geteuid().is_root(),
            "network namespaces need root: run this test as root"
        );
        let pid = std::process::id();
        let n = N.fetch_add(1, Ordering::Relaxed);
        let used = Command::new(IP)
            .args(["-o", "-4", "addr"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| {
                panic!("cannot run {IP} ({e}): install it with `apt-get install iproute2`")
            });
        let mut idx = (pid.wrapping_mul(16).wrapping_add(n)) % 16384;
        let (peer, addr) = loop {
            let base = [10, 213, (idx / 64) as u8, ((idx % 64) * 4) as u8];
            let peer = Ipv4Addr::new(base[0], base[1], base[2], base[3] + 1);
            let addr = Ipv4Addr::new(base[0], base[1], base[2], base[3] + 2);
            if !used.contains(&format!(" {peer}/")) && !used.contains(&format!(" {addr}/")) {
                break (peer, addr);
            }
            idx = (idx + 1) % 16384;
        };
        let ns = NetNs {
            name: format!("fpmd-it-{pid}-{n}"),
            veth: format!("fv{pid}x{n}"),
            addr,
            peer,
        };
        let inner = format!("fp{pid}x{n}");
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), ns.name.clone()],
            vec![
                "link".into(),
                "add".into(),
                ns.veth.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                inner.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                inner.clone(),
                "netns".into(),
                ns.name.clone(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("{peer}/30"),
                "dev".into(),
                ns.veth.clone(),
            ],
            vec!["link".into(), "set".into(), ns.veth.clone(), "up".into()],
            vec![
                "-n".into(),
                ns.name.clone(),
                "addr".into(),
                "add".into(),
                format!("{addr}/30"),
                "dev".into(),
                inner.clone(),
            ],
            vec![
                "-n".into(),
                ns.name.clone(),
                "link".into(),
                "set".into(),
                inner,
                "up".into(),
            ],
            vec![
                "-n".into(),
                ns.name.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
        ];
        for step in steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            if let Err(e) = ip(&args) {
                drop(ns);
                panic!("cannot set up a network namespace: {e}");
            }
        }
        ns
    }

    /// The launcher that runs a program inside: `ip netns exec NAME`
    /// (which execs it: the pid stays the program's).
    pub fn exec_prefix(&self) -> Vec<String> {
        vec![IP.into(), "netns".into(), "exec".into(), self.name.clone()]
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth end inside it, and with
        // it the pair; the root end is deleted too in case the move failed.
        let _ = ip(&["link", "del", &self.veth]);
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("cannot remove network namespace {}: {e}", self.name);
        }
    }
}
