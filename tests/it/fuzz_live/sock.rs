//! The fuzzer's own client: a unix or TCP connection to one of fpmd's
//! listeners, with the timeouts, the half-close and the reset it needs.

use crate::harness::Addr;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug)]
pub(super) enum Target {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl From<Addr> for Target {
    fn from(a: Addr) -> Target {
        match a {
            Addr::Unix(p) => Target::Unix(p),
            Addr::Tcp(a) => Target::Tcp(a),
        }
    }
}

pub(super) enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    pub(super) fn connect(t: &Target) -> io::Result<Sock> {
        use socket2::{Domain, SockAddr, Socket, Type};
        let (domain, addr) = match t {
            Target::Unix(p) => (Domain::UNIX, SockAddr::unix(p)?),
            Target::Tcp(a) => (Domain::for_address(*a), SockAddr::from(*a)),
        };
        let s = Socket::new(domain, Type::STREAM, None)?;
        s.connect_timeout(&addr, Duration::from_secs(10))?;
        Ok(match t {
            Target::Unix(_) => Sock::Unix(s.into()),
            Target::Tcp(_) => {
                s.set_nodelay(true)?;
                Sock::Tcp(s.into())
            }
        })
    }
    pub(super) fn set_read_timeout(&self, d: Duration) {
        let d = Some(d.max(Duration::from_millis(1)));
        let _ = match self {
            Sock::Tcp(s) => s.set_read_timeout(d),
            Sock::Unix(s) => s.set_read_timeout(d),
        };
    }
    pub(super) fn set_write_timeout(&self, d: Duration) {
        let d = Some(d.max(Duration::from_millis(1)));
        let _ = match self {
            Sock::Tcp(s) => s.set_write_timeout(d),
            Sock::Unix(s) => s.set_write_timeout(d),
        };
    }
    pub(super) fn set_nonblocking(&self, on: bool) {
        let _ = match self {
            Sock::Tcp(s) => s.set_nonblocking(on),
            Sock::Unix(s) => s.set_nonblocking(on),
        };
    }
    pub(super) fn shutdown_write(&self) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Write),
            Sock::Unix(s) => s.shutdown(Shutdown::Write),
        };
    }
    /// Closes with a reset (TCP: SO_LINGER 0); a unix socket just closes.
    pub(super) fn reset(self) {
        if let Sock::Tcp(s) = &self {
            let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
        }
    }
}

impl Read for Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(b),
            Sock::Unix(s) => s.read(b),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(b),
            Sock::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
