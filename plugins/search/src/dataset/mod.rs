//! QA tasks with Search-R1's fields, from JSONL or parquet.
//!
//! - JSONL ([`load_qa_jsonl`]): one object a line with `question`, `golden_answers` (a list, or a
//!   single string), optional `data_source`, optional `id` (string or integer) and optional
//!   `gold_doc_ids` (the ids of passages that answer the question, for retrieval metrics).
//! - Parquet ([`load_qa_parquet`]): the same flat columns, or Search-R1's verl layout
//!   (`reward_model.ground_truth.target` for the answers, the question from `question`, else
//!   `extra_info.question`, else the last user message of `prompt`).
//!
//! - [`Split`]: `train` / `test` subsets of a file that has no splits (one task in ten, by the
//!   hash of its id, is `test`), applied by the search environment before its `limit`.
//!
//! [`load_qa`] picks the reader by the file's extension. The files are read by [`drmas_formats`];
//! both readers build their tasks through the same checks, so a JSONL file and a parquet file with
//! the same records give equal tasks.

mod jsonl;
mod parquet;
mod record;
mod split;

use std::path::Path;

pub use drmas_formats::{
    check_max_record_bytes, is_parquet, DatasetError, LoadOptions, DEFAULT_MAX_RECORD_BYTES,
};
pub use jsonl::load_qa_jsonl;
pub use parquet::load_qa_parquet;
pub use split::Split;

/// One question with its accepted answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QaTask {
    /// The task id: `id` from the file, or `<file stem>:<line>` (JSONL) / `<file stem>:<row>`
    /// (parquet, 1-based) when the record has none.
    pub id: String,
    /// The question.
    pub question: String,
    /// The accepted answers (never empty).
    pub golden_answers: Vec<String>,
    /// Where the question comes from (`data_source`, e.g. `nq`), if the file says.
    pub data_source: Option<String>,
    /// Ids of corpus passages that contain the answer (empty when the file has none).
    pub gold_doc_ids: Vec<String>,
}

/// The tasks read from a QA file, and how many malformed lines or rows were skipped.
pub type QaDataset = drmas_formats::Loaded<QaTask>;

/// Loads QA tasks from `path`: parquet when the name ends in `.parquet`, JSONL otherwise.
pub fn load_qa(path: &Path, options: &LoadOptions) -> Result<QaDataset, DatasetError> {
    if is_parquet(path) {
        load_qa_parquet(path, options)
    } else {
        load_qa_jsonl(path, options)
    }
}

/// The file's stem, which prefixes the ids of records that have none.
fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
