//! Writing a whole folder so that readers see the old one or the new one, never a mix.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::ModelError;

/// Whether a folder written by [`write_dir_atomically`] is flushed to disk before it is put in
/// place. Either way readers see the old folder or the whole new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Flushed (fsync of every file and the folder): once in place it survives a power cut.
    /// Checkpoints, adapters and converted models.
    Flushed,
    /// Left to the page cache: for a folder rewritten every iteration and read at once, such
    /// as the weights handed to inference servers, which a crash makes stale anyway.
    Cached,
}

/// Fills a fresh temporary sibling of `dir` with `write`, flushes it when `durability` says so,
/// and only then puts it in place of `dir`.
///
/// An existing `dir` is first renamed aside (`.NAME.old-…`), the new folder renamed in, and
/// the old one deleted; if the second rename fails the old folder is renamed back. So `dir`
/// is at every moment either absent (only between the two renames), the complete old folder
/// or the complete new one. When `write` fails, the temporary folder is removed and `dir` is
/// untouched. `dir` may not be a file.
pub fn write_dir_atomically(
    dir: &Path,
    durability: Durability,
    write: impl FnOnce(&Path) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    let name = dir
        .file_name()
        .ok_or_else(|| ModelError::file(dir, "not a folder name to write to"))?
        .to_string_lossy()
        .into_owned();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    if dir.exists() && !dir.is_dir() {
        return Err(ModelError::file(dir, "exists and is not a folder"));
    }
    fs::create_dir_all(&parent).map_err(|e| ModelError::file(&parent, e))?;
    let temp = sibling(&parent, &name, "tmp");
    fs::create_dir(&temp).map_err(|e| ModelError::file(&temp, e))?;
    let written = write(&temp).and_then(|()| match durability {
        Durability::Flushed => sync_folder(&temp),
        Durability::Cached => Ok(()),
    });
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&temp);
        return Err(e);
    }
    if !dir.exists() {
        return fs::rename(&temp, dir).map_err(|e| {
            let _ = fs::remove_dir_all(&temp);
            ModelError::file(dir, format!("cannot move the new folder into place: {e}"))
        });
    }
    let old = sibling(&parent, &name, "old");
    if let Err(e) = fs::rename(dir, &old) {
        let _ = fs::remove_dir_all(&temp);
        return Err(ModelError::file(
            dir,
            format!("cannot move the old folder aside: {e}"),
        ));
    }
    if let Err(e) = fs::rename(&temp, dir) {
        let restored = fs::rename(&old, dir);
        let _ = fs::remove_dir_all(&temp);
        return Err(ModelError::file(
            dir,
            format!(
                "cannot move the new folder into place: {e}{}",
                match restored {
                    Ok(()) => String::new(),
                    Err(r) => format!(" (and the old one stays at {}: {r})", old.display()),
                }
            ),
        ));
    }
    // The new folder is in place; a leftover old one only wastes space.
    let _ = fs::remove_dir_all(&old);
    Ok(())
}

/// `PARENT/.NAME.KIND-PID-N`, a name no other writer (thread or process) uses.
fn sibling(parent: &Path, name: &str, kind: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    parent.join(format!(".{name}.{kind}-{}-{n}", std::process::id()))
}

/// Flushes every file of `dir` (not recursive) and the folder itself to disk.
fn sync_folder(dir: &Path) -> Result<(), ModelError> {
    let entries = fs::read_dir(dir).map_err(|e| ModelError::file(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| ModelError::file(dir, e))?.path();
        if path.is_file() {
            fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| ModelError::file(&path, e))?;
        }
    }
    fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| ModelError::file(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &Path, file: &str) -> String {
        fs::read_to_string(dir.join(file)).expect("readable")
    }

    #[test]
    fn replaces_a_folder_whole_and_leaves_no_siblings_flushed_or_not() {
        for durability in [Durability::Flushed, Durability::Cached] {
            let root = tempfile::tempdir().expect("a temp dir");
            let dir = root.path().join("ckpt");
            write_dir_atomically(&dir, durability, |d| {
                fs::write(d.join("a"), "1").map_err(|e| ModelError::file(d, e))
            })
            .expect("first write");
            assert_eq!(read(&dir, "a"), "1");
            write_dir_atomically(&dir, durability, |d| {
                fs::write(d.join("b"), "2").map_err(|e| ModelError::file(d, e))
            })
            .expect("second write");
            assert_eq!(read(&dir, "b"), "2");
            assert!(!dir.join("a").exists(), "the old folder's files are gone");
            let names: Vec<_> = fs::read_dir(root.path())
                .expect("lists")
                .map(|e| e.expect("entry").file_name())
                .collect();
            assert_eq!(names, ["ckpt"], "{durability:?}");
        }
    }

    #[test]
    fn a_failed_write_leaves_the_old_folder() {
        let root = tempfile::tempdir().expect("a temp dir");
        let dir = root.path().join("ckpt");
        fs::create_dir(&dir).expect("mkdir");
        fs::write(dir.join("a"), "old").expect("write");
        let err = write_dir_atomically(&dir, Durability::Flushed, |d| {
            fs::write(d.join("a"), "half").map_err(|e| ModelError::file(d, e))?;
            Err(ModelError::Input("disk full".to_owned()))
        })
        .expect_err("fails");
        assert!(err.to_string().contains("disk full"));
        assert_eq!(read(&dir, "a"), "old");
        assert_eq!(fs::read_dir(root.path()).expect("lists").count(), 1);
    }

    #[test]
    fn a_file_in_the_way_is_an_error() {
        let root = tempfile::tempdir().expect("a temp dir");
        let file = root.path().join("x");
        fs::write(&file, "not a folder").expect("write");
        let err = write_dir_atomically(&file, Durability::Flushed, |_| Ok(())).expect_err("a file");
        assert!(err.to_string().contains("not a folder"), "{err}");
    }
}
