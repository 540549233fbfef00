//! [`MetricsLog`]: one flat JSON object per iteration in `RUN_DIR/metrics.jsonl`, written and
//! flushed as each iteration ends so a killed run keeps every finished iteration.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Map, Value};

/// Named numbers of one iteration, keys like `reward/mean` or `grad_norm/agent/solver`.
#[derive(Debug, Clone, Default)]
pub struct Metrics(Map<String, Value>);

impl Metrics {
    /// An empty record for `iteration`.
    pub fn new(iteration: u32) -> Self {
        let mut map = Map::new();
        map.insert("iteration".into(), iteration.into());
        Self(map)
    }

    /// Sets `key` to `value` (non-finite values are written as `null`).
    pub fn set(&mut self, key: impl Into<String>, value: f64) {
        let value = serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number);
        self.0.insert(key.into(), value);
    }

    /// The value of `key`, if set and finite.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(Value::as_f64)
    }

    /// The keys set so far.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The record as one JSON line (no newline).
    pub fn to_line(&self) -> String {
        Value::Object(self.0.clone()).to_string()
    }
}

/// The run's metrics file, opened for appending.
pub struct MetricsLog {
    path: PathBuf,
    writer: BufWriter<File>,
}

impl MetricsLog {
    /// Opens `dir/metrics.jsonl` for appending (a resumed run continues the same file).
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("metrics.jsonl");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(Self {
            path,
            writer: BufWriter::new(file),
        })
    }

    /// Drops the records of iterations after `iteration` — of every iteration, the evaluation
    /// before training included, when `None` — from the run's JSONL files (`metrics.jsonl`,
    /// `samples.jsonl`): a resumed run redoes them. Also drops a torn last line a kill may have
    /// left.
    pub fn truncate_after(dir: &Path, iteration: Option<u32>) -> anyhow::Result<()> {
        for name in ["metrics.jsonl", "samples.jsonl"] {
            truncate_jsonl(&dir.join(name), iteration)?;
        }
        Ok(())
    }

    /// Appends one record and flushes it to disk.
    pub fn write(&mut self, metrics: &Metrics) -> anyhow::Result<()> {
        writeln!(self.writer, "{}", metrics.to_line())
            .and_then(|()| self.writer.flush())
            .with_context(|| format!("writing {}", self.path.display()))
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Keeps the lines of `path` whose `iteration` is at most `iteration` (none when `None`; a
/// missing file is fine). The kept lines go to a temporary file renamed over `path`, so a kill
/// in the middle leaves either the old file or the new one.
fn truncate_jsonl(path: &Path, iteration: Option<u32>) -> anyhow::Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let kept: String = text
        .lines()
        .filter(|line| {
            let line_iteration = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| v.get("iteration").and_then(Value::as_u64));
            matches!((line_iteration, iteration), (Some(i), Some(last)) if i <= u64::from(last))
        })
        .flat_map(|line| [line, "\n"])
        .collect();
    if kept == text {
        return Ok(());
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".truncating");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, kept)
        .and_then(|()| std::fs::rename(&temporary, path))
        .with_context(|| format!("rewriting {}", path.display()))
}
