//! What every reader is asked ([`LoadOptions`]) and gives back ([`Loaded`]).

/// The longest JSONL line or parquet value read by default: 1 MiB, far beyond any task's text,
/// far below what tokenising a runaway record would cost.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;

/// The largest `max_record_bytes` a plugin accepts in its params: 1 GiB.
const MAX_RECORD_BYTES_CEILING: u64 = 1 << 30;

/// `max_record_bytes` from a component's params, when it is from 1 byte to 1 GiB; otherwise the
/// reason, naming the field.
pub fn check_max_record_bytes(value: u64) -> Result<usize, String> {
    match usize::try_from(value) {
        Ok(bytes) if (1..=MAX_RECORD_BYTES_CEILING).contains(&value) => Ok(bytes),
        _ => Err(format!(
            "max_record_bytes = {value} must be a number of bytes from 1 to \
             {MAX_RECORD_BYTES_CEILING}"
        )),
    }
}

/// How a dataset is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// Keep at most this many records, the first ones in file order (`None`: all).
    pub limit: Option<usize>,
    /// Skip (and count) malformed lines or rows instead of failing on the first one.
    pub skip_malformed: bool,
    /// A JSONL line longer than this many bytes is malformed, and is never held in memory whole;
    /// so is a parquet row with a string value this long, and a parquet page that must hold
    /// one is refused before it is decoded.
    pub max_record_bytes: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            limit: None,
            skip_malformed: false,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
        }
    }
}

/// The records read from a dataset, and how many malformed ones were skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded<T> {
    /// The records, in file order.
    pub tasks: Vec<T>,
    /// Malformed lines or rows skipped (always 0 unless [`LoadOptions::skip_malformed`]).
    pub skipped: usize,
}

impl<T> Default for Loaded<T> {
    fn default() -> Self {
        Self {
            tasks: Vec::new(),
            skipped: 0,
        }
    }
}

impl<T> Loaded<T> {
    /// Whether the limit is reached, so no further record is to be read.
    pub(crate) fn is_full(&self, options: &LoadOptions) -> bool {
        options.limit.is_some_and(|limit| self.tasks.len() >= limit)
    }

    /// Adds one record's outcome: a record, or a malformed one that is counted (when skipping) or
    /// else becomes the error `malformed(reason)`.
    pub(crate) fn push<E>(
        &mut self,
        record: Result<T, String>,
        options: &LoadOptions,
        malformed: impl FnOnce(String) -> E,
    ) -> Result<(), E> {
        match record {
            Ok(record) => self.tasks.push(record),
            Err(_) if options.skip_malformed => self.skipped += 1,
            Err(reason) => return Err(malformed(reason)),
        }
        Ok(())
    }
}
