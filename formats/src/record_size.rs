//! The bound on a parquet record's size ([`LoadOptions::max_record_bytes`](crate::LoadOptions)),
//! held in two places: every page's header is read before any row, so a page that must hold a
//! value over the bound (or that is larger than this reader decodes) is refused before it is
//! allocated; and each decoded row's values are measured, so a long value in an ordinary page
//! makes its row malformed, naming the row and column.

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::Path;

use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::record::{Field, Row};

use crate::page_header::read_page_header;
use crate::DatasetError;

/// A page is decoded whole, so no page larger than this many records' worth (counting at least
/// 1 MiB a record) is decoded: 64 MiB with the default bound.
const PAGE_RECORDS: u64 = 64;

/// The largest page decoded under the bound `max_record_bytes`.
fn page_limit(max_record_bytes: usize) -> u64 {
    (max_record_bytes as u64)
        .max(1 << 20)
        .saturating_mul(PAGE_RECORDS)
}

/// Reads every page header of `file` (at `path`, described by `metadata`) and refuses the first
/// page that holds a value longer than `max_record_bytes` for certain, or that is larger than
/// the reader decodes. Column chunks no larger than the bound are not read at all.
pub(crate) fn check_pages(
    path: &Path,
    file: &File,
    metadata: &ParquetMetaData,
    max_record_bytes: usize,
) -> Result<(), DatasetError> {
    let mut first_row = 0u64;
    for group in metadata.row_groups() {
        let rows = u64::try_from(group.num_rows()).unwrap_or(0);
        for column in group.columns() {
            if u64::try_from(column.uncompressed_size()).unwrap_or(u64::MAX)
                > max_record_bytes as u64
            {
                check_chunk(path, file, column, first_row, rows, max_record_bytes)?;
            }
        }
        first_row += rows;
    }
    Ok(())
}

/// Walks one column chunk's page headers (`first_row`: rows before its row group; `rows`: the
/// row group's).
fn check_chunk(
    path: &Path,
    file: &File,
    column: &ColumnChunkMetaData,
    first_row: u64,
    rows: u64,
    max_record_bytes: usize,
) -> Result<(), DatasetError> {
    let name = column.column_path().string();
    let corrupt = |reason: String| DatasetError::Parquet {
        path: path.to_owned(),
        reason: format!("column `{name}`: {reason}"),
    };
    let (start, length) = column.byte_range();
    let end = start.saturating_add(length);
    let mut input = BufReader::with_capacity(8 * 1024, file);
    input
        .seek(SeekFrom::Start(start))
        .map_err(|e| corrupt(e.to_string()))?;
    // Rows are known page by page only in flat columns (one value a row).
    let flat = column.column_descr().max_rep_level() == 0;
    let mut position = start;
    let mut values_before = 0u64;
    while position < end {
        let page = read_page_header(&mut input, end - position)
            .map_err(|e| corrupt(format!("unreadable page header at byte {position}: {e}")))?;
        let rows_words = if flat && !page.is_dictionary && page.values > 0 {
            let from = first_row + values_before + 1;
            let to = from + page.values - 1;
            if from == to {
                format!("row {from}")
            } else {
                format!("rows {from} to {to}")
            }
        } else {
            format!("rows {} to {}", first_row + 1, first_row + rows)
        };
        if let Some(what) = oversized_page(page.uncompressed_size, page.values, max_record_bytes) {
            return Err(DatasetError::RecordTooLarge {
                path: path.to_owned(),
                column: name,
                rows: rows_words,
                what,
            });
        }
        if !page.is_dictionary {
            values_before += page.values;
        }
        position = position
            .saturating_add(page.header_len)
            .saturating_add(page.compressed_size);
        input
            .seek(SeekFrom::Start(position))
            .map_err(|e| corrupt(e.to_string()))?;
    }
    Ok(())
}

/// Why a page of `size` bytes (decompressed) holding `values` values is refused, if it is.
fn oversized_page(size: u64, values: u64, max_record_bytes: usize) -> Option<String> {
    let limit = page_limit(max_record_bytes);
    // Each value may take its bytes, a 4-byte length and a little for its levels.
    let room = values.max(1).saturating_mul(max_record_bytes as u64 + 8);
    if size > room {
        let held = if values <= 1 {
            "one value".to_owned()
        } else {
            format!("{values} values, so at least one of them is longer than that")
        };
        Some(format!(
            "a page of {size} bytes holds {held}, over max_record_bytes = {max_record_bytes}"
        ))
    } else if size > limit {
        Some(format!(
            "a page of {size} bytes, more than the {limit} bytes this reader decodes at once \
             ({PAGE_RECORDS} × max(max_record_bytes, 1 MiB))"
        ))
    } else {
        None
    }
}

/// The first string or bytes value of `row` longer than `max_record_bytes`: its column (dotted)
/// and length.
pub(crate) fn oversized_value(row: &Row, max_record_bytes: usize) -> Option<(String, usize)> {
    row.get_column_iter().find_map(|(name, field)| {
        oversized_field(field, max_record_bytes).map(|(inner, bytes)| {
            let column = if inner.is_empty() {
                name.clone()
            } else {
                format!("{name}.{inner}")
            };
            (column, bytes)
        })
    })
}

/// Like [`oversized_value`] inside one field; the column is relative to it (empty: the field).
fn oversized_field(field: &Field, max_record_bytes: usize) -> Option<(String, usize)> {
    match field {
        Field::Str(text) if text.len() > max_record_bytes => Some((String::new(), text.len())),
        Field::Bytes(bytes) if bytes.len() > max_record_bytes => Some((String::new(), bytes.len())),
        Field::Group(inner) => oversized_value(inner, max_record_bytes),
        Field::ListInternal(list) => list
            .elements()
            .iter()
            .find_map(|element| oversized_field(element, max_record_bytes)),
        Field::MapInternal(map) => map.entries().iter().find_map(|(key, value)| {
            oversized_field(key, max_record_bytes)
                .or_else(|| oversized_field(value, max_record_bytes))
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::oversized_page;

    #[test]
    fn a_page_is_refused_when_its_values_cannot_all_fit_the_bound_or_it_is_too_large() {
        assert!(oversized_page(1000, 1, 1000).is_none());
        let one = oversized_page(5000, 1, 1000).expect("one value over the bound");
        assert_eq!(
            one,
            "a page of 5000 bytes holds one value, over max_record_bytes = 1000"
        );
        assert!(oversized_page(5000, 10, 1000).is_none());
        let many = oversized_page(50_000, 10, 1000).expect("ten values cannot fill it");
        assert!(many.contains("10 values, so at least one"), "{many}");
        let huge = oversized_page(65 << 20, 1_000_000, 1000).expect("over 64 MiB");
        assert!(huge.contains("more than the 67108864 bytes"), "{huge}");
    }
}
