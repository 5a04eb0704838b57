//! A connected stream socket (unix or TCP) on the event loop that is woken
//! for what it reads, not for room to write: fpmd's connections to web
//! servers and to its children.
//!
//! tokio's `UnixStream`/`TcpStream` register every socket for both
//! readability and writability (`EPOLLIN|EPOLLOUT|EPOLLET`). Each time the
//! peer reads what fpmd wrote, the kernel then reports the room it freed
//! (an `EPOLLOUT` edge), and the runtime's thread wakes for it although no
//! task waits to write: php-cgi reading its request, nginx reading each
//! piece of the answer. Measured with `strace -e epoll_wait` on fpmd under
//! DokuWiki without upstream keepalive: 9,188 of 19,985 events were
//! `EPOLLOUT` alone, ~2.9 per request, and 5.3 `epoll_wait` per request.
//! Here a socket is registered for readability only (`EPOLLIN|EPOLLRDHUP`,
//! edge-triggered); a write is tried at once, and only a write that finds
//! the socket full (`EAGAIN`) registers a duplicate of the fd for
//! writability, waits on it and drops it once the write went through.
//!
//! Must not touch: what is read or written (the FastCGI path's), when a
//! connection is opened or closed.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// A connected, non-blocking stream socket registered for readability.
/// Split it ([`Stream::into_split`]) to read and write from one task or two.
pub struct Stream {
    io: Arc<AsyncFd<OwnedFd>>,
}

/// The reading side of a [`Stream`]: [`AsyncRead`] with `recv(2)`.
pub struct ReadHalf {
    io: Arc<AsyncFd<OwnedFd>>,
}

/// The writing side of a [`Stream`]: [`AsyncWrite`] with `write(2)` and
/// `writev(2)`. Dropped while its [`ReadHalf`] lives on, it shuts the
/// socket down for writing (`shutdown(SHUT_WR)`, as tokio's
/// `OwnedWriteHalf` does), so the peer reads the end; dropped last, the
/// close that follows says as much and no `shutdown` is made.
pub struct WriteHalf {
    io: Arc<AsyncFd<OwnedFd>>,
    /// A duplicate of the fd registered for writability, while a write
    /// waits for room (`EAGAIN`); `None` otherwise.
    room: Option<AsyncFd<OwnedFd>>,
}

impl Stream {
    /// Takes `fd`, a connected stream socket: makes it non-blocking (unless
    /// `nonblocking` says it already is, e.g. from `accept4(SOCK_NONBLOCK)`)
    /// and registers it for readability with the current tokio runtime.
    /// Errors: `fcntl` or the registration (`epoll_ctl`) failed; no runtime
    /// panics, as tokio's own types do.
    pub fn new(fd: OwnedFd, nonblocking: bool) -> io::Result<Stream> {
        if !nonblocking {
            set_nonblocking(fd.as_raw_fd())?;
        }
        let io = register(fd, Interest::READABLE)?;
        Ok(Stream { io: Arc::new(io) })
    }

    /// Connects to the unix socket at `path`. The connect itself is
    /// tokio's (it waits for room when the listener's backlog is full);
    /// the socket is then registered here, readability only.
    pub async fn connect_unix(path: &std::path::Path) -> io::Result<Stream> {
        let s = tokio::net::UnixStream::connect(path).await?.into_std()?;
        Stream::new(OwnedFd::from(s), true)
    }

    /// Splits into a reading and a writing side, each usable from its own
    /// task; the socket is closed once both are dropped.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        (
            ReadHalf {
                io: self.io.clone(),
            },
            WriteHalf {
                io: self.io,
                room: None,
            },
        )
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.io.get_ref().as_fd()
    }
}

impl AsRawFd for ReadHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.io.as_raw_fd()
    }
}

impl AsRawFd for WriteHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.io.as_raw_fd()
    }
}

/// Registers `fd` with the current runtime for `interest`.
fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the OwnedFd is moved into the AsyncFd, which keeps it open
    // for as long as it is registered.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(|e| e.into_parts().1)
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `n` bytes moved, or the error of the call that just returned `n < 0`.
fn result(n: isize) -> io::Result<usize> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.io.poll_read_ready(cx))?;
            let len = buf.remaining();
            // SAFETY: recv writes at most `unfilled.len()` bytes into the
            // unfilled part, which is then marked initialized and filled.
            let read = guard.try_io(|io| unsafe {
                let unfilled = buf.unfilled_mut();
                result(libc::recv(
                    io.as_raw_fd(),
                    unfilled.as_mut_ptr().cast(),
                    unfilled.len(),
                    0,
                ))
            });
            match read {
                Ok(Ok(n)) => {
                    // SAFETY: recv initialized these `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    if n > 0 && n < len {
                        // Less than asked for: the socket is drained (as
                        // tokio's own streams conclude under epoll), so the
                        // next read waits for the next edge instead of
                        // finding EAGAIN first.
                        guard.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // EAGAIN: the readiness is cleared; wait for the next edge.
                Err(_would_block) => continue,
            }
        }
    }
}

impl WriteHalf {
    /// Runs `op` (a `write`/`writev` on the fd) at once; on `EAGAIN` waits
    /// for room on a duplicate registered for writability, then tries
    /// again. The duplicate is dropped (deregistered, closed) once a write
    /// went through.
    fn poll_op(
        &mut self,
        cx: &mut Context<'_>,
        op: impl Fn(RawFd) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        let fd = self.io.as_raw_fd();
        if self.room.is_none() {
            loop {
                match op(fd) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    done => return Poll::Ready(done),
                }
            }
            // SAFETY: F_DUPFD_CLOEXEC returns a new fd we then own.
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            if dup < 0 {
                return Poll::Ready(Err(io::Error::last_os_error()));
            }
            // SAFETY: `dup` is a fresh fd owned by nothing else.
            let dup = unsafe { OwnedFd::from_raw_fd(dup) };
            self.room = Some(register(dup, Interest::WRITABLE)?);
        }
        loop {
            let room = self.room.as_ref().expect("registered above");
            let mut guard = ready!(room.poll_write_ready(cx))?;
            match guard.try_io(|_| op(fd)) {
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(done) => {
                    drop(guard);
                    self.room = None;
                    return Poll::Ready(done);
                }
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // SAFETY: write(2) of a valid buffer; SIGPIPE is ignored in fpmd
        // (Rust's runtime sets it so), a closed peer gives EPIPE.
        self.get_mut().poll_op(cx, |fd| {
            result(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) })
        })
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let n = bufs.len().min(libc::UIO_MAXIOV as usize);
        // SAFETY: IoSlice is ABI-compatible with iovec (std guarantees it).
        self.get_mut().poll_op(cx, |fd| {
            result(unsafe { libc::writev(fd, bufs.as_ptr().cast(), n as libc::c_int) })
        })
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// `shutdown(SHUT_WR)`: the peer reads the end. A socket the peer
    /// already closed (`ENOTCONN`) counts as shut.
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // SAFETY: shutdown(2) on our fd.
        let r = unsafe { libc::shutdown(self.io.as_raw_fd(), libc::SHUT_WR) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOTCONN) {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for WriteHalf {
    fn drop(&mut self) {
        if Arc::strong_count(&self.io) > 1 {
            // SAFETY: shutdown(2) on our fd; its error is of no use here.
            unsafe { libc::shutdown(self.io.as_raw_fd(), libc::SHUT_WR) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pair() -> (Stream, std::os::unix::net::UnixStream) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (Stream::new(OwnedFd::from(a), false).unwrap(), b)
    }

    #[tokio::test]
    async fn reads_and_writes_both_ways() {
        let (s, mut peer) = pair();
        let (mut r, mut w) = s.into_split();
        w.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        std::io::Read::read_exact(&mut peer, &mut got).unwrap();
        assert_eq!(&got, b"hello");
        std::io::Write::write_all(&mut peer, b"world").unwrap();
        let mut got = [0u8; 5];
        r.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"world");
        drop(peer);
        assert_eq!(r.read(&mut got).await.unwrap(), 0, "end of file");
    }

    #[tokio::test]
    async fn a_write_to_a_full_socket_waits_for_room_then_goes_through() {
        let (s, peer) = pair();
        let (_r, mut w) = s.into_split();
        // Far more than a unix socket's buffer: the writes hit EAGAIN and
        // wait until the peer reads.
        let big = vec![7u8; 4 << 20];
        let reader = std::thread::spawn(move || {
            let mut peer = peer;
            let mut all = Vec::new();
            std::io::Read::read_to_end(&mut peer, &mut all).unwrap();
            all
        });
        let mut slices = [
            io::IoSlice::new(&big[..1 << 20]),
            io::IoSlice::new(&big[1 << 20..]),
        ];
        let mut bufs = &mut slices[..];
        while !bufs.is_empty() {
            let n = w.write_vectored(bufs).await.unwrap();
            io::IoSlice::advance_slices(&mut bufs, n);
        }
        w.write_all(b"end").await.unwrap();
        assert!(
            w.room.is_none(),
            "the duplicate goes once the write went through"
        );
        drop(w);
        drop(_r);
        let all = reader.join().unwrap();
        assert_eq!(all.len(), big.len() + 3);
        assert!(all[..big.len()].iter().all(|&b| b == 7));
        assert_eq!(&all[big.len()..], b"end");
    }

    #[tokio::test]
    async fn dropping_the_writer_alone_ends_the_peers_reading() {
        let (s, mut peer) = pair();
        let (r, w) = s.into_split();
        drop(w);
        let mut buf = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut peer, &mut buf).unwrap(), 0);
        drop(r);
    }

    #[tokio::test]
    async fn a_write_to_a_closed_peer_is_an_error_not_a_signal() {
        let (s, peer) = pair();
        let (_r, mut w) = s.into_split();
        drop(peer);
        let e = w.write_all(b"x").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}
