//! The [`ListenerTable`]: the one owner of every listening socket, keyed by
//! address.
//!
//! A reload asks the table for each configured address ([`obtain`]): a
//! socket it already holds is kept (its `listen.*` options re-applied in
//! place), any other is bound. Sockets inherited from a previous fpmd or
//! from systemd enter through [`adopt`] and are then obtained like any
//! other. [`retain`] closes the sockets no pool uses any more.
//!
//! **The unlink rule.** A unix socket's file is removed in three places
//! only: [`retain`], for the sockets it closes, the drop of the table (the
//! end of a normal stop), and [`refuse_new`], just before either. Each
//! removes only a file fpmd owns: one it bound or took over from a
//! previous fpmd, never one of a systemd socket unit, and only while the
//! path still holds the very file recorded when it was bound
//! or adopted (same device and inode). After [`disown_files`] (the sockets
//! went to a new fpmd in a binary upgrade) nothing is unlinked any more.
//! Accept loops and connections never unlink anything.
//!
//! Owns: the sockets and their files. Must not touch: connections (accept
//! loops borrow a clone of a socket, [`ListenerTable::clone_socket`]).
//!
//! [`obtain`]: ListenerTable::obtain
//! [`adopt`]: ListenerTable::adopt
//! [`retain`]: ListenerTable::retain
//! [`disown_files`]: ListenerTable::disown_files
//! [`refuse_new`]: ListenerTable::refuse_new

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use socket2::{Domain, SockAddr, Socket, Type};
use tracing::warn;

use super::bind::{self, BindError, SocketFile};
use crate::config::{Listen, ListenAddress};

/// A listening address as the table knows it: the canonical text of a
/// [`ListenAddress`] (a unix socket's absolute path with repeated `/` and
/// `.` components removed, or a TCP address as `127.0.0.1:9000` /
/// `[::1]:9000`). The same text is the key of a socket handed to another
/// process.
#[derive(Debug, Clone)]
pub struct ListenKey {
    text: Box<str>,
    address: ListenAddress,
}

impl ListenKey {
    /// The key of `address`.
    pub fn new(address: &ListenAddress) -> ListenKey {
        let address = match address {
            ListenAddress::Unix(path) => ListenAddress::Unix(path.components().collect()),
            tcp => tcp.clone(),
        };
        let text = address.to_string().into_boxed_str();
        ListenKey { text, address }
    }

    /// Parses a key's text (as received from another process): an absolute
    /// path, or an IP address and port.
    pub fn parse(text: &str) -> Result<ListenKey, KeyError> {
        if text.starts_with('/') {
            if text.contains('\0') {
                return Err(KeyError::Invalid(text.into()));
            }
            Ok(ListenKey::new(&ListenAddress::Unix(PathBuf::from(text))))
        } else if let Ok(port) = text.parse::<u16>() {
            // A bare port's socket (handed over by an fpmd).
            Ok(ListenKey::new(&ListenAddress::Port(port)))
        } else {
            text.parse::<SocketAddr>()
                .map(|a| ListenKey::new(&ListenAddress::Tcp(a)))
                .map_err(|_| KeyError::Invalid(text.into()))
        }
    }

    /// The key of the address a socket is bound to (`getsockname`).
    /// Errors: not an IP or unix stream socket, or an unnamed, abstract or
    /// non-UTF-8 unix address.
    pub fn of_socket(fd: BorrowedFd<'_>) -> Result<ListenKey, KeyError> {
        let local = socket2::SockRef::from(&fd)
            .local_addr()
            .map_err(KeyError::Io)?;
        address_of(&local)
            .map(|a| ListenKey::new(&a))
            .ok_or_else(|| KeyError::Unsupported(format!("{local:?}")))
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The address the key names.
    pub fn address(&self) -> &ListenAddress {
        &self.address
    }
}

impl From<&ListenAddress> for ListenKey {
    fn from(address: &ListenAddress) -> ListenKey {
        ListenKey::new(address)
    }
}

impl fmt::Display for ListenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

// The text determines the address: compare, order and hash the text only.
impl PartialEq for ListenKey {
    fn eq(&self, other: &ListenKey) -> bool {
        self.text == other.text
    }
}
impl Eq for ListenKey {}
impl PartialOrd for ListenKey {
    fn partial_cmp(&self, other: &ListenKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ListenKey {
    fn cmp(&self, other: &ListenKey) -> Ordering {
        self.text.cmp(&other.text)
    }
}
impl Hash for ListenKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state)
    }
}

/// A key that names no address fpmd can listen on.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("'{0}' is not a listen address (an absolute path or IP:PORT)")]
    Invalid(String),
    #[error("not a TCP or named unix socket: {0}")]
    Unsupported(String),
    #[error("getsockname: {0}")]
    Io(io::Error),
}

/// What [`ListenerTable::obtain`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Obtained {
    /// The table's socket for the address is kept (connections waiting in
    /// its queue stay there); its options were re-applied.
    Kept,
    /// A new socket was bound: the address was not in the table.
    Bound,
    /// The table held a unix socket for the address whose file was removed
    /// or replaced since (so nobody could reach it): it was closed and a new
    /// socket bound. An accept loop on the old socket must be replaced.
    Rebound,
}

/// Where an adopted socket comes from; it decides who owns its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inherited {
    /// From the fpmd this one replaces (binary upgrade): its file is fpmd's,
    /// its options are re-applied, and it is unlinked as if bound here.
    Upgrade,
    /// From systemd socket activation (directly, or through the fpmd this
    /// one replaces): the socket unit owns the socket and its file
    /// (`SocketUser=`, `SocketMode=`, `Backlog=`, removal). fpmd changes
    /// none of them, never binds another in its place, never unlinks its
    /// file and keeps it open when no pool uses it
    /// ([`ListenerTable::retain`]).
    Systemd,
}

/// Why a socket could not be adopted; the fd is closed.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error("inherited socket for {key}: {what}")]
    Invalid { key: ListenKey, what: String },
    #[error("inherited socket for {key} is bound to {actual}, not to it")]
    WrongAddress { key: ListenKey, actual: String },
    #[error("inherited socket for {key}: the table already holds a socket for this address")]
    Duplicate { key: ListenKey },
    #[error("inherited socket for {key}: {source}")]
    Io { key: ListenKey, source: io::Error },
}

#[derive(Debug)]
enum Origin {
    Bound,
    Adopted(Inherited),
}

#[derive(Debug)]
struct Entry {
    socket: Socket,
    /// A unix socket's file as bound or adopted.
    file: Option<SocketFile>,
    origin: Origin,
}

impl Entry {
    /// The file, when fpmd owns it (changes its owner and mode, unlinks it).
    fn own_file(&self) -> Option<&SocketFile> {
        match self.origin {
            Origin::Adopted(Inherited::Systemd) => None,
            Origin::Bound | Origin::Adopted(Inherited::Upgrade) => self.file.as_ref(),
        }
    }
}

/// Every listening socket of the daemon, keyed by address. See the module
/// documentation for when a socket's file is unlinked.
#[derive(Debug)]
pub struct ListenerTable {
    entries: BTreeMap<ListenKey, Entry>,
    /// False once the sockets were handed to another process.
    owns_files: bool,
}

impl Default for ListenerTable {
    fn default() -> ListenerTable {
        ListenerTable::new()
    }
}

impl ListenerTable {
    pub fn new() -> ListenerTable {
        ListenerTable {
            entries: BTreeMap::new(),
            owns_files: true,
        }
    }

    /// Makes sure the table has a listening socket for `listen.address`
    /// with `listen`'s options, for the pool `pool` (named in warnings).
    ///
    /// A socket already in the table is kept: `listen(backlog)` is called
    /// again and a unix socket's owner, group and mode are re-applied. Any
    /// other address is bound: a stale unix socket file (nobody accepts on
    /// it) is replaced, a live one or a path that is not a socket is
    /// refused, and `somaxconn` capping the backlog is warned of. Errors
    /// leave the table as it was, except that a kept socket whose options
    /// could not all be re-applied stays in it.
    pub fn obtain(&mut self, pool: &str, listen: &Listen) -> Result<Obtained, BindError> {
        let key = ListenKey::new(&listen.address);
        let mut obtained = Obtained::Bound;
        if let Some(entry) = self.entries.get(&key) {
            if matches!(entry.origin, Origin::Adopted(Inherited::Systemd)) {
                // The socket unit's: left as it made it (owner, mode,
                // backlog), never replaced by one of fpmd's.
                return Ok(Obtained::Kept);
            }
            match &entry.file {
                Some(file) if !file.is_current() => {
                    warn!(pool = %pool, "the socket file {} was removed or replaced: binding it again", file.path.display());
                    obtained = Obtained::Rebound;
                }
                _ => {
                    bind::reapply(pool, listen, &entry.socket, entry.own_file())?;
                    return Ok(Obtained::Kept);
                }
            }
        }
        let (socket, file) = bind::bind(pool, listen)?;
        // A replaced entry's file is no longer its own: dropping it
        // unlinks nothing.
        self.entries.insert(
            key,
            Entry {
                socket,
                file,
                origin: Origin::Bound,
            },
        );
        Ok(obtained)
    }

    /// Takes `fd`, a listening socket inherited for `key`, into the table.
    /// Checks: it is a stream socket, listening, of the key's family (IPv4,
    /// IPv6, unix), bound to the key's address (`getsockname`), and a unix
    /// socket's path holds a socket file; then sets it non-blocking and
    /// close-on-exec (php-cgi children must not inherit it). Owner, mode
    /// and backlog are re-applied by the [`obtain`](Self::obtain) of the
    /// pool that uses it, as for any kept socket.
    pub fn adopt(
        &mut self,
        key: ListenKey,
        fd: OwnedFd,
        from: Inherited,
    ) -> Result<(), AdoptError> {
        if self.entries.contains_key(&key) {
            return Err(AdoptError::Duplicate { key });
        }
        let socket = Socket::from(fd);
        let invalid = |what: &str| AdoptError::Invalid {
            key: key.clone(),
            what: what.into(),
        };
        let io = |source| AdoptError::Io {
            key: key.clone(),
            source,
        };
        if socket.r#type().map_err(io)? != Type::STREAM {
            return Err(invalid("not a stream socket"));
        }
        let want: &[Domain] = match key.address() {
            ListenAddress::Tcp(a) if a.is_ipv4() => &[Domain::IPV4],
            ListenAddress::Tcp(_) => &[Domain::IPV6],
            // `[::]`, or `0.0.0.0` where that could not be bound.
            ListenAddress::Port(_) => &[Domain::IPV6, Domain::IPV4],
            ListenAddress::Unix(_) => &[Domain::UNIX],
        };
        let domain = socket.domain().map_err(io)?;
        if !want.contains(&domain) {
            return Err(invalid(&format!("{domain:?} socket, not {:?}", want[0])));
        }
        if !socket.is_listener().map_err(io)? {
            return Err(invalid("not listening"));
        }
        let local = socket.local_addr().map_err(io)?;
        let actual = address_of(&local);
        if !actual
            .as_ref()
            .is_some_and(|a| key.address().is_bound_as(a))
        {
            return Err(AdoptError::WrongAddress {
                actual: actual.map_or_else(|| format!("{local:?}"), |a| a.to_string()),
                key,
            });
        }
        let file = match key.address() {
            ListenAddress::Unix(path) => Some(SocketFile::at(path).map_err(io)?),
            ListenAddress::Tcp(_) | ListenAddress::Port(_) => None,
        };
        socket.set_nonblocking(true).map_err(io)?;
        socket.set_cloexec(true).map_err(io)?;
        self.entries.insert(
            key,
            Entry {
                socket,
                file,
                origin: Origin::Adopted(from),
            },
        );
        Ok(())
    }

    /// Closes every socket whose key is not in `keep` and unlinks its file
    /// (see the unlink rule), except the sockets from systemd, which stay
    /// open (unused until a configuration uses them again: the socket unit
    /// owns them). Returns the keys closed. An accept loop on a closed
    /// socket holds its own clone: stop it first (its route to `None`), or
    /// the kernel keeps the socket listening until it ends.
    pub fn retain(&mut self, keep: &[ListenKey]) -> Vec<ListenKey> {
        let gone: Vec<ListenKey> = self
            .entries
            .iter()
            .filter(|(k, e)| {
                !keep.contains(k) && !matches!(e.origin, Origin::Adopted(Inherited::Systemd))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in &gone {
            if let Some(entry) = self.entries.remove(key) {
                self.close(entry);
            }
        }
        gone
    }

    /// Makes the socket of `key` refuse new connections while those the
    /// kernel has made can still be accepted, for the last accepts before
    /// [`retain`](Self::retain) or the drop of the table closes it: closing
    /// resets every connection still queued, each with a request the web
    /// server has sent and will not send elsewhere (nginx retries no POST
    /// once it was sent). Returns whether the socket refuses now: false,
    /// changing nothing, for a systemd socket and after
    /// [`disown_files`](Self::disown_files) (those sockets live on in
    /// another process, which serves what waits in them), or for a key not
    /// in the table.
    ///
    /// TCP: a socket filter drops every SYN without ACK, the first segment
    /// of a handshake. The client retransmits it (after 1 s on Linux), is
    /// refused by then (`ECONNREFUSED`) and goes to its next upstream, its
    /// request unsent; the final ACK of a handshake already under way still
    /// passes, so that connection is made and queued. Unix: the file is
    /// unlinked now (by the unlink rule), and `connect` fails with `ENOENT`.
    /// Errors: the filter could not be attached (the socket is unchanged).
    pub fn refuse_new(&mut self, key: &ListenKey) -> io::Result<bool> {
        let owns_files = self.owns_files;
        let Some(entry) = self.entries.get_mut(key) else {
            return Ok(false);
        };
        if !owns_files || matches!(entry.origin, Origin::Adopted(Inherited::Systemd)) {
            return Ok(false);
        }
        match key.address() {
            ListenAddress::Tcp(_) | ListenAddress::Port(_) => {
                entry.socket.attach_filter(&DROP_SYN)?
            }
            ListenAddress::Unix(_) => {
                if let Some(file) = entry.file.take() {
                    file.unlink();
                }
            }
        }
        Ok(true)
    }

    /// From now on nothing is unlinked, neither by [`retain`](Self::retain)
    /// nor by the drop of the table: for after the sockets were handed to
    /// a new fpmd, which owns their files from then on.
    pub fn disown_files(&mut self) {
        self.owns_files = false;
    }

    /// Where the socket of `key` came from: `None` when fpmd bound it, or
    /// for a key not in the table.
    pub fn inherited(&self, key: &ListenKey) -> Option<Inherited> {
        match self.entries.get(key)?.origin {
            Origin::Bound => None,
            Origin::Adopted(from) => Some(from),
        }
    }

    /// Every socket, in key order, for the hand-over to another process.
    pub fn fds(&self) -> Vec<(ListenKey, BorrowedFd<'_>)> {
        self.entries
            .iter()
            .map(|(k, e)| (k.clone(), e.socket.as_fd()))
            .collect()
    }

    /// A new fd for the socket of `key` (the same socket: an accept loop
    /// registers it with the event loop). Errors: `NotFound` for a key not
    /// in the table.
    pub fn clone_socket(&self, key: &ListenKey) -> io::Result<Socket> {
        match self.entries.get(key) {
            Some(e) => e.socket.try_clone(),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no listening socket for {key}"),
            )),
        }
    }

    pub fn contains(&self, key: &ListenKey) -> bool {
        self.entries.contains_key(key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &ListenKey> {
        self.entries.keys()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn close(&self, entry: Entry) {
        let file = entry.own_file().filter(|_| self.owns_files).cloned();
        // Close first: a web server connecting in between finds no file
        // rather than a file nobody accepts on.
        drop(entry);
        if let Some(file) = file {
            file.unlink();
        }
    }
}

/// A normal stop: every socket is closed and its file unlinked (by the
/// unlink rule). To drop the table without unlinking, call
/// [`ListenerTable::disown_files`] first.
impl Drop for ListenerTable {
    fn drop(&mut self) {
        for entry in std::mem::take(&mut self.entries).into_values() {
            self.close(entry);
        }
    }
}

/// A classic BPF socket filter (`SO_ATTACH_FILTER`) that drops each TCP
/// segment with SYN set and ACK clear and keeps all others. A TCP socket's
/// filter sees the segment from its TCP header on, so byte 13 holds the
/// flags (RFC 9293 3.1); a return of 0 drops the segment, `u32::MAX` keeps
/// it whole. Sockets made from the listener inherit the filter, and see no
/// such segment once established.
const DROP_SYN: [libc::sock_filter; 5] = {
    const fn op(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        }
    }
    const SYN: u32 = 0x02;
    const ACK: u32 = 0x10;
    [
        op(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0, 0, 13),
        op(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0, 0, SYN | ACK),
        op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 1, SYN),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
    ]
};

/// The [`ListenAddress`] a socket address is, if fpmd could listen on it.
fn address_of(local: &SockAddr) -> Option<ListenAddress> {
    if let Some(addr) = local.as_socket() {
        let addr = match addr {
            SocketAddr::V6(mut v6) => {
                v6.set_flowinfo(0);
                SocketAddr::V6(v6)
            }
            v4 => v4,
        };
        return Some(ListenAddress::Tcp(addr));
    }
    let path: &Path = local.as_pathname()?;
    path.to_str()?;
    path.is_absolute()
        .then(|| ListenAddress::Unix(path.components().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::Duration;

    fn unix_listen(path: &Path, mode: u32, backlog: u32) -> Listen {
        Listen {
            address: ListenAddress::Unix(path.to_path_buf()),
            owner: Some(nix::unistd::Uid::effective().as_raw()),
            group: Some(nix::unistd::Gid::effective().as_raw()),
            mode,
            backlog,
            allowed_clients: None,
            acl_users: Vec::new(),
            acl_groups: Vec::new(),
        }
    }

    fn tcp_listen(addr: SocketAddr, backlog: u32) -> Listen {
        Listen {
            address: ListenAddress::Tcp(addr),
            owner: None,
            group: None,
            mode: 0o660,
            backlog,
            allowed_clients: None,
            acl_users: Vec::new(),
            acl_groups: Vec::new(),
        }
    }

    fn fstat_ino(fd: BorrowedFd<'_>) -> u64 {
        nix::sys::stat::fstat(fd.as_raw_fd()).unwrap().st_ino
    }

    fn fd_of(table: &ListenerTable, key: &ListenKey) -> (i32, u64) {
        let fds = table.fds();
        let fd = fds.iter().find(|(k, _)| k == key).unwrap().1;
        (fd.as_raw_fd(), fstat_ino(fd))
    }

    /// The backlog of a listening socket, as `ss -l` shows it
    /// (`/proc/net/unix` does not carry it; `tcp_info.tcpi_sacked` does
    /// for TCP).
    fn tcp_backlog(fd: BorrowedFd<'_>) -> u32 {
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `info`.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                &mut info as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        assert_eq!(r, 0, "TCP_INFO: {}", io::Error::last_os_error());
        info.tcpi_sacked
    }

    /// Connects to the unix socket at `path` without blocking until its
    /// listen queue is full; returns how many connections it took.
    fn fill_queue(path: &Path, held: &mut Vec<Socket>) -> usize {
        let addr = SockAddr::unix(path).unwrap();
        let mut n = 0;
        loop {
            let s = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
            s.set_nonblocking(true).unwrap();
            match s.connect(&addr) {
                Ok(()) => {
                    held.push(s);
                    n += 1;
                    assert!(n < 10_000, "the queue never fills");
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return n,
                Err(e) => panic!("connect {}: {e}", path.display()),
            }
        }
    }

    #[test]
    fn keys_are_canonical() {
        let a = ListenKey::new(&ListenAddress::Unix("/run//fpmd/./www.sock".into()));
        assert_eq!(a.as_str(), "/run/fpmd/www.sock");
        assert_eq!(a, ListenKey::parse("/run/fpmd/www.sock").unwrap());
        let t = ListenKey::parse("[0:0::1]:9000").unwrap();
        assert_eq!(t.as_str(), "[::1]:9000");
        assert_eq!(
            t.address(),
            &ListenAddress::Tcp("[::1]:9000".parse().unwrap())
        );
        assert_eq!(
            ListenKey::parse("127.0.0.1:9000").unwrap().as_str(),
            "127.0.0.1:9000"
        );
        assert!(ListenKey::parse("www.sock").is_err());
        // A bare port's key is the port (handed over by an fpmd).
        let port = ListenKey::parse("9000").unwrap();
        assert_eq!(port.address(), &ListenAddress::Port(9000));
        assert_eq!(port, ListenKey::new(&ListenAddress::Port(9000)));
        assert!(ListenKey::parse("90000").is_err());
        assert!(ListenKey::parse("/a\0b").is_err());
    }

    #[test]
    fn obtain_keeps_a_unix_socket_and_reapplies_its_options() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("www.sock");
        let mut table = ListenerTable::new();
        let key = ListenKey::new(&ListenAddress::Unix(path.clone()));

        let first = table.obtain("www", &unix_listen(&path, 0o660, 16)).unwrap();
        assert_eq!(first, Obtained::Bound);
        let file_ino = std::fs::metadata(&path).unwrap().ino();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o660);
        let (fd, ino) = fd_of(&table, &key);

        let mut queued = Vec::new();
        let before = fill_queue(&path, &mut queued);
        let second = table.obtain("www", &unix_listen(&path, 0o600, 32)).unwrap();
        assert_eq!(second, Obtained::Kept);
        assert_eq!(
            fill_queue(&path, &mut queued),
            32 - 16,
            "the new backlog takes {} more connections",
            32 - 16
        );
        assert!(before > 0);
        drop(queued);
        let listener = table.clone_socket(&key).unwrap();
        while listener.accept().is_ok() {}
        assert_eq!(fd_of(&table, &key), (fd, ino), "the same socket");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.ino(), file_ino, "the same file");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "the new mode");
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());

        // Its file removed behind fpmd's back: bound again.
        std::fs::remove_file(&path).unwrap();
        let third = table.obtain("www", &unix_listen(&path, 0o600, 32)).unwrap();
        assert_eq!(third, Obtained::Rebound);
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());

        assert_eq!(table.retain(&[]), vec![key]);
        assert!(!path.exists(), "retain unlinks the file");
        assert!(table.is_empty());
    }

    #[test]
    fn obtain_keeps_a_tcp_socket_and_updates_its_backlog() {
        let addr = free_tcp_addr();
        let mut table = ListenerTable::new();
        let key = ListenKey::new(&ListenAddress::Tcp(addr));
        assert_eq!(
            table.obtain("www", &tcp_listen(addr, 16)).unwrap(),
            Obtained::Bound
        );
        let (fd, ino) = fd_of(&table, &key);
        let borrowed = table.fds();
        assert_eq!(tcp_backlog(borrowed[0].1), 16);
        drop(borrowed);

        assert_eq!(
            table.obtain("www", &tcp_listen(addr, 7)).unwrap(),
            Obtained::Kept
        );
        assert_eq!(fd_of(&table, &key), (fd, ino), "the same socket");
        assert_eq!(tcp_backlog(table.fds()[0].1), 7, "the new backlog");
        assert!(std::net::TcpStream::connect(addr).is_ok());

        table.retain(&[]);
        assert!(
            std::net::TcpListener::bind(addr).is_ok(),
            "retain closed the socket"
        );
    }

    #[test]
    fn bind_refuses_a_live_socket_and_a_non_socket_and_replaces_a_stale_one() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live.sock");
        let _other = std::os::unix::net::UnixListener::bind(&live).unwrap();
        let mut table = ListenerTable::new();
        let e = table
            .obtain("www", &unix_listen(&live, 0o660, 8))
            .unwrap_err();
        assert!(matches!(e, BindError::InUse { .. }), "{e}");

        let file = dir.path().join("file.sock");
        std::fs::write(&file, "keep me").unwrap();
        let e = table
            .obtain("www", &unix_listen(&file, 0o660, 8))
            .unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

        let stale = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert_eq!(
            table.obtain("www", &unix_listen(&stale, 0o660, 8)).unwrap(),
            Obtained::Bound
        );
        assert_eq!(table.len(), 1);
        drop(table);
        assert!(!stale.exists(), "dropping the table unlinks");
        assert!(live.exists() && file.exists());
    }

    #[test]
    fn unlink_spares_a_file_that_replaced_fpmds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("www.sock");
        let mut table = ListenerTable::new();
        table.obtain("www", &unix_listen(&path, 0o660, 8)).unwrap();
        std::fs::remove_file(&path).unwrap();
        let other = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(table);
        assert!(path.exists(), "another process's socket file was unlinked");
        drop(other);
    }

    /// A free TCP port on 127.0.0.1, as a socket address.
    fn free_tcp_addr() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }

    #[test]
    fn refuse_new_tcp_keeps_made_connections_and_drops_syns() {
        let addr = free_tcp_addr();
        let mut table = ListenerTable::new();
        let key = ListenKey::new(&ListenAddress::Tcp(addr));
        table.obtain("www", &tcp_listen(addr, 16)).unwrap();
        let mut made = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(&mut made, b"request").unwrap();

        assert!(table.refuse_new(&key).unwrap());
        let late = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let e = late
            .connect_timeout(&addr.into(), Duration::from_millis(300))
            .expect_err("a new connection after refuse_new");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "its SYN is dropped: {e}");

        let (mut accepted, _) = table.clone_socket(&key).unwrap().accept().unwrap();
        let mut got = [0u8; 7];
        std::io::Read::read_exact(&mut accepted, &mut got).unwrap();
        assert_eq!(&got, b"request", "the queued connection and its bytes");
    }

    #[test]
    fn refuse_new_unix_unlinks_and_keeps_made_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("www.sock");
        let mut table = ListenerTable::new();
        let key = ListenKey::new(&ListenAddress::Unix(path.clone()));
        table.obtain("www", &unix_listen(&path, 0o660, 8)).unwrap();
        let _made = std::os::unix::net::UnixStream::connect(&path).unwrap();

        assert!(table.refuse_new(&key).unwrap());
        assert!(!path.exists(), "the file is gone");
        let e = std::os::unix::net::UnixStream::connect(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(table.clone_socket(&key).unwrap().accept().is_ok());

        // The path is another socket's now: the close leaves it alone.
        let other = std::os::unix::net::UnixListener::bind(&path).unwrap();
        table.retain(&[]);
        assert!(path.exists(), "another socket's file was unlinked");
        drop(other);
    }

    #[test]
    fn refuse_new_changes_nothing_after_the_hand_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("www.sock");
        let addr = free_tcp_addr();
        let mut table = ListenerTable::new();
        table.obtain("www", &unix_listen(&path, 0o660, 8)).unwrap();
        table.obtain("www", &tcp_listen(addr, 8)).unwrap();
        table.disown_files();
        for key in table.keys().cloned().collect::<Vec<_>>() {
            assert!(!table.refuse_new(&key).unwrap(), "{key}");
        }
        assert!(path.exists());
        assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok());
        let unknown = ListenKey::new(&ListenAddress::Unix(dir.path().join("none.sock")));
        assert!(!table.refuse_new(&unknown).unwrap());
    }

    #[test]
    fn disowned_files_are_not_unlinked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("www.sock");
        let mut table = ListenerTable::new();
        table.obtain("www", &unix_listen(&path, 0o660, 8)).unwrap();
        table.disown_files();
        drop(table);
        assert!(path.exists());
    }

    #[test]
    fn adopt_a_socket_bound_outside_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("www.sock");
        let outside = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let ino = fstat_ino(outside.as_fd());
        let key = ListenKey::new(&ListenAddress::Unix(path.clone()));
        let mut table = ListenerTable::new();
        table
            .adopt(key.clone(), OwnedFd::from(outside), Inherited::Upgrade)
            .unwrap();
        assert_eq!(fd_of(&table, &key).1, ino);
        let socket = table.clone_socket(&key).unwrap();
        assert!(socket.nonblocking().unwrap());

        // The pool that uses it keeps it and applies its mode.
        assert_eq!(
            table.obtain("www", &unix_listen(&path, 0o604, 8)).unwrap(),
            Obtained::Kept
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o604);
        drop(socket);
        table.retain(&[]);
        assert!(
            !path.exists(),
            "a socket taken over from an upgrade is fpmd's"
        );

        // TCP, from systemd: checked against its key.
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap();
        let key = ListenKey::of_socket(tcp.as_fd()).unwrap();
        assert_eq!(key, ListenKey::new(&ListenAddress::Tcp(addr)));
        let wrong = ListenKey::parse("127.0.0.1:1").unwrap();
        let tcp2 = tcp.try_clone().unwrap();
        let e = table
            .adopt(wrong, OwnedFd::from(tcp2), Inherited::Systemd)
            .unwrap_err();
        assert!(matches!(e, AdoptError::WrongAddress { .. }), "{e}");
        table
            .adopt(key.clone(), OwnedFd::from(tcp), Inherited::Systemd)
            .unwrap();
        assert!(table.contains(&key));
        assert_eq!(
            table.obtain("www", &tcp_listen(addr, 8)).unwrap(),
            Obtained::Kept
        );
        let e = table
            .adopt(
                key.clone(),
                OwnedFd::from(std::net::TcpListener::bind("127.0.0.1:0").unwrap()),
                Inherited::Systemd,
            )
            .unwrap_err();
        assert!(matches!(e, AdoptError::Duplicate { .. }), "{e}");

        // A bare port's socket handed over after its IPv4 fallback
        // (`0.0.0.0`): the key is the port; any other address is not it.
        let v4 = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        let key = ListenKey::parse(&port.to_string()).unwrap();
        let lo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let lo_key = ListenKey::parse(&lo.local_addr().unwrap().port().to_string()).unwrap();
        let e = table
            .adopt(lo_key, OwnedFd::from(lo), Inherited::Upgrade)
            .unwrap_err();
        assert!(matches!(e, AdoptError::WrongAddress { .. }), "{e}");
        table
            .adopt(key.clone(), OwnedFd::from(v4), Inherited::Upgrade)
            .unwrap();
        let port_listen = Listen {
            address: ListenAddress::Port(port),
            ..tcp_listen(addr, 8)
        };
        assert_eq!(table.obtain("www", &port_listen).unwrap(), Obtained::Kept);
    }

    /// A socket from systemd is the socket unit's: its mode stays, a
    /// retain without it keeps it open, a removed file is not replaced by
    /// a socket of fpmd's, and its file is never unlinked.
    #[test]
    fn a_systemd_socket_is_left_as_systemd_made_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("www.sock");
        let outside = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let ino = fstat_ino(outside.as_fd());
        let key = ListenKey::new(&ListenAddress::Unix(path.clone()));
        let mut table = ListenerTable::new();
        table
            .adopt(key.clone(), OwnedFd::from(outside), Inherited::Systemd)
            .unwrap();
        assert_eq!(table.inherited(&key), Some(Inherited::Systemd));
        assert_eq!(
            table.obtain("www", &unix_listen(&path, 0o600, 8)).unwrap(),
            Obtained::Kept
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o666, "fpmd changed the socket unit's SocketMode=");

        assert!(
            table.retain(&[]).is_empty(),
            "retain closed systemd's socket"
        );
        assert_eq!(fd_of(&table, &key).1, ino);
        let client = std::os::unix::net::UnixStream::connect(&path);
        assert!(client.is_ok(), "the kept socket no longer listens");

        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            table.obtain("www", &unix_listen(&path, 0o600, 8)).unwrap(),
            Obtained::Kept
        );
        assert!(
            !path.exists(),
            "fpmd bound a socket of its own in its place"
        );

        let again = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(table);
        assert!(path.exists(), "a file fpmd did not create was unlinked");
        drop(again);
    }

    #[test]
    fn adopt_refuses_what_is_not_a_listening_socket_of_the_family() {
        let mut table = ListenerTable::new();
        let key = ListenKey::parse("127.0.0.1:9").unwrap();
        // Not listening.
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.bind(&SockAddr::from(
            "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
        ))
        .unwrap();
        let e = table
            .adopt(key.clone(), OwnedFd::from(s), Inherited::Upgrade)
            .unwrap_err();
        assert!(e.to_string().contains("not listening"), "{e}");
        // A datagram socket.
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = table
            .adopt(key.clone(), OwnedFd::from(u), Inherited::Upgrade)
            .unwrap_err();
        assert!(e.to_string().contains("not a stream socket"), "{e}");
        // A unix socket for a TCP key.
        let dir = tempfile::tempdir().unwrap();
        let l = std::os::unix::net::UnixListener::bind(dir.path().join("x.sock")).unwrap();
        let e = table
            .adopt(key, OwnedFd::from(l), Inherited::Upgrade)
            .unwrap_err();
        assert!(e.to_string().contains("UNIX"), "{e}");
        // A regular file.
        let f = tempfile::tempfile().unwrap();
        assert!(table
            .adopt(
                ListenKey::parse("127.0.0.1:9").unwrap(),
                OwnedFd::from(f),
                Inherited::Upgrade
            )
            .is_err());
        assert!(table.is_empty());
    }
}
