//! The runs of an experiment on disk: one folder per (estimator, seed), its `metrics.jsonl`
//! read back, whether it already finished, and its evaluation before training.

use std::path::{Path, PathBuf};

use crate::plot::MetricSeries;
use crate::trainer::{eval_path, EvalReport};

/// One finished (or partly finished) run of the experiment.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// The estimator it trained with.
    pub estimator: String,
    /// Its `[run] seed`.
    pub seed: u64,
    /// Its metrics, read from the run folder.
    pub metrics: MetricSeries,
}

/// The folder of one run: `out/ESTIMATOR/seed-N`.
pub fn run_dir(out: &Path, estimator: &str, seed: u64) -> PathBuf {
    out.join(estimator).join(format!("seed-{seed}"))
}

/// Whether `dir/metrics.jsonl` holds a line for iteration `iterations` (the run's last), so the
/// run need not be repeated. A missing or unreadable file is not finished.
pub fn finished(dir: &Path, iterations: u32) -> bool {
    MetricSeries::read_run(dir).is_ok_and(|metrics| {
        metrics
            .series("reward/mean")
            .is_some_and(|points| points.iter().any(|&(i, _)| i == u64::from(iterations)))
    })
}

/// The evaluation before training that a run of `seed` under another of `estimators` wrote,
/// and its file. Every estimator's run of a seed evaluates the same weights with the same eval
/// sampler before training, so one run's evaluation serves them all. An unreadable file is
/// passed over with a warning.
pub fn initial_eval(
    out: &Path,
    estimators: &[String],
    estimator: &str,
    seed: u64,
) -> Option<(EvalReport, PathBuf)> {
    estimators
        .iter()
        .filter(|other| *other != estimator)
        .find_map(|other| {
            let path = eval_path(&run_dir(out, other, seed), 0);
            let text = std::fs::read_to_string(&path).ok()?;
            match serde_json::from_str(&text) {
                Ok(report) => Some((report, path)),
                Err(error) => {
                    tracing::warn!(
                        "{} is not an evaluation ({error}); not reused",
                        path.display()
                    );
                    None
                }
            }
        })
}

/// Reads every run of `estimators` × `seeds` under `out`, in that order.
pub fn read_all(
    out: &Path,
    estimators: &[String],
    seeds: &[u64],
) -> anyhow::Result<Vec<RunRecord>> {
    let mut records = Vec::new();
    for estimator in estimators {
        for &seed in seeds {
            records.push(RunRecord {
                estimator: estimator.clone(),
                seed,
                metrics: MetricSeries::read_run(&run_dir(out, estimator, seed))?,
            });
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_finished_once_its_last_iteration_is_logged() {
        let out = tempfile::tempdir().expect("temp dir");
        let dir = run_dir(out.path(), "drmas", 2);
        assert!(dir.ends_with("drmas/seed-2"));
        assert!(!finished(&dir, 2), "no folder");
        std::fs::create_dir_all(&dir).expect("folder");
        let file = dir.join("metrics.jsonl");
        std::fs::write(
            &file,
            "{\"iteration\": 0, \"eval/avg@2\": 0.5}\n{\"iteration\": 1, \"reward/mean\": 0.5}\n",
        )
        .expect("write");
        assert!(!finished(&dir, 2), "iteration 2 missing");
        assert!(finished(&dir, 1));
        let records = read_all(out.path(), &["drmas".into()], &[2]).expect("read");
        assert_eq!(records[0].metrics.lines(), 2);
        assert!(read_all(out.path(), &["grpo".into()], &[2]).is_err());
    }
}
