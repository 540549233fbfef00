//! Loading math tasks from files: JSONL with a field mapping (GSM8K, MATH-500, …) and verl's
//! parquet layout.
//!
//! The files are read by [`drmas_formats`], which this module tells how a line or row becomes a
//! [`MathTask`]: every reader returns the tasks in file order, honours a `limit`, and either stops
//! at the first malformed record with an error naming the file and its 1-based line (or row), or —
//! with `skip_malformed` — skips it and counts it.

mod jsonl;
mod parquet;

pub use drmas_formats::{
    check_max_record_bytes, is_parquet, DatasetError, LoadOptions, DEFAULT_MAX_RECORD_BYTES,
};
pub use jsonl::{load_jsonl, read_jsonl, AnswerMode, JsonlFormat};
pub use parquet::load_parquet;

use serde::{Deserialize, Serialize};

/// One math problem with its reference answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MathTask {
    /// A stable identifier, unique within its dataset.
    pub id: String,
    /// The problem statement shown to the agents.
    pub question: String,
    /// The reference final answer, compared with [`crate::answer::is_equivalent`].
    pub ground_truth: String,
    /// Where the task comes from (`openai/gsm8k`, `HuggingFaceH4/MATH-500`, …), for per-source metrics.
    pub data_source: String,
}

/// The tasks read from a dataset, and how many malformed records were skipped.
pub type Loaded = drmas_formats::Loaded<MathTask>;
