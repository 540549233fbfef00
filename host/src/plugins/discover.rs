//! Finding plugin libraries in a folder. The folder may hold built libraries (`*.so`, `*.dylib`,
//! `*.dll`) and/or plugin crates (a folder whose Cargo.toml has a `cdylib` lib); a crate is built
//! with cargo (which skips the work when it is up to date) and its artifact is used.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::trust::{
    refuse_external_link, refuse_writable_by_others, refuse_writable_library, ExternalLinks,
    TrustError,
};

/// Which cargo profile plugin crates are built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildProfile {
    /// `--release`: what `drmas-host` uses.
    Release,
    /// The dev profile: what tests use, sharing the test build's artifacts.
    Dev,
}

impl BuildProfile {
    fn folder(self) -> &'static str {
        match self {
            BuildProfile::Release => "release",
            BuildProfile::Dev => "debug",
        }
    }
}

/// Why the plugins folder could not be turned into a list of libraries.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// The folder is missing or unreadable.
    #[error("cannot read plugins folder {path}: {source}; pass an existing folder with --plugins")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A plugin crate's manifest could not be read.
    #[error("cannot read plugin crate manifest {path}: {reason}")]
    Manifest {
        /// The Cargo.toml.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Building a plugin crate failed.
    #[error("building plugin crate {path} failed ({status}); run `cargo build --release --manifest-path {path}/Cargo.toml` to see why")]
    Build {
        /// The crate folder.
        path: PathBuf,
        /// cargo's exit status.
        status: String,
    },
    /// A plugin file or folder the host will not run code from.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// cargo could not be run or told us nothing useful.
    #[error("cannot build plugin crate {path}: {reason}")]
    Cargo {
        /// The crate folder.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// Every plugin library in `folder`, building plugin crates first. Sorted by path so loading
/// order (and so duplicate-name errors) is deterministic. `folder` may also be one plugin crate
/// itself: then only that crate is built and loaded. Nothing runs from a file or folder other
/// users can write, nor (unless `links` says to follow them) through a link out of `folder`
/// (see `plugins::trust`).
pub fn discover(
    folder: &Path,
    profile: BuildProfile,
    links: ExternalLinks,
) -> Result<Vec<PathBuf>, DiscoverError> {
    if folder.join("Cargo.toml").is_file() {
        return Ok(build_crate(folder, profile)?.into_iter().collect());
    }
    let entries = std::fs::read_dir(folder).map_err(|source| DiscoverError::Folder {
        path: folder.to_owned(),
        source,
    })?;
    refuse_writable_by_others(folder)?;
    let canonical = folder
        .canonicalize()
        .map_err(|source| DiscoverError::Folder {
            path: folder.to_owned(),
            source,
        })?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    let mut libraries = Vec::new();
    for path in paths {
        if path.is_dir() && path.join("Cargo.toml").is_file() {
            refuse_external_link(&path, &canonical, links)?;
            if let Some(library) = build_crate(&path, profile)? {
                libraries.push(library);
            }
        } else if is_library(&path) {
            refuse_external_link(&path, &canonical, links)?;
            refuse_writable_library(&path)?;
            libraries.push(path);
        }
    }
    Ok(libraries)
}

fn is_library(path: &Path) -> bool {
    path.is_file()
        && matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("so" | "dylib" | "dll")
        )
}

/// What `cargo metadata` says about the crate in a folder.
#[derive(serde::Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    target_directory: PathBuf,
}

#[derive(serde::Deserialize)]
struct Package {
    manifest_path: PathBuf,
    targets: Vec<Target>,
}

#[derive(serde::Deserialize)]
struct Target {
    name: String,
    crate_types: Vec<String>,
}

/// Builds the crate in `folder` if it has a cdylib lib; returns its artifact. Crates without a
/// cdylib (a helper crate next to plugins) are skipped.
fn build_crate(folder: &Path, profile: BuildProfile) -> Result<Option<PathBuf>, DiscoverError> {
    // Building runs the crate's build script: its folder must be the user's alone.
    refuse_writable_by_others(folder)?;
    refuse_writable_by_others(&folder.join("Cargo.toml"))?;
    // cargo resolves workspaces from the real path, so a symlinked crate must be followed.
    let manifest = folder
        .join("Cargo.toml")
        .canonicalize()
        .unwrap_or_else(|_| folder.join("Cargo.toml"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()
        .map_err(|e| DiscoverError::Cargo {
            path: folder.to_owned(),
            reason: format!("cannot run cargo: {e}"),
        })?;
    if !output.status.success() {
        return Err(DiscoverError::Manifest {
            path: manifest,
            reason: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    let metadata: Metadata =
        serde_json::from_slice(&output.stdout).map_err(|e| DiscoverError::Manifest {
            path: manifest.clone(),
            reason: e.to_string(),
        })?;
    let Some(package) = metadata.packages.iter().find(|p| {
        p.manifest_path
            .canonicalize()
            .unwrap_or(p.manifest_path.clone())
            == manifest
    }) else {
        return Err(DiscoverError::Manifest {
            path: manifest,
            reason: "no package in this manifest".into(),
        });
    };
    let Some(lib) = package
        .targets
        .iter()
        .find(|t| t.crate_types.iter().any(|c| c == "cdylib"))
    else {
        tracing::debug!(
            "{} has no cdylib target; not a plugin crate",
            folder.display()
        );
        return Ok(None);
    };

    tracing::info!(
        "building plugin crate {} ({})",
        folder.display(),
        profile.folder()
    );
    let mut build = Command::new(&cargo);
    build
        .args([
            "build",
            "--lib",
            "--message-format",
            "short",
            "--manifest-path",
        ])
        .arg(&manifest);
    if profile == BuildProfile::Release {
        build.arg("--release");
    }
    let status = build.status().map_err(|e| DiscoverError::Cargo {
        path: folder.to_owned(),
        reason: format!("cannot run cargo: {e}"),
    })?;
    if !status.success() {
        return Err(DiscoverError::Build {
            path: folder.to_owned(),
            status: status.to_string(),
        });
    }
    let file = format!(
        "{}{}{}",
        std::env::consts::DLL_PREFIX,
        lib.name.replace('-', "_"),
        std::env::consts::DLL_SUFFIX
    );
    let artifact = metadata.target_directory.join(profile.folder()).join(file);
    if !artifact.is_file() {
        return Err(DiscoverError::Cargo {
            path: folder.to_owned(),
            reason: format!("cargo built it but {} is missing", artifact.display()),
        });
    }
    refuse_writable_library(&artifact)?;
    Ok(Some(artifact))
}
