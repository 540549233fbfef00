//! A run's `metrics.jsonl` read back as series: metric key → (iteration, value) points.
//!
//! The trainer appends one flat JSON object per iteration (`{"iteration": 3, "reward/mean": 0.4,
//! ...}`). Numbers become points; `null` (not measured that iteration), strings, booleans and
//! nested values are skipped, so keys this reader does not know are harmless. A malformed last line
//! is what a killed run leaves behind: it is skipped with a warning. A malformed line anywhere else
//! is an error naming the file and line.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The file the trainer writes into the run folder.
pub const FILE_NAME: &str = "metrics.jsonl";

/// The key holding the iteration number of a line.
pub const ITERATION_KEY: &str = "iteration";

/// One metric over training: `(iteration, value)` in file order.
pub type Series = Vec<(u64, f64)>;

/// Every numeric metric of one run.
#[derive(Debug, Clone, Default)]
pub struct MetricSeries {
    path: PathBuf,
    series: BTreeMap<String, Series>,
    lines: usize,
    skipped_last_line: Option<usize>,
}

impl MetricSeries {
    /// Reads `run_dir/metrics.jsonl`; a missing file says to train first.
    pub fn read_run(run_dir: &Path) -> anyhow::Result<Self> {
        let path = run_dir.join(FILE_NAME);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => bail!(
                "{} not found: run `drmas-host train --config FILE` first; it writes {FILE_NAME} \
                 into the run file's `[run] output_dir`",
                path.display()
            ),
            Err(error) => {
                return Err(error).with_context(|| format!("cannot read {}", path.display()))
            }
        };
        Self::parse(&text, &path)
    }

    /// Parses the text of a metrics file; `path` only names it in messages.
    pub fn parse(text: &str, path: &Path) -> anyhow::Result<Self> {
        let mut metrics = Self {
            path: path.to_path_buf(),
            ..Self::default()
        };
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .map(|(index, line)| (index + 1, line.trim()))
            .filter(|(_, line)| !line.is_empty())
            .collect();
        let last = lines.last().map(|(number, _)| *number);
        for (number, line) in lines {
            let object = match serde_json::from_str::<serde_json::Value>(line) {
                Ok(serde_json::Value::Object(object)) => object,
                Ok(_) if Some(number) == last => {
                    metrics.skip_last(number, "not a JSON object");
                    continue;
                }
                Ok(_) => bail!(
                    "{}:{number}: expected one JSON object per line",
                    path.display()
                ),
                Err(error) if Some(number) == last => {
                    metrics.skip_last(number, &error.to_string());
                    continue;
                }
                Err(error) => bail!("{}:{number}: malformed line: {error}", path.display()),
            };
            let iteration = object
                .get(ITERATION_KEY)
                .and_then(iteration_number)
                .unwrap_or(metrics.lines as u64);
            for (key, value) in &object {
                if key == ITERATION_KEY {
                    continue;
                }
                if let Some(value) = value.as_f64() {
                    metrics
                        .series
                        .entry(key.clone())
                        .or_default()
                        .push((iteration, value));
                }
            }
            metrics.lines += 1;
        }
        Ok(metrics)
    }

    fn skip_last(&mut self, number: usize, why: &str) {
        tracing::warn!(
            "{}:{number}: skipping the last line, cut short or malformed ({why}); \
             a killed run leaves one behind",
            self.path.display()
        );
        self.skipped_last_line = Some(number);
    }

    /// The file these metrics came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The iterations read (lines that parsed).
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// The line number of a malformed last line that was skipped, if any.
    pub fn skipped_last_line(&self) -> Option<usize> {
        self.skipped_last_line
    }

    /// One metric's points, if it was ever measured.
    pub fn series(&self, key: &str) -> Option<&[(u64, f64)]> {
        self.series.get(key).map(Vec::as_slice)
    }

    /// Every metric key with at least one number, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.series.keys().map(String::as_str)
    }

    /// The metrics whose key starts with `prefix`, as (rest of the key, points), sorted by key.
    pub fn with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a [(u64, f64)])> + 'a {
        self.series
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .map_while(move |(key, points)| {
                key.strip_prefix(prefix)
                    .map(|rest| (rest, points.as_slice()))
            })
    }
}

/// A non-negative whole number, written as an integer or as a float like `3.0`.
fn iteration_number(value: &serde_json::Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|number| *number >= 0.0 && number.fract() == 0.0)
            .map(|number| number as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<MetricSeries> {
        MetricSeries::parse(text, Path::new("run/metrics.jsonl"))
    }

    #[test]
    fn numbers_become_points_and_nulls_and_unknown_values_are_skipped() {
        let metrics = parse(
            "{\"iteration\": 0, \"reward/mean\": 0.25, \"eval/avg@4\": null, \"note\": \"x\"}\n\
             {\"iteration\": 1, \"reward/mean\": 0.5, \"eval/avg@4\": 0.3, \"nested\": {\"a\": 1}}\n",
        )
        .expect("parses");
        assert_eq!(metrics.lines(), 2);
        assert_eq!(
            metrics.series("reward/mean"),
            Some(&[(0, 0.25), (1, 0.5)][..])
        );
        assert_eq!(metrics.series("eval/avg@4"), Some(&[(1, 0.3)][..]));
        assert_eq!(metrics.series("note"), None);
        assert_eq!(metrics.series("iteration"), None);
        assert_eq!(
            metrics.keys().collect::<Vec<_>>(),
            ["eval/avg@4", "reward/mean"]
        );
    }

    #[test]
    fn a_missing_iteration_falls_back_to_the_line_count() {
        let metrics = parse("{\"loss\": 1}\n\n{\"loss\": 2, \"iteration\": 7.0}\n{\"loss\": 3}")
            .expect("parses");
        assert_eq!(
            metrics.series("loss"),
            Some(&[(0, 1.0), (7, 2.0), (2, 3.0)][..])
        );
    }

    #[test]
    fn prefix_lists_only_its_keys_with_the_prefix_cut() {
        let metrics = parse(
            "{\"grad_norm/agent/solver\": 1, \"grad_norm/agent/verifier\": 2, \
              \"grad_norm/group/shared\": 3, \"grad_norm/agent\": 4, \"reward/mean\": 0}",
        )
        .expect("parses");
        let agents: Vec<&str> = metrics
            .with_prefix("grad_norm/agent/")
            .map(|(name, _)| name)
            .collect();
        assert_eq!(agents, ["solver", "verifier"]);
    }

    #[test]
    fn a_cut_short_last_line_is_skipped() {
        let metrics =
            parse("{\"iteration\": 0, \"loss\": 1}\n{\"iteration\": 1, \"lo").expect("tolerated");
        assert_eq!(metrics.lines(), 1);
        assert_eq!(metrics.skipped_last_line(), Some(2));
        assert_eq!(metrics.series("loss"), Some(&[(0, 1.0)][..]));
    }

    #[test]
    fn a_malformed_middle_line_names_file_and_line() {
        let error = parse("{\"loss\": 1}\n\n{\"loss\": \n{\"loss\": 2}\n")
            .expect_err("malformed")
            .to_string();
        assert!(error.contains("run/metrics.jsonl:3"), "{error}");
        let error = parse("{\"loss\": 1}\n[1, 2]\n{\"loss\": 2}\n")
            .expect_err("not an object")
            .to_string();
        assert!(error.contains("run/metrics.jsonl:2"), "{error}");
    }

    #[test]
    fn a_missing_file_says_to_train_first() {
        let folder = tempfile::tempdir().expect("temp dir");
        let error = MetricSeries::read_run(folder.path())
            .expect_err("no file")
            .to_string();
        assert!(
            error.contains(&folder.path().join(FILE_NAME).display().to_string()),
            "{error}"
        );
        assert!(error.contains("drmas-host train"), "{error}");
    }
}
