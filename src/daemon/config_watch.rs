//! `[global] watch = true`: a reload when a file of the configuration
//! changes.
//!
//! Owns: one `notify` watcher (inotify) on the directories of the
//! configuration's files and of its include globs, and the debounce. Must
//! not touch: the reload itself (it only asks for one; a change that does
//! not validate is refused by the reload like any other).

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::config::Sources;
use crate::control::{Intent, Order, Orders};

/// Changes closer together than this make one reload (editors write a file
/// in several steps: a temporary file, a rename, a chmod).
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// A running watcher; dropping it stops watching.
pub struct ConfigWatcher {
    _watcher: notify::RecommendedWatcher,
}

/// Whether `path` is one of the configuration's files, or one an include
/// glob would read.
fn relevant(sources: &Sources, path: &Path) -> bool {
    sources.files.iter().any(|f| f == path)
        || sources
            .include_globs
            .iter()
            .any(|g| glob::Pattern::new(g).is_ok_and(|p| p.matches_path(path)))
}

/// Directories to watch: those of the files and of the globs' fixed part.
fn directories(sources: &Sources) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = sources
        .files
        .iter()
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .collect();
    for g in &sources.include_globs {
        let fixed: PathBuf = Path::new(g)
            .components()
            .take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?', '[']))
            .collect();
        // The glob's last fixed component may be the file name itself.
        let dir = if Path::new(g).components().count() == fixed.components().count() {
            fixed.parent().map(Path::to_path_buf).unwrap_or(fixed)
        } else {
            fixed
        };
        dirs.push(dir);
    }
    dirs.iter_mut().for_each(|d| {
        if d.as_os_str().is_empty() {
            *d = PathBuf::from(".");
        }
    });
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Watches `sources`; each burst of relevant changes sends one reload
/// order to `orders` once [`DEBOUNCE`] has passed without another. Errors:
/// the watcher cannot be set up (no inotify).
pub fn watch(sources: &Sources, orders: Orders) -> notify::Result<ConfigWatcher> {
    let (tx, mut rx) = mpsc::unbounded_channel::<PathBuf>();
    let filter = sources.clone();
    let mut watcher =
        notify::recommended_watcher(move |ev: notify::Result<notify::Event>| match ev {
            // Reads (fpmd reading its own files during a reload, a log reader
            // beside them) change nothing; nor do files that are not the
            // configuration's: neither may start or put off a reload.
            Ok(ev) if !ev.kind.is_access() && !ev.kind.is_other() => {
                for p in ev.paths {
                    if relevant(&filter, &p) {
                        let _ = tx.send(p);
                    }
                }
            }
            Ok(_) => {}
            Err(e) => debug!("configuration watcher: {e}"),
        })?;
    for dir in directories(sources) {
        if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
            warn!(
                "cannot watch {} for configuration changes: {e}",
                dir.display()
            );
        }
    }
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            debug!("configuration file changed: {}", first.display());
            // Let the burst end.
            loop {
                match tokio::time::timeout(DEBOUNCE, rx.recv()).await {
                    Ok(Some(_)) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            info!("a configuration file changed (watch = true)");
            if orders.send(Order::new(Intent::Reload)).is_err() {
                return;
            }
        }
    });
    Ok(ConfigWatcher { _watcher: watcher })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Sources {
        Sources {
            files: vec![
                "/etc/fpmd/fpmd.toml".into(),
                "/etc/fpmd/pool.d/www.toml".into(),
            ],
            include_globs: vec!["/etc/fpmd/pool.d/*.toml".into()],
        }
    }

    #[test]
    fn relevant_files_and_directories() {
        let s = sources();
        assert!(relevant(&s, Path::new("/etc/fpmd/fpmd.toml")));
        assert!(
            relevant(&s, Path::new("/etc/fpmd/pool.d/new.toml")),
            "a new file the glob reads"
        );
        assert!(
            !relevant(&s, Path::new("/etc/fpmd/pool.d/.www.toml.swp")),
            "an editor's swap file"
        );
        assert!(
            !relevant(&s, Path::new("/etc/fpmd/fpmd.log")),
            "the error log beside it"
        );
        assert_eq!(
            directories(&s),
            vec![
                PathBuf::from("/etc/fpmd"),
                PathBuf::from("/etc/fpmd/pool.d")
            ]
        );
    }

    #[tokio::test]
    async fn a_burst_of_writes_is_one_reload() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("fpmd.toml");
        std::fs::write(&main, "a").unwrap();
        let log = dir.path().join("fpmd.log");
        let s = Sources {
            files: vec![main.clone()],
            include_globs: vec![],
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _w = watch(&s, tx).unwrap();
        std::fs::write(&log, "not configuration").unwrap();
        for i in 0..5 {
            std::fs::write(&main, format!("edit {i}")).unwrap();
        }
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a reload")
            .unwrap();
        assert!(
            tokio::time::timeout(DEBOUNCE * 3, rx.recv()).await.is_err(),
            "one reload for the burst"
        );
    }
}
