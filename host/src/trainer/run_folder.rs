//! Whether a run folder already holds a run. A run is there once an iteration finished — a
//! checkpoint, or an iteration's line in `metrics.jsonl`. What a run that failed before its
//! first iteration leaves (the evaluation before training, samples of an unfinished iteration,
//! a checkpoint it did not finish saving) is not a run: a corrected re-run reuses the folder.

use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use super::{Checkpoint, MetricsLog};

/// The last iteration a run in `dir` finished, or `None` when no iteration finished there (or
/// there is no such folder).
pub fn finished_iteration(dir: &Path) -> anyhow::Result<Option<u32>> {
    let checkpoint = Checkpoint::latest(dir)?.map(|c| c.iteration());
    let path = dir.join("metrics.jsonl");
    let logged = match std::fs::File::open(&path) {
        Ok(file) => {
            last_logged_iteration(file).with_context(|| format!("reading {}", path.display()))?
        }
        Err(_) => None,
    };
    Ok(checkpoint.max(logged).filter(|&i| i > 0))
}

/// Clears what an unfinished run left in `dir` (its metrics and samples, checkpoints it did not
/// finish), so a new run starts there as in an empty folder; says whether there was any.
pub fn clear_unfinished(dir: &Path) -> anyhow::Result<bool> {
    let left = ["metrics.jsonl", "samples.jsonl", "checkpoints"]
        .iter()
        .any(|name| dir.join(name).exists());
    Checkpoint::discard_unfinished(dir)?;
    MetricsLog::truncate_after(dir, None)?;
    Ok(left)
}

/// The largest `iteration` of a metrics log's lines (torn or foreign lines are skipped).
fn last_logged_iteration(file: std::fs::File) -> std::io::Result<Option<u32>> {
    let mut last = None;
    for line in BufReader::new(file).lines() {
        let iteration = serde_json::from_str::<Value>(&line?)
            .ok()
            .and_then(|v| v.get("iteration").and_then(Value::as_u64))
            .and_then(|i| u32::try_from(i).ok());
        last = last.max(iteration);
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::{clear_unfinished, finished_iteration};

    #[test]
    fn only_a_finished_iteration_makes_a_run() {
        let dir = tempfile::tempdir().expect("a temp dir");
        assert_eq!(finished_iteration(dir.path()).expect("reads"), None);
        let metrics = dir.path().join("metrics.jsonl");
        std::fs::write(&metrics, "{\"iteration\":0,\"eval/avg\":0.5}\n").expect("writes");
        assert_eq!(finished_iteration(dir.path()).expect("reads"), None);
        std::fs::write(dir.path().join("samples.jsonl"), "{\"iteration\":1}\n").expect("writes");
        assert!(clear_unfinished(dir.path()).expect("clears"));
        assert_eq!(std::fs::read_to_string(&metrics).expect("reads"), "");
        std::fs::write(&metrics, "{\"iteration\":1}\n{\"iteration\":2}\n{\"itera").expect("writes");
        assert_eq!(finished_iteration(dir.path()).expect("reads"), Some(2));
    }
}
