//! Parquet datasets as verl and pandas write them: opened once, optionally checked column by
//! column, then read row by row.

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use parquet::errors::ParquetError;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Row;

use crate::record_size::{check_pages, oversized_value};
use crate::schema::{check_columns, Expect};
use crate::{DatasetError, LoadOptions, Loaded};

/// Whether `path` names a parquet file (by its extension, case-insensitively).
pub fn is_parquet(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("parquet"))
}

/// An open parquet dataset file.
pub struct ParquetFile {
    path: PathBuf,
    reader: SerializedFileReader<File>,
    /// The same file, for reading page headers before the reader decodes their pages.
    pages: File,
}

impl ParquetFile {
    /// Opens `path` and reads its metadata; a file that is not parquet is a
    /// [`DatasetError::Parquet`].
    pub fn open(path: &Path) -> Result<Self, DatasetError> {
        let io = |source| DatasetError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let pages = file.try_clone().map_err(io)?;
        let reader = decoding(path, || SerializedFileReader::new(file))?;
        Ok(Self {
            path: path.to_owned(),
            reader,
            pages,
        })
    }

    /// Checks the schema before any row is read, so a file that cannot give any record fails once
    /// with the column named, whatever `skip_malformed` says: each column of `known` the file has
    /// must be of its [`Expect`]ed type, and each entry of `required` must have at least one of
    /// its alternative columns in the file. Columns are paths: a top-level column, then struct
    /// fields (`["reward_model", "ground_truth"]`).
    pub fn check_columns(
        &self,
        known: &[(&[&str], Expect)],
        required: &[&[&[&str]]],
    ) -> Result<(), DatasetError> {
        let schema = self.reader.metadata().file_metadata().schema();
        check_columns(schema, known, required, &self.path)
    }

    /// Reads the rows in file order: `parse` turns each row, with its 1-based number, into a
    /// record or says why it is malformed. A value longer than
    /// [`LoadOptions::max_record_bytes`] makes its row malformed; a page that must hold one, or
    /// is too large to decode, is refused from its header before any row is read.
    pub fn load<T>(
        &self,
        options: &LoadOptions,
        mut parse: impl FnMut(&Row, usize) -> Result<T, String>,
    ) -> Result<Loaded<T>, DatasetError> {
        check_pages(
            &self.path,
            &self.pages,
            self.reader.metadata(),
            options.max_record_bytes,
        )?;
        let mut loaded = Loaded::default();
        let mut rows = decoding(&self.path, || self.reader.get_row_iter(None))?;
        for number in 1.. {
            if loaded.is_full(options) {
                break;
            }
            let Some(row) = decoding(&self.path, || rows.next().transpose())? else {
                break;
            };
            let record = match oversized_value(&row, options.max_record_bytes) {
                Some((column, bytes)) => Err(format!(
                    "column `{column}` holds a value of {bytes} bytes, over max_record_bytes = {}",
                    options.max_record_bytes
                )),
                None => parse(&row, number),
            };
            loaded.push(record, options, |reason| DatasetError::MalformedRow {
                path: self.path.clone(),
                row: number,
                reason,
            })?;
        }
        Ok(loaded)
    }
}

/// Runs one decoding step of the parquet crate on the file at `path`. Its error, and a panic —
/// the crate panics on some corrupt files instead of failing (bad page headers, levels or
/// metadata) — become a file-level [`DatasetError::Parquet`]: a damaged dataset is the user's to
/// replace, never a crash of the run. Only the crate's own work runs inside, so a panic here is
/// the file's, not a plugin's.
fn decoding<T>(
    path: &Path,
    step: impl FnOnce() -> Result<T, ParquetError>,
) -> Result<T, DatasetError> {
    match catch_unwind(AssertUnwindSafe(step)) {
        Ok(result) => result.map_err(|e| parquet_error(path, e)),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(DatasetError::Parquet {
                path: path.to_owned(),
                reason: format!("corrupt file, the reader stopped: {message}"),
            })
        }
    }
}

/// The file-level error of a parquet failure.
fn parquet_error(path: &Path, error: ParquetError) -> DatasetError {
    DatasetError::Parquet {
        path: path.to_owned(),
        reason: error.to_string(),
    }
}
