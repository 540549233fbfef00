//! `drmas-host plot RUN_DIR`: PNG charts of a run's `metrics.jsonl`, written next to it.
//!
//! [`series`] reads the file into one series per key, [`figures`] decides which charts a run gets and what
//! they show, [`chart`] draws one chart to a PNG.

pub mod chart;
pub mod figures;
pub mod series;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use anyhow::bail;

pub use series::MetricSeries;

/// Reads `run_dir/metrics.jsonl` and writes `reward.png`, `grad_norm.png` and (when the run
/// logged amplification) `amplification.png` into `run_dir`; returns the files written.
///
/// A chart with no data is left out; a run with nothing plottable at all is an error listing
/// the keys it did find.
pub fn plot_run(run_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let metrics = MetricSeries::read_run(run_dir)?;
    if metrics.lines() == 0 {
        bail!(
            "{} has no complete iteration yet: nothing to plot",
            metrics.path().display()
        );
    }
    let mut written = Vec::new();
    for (name, chart) in figures::all(&metrics) {
        if chart.is_empty() {
            continue;
        }
        let path = run_dir.join(name);
        chart.write_png(&path)?;
        written.push(path);
    }
    if written.is_empty() {
        let keys: Vec<&str> = metrics.keys().collect();
        bail!(
            "{}: nothing to plot; expected reward/mean, eval/avg@K, eval/pass@K, \
             grad_norm/agent/NAME, grad_norm/group/NAME or advantage/amplification/NAME, found: {}",
            metrics.path().display(),
            if keys.is_empty() {
                "no numeric keys".to_string()
            } else {
                keys.join(", ")
            }
        );
    }
    Ok(written)
}
