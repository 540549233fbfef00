//! What the host checks before it runs a plugin's code. Loading a library runs its constructors
//! and building a crate runs its build script, both with the host's rights: so a plugin file or
//! folder that other users can write is refused, and so is a link that leads out of the plugins
//! folder unless the user asked to follow such links.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Whether symbolic links in the plugins folder may lead out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExternalLinks {
    /// Refuse them: everything loaded lies inside the folder (the default).
    #[default]
    Refuse,
    /// Follow them (`--follow-plugin-links`).
    Follow,
}

/// A plugin file or folder the host will not run code from.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// Other users can write it.
    #[error(
        "{path} is writable by {who} (mode {mode:03o}): whoever can write it can run code inside \
         drmas-host; run `chmod go-w {path}` (or keep plugins where only you can write)"
    )]
    Writable {
        /// The file or folder.
        path: PathBuf,
        /// "its group", "all users" or "its group and all users".
        who: &'static str,
        /// Its permission bits.
        mode: u32,
    },
    /// A link leads out of the plugins folder.
    #[error(
        "{link} is a symbolic link to {target}, outside the plugins folder {folder}; copy the \
         plugin into the folder, or pass --follow-plugin-links to load what such links point to"
    )]
    ExternalLink {
        /// The link.
        link: PathBuf,
        /// Where it resolves to.
        target: PathBuf,
        /// The plugins folder.
        folder: PathBuf,
    },
    /// Its permissions could not be read.
    #[error("cannot read the permissions of {path}: {source}")]
    Unreadable {
        /// The file or folder.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}

/// Refuses `path` (a plugin library, crate or the folder holding one; links followed) when users
/// other than its owner can write it.
pub fn refuse_writable_by_others(path: &Path) -> Result<(), TrustError> {
    let mode = std::fs::metadata(path)
        .map_err(|source| TrustError::Unreadable {
            path: path.to_owned(),
            source,
        })?
        .permissions()
        .mode()
        & 0o777;
    let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (false, false) => return Ok(()),
        (true, false) => "its group",
        (false, true) => "all users",
        (true, true) => "its group and all users",
    };
    Err(TrustError::Writable {
        path: path.to_owned(),
        who,
        mode,
    })
}

/// Refuses `entry` of the plugins folder (`folder`, canonical) when it is a symbolic link that
/// resolves outside the folder, unless `links` says to follow such links.
pub fn refuse_external_link(
    entry: &Path,
    folder: &Path,
    links: ExternalLinks,
) -> Result<(), TrustError> {
    let is_link = std::fs::symlink_metadata(entry).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link || links == ExternalLinks::Follow {
        return Ok(());
    }
    // A dangling link loads nothing; discovery skips it.
    let Ok(target) = entry.canonicalize() else {
        return Ok(());
    };
    if target.starts_with(folder) {
        return Ok(());
    }
    Err(TrustError::ExternalLink {
        link: entry.to_owned(),
        target,
        folder: folder.to_owned(),
    })
}

/// Refuses a library about to be loaded, or the folder it really lies in (links followed), when
/// others can write either.
pub fn refuse_writable_library(library: &Path) -> Result<(), TrustError> {
    refuse_writable_by_others(library)?;
    let real = library
        .canonicalize()
        .unwrap_or_else(|_| library.to_owned());
    match real.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => refuse_writable_by_others(parent),
        _ => Ok(()),
    }
}
