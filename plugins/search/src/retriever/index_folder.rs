//! The folder a BM25 index lives in. It is marked as ours, so that a rebuild only ever clears a
//! folder this module created, and locked while its index is checked or built, so that two
//! processes pointed at one folder (two runs, or a run and `drmas-retriever serve`) do not build
//! into it at once: the second waits, then reuses what the first built.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

/// The file marking a folder as a drmas BM25 index.
const MARKER_FILE: &str = "drmas-bm25-index";
/// The file locked while the index is checked or built; it outlives rebuilds.
const LOCK_FILE: &str = "drmas-bm25-index.lock";

/// An index folder, locked for as long as this value lives.
pub(super) struct IndexFolder {
    dir: PathBuf,
    /// `None` where the lock file cannot be written (a read-only index), which nobody can
    /// build into either.
    _lock: Option<File>,
}

impl IndexFolder {
    /// Locks `dir`, creating it if needed, once it is known to be empty or ours; tells
    /// `progress` when another process holds the lock and this one waits for it.
    pub(super) fn lock(dir: &Path, progress: &dyn Fn(&str)) -> Result<IndexFolder, String> {
        refuse_foreign(dir)?;
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create the folder: {e}"))?;
        let lock = match OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))
        {
            Ok(file) => Some(file),
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
                ) =>
            {
                None
            }
            Err(error) => return Err(format!("cannot open {LOCK_FILE}: {error}")),
        };
        if let Some(file) = &lock {
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    progress(&format!(
                        "another process is building or checking the index in {}; waiting for it",
                        dir.display()
                    ));
                    file.lock()
                        .map_err(|e| format!("cannot lock {LOCK_FILE}: {e}"))?;
                }
                Err(TryLockError::Error(error)) => {
                    return Err(format!("cannot lock {LOCK_FILE}: {error}"))
                }
            }
        }
        Ok(IndexFolder {
            dir: dir.to_owned(),
            _lock: lock,
        })
    }

    /// The folder.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Empties the folder but for its lock and marks it as ours, for a build.
    pub(super) fn clear(&self) -> Result<(), String> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| e.to_string())?;
        for entry in entries {
            let entry = entry.map_err(|e| e.to_string())?;
            if entry.file_name() == LOCK_FILE {
                continue;
            }
            let path = entry.path();
            let removed = if entry.file_type().map_err(|e| e.to_string())?.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| format!("cannot clear the old index: {e}"))?;
        }
        std::fs::write(
            self.dir.join(MARKER_FILE),
            "BM25 index of a drmas search corpus; safe to delete\n",
        )
        .map_err(|e| format!("cannot write {MARKER_FILE}: {e}"))
    }
}

/// Refuses a folder that holds files but not the marker: not ours to write into.
fn refuse_foreign(dir: &Path) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        // Absent (created next), or unreadable (the next step says why).
        return Ok(());
    };
    let mut others = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name() != LOCK_FILE);
    if others.next().is_some() && !dir.join(MARKER_FILE).is_file() {
        return Err(format!(
            "the folder is not empty and holds no drmas BM25 index (no {MARKER_FILE}); \
             refusing to overwrite it: pick a new or empty folder"
        ));
    }
    Ok(())
}
