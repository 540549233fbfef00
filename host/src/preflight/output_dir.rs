//! `[run] output_dir` checked before any work: a folder (or a place one can be made) this
//! process can write, and — for a fresh `train` — not one that already holds a run.

use std::path::{Path, PathBuf};

use crate::config::{RunConfig, RunFile, Step};
use crate::trainer::run_folder;

/// What the command will do with the run folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// `train`: a new run, refused where one already finished an iteration.
    Train,
    /// `train --resume`: continue the run there (or start one).
    Resume,
    /// `eval`: write evaluations beside whatever is there.
    Eval,
}

/// The run folder of `config` (absolute against the run file), checked for `intent`: it is a
/// folder or can be created, this process can write there, and a fresh `train` finds no
/// finished iteration in it. Creates and changes nothing.
pub fn check_output_dir(
    config: &RunConfig,
    file: &RunFile,
    intent: Intent,
) -> anyhow::Result<PathBuf> {
    let dir = file.resolve(&config.run.output_dir.to_string_lossy());
    let fail = |message: String| -> anyhow::Error {
        file.invalid_at(&[Step::Key("run"), Step::Key("output_dir")], message)
            .into()
    };
    let existing = dir
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or_else(|| Path::new("."));
    if !existing.is_dir() {
        return Err(fail(format!(
            "output_dir {}: {} is a file, not a folder; name a folder for the run",
            dir.display(),
            existing.display()
        )));
    }
    if let Err(error) = probe_writable(existing) {
        return Err(fail(format!(
            "output_dir {}: cannot write in {} ({error}); choose a folder you can write to",
            dir.display(),
            existing.display()
        )));
    }
    if intent == Intent::Train {
        if let Some(iteration) = run_folder::finished_iteration(&dir)? {
            return Err(fail(format!(
                "output_dir {} already holds a run (iteration {iteration} finished there); pass \
                 --resume to continue it, or set another output_dir",
                dir.display()
            )));
        }
    }
    Ok(dir)
}

/// Creates and removes a file in `dir`: the only sure test that this process may write there
/// (permission bits say nothing about read-only mounts, ACLs or root).
fn probe_writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".drmas-write-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}
