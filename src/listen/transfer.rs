//! Listening sockets that cross a process boundary: the hand-over of the
//! [`ListenerTable`](super::ListenerTable) to a new fpmd over a unix socket
//! (`SCM_RIGHTS`, as pingora's `transfer_fd`), and the sockets systemd
//! passes by socket activation (`LISTEN_FDS`).
//!
//! The hand-over, on a connected `SOCK_STREAM` unix socket:
//!
//! ```text
//! header   "FPMDLFD2"                      8 bytes: magic and version
//!          count                           u32, little-endian
//!          count × key length              u32, little-endian each
//!          count × tag length              u32, little-endian each
//!          keys                            UTF-8, concatenated, no separator
//!          tags                            UTF-8, concatenated, no separator
//! batches  1 byte each = n, the number of fds in its SCM_RIGHTS message
//!          (1 ≤ n ≤ FDS_PER_MESSAGE), until count fds, in key order
//! ```
//!
//! A tag is the sender's note on one socket (empty for most; the upgrade
//! marks systemd's sockets with it). Version 1 (`"FPMDLFD1"`, from an fpmd
//! before tags) has no tag lengths and no tags, and is still received: its
//! tags are empty.
//!
//! The header is plain data, so it has no size limit of its own; the fds
//! travel in messages of at most [`FDS_PER_MESSAGE`] (Linux refuses more
//! than 253 per message, `SCM_MAX_FD`), each on one byte of its own, so
//! that a receiver reading one byte at a time gets exactly one message's
//! fds with each read.
//!
//! Owns: the wire format and the fd passing. Must not touch: the table
//! (the caller adopts what arrives).

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::errno::Errno;
use nix::sys::socket::{self, ControlMessage, ControlMessageOwned, MsgFlags};

use super::{KeyError, ListenKey};

const MAGIC: &[u8; 8] = b"FPMDLFD2";
/// The version before tags, still received.
const MAGIC_V1: &[u8; 8] = b"FPMDLFD1";
/// Fds in one `SCM_RIGHTS` message.
pub const FDS_PER_MESSAGE: usize = 64;
/// Bounds on what a receiver accepts (a garbled header must not make it
/// allocate gigabytes).
const MAX_COUNT: usize = 65_536;
const MAX_KEY_LEN: usize = 4096;

/// A failed hand-over. Fds received before the failure are closed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("listener hand-over: {0}")]
    Io(#[from] io::Error),
    #[error("listener hand-over: not an fpmd listener header")]
    BadMagic,
    #[error("listener hand-over: {0}")]
    Malformed(String),
    #[error("listener hand-over: {0}")]
    Key(#[from] KeyError),
    #[error("listener hand-over: {got} file descriptors received, {expected} announced")]
    MissingFds { expected: usize, got: usize },
}

/// Sends `listeners` (keys and fds) over `stream`, a connected, blocking
/// unix stream socket. The fds stay open here: both processes hold the
/// sockets until this one closes its own.
pub fn send_listeners(
    stream: &UnixStream,
    listeners: &[(ListenKey, BorrowedFd<'_>)],
) -> Result<(), TransferError> {
    let tagged: Vec<_> = listeners
        .iter()
        .map(|(k, fd)| (k.clone(), "", *fd))
        .collect();
    send_tagged(stream, &tagged)
}

/// [`send_listeners`] with a tag (at most 4096 bytes of text) on each
/// listener, which [`recv_tagged`] returns with it.
pub fn send_tagged(
    stream: &UnixStream,
    listeners: &[(ListenKey, &str, BorrowedFd<'_>)],
) -> Result<(), TransferError> {
    if listeners.len() > MAX_COUNT {
        return Err(TransferError::Malformed(format!(
            "{} listeners, at most {MAX_COUNT}",
            listeners.len()
        )));
    }
    let mut header = Vec::with_capacity(12 + listeners.len() * 64);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&(listeners.len() as u32).to_le_bytes());
    if let Some((_, tag, _)) = listeners.iter().find(|(_, t, _)| t.len() > MAX_KEY_LEN) {
        return Err(TransferError::Malformed(format!(
            "a tag of {} bytes, at most {MAX_KEY_LEN}",
            tag.len()
        )));
    }
    for (key, _, _) in listeners {
        header.extend_from_slice(&(key.as_str().len() as u32).to_le_bytes());
    }
    for (_, tag, _) in listeners {
        header.extend_from_slice(&(tag.len() as u32).to_le_bytes());
    }
    for (key, _, _) in listeners {
        header.extend_from_slice(key.as_str().as_bytes());
    }
    for (_, tag, _) in listeners {
        header.extend_from_slice(tag.as_bytes());
    }
    (&*stream).write_all(&header)?;
    let fds: Vec<RawFd> = listeners.iter().map(|(_, _, fd)| fd.as_raw_fd()).collect();
    for batch in fds.chunks(FDS_PER_MESSAGE) {
        let byte = [batch.len() as u8];
        let iov = [IoSlice::new(&byte)];
        let cmsg = [ControlMessage::ScmRights(batch)];
        loop {
            match socket::sendmsg::<()>(stream.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None) {
                Ok(1) => break,
                Ok(n) => {
                    return Err(TransferError::Io(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("sendmsg sent {n} bytes"),
                    )))
                }
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(TransferError::Io(e.into())),
            }
        }
    }
    Ok(())
}

/// Receives what [`send_listeners`] sent on the other end of `stream` (a
/// connected, blocking unix stream socket; set a read timeout on it to
/// bound the wait). The fds arrive close-on-exec.
pub fn recv_listeners(stream: &UnixStream) -> Result<Vec<(ListenKey, OwnedFd)>, TransferError> {
    Ok(recv_tagged(stream)?
        .into_iter()
        .map(|(k, _, fd)| (k, fd))
        .collect())
}

/// [`recv_listeners`] with each listener's tag (empty from a version 1
/// sender).
pub fn recv_tagged(
    stream: &UnixStream,
) -> Result<Vec<(ListenKey, String, OwnedFd)>, TransferError> {
    let mut r = stream;
    let mut fixed = [0u8; 12];
    r.read_exact(&mut fixed)?;
    let tagged = match &fixed[..8] {
        m if m == MAGIC => true,
        m if m == MAGIC_V1 => false,
        _ => return Err(TransferError::BadMagic),
    };
    let count = u32::from_le_bytes(fixed[8..12].try_into().unwrap()) as usize;
    if count > MAX_COUNT {
        return Err(TransferError::Malformed(format!(
            "{count} listeners announced, at most {MAX_COUNT}"
        )));
    }
    let mut lens = vec![0u8; count * 4 * if tagged { 2 } else { 1 }];
    r.read_exact(&mut lens)?;
    let mut lens: Vec<usize> = lens
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
        .collect();
    if let Some(len) = lens.iter().find(|&&l| l > MAX_KEY_LEN) {
        return Err(TransferError::Malformed(format!(
            "a key or tag of {len} bytes, at most {MAX_KEY_LEN}"
        )));
    }
    let tag_lens = lens.split_off(count);
    let mut text_of = |len: usize, what: &str| -> Result<String, TransferError> {
        let mut text = vec![0u8; len];
        r.read_exact(&mut text)?;
        String::from_utf8(text)
            .map_err(|_| TransferError::Malformed(format!("a {what} is not UTF-8")))
    };
    let mut keys = Vec::with_capacity(count);
    for len in lens {
        keys.push(ListenKey::parse(&text_of(len, "key")?)?);
    }
    let mut tags = Vec::with_capacity(count);
    for len in tag_lens {
        tags.push(text_of(len, "tag")?);
    }
    tags.resize(count, String::new());

    let mut fds: Vec<OwnedFd> = Vec::with_capacity(count);
    while fds.len() < count {
        let mut byte = [0u8; 1];
        let mut iov = [IoSliceMut::new(&mut byte)];
        let mut space = nix::cmsg_space!([RawFd; FDS_PER_MESSAGE]);
        let msg = match socket::recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(TransferError::Io(e.into())),
        };
        if msg.bytes == 0 {
            return Err(TransferError::MissingFds {
                expected: count,
                got: fds.len(),
            });
        }
        let before = fds.len();
        let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
        if let Ok(cmsgs) = msg.cmsgs() {
            for cmsg in cmsgs {
                if let ControlMessageOwned::ScmRights(raw) = cmsg {
                    for fd in raw {
                        // SAFETY: the kernel has just installed `fd` in
                        // this process for this message; nothing else
                        // knows it, so it is owned here alone.
                        fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                    }
                }
            }
        }
        let announced = byte[0] as usize;
        if truncated || announced == 0 || fds.len() - before != announced {
            return Err(TransferError::Malformed(format!(
                "a message announced {announced} file descriptors and carried {}{}",
                fds.len() - before,
                if truncated {
                    " (truncated: out of file descriptors?)"
                } else {
                    ""
                }
            )));
        }
    }
    if fds.len() != count {
        return Err(TransferError::MissingFds {
            expected: count,
            got: fds.len(),
        });
    }
    Ok(keys
        .into_iter()
        .zip(tags)
        .zip(fds)
        .map(|((k, t), fd)| (k, t, fd))
        .collect())
}

/// The first fd systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;

/// Takes the sockets systemd passed to this process (socket activation:
/// `LISTEN_PID` is this process, `LISTEN_FDS` fds from 3, named by
/// `LISTEN_FDNAMES`, `"unknown"` when unnamed) and unsets the three
/// variables, as `sd_listen_fds_with_names(unset_environment = 1)` does, so
/// that a second call and the children see none. Each fd is made
/// close-on-exec. Empty when the variables are absent or meant for another
/// process.
///
/// Call it once, first thing in `main`, before any thread starts (it
/// changes the environment) and before anything else opens a file (the fds
/// from 3 must still be the ones systemd passed).
pub fn systemd_listen_fds() -> Vec<(String, OwnedFd)> {
    let var = |name| std::env::var(name).ok();
    let parsed = parse_listen_env(
        var("LISTEN_PID").as_deref(),
        var("LISTEN_FDS").as_deref(),
        var("LISTEN_FDNAMES").as_deref(),
        std::process::id(),
    );
    for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(name);
    }
    let mut out = Vec::new();
    for (fd, name) in parsed {
        // SAFETY: F_GETFD only reads the flags of `fd`, open or not.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            tracing::warn!("LISTEN_FDS names fd {fd}, which is not open");
            continue;
        }
        // SAFETY: by the protocol, systemd passed `fd` to this process for
        // it to own; the environment is unset above, so no second call
        // takes it again.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: F_SETFD on an fd this process owns.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        out.push((name, owned));
    }
    out
}

/// The fds and names `LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES` describe
/// for the process `my_pid` (pure: [`systemd_listen_fds`] without the
/// environment). Malformed or foreign variables give none; missing or
/// extra names give `"unknown"` and are dropped, as in libsystemd.
pub fn parse_listen_env(
    pid: Option<&str>,
    fds: Option<&str>,
    names: Option<&str>,
    my_pid: u32,
) -> Vec<(RawFd, String)> {
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Vec::new();
    };
    if pid.trim().parse::<u32>().ok() != Some(my_pid) {
        return Vec::new();
    }
    let Ok(n) = fds.trim().parse::<RawFd>() else {
        return Vec::new();
    };
    if !(1..=4096).contains(&n) {
        return Vec::new();
    }
    let mut names = names.map(|s| s.split(':')).into_iter().flatten();
    (0..n)
        .map(|i| {
            let name = names
                .next()
                .filter(|s| !s.is_empty())
                .unwrap_or("unknown")
                .to_string();
            (LISTEN_FDS_START + i, name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ListenAddress;
    use std::io::Read;
    use std::os::fd::AsFd;

    fn tcp_listener() -> (ListenKey, std::net::TcpListener) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let key = ListenKey::new(&ListenAddress::Tcp(l.local_addr().unwrap()));
        (key, l)
    }

    #[test]
    fn listeners_cross_a_unix_socket_and_accept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("www.sock");
        let unix = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let unix_key = ListenKey::new(&ListenAddress::Unix(path.clone()));
        // More than one message's worth of fds.
        let mut tcp: Vec<_> = (0..FDS_PER_MESSAGE + 3).map(|_| tcp_listener()).collect();
        tcp.sort_by(|a, b| a.0.cmp(&b.0));
        let mut sent: Vec<(ListenKey, BorrowedFd<'_>)> = vec![(unix_key.clone(), unix.as_fd())];
        sent.extend(tcp.iter().map(|(k, l)| (k.clone(), l.as_fd())));

        let (a, b) = UnixStream::pair().unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let receiver = std::thread::spawn(move || recv_listeners(&b));
        send_listeners(&a, &sent).unwrap();
        let received = receiver.join().unwrap().unwrap();

        assert_eq!(received.len(), sent.len());
        for ((k, fd), (sk, sfd)) in received.iter().zip(&sent) {
            assert_eq!(k, sk);
            assert_ne!(fd.as_raw_fd(), sfd.as_raw_fd(), "a new fd");
            assert_eq!(ListenKey::of_socket(fd.as_fd()).unwrap(), *k);
            // SAFETY: F_GETFD only reads the flags.
            let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        }
        // The received sockets accept connections: the unix one ...
        let (_, unix_fd) = received.into_iter().next().unwrap();
        let got = std::os::unix::net::UnixListener::from(unix_fd);
        let mut client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        client.write_all(b"hello").unwrap();
        drop(unix); // the sender's fd closed: the socket lives on here
        let (mut conn, _) = got.accept().unwrap();
        let mut buf = [0u8; 5];
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hello");
    }

    #[test]
    fn a_received_tcp_listener_accepts() {
        let (key, l) = tcp_listener();
        let addr = l.local_addr().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let receiver = std::thread::spawn(move || recv_listeners(&b));
        send_listeners(&a, &[(key.clone(), l.as_fd())]).unwrap();
        drop(l);
        let mut received = receiver.join().unwrap().unwrap();
        let (k, fd) = received.pop().unwrap();
        assert_eq!(k, key);
        let got = std::net::TcpListener::from(fd);
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.write_all(b"x").unwrap();
        let (mut conn, _) = got.accept().unwrap();
        let mut buf = [0u8; 1];
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"x");
    }

    #[test]
    fn nothing_to_hand_over() {
        let (a, b) = UnixStream::pair().unwrap();
        send_listeners(&a, &[]).unwrap();
        assert!(recv_listeners(&b).unwrap().is_empty());
    }

    #[test]
    fn a_garbled_or_short_hand_over_is_refused() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"NOTFPMD!\0\0\0\0").unwrap();
        assert!(matches!(recv_listeners(&b), Err(TransferError::BadMagic)));

        let (mut a, b) = UnixStream::pair().unwrap();
        let mut h = MAGIC_V1.to_vec();
        h.extend_from_slice(&1u32.to_le_bytes());
        h.extend_from_slice(&5u32.to_le_bytes());
        h.extend_from_slice(b"x.soc");
        a.write_all(&h).unwrap();
        assert!(matches!(recv_listeners(&b), Err(TransferError::Key(_))));

        // A header without its fds: the sender went away.
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut h = MAGIC_V1.to_vec();
        h.extend_from_slice(&1u32.to_le_bytes());
        h.extend_from_slice(&14u32.to_le_bytes());
        h.extend_from_slice(b"127.0.0.1:9000");
        a.write_all(&h).unwrap();
        drop(a);
        assert!(matches!(
            recv_listeners(&b),
            Err(TransferError::MissingFds {
                expected: 1,
                got: 0
            })
        ));

        let (mut a, b) = UnixStream::pair().unwrap();
        let mut h = MAGIC_V1.to_vec();
        h.extend_from_slice(&u32::MAX.to_le_bytes());
        a.write_all(&h).unwrap();
        assert!(matches!(
            recv_listeners(&b),
            Err(TransferError::Malformed(_))
        ));
    }

    /// Tags travel with their listeners; a version 1 header (no tags) is
    /// still read, with empty tags.
    #[test]
    fn tags_cross_with_their_listeners_and_v1_is_read() {
        let (k1, l1) = tcp_listener();
        let (k2, l2) = tcp_listener();
        let (a, b) = UnixStream::pair().unwrap();
        let receiver = std::thread::spawn(move || recv_tagged(&b));
        send_tagged(
            &a,
            &[
                (k1.clone(), "systemd:www", l1.as_fd()),
                (k2.clone(), "", l2.as_fd()),
            ],
        )
        .unwrap();
        let got = receiver.join().unwrap().unwrap();
        let got: Vec<(ListenKey, String)> = got.into_iter().map(|(k, t, _)| (k, t)).collect();
        assert_eq!(
            got,
            vec![(k1.clone(), "systemd:www".into()), (k2, String::new())]
        );

        // Version 1, as an fpmd before tags sends it.
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut h = MAGIC_V1.to_vec();
        h.extend_from_slice(&1u32.to_le_bytes());
        h.extend_from_slice(&(k1.as_str().len() as u32).to_le_bytes());
        h.extend_from_slice(k1.as_str().as_bytes());
        a.write_all(&h).unwrap();
        let receiver = std::thread::spawn(move || recv_tagged(&b));
        let byte = [1u8];
        let fds = [l1.as_raw_fd()];
        socket::sendmsg::<()>(
            a.as_raw_fd(),
            &[IoSlice::new(&byte)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        let got = receiver.join().unwrap().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((&got[0].0, got[0].1.as_str()), (&k1, ""));
    }

    #[test]
    fn listen_env_parsing() {
        let me = 4242;
        assert_eq!(
            parse_listen_env(Some("4242"), Some("2"), Some("web:admin"), me),
            vec![(3, "web".into()), (4, "admin".into())]
        );
        assert_eq!(
            parse_listen_env(Some("4242"), Some("3"), Some("web::x:extra"), me),
            vec![(3, "web".into()), (4, "unknown".into()), (5, "x".into())]
        );
        assert_eq!(
            parse_listen_env(Some("4242"), Some("1"), None, me),
            vec![(3, "unknown".into())]
        );
        assert!(parse_listen_env(Some("1"), Some("1"), None, me).is_empty());
        assert!(parse_listen_env(None, Some("1"), None, me).is_empty());
        assert!(parse_listen_env(Some("4242"), None, None, me).is_empty());
        assert!(parse_listen_env(Some("4242"), Some("0"), None, me).is_empty());
        assert!(parse_listen_env(Some("4242"), Some("-1"), None, me).is_empty());
        assert!(parse_listen_env(Some("4242"), Some("x"), None, me).is_empty());
    }

    const CHILD: &str = "FPMD_TEST_SYSTEMD_CHILD";

    /// The child half of [`systemd_fds_in_a_child_process`]: does nothing
    /// unless that test started it.
    #[test]
    fn systemd_child() {
        let Ok(expected) = std::env::var(CHILD) else {
            return;
        };
        let fds = systemd_listen_fds();
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            assert!(std::env::var_os(name).is_none(), "{name} still set");
        }
        assert_eq!(fds.len(), 1, "{fds:?}");
        let (name, fd) = &fds[0];
        assert_eq!(name, "web");
        assert_eq!(fd.as_raw_fd(), 3);
        assert_eq!(ListenKey::of_socket(fd.as_fd()).unwrap().as_str(), expected);
        // SAFETY: F_GETFD only reads the flags.
        let flags = unsafe { libc::fcntl(3, libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        assert!(systemd_listen_fds().is_empty(), "taken twice");
        println!("systemd child ok");
    }

    /// A child started as systemd starts a socket-activated service
    /// (`LISTEN_PID` is its own pid: set by the shell that execs it) finds
    /// its socket at fd 3.
    #[test]
    fn systemd_fds_in_a_child_process() {
        use std::os::unix::process::CommandExt;
        let (key, l) = tcp_listener();
        let raw = l.as_raw_fd();
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(r#"LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=web exec "$0" "$@""#)
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "listen::transfer::tests::systemd_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, key.as_str());
        // SAFETY: dup2 and fcntl are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                let r = if raw == LISTEN_FDS_START {
                    libc::fcntl(raw, libc::F_SETFD, 0)
                } else {
                    libc::dup2(raw, LISTEN_FDS_START)
                };
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("systemd child ok"),
            "child: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
