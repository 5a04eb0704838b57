//! The file-system seam of the emulation: [`FileSystem`]'s `stat(2)`, on
//! the host ([`RealFs`]) or under a chroot ([`ChrootFs`]); the tests' map
//! (`MapFs`) is compiled into tests only.

/// What `stat(2)` (following symlinks) says a path is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Regular,
    Directory,
    /// Anything else: fifo, socket, device.
    Other,
}

/// The file system as php's path walk sees it. `stat` follows symlinks and
/// returns `None` when the path does not exist or cannot be resolved (any
/// `stat(2)` error). Paths are the raw bytes of a C string (no NUL);
/// relative paths are relative to the implementation's working directory.
pub trait FileSystem {
    fn stat(&self, path: &[u8]) -> Option<FileKind>;
}

/// The real file system: `std::fs::metadata` (`stat(2)`, follows symlinks).
/// Relative paths resolve against fpmd's working directory, which need not
/// be php-fpm's (php-fpm runs from the pool's `chdir`, `/` by default).
///
/// A path found to be a regular file is taken as one for [`FOUND_TTL`]
/// without a new `stat` (one `statx` per request saved: a script is
/// almost always the same few files). Only that answer is kept: a missing
/// file, a directory or a device is looked at again every time, so a new
/// script serves at once. php-fpm's child keeps far longer answers
/// (`realpath_cache_ttl`, 120 s); a script removed within the second
/// reaches php-cgi, which answers "No input file specified." as php-fpm
/// does.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

/// How long [`RealFs`] takes a path found to be a regular file as one.
pub const FOUND_TTL: std::time::Duration = std::time::Duration::from_secs(1);
/// Paths [`RealFs`] keeps at most; beyond, the oldest half is dropped.
const FOUND_MAX: usize = 512;

thread_local! {
    /// Regular files found, with when (the event loop's thread only).
    static FOUND: std::cell::RefCell<std::collections::HashMap<Box<[u8]>, std::time::Instant>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

impl FileSystem for RealFs {
    fn stat(&self, path: &[u8]) -> Option<FileKind> {
        use std::os::unix::ffi::OsStrExt;
        // An empty path is ENOENT for stat(2); std agrees, but be explicit.
        if path.is_empty() {
            return None;
        }
        let now = std::time::Instant::now();
        let fresh = FOUND.with(|f| {
            f.borrow()
                .get(path)
                .is_some_and(|at| now.duration_since(*at) < FOUND_TTL)
        });
        if fresh {
            return Some(FileKind::Regular);
        }
        let md = std::fs::metadata(std::ffi::OsStr::from_bytes(path)).ok();
        let ft = md.map(|m| m.file_type());
        let kind = match ft {
            None => None,
            Some(ft) if ft.is_file() => Some(FileKind::Regular),
            Some(ft) if ft.is_dir() => Some(FileKind::Directory),
            Some(_) => Some(FileKind::Other),
        };
        FOUND.with(|f| {
            let mut f = f.borrow_mut();
            if kind == Some(FileKind::Regular) {
                if f.len() >= FOUND_MAX {
                    f.retain(|_, at| now.duration_since(*at) < FOUND_TTL / 2);
                    if f.len() >= FOUND_MAX {
                        f.clear();
                    }
                }
                f.insert(path.into(), now);
            } else {
                f.remove(path);
            }
        });
        kind
    }
}

/// The file system under a pool's `chroot`: absolute paths are inside it
/// (what the web server sends a chrooted pool, as with php-fpm), looked
/// up under the host directory. Symlinks are followed on the host side;
/// php-cgi, which runs inside, decides in the end.
#[derive(Clone, Copy, Debug)]
pub struct ChrootFs<'a>(pub &'a std::path::Path);

impl FileSystem for ChrootFs<'_> {
    fn stat(&self, path: &[u8]) -> Option<FileKind> {
        use std::os::unix::ffi::OsStrExt;
        let inside = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
        if !inside.is_absolute() {
            return RealFs.stat(path);
        }
        let host = crate::config::paths::host_path(self.0, inside);
        RealFs.stat(host.as_os_str().as_bytes())
    }
}

#[cfg(test)]
/// An in-memory file tree for tests: absolute paths mapped to kinds,
/// resolved the way the kernel resolves them (no symlinks): empty and `.`
/// components are skipped, `..` goes up (and stays at `/`), every component
/// before the last must be a directory (else `ENOTDIR`: `None`), and a
/// trailing `/` requires a directory. Relative and empty paths: `None`.
#[derive(Clone, Debug, Default)]
pub struct MapFs {
    pub(super) entries: std::collections::BTreeMap<Vec<u8>, FileKind>,
}

#[cfg(test)]
impl MapFs {
    /// An empty tree: only `/` exists.
    pub fn new() -> MapFs {
        MapFs::default()
    }

    /// Adds `path` (absolute, normalised: `/a/b`, no `.`/`..`/empty
    /// components) as `kind`, and every missing ancestor as a directory.
    /// An ancestor already present as a file stays a file, which makes
    /// `path` unreachable, as on disk.
    pub fn insert(&mut self, path: &[u8], kind: FileKind) -> &mut MapFs {
        for (i, &b) in path.iter().enumerate().skip(1) {
            if b == b'/' {
                self.entries
                    .entry(path[..i].to_vec())
                    .or_insert(FileKind::Directory);
            }
        }
        if path.len() > 1 {
            self.entries.insert(path.to_vec(), kind);
        }
        self
    }

    /// Builder form of [`MapFs::insert`] for a regular file.
    pub fn file(mut self, path: &str) -> MapFs {
        self.insert(path.as_bytes(), FileKind::Regular);
        self
    }

    /// Builder form of [`MapFs::insert`] for a directory.
    pub fn dir(mut self, path: &str) -> MapFs {
        self.insert(path.as_bytes(), FileKind::Directory);
        self
    }
}

#[cfg(test)]
impl FileSystem for MapFs {
    fn stat(&self, path: &[u8]) -> Option<FileKind> {
        if path.first() != Some(&b'/') {
            return None;
        }
        let mut cur: Vec<u8> = Vec::new(); // "" is `/`
        let mut kind = FileKind::Directory;
        for comp in path.split(|&b| b == b'/') {
            if comp.is_empty() {
                continue;
            }
            if kind != FileKind::Directory {
                return None; // ENOTDIR
            }
            match comp {
                b"." => {}
                b".." => {
                    let cut = cur.iter().rposition(|&b| b == b'/').unwrap_or(0);
                    cur.truncate(cut);
                }
                name => {
                    cur.push(b'/');
                    cur.extend_from_slice(name);
                    kind = *self.entries.get(&cur)?;
                }
            }
        }
        if path.ends_with(b"/") && kind != FileKind::Directory {
            return None;
        }
        Some(kind)
    }
}
