//! Why a dataset could not be loaded.

use std::path::PathBuf;

/// A dataset file that could not be loaded; every variant names the file, and a malformed record
/// its line or row.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The file could not be opened or read.
    #[error("cannot read dataset {path}: {source}")]
    Io {
        /// The dataset file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A JSONL line is not a valid record.
    #[error("{path}:{line}: {reason}; load with skip_malformed to skip such lines")]
    Malformed {
        /// The dataset file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is not readable as parquet (not one row: the file itself).
    #[error("cannot read parquet file {path}: {reason}")]
    Parquet {
        /// The dataset file.
        path: PathBuf,
        /// The parquet library's message.
        reason: String,
    },
    /// The parquet file has none of the columns a record's field may be taken from.
    #[error("{path}: no column {column}")]
    MissingColumn {
        /// The dataset file.
        path: PathBuf,
        /// The column looked for, with its alternatives.
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
    /// A parquet page, refused from its header, holds a value longer than the record bound or is
    /// too large to decode.
    #[error(
        "{path}: column `{column}`, {rows}: {what}; raise max_record_bytes in the environment's \
         params if records this long are meant, or remove them from the file"
    )]
    RecordTooLarge {
        /// The dataset file.
        path: PathBuf,
        /// The column, dotted.
        column: String,
        /// The rows the page spans (`row 7`, `rows 1 to 500`), 1-based.
        rows: String,
        /// The page's size and what it holds.
        what: String,
    },
    /// A parquet row is not a valid record.
    #[error("{path}: row {row}: {reason}; load with skip_malformed to skip such rows")]
    MalformedRow {
        /// The dataset file.
        path: PathBuf,
        /// The 1-based row number.
        row: usize,
        /// What is wrong with it.
        reason: String,
    },
}
