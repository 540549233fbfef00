//! Environment `math`: one step per task; the action is the final solution and the reward is 1
//! when its answer is right, else 0.
//!
//! Datasets: `builtin:generated` (the seeded procedural generator; `split` picks the held-out
//! stream, `limit` the count), GSM8K / MATH JSONL (format detected from the fields, or set), and
//! verl's parquet layout.

use std::path::Path;

use drmas_sdk::{
    Component, DatasetSpec, Environment, Episode, Error, Metric, Params, Reset, Result, Step, Task,
};
use serde::Deserialize;

use crate::answer::{extract_answer, score};
use crate::dataset::{
    check_max_record_bytes, is_parquet, load_jsonl, load_parquet, JsonlFormat, LoadOptions,
    MathTask, DEFAULT_MAX_RECORD_BYTES,
};
use crate::generator::{generate, Difficulty, Split};

/// The built-in generated dataset's path.
pub const GENERATED: &str = "builtin:generated";

/// The most tasks `builtin:generated` makes for one dataset: a larger `limit` or
/// `generated_count` is refused rather than generated until the memory runs out.
pub const MAX_GENERATED: usize = 1_000_000;

/// Scores solutions with the answer checker.
pub struct MathEnvironment {
    config: MathEnvironmentConfig,
    /// `config.max_record_bytes`, checked.
    max_record_bytes: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct MathEnvironmentConfig {
    /// `auto` (by extension and fields), `gsm8k`, `math`, `parquet`, or a custom field mapping.
    format: Format,
    /// Skip (and count) malformed lines instead of failing.
    skip_malformed: bool,
    /// The longest JSONL line or parquet value read (bytes): longer ones are malformed.
    max_record_bytes: u64,
    /// Difficulty of generated tasks (1-3).
    level: Difficulty,
    /// Seed of generated tasks.
    seed: u64,
    /// Generated tasks when the dataset spec sets no limit.
    generated_count: usize,
}

impl Default for MathEnvironmentConfig {
    fn default() -> Self {
        Self {
            format: Format::Auto,
            skip_malformed: false,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES as u64,
            level: Difficulty::Easy,
            seed: 0,
            generated_count: 1000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum Format {
    Auto,
    Gsm8k,
    Math,
    Parquet,
    Custom(JsonlFormat),
}

impl Component for MathEnvironment {
    const NAME: &'static str = "math";
    const DESCRIPTION: &'static str = "one-step math tasks scored by a MATH-style answer checker";

    fn from_config(params: &Params) -> Result<Self> {
        let config: MathEnvironmentConfig = params.parse()?;
        let max_record_bytes = check_max_record_bytes(config.max_record_bytes)
            .map_err(|reason| Error::new(format!("[environment.params] {reason}")))?;
        Ok(Self {
            config,
            max_record_bytes,
        })
    }
}

impl MathEnvironment {
    fn load(&self, spec: &DatasetSpec) -> Result<Vec<MathTask>> {
        let limit = spec.limit.map(|l| l as usize);
        if spec.path == GENERATED {
            let split = match spec.split.as_str() {
                "" | "train" => Split::Train,
                "test" | "eval" | "validation" => Split::Test,
                other => {
                    return Err(Error::new(format!(
                        "{GENERATED} has splits `train` and `test`, not `{other}`"
                    )))
                }
            };
            let (count, key) = match limit {
                Some(limit) => (limit, "the dataset's `limit`"),
                None => (
                    self.config.generated_count,
                    "[environment.params] generated_count",
                ),
            };
            if count > MAX_GENERATED {
                return Err(Error::new(format!(
                    "{GENERATED} makes at most {MAX_GENERATED} tasks, and {key} asks for \
                     {count}: lower it, or put more tasks in a dataset file"
                )));
            }
            return Ok(generate(self.config.seed, split, self.config.level, count));
        }
        let path = spec.resolved_path();
        let options = LoadOptions {
            limit,
            skip_malformed: self.config.skip_malformed,
            max_record_bytes: self.max_record_bytes,
        };
        let loaded = match &self.config.format {
            Format::Parquet => load_parquet(&path, &options)?,
            Format::Auto if is_parquet(&path) => load_parquet(&path, &options)?,
            Format::Auto => load_jsonl(&path, &detect_format(&path)?, &options)?,
            Format::Gsm8k => load_jsonl(&path, &JsonlFormat::gsm8k(), &options)?,
            Format::Math => load_jsonl(&path, &JsonlFormat::math(), &options)?,
            Format::Custom(format) => load_jsonl(&path, format, &options)?,
        };
        if loaded.skipped > 0 {
            drmas_sdk::log::warn!(
                "{}: skipped {} malformed lines",
                path.display(),
                loaded.skipped
            );
        }
        Ok(loaded.tasks)
    }
}

/// GSM8K has `question`; MATH has `problem`. Decided by the first line.
fn detect_format(path: &Path) -> Result<JsonlFormat> {
    use std::io::BufRead;
    let file = std::fs::File::open(path)
        .map_err(|e| Error::new(format!("cannot open dataset {}: {e}", path.display())))?;
    let mut first = String::new();
    std::io::BufReader::new(file).read_line(&mut first)?;
    if first.contains("\"problem\"") {
        Ok(JsonlFormat::math())
    } else if first.contains("\"question\"") {
        Ok(JsonlFormat::gsm8k())
    } else {
        Err(Error::new(format!(
            "{}: cannot tell the dataset format from its first line; set format = \"gsm8k\", \"math\", \
             \"parquet\" or a custom {{ question_field, answer_field, answer_mode, data_source }} in [environment.params]",
            path.display()
        )))
    }
}

impl Environment for MathEnvironment {
    fn load_tasks(&self, spec: &DatasetSpec) -> Result<Vec<Task>> {
        Ok(self
            .load(spec)?
            .into_iter()
            .map(|t| Task {
                id: t.id,
                prompt: t.question,
                data_source: t.data_source,
                payload: t.ground_truth,
            })
            .collect())
    }

    fn reset(&self, task: &Task) -> Result<Reset> {
        Ok(Reset {
            episode: Box::new(MathEpisode {
                ground_truth: task.payload.clone(),
                done: false,
            }),
            observation: task.prompt.clone(),
            state_key: None,
        })
    }
}

/// One task: a single step scored against the ground truth.
struct MathEpisode {
    ground_truth: String,
    done: bool,
}

impl Episode for MathEpisode {
    fn step(&mut self, action: &str) -> Result<Step> {
        if self.done {
            return Err(Error::new("the math episode has already ended"));
        }
        self.done = true;
        let reward = score(action, &self.ground_truth);
        let answered = if extract_answer(action).is_some() {
            1.0
        } else {
            0.0
        };
        Ok(Step {
            observation: String::new(),
            reward,
            done: true,
            metrics: vec![
                Metric {
                    name: "correct".into(),
                    value: reward,
                },
                Metric {
                    name: "answered".into(),
                    value: answered,
                },
            ],
            state_key: None,
        })
    }
}
