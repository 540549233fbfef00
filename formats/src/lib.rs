//! # drmas-formats
//!
//! The dataset file formats the drmas plugins share, so that each plugin keeps only what is its
//! own (which fields make a task, how an answer is read):
//!
//! - JSONL ([`load_jsonl`], [`read_jsonl`]): one record a line, blank lines ignored, errors naming
//!   the file and the 1-based line;
//! - parquet as verl and pandas write it (snappy; lists and structs nested) ([`ParquetFile`]):
//!   optional column checks before any row is read, then rows with errors naming the file and the
//!   1-based row, read through the [`row`] accessors;
//! - one [`DatasetError`], and the [`LoadOptions`] (`limit`, `skip_malformed`, `max_record_bytes`,
//!   checked in params by [`check_max_record_bytes`]) and [`Loaded`] result every reader shares;
//!   a record's size is bounded before it is read whole, in JSONL lines and parquet pages alike.
//!
//! A plugin hands a reader a function that turns one line or row into its record, or says why the
//! record is malformed; the reader applies the limit, skips and counts malformed records when asked
//! to, and otherwise stops at the first one with an error that says where it is.
//!
//! It is a crate of its own rather than part of `drmas-sdk` so that only the plugins that read
//! datasets link parquet.

mod error;
mod jsonl;
mod load;
mod page_header;
mod parquet;
mod record_size;
pub mod row;
mod schema;

pub use error::DatasetError;
pub use jsonl::{load_jsonl, read_jsonl};
pub use load::{check_max_record_bytes, LoadOptions, Loaded, DEFAULT_MAX_RECORD_BYTES};
pub use parquet::{is_parquet, ParquetFile};
pub use schema::Expect;
