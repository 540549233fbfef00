//! Shared helpers of the end-to-end tests.

#![allow(dead_code)] // each test file uses a subset

use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// A fresh temporary folder under the target dir, removed first if a previous run left it.
pub fn scratch(name: &str) -> PathBuf {
    let dir = repo().join("target").join("e2e-scratch").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Runs a command, failing the test with its output when it fails.
pub fn run(command: &mut std::process::Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `cargo`, as the test runner was started with.
pub fn cargo() -> std::process::Command {
    std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The fixture plugin's library (tests/fixture-plugin), built once per test process through the
/// host's own discovery of a plugins folder that links its crate. Per process: test runners may
/// run test files in parallel processes.
pub fn fixture_library() -> &'static PathBuf {
    static LIBRARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIBRARY.get_or_init(|| {
        let folder = scratch(&format!("fixture-folder-{}", std::process::id()));
        std::os::unix::fs::symlink(repo().join("tests/fixture-plugin"), folder.join("fixture"))
            .expect("symlink");
        let libraries = drmas_host::plugins::discover(
            &folder,
            drmas_host::plugins::BuildProfile::Dev,
            // The crate is linked in from the repository.
            drmas_host::plugins::ExternalLinks::Follow,
        )
        .expect("discover");
        assert_eq!(libraries.len(), 1, "{libraries:?}");
        libraries[0].clone()
    })
}

/// A registry holding only the fixture plugin.
pub fn fixture_registry() -> drmas_host::plugins::Registry {
    let mut registry = drmas_host::plugins::Registry::default();
    registry
        .load_file(fixture_library())
        .expect("load fixture plugin");
    registry
}
