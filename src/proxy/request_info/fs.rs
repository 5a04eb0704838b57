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
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

impl FileSystem for RealFs {
    fn stat(&self, path: &[u8]) -> Option<FileKind> {
        use std::os::unix::ffi::OsStrExt;
        // An empty path is ENOENT for stat(2); std agrees, but be explicit.
        if path.is_empty() {
            return None;
        }
        let md = std::fs::metadata(std::ffi::OsStr::from_bytes(path)).ok()?;
        let ft = md.file_type();
        Some(if ft.is_file() {
            FileKind::Regular
        } else if ft.is_dir() {
            FileKind::Directory
        } else {
            FileKind::Other
        })
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
