//! Starts and exits of the processes fpmd did not fork itself: the
//! children a pre-fork php-cgi parent forks and reaps on its own, whose
//! exit status fpmd would otherwise never see (it only sees their
//! connections close).
//!
//! Owns: one socket on the kernel's process events connector
//! (`NETLINK_CONNECTOR`, group `CN_IDX_PROC`, `linux/cn_proc.h`), which
//! reports every fork and exit on the machine with pids and wait status,
//! and the table of php-cgi parents whose children's events are wanted.
//! Must not touch: what an exit means for a pool (the supervisor decides).
//!
//! Needs CAP_NET_ADMIN (fpmd runs as root) and a kernel with
//! `CONFIG_PROC_EVENTS`; without them [`start`] fails, fpmd says so once
//! and goes on: a pre-forked child's death is then known from its closed
//! connection only, without its signal.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

use nix::sys::socket::MsgFlags;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::UnboundedSender;

use crate::process::reap::ExitKind;
use crate::sys::netlink::{self, u32_at, NLMSG_HDR};

/// An event about a child of a watched php-cgi parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkedEvent {
    /// The parent forked child `pid`.
    Started { pid: i32, parent: i32 },
    /// Child `pid` of `parent` ended.
    Exited {
        pid: i32,
        parent: i32,
        kind: ExitKind,
    },
}

/// The connector is subscribed ([`start`] succeeded).
static AVAILABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether fpmd sees the exits of pre-forked children.
pub fn available() -> bool {
    AVAILABLE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Parents whose children are watched, and where their events go.
static WATCHED: Mutex<Option<HashMap<i32, UnboundedSender<ForkedEvent>>>> = Mutex::new(None);

/// Sends the events of `parent`'s children to `owner` (from now on).
pub fn watch(parent: i32, owner: UnboundedSender<ForkedEvent>) {
    WATCHED
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(parent, owner);
}

/// Stops watching `parent` (it exited).
pub fn unwatch(parent: i32) {
    if let Some(m) = WATCHED.lock().unwrap().as_mut() {
        m.remove(&parent);
    }
}

const NETLINK_CONNECTOR: libc::c_int = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_EVENT_FORK: u32 = 0x0000_0001;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
const CN_MSG: usize = 20;
/// `struct proc_event`: what, cpu, timestamp_ns (8-aligned), then the union.
const EVENT_DATA: usize = 16;

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    u32_at(b, at).map(|v| v as i32)
}

/// Decodes one datagram from the connector into (what happened, parent
/// tgid): only process forks and exits (not threads'). Pure, for tests.
pub fn decode(b: &[u8]) -> Option<ForkedEvent> {
    let ev = NLMSG_HDR + CN_MSG;
    let what = u32_at(b, ev)?;
    let data = ev + EVENT_DATA;
    match what {
        PROC_EVENT_FORK => {
            // struct fork_proc_event: parent_pid, parent_tgid, child_pid, child_tgid
            let (parent_tgid, child_pid, child_tgid) = (
                i32_at(b, data + 4)?,
                i32_at(b, data + 8)?,
                i32_at(b, data + 12)?,
            );
            (child_pid == child_tgid).then_some(ForkedEvent::Started {
                pid: child_pid,
                parent: parent_tgid,
            })
        }
        PROC_EVENT_EXIT => {
            // struct exit_proc_event: process_pid, process_tgid, exit_code,
            // exit_signal, parent_pid, parent_tgid
            let (pid, tgid, code) = (i32_at(b, data)?, i32_at(b, data + 4)?, i32_at(b, data + 8)?);
            let parent = i32_at(b, data + 20)?;
            let kind = ExitKind::from_wait_status(code)?;
            (pid == tgid).then_some(ForkedEvent::Exited { pid, parent, kind })
        }
        _ => None,
    }
}

/// Subscribes to the connector and spawns the task that routes events of
/// watched parents' children. Errors: no permission (not root), or no
/// process events in this kernel.
pub fn start() -> io::Result<()> {
    let sock = netlink::socket(
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        NETLINK_CONNECTOR,
    )?;
    netlink::bind_groups(sock.as_raw_fd(), CN_IDX_PROC)?;
    // seq 0, from this process.
    let mut msg = netlink::message(
        NLMSG_HDR + CN_MSG + 4,
        libc::NLMSG_DONE as u16,
        0,
        0,
        std::process::id(),
    );
    msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
    msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // ack
    msg.extend_from_slice(&4u16.to_ne_bytes()); // len
    msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
    msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
    netlink::send(sock.as_raw_fd(), &msg)?;
    // SAFETY: `sock` is an OwnedFd moved into the AsyncFd, which keeps it
    // open for as long as it is registered.
    let fd = unsafe { AsyncFd::register(sock) }.map_err(|e| e.into_parts().1)?;
    AVAILABLE.store(true, std::sync::atomic::Ordering::Relaxed);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok(mut ready) = fd.readable().await else {
                return;
            };
            loop {
                let n =
                    match netlink::recv(fd.get_ref().as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT)
                    {
                        Ok(n) => n,
                        Err(e) => match e.kind() {
                            io::ErrorKind::WouldBlock => {
                                ready.clear_ready();
                                break;
                            }
                            io::ErrorKind::Interrupted => continue,
                            // ENOBUFS: events were lost while fpmd was busy;
                            // the closed connections still tell of deaths.
                            _ => {
                                tracing::debug!("process events: {e}");
                                continue;
                            }
                        },
                    };
                let Some(ev) = decode(&buf[..n]) else {
                    continue;
                };
                let parent = match ev {
                    ForkedEvent::Started { parent, .. } | ForkedEvent::Exited { parent, .. } => {
                        parent
                    }
                };
                if let Some(owner) = WATCHED
                    .lock()
                    .unwrap()
                    .as_ref()
                    .and_then(|m| m.get(&parent))
                {
                    let _ = owner.send(ev);
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(what: u32, data: &[i32]) -> Vec<u8> {
        let mut b = vec![0u8; NLMSG_HDR + CN_MSG];
        b.extend_from_slice(&what.to_ne_bytes());
        b.extend_from_slice(&[0; 12]);
        for d in data {
            b.extend_from_slice(&d.to_ne_bytes());
        }
        b
    }

    #[test]
    fn forks_and_exits_of_processes_not_threads() {
        assert_eq!(
            decode(&datagram(PROC_EVENT_FORK, &[10, 10, 11, 11])),
            Some(ForkedEvent::Started {
                pid: 11,
                parent: 10
            })
        );
        assert_eq!(
            decode(&datagram(PROC_EVENT_FORK, &[10, 10, 12, 11])),
            None,
            "a thread"
        );
        let killed = decode(&datagram(PROC_EVENT_EXIT, &[11, 11, 9, 17, 10, 10]));
        assert_eq!(
            killed,
            Some(ForkedEvent::Exited {
                pid: 11,
                parent: 10,
                kind: ExitKind::Signal {
                    signal: 9,
                    core_dumped: false
                }
            })
        );
        let exited = decode(&datagram(PROC_EVENT_EXIT, &[11, 11, 3 << 8, 17, 10, 10]));
        assert_eq!(
            exited,
            Some(ForkedEvent::Exited {
                pid: 11,
                parent: 10,
                kind: ExitKind::Code(3)
            })
        );
        assert_eq!(decode(&datagram(2, &[1, 2, 3])), None, "an exec event");
        assert_eq!(decode(&[1, 2, 3]), None, "short");
    }

    #[tokio::test]
    async fn sees_a_fork_and_exit_when_root() {
        if !nix::unistd::Uid::effective().is_root() {
            // The connector needs CAP_NET_ADMIN; fpmd then runs without it.
            assert!(start().is_err());
            return;
        }
        start().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        watch(std::process::id() as i32, tx);
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg("kill -9 $$")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut seen_exit = None;
        while seen_exit.is_none() {
            match tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv()).await {
                Ok(Some(ForkedEvent::Exited { pid: p, kind, .. })) if p == pid => {
                    seen_exit = Some(kind)
                }
                Ok(Some(_)) => {}
                other => panic!("no exit event for {pid}: {other:?}"),
            }
        }
        assert_eq!(
            seen_exit,
            Some(ExitKind::Signal {
                signal: 9,
                core_dumped: false
            })
        );
        unwatch(std::process::id() as i32);
        drop(child);
    }
}
