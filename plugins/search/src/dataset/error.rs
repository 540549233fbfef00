//! Why a QA file could not be loaded.

use std::path::PathBuf;

/// A QA file that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The file could not be opened or read.
    #[error("cannot read QA dataset {path}: {source}; check the dataset path")]
    Io {
        /// The dataset file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A JSONL line is not a valid QA task.
    #[error(
        "{path}:{line}: not a QA task ({reason}); each line must be a JSON object with \
         \"question\" (string) and \"golden_answers\" (non-empty list of strings), or load with \
         skip_malformed to skip such lines"
    )]
    Malformed {
        /// The dataset file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is not readable as parquet (not one row: the file itself).
    #[error("cannot read parquet QA dataset {path}: {reason}")]
    Parquet {
        /// The dataset file.
        path: PathBuf,
        /// The parquet library's message.
        reason: String,
    },
    /// The parquet file has no column to take a task's question or answers from.
    #[error(
        "{path}: no column {column}; a parquet QA dataset needs a question (`question`, \
         `extra_info.question` or `prompt`) and answers (`golden_answers` or \
         `reward_model.ground_truth.target`)"
    )]
    MissingColumn {
        /// The dataset file.
        path: PathBuf,
        /// The column (or the alternatives) looked for.
        column: String,
    },
    /// A parquet column has a type the reader cannot use.
    #[error("{path}: column `{column}` is {found}, expected {expected}")]
    ColumnType {
        /// The dataset file.
        path: PathBuf,
        /// The column, dotted for nested ones (`reward_model.ground_truth.target`).
        column: String,
        /// What the reader needs.
        expected: &'static str,
        /// What the file has.
        found: String,
    },
    /// A parquet row is not a valid QA task.
    #[error(
        "{path}: row {row}: not a QA task ({reason}); load with skip_malformed to skip such rows"
    )]
    MalformedRow {
        /// The dataset file.
        path: PathBuf,
        /// The 1-based row number.
        row: usize,
        /// What is wrong with it.
        reason: String,
    },
}
