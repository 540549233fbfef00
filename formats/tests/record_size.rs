//! A runaway value in a parquet dataset: refused from its page's header before the page is
//! decoded, or, inside an ordinary page, its row made malformed; either way the error names the
//! file, the row and the column.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use drmas_formats::{check_max_record_bytes, row, LoadOptions, ParquetFile};
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

/// A fresh file path in the test's own temporary folder.
fn scratch(name: &str) -> PathBuf {
    let folder = std::env::temp_dir().join(format!("drmas-formats-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("scratch folder");
    folder.join(name)
}

/// Removes a test's file when the test ends, passed or not.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes one `question` string column, `rows_per_page` values a data page, no dictionary,
/// snappy-compressed (as verl's pandas files are).
fn write_questions(path: &Path, questions: &[Vec<u8>], rows_per_page: usize) {
    let schema =
        parse_message_type("message t { REQUIRED BYTE_ARRAY question (UTF8); }").expect("schema");
    let props = WriterProperties::builder()
        .set_dictionary_enabled(false)
        .set_compression(Compression::SNAPPY)
        .set_data_page_row_count_limit(rows_per_page)
        .set_write_batch_size(rows_per_page)
        .build();
    let file = File::create(path).expect("create");
    let mut writer =
        SerializedFileWriter::new(file, Arc::new(schema), Arc::new(props)).expect("writer");
    let mut group = writer.next_row_group().expect("row group");
    let mut column = group.next_column().expect("column").expect("one column");
    let values: Vec<ByteArray> = questions
        .iter()
        .map(|q| ByteArray::from(q.clone()))
        .collect();
    for chunk in values.chunks(rows_per_page) {
        column
            .typed::<ByteArrayType>()
            .write_batch(chunk, None, None)
            .expect("write");
    }
    column.close().expect("close column");
    group.close().expect("close row group");
    writer.close().expect("close file");
}

fn questions(path: &Path, options: &LoadOptions) -> Result<Vec<String>, String> {
    let file = ParquetFile::open(path).map_err(|e| e.to_string())?;
    file.load(options, |row, _| {
        let field = row::value(row, &["question"]).ok_or("no question")?;
        row::text(field, "question")
    })
    .map(|loaded| loaded.tasks)
    .map_err(|e| e.to_string())
}

#[test]
fn a_100_mb_value_is_refused_from_its_page_header_naming_row_and_column() {
    let path = scratch("huge.parquet");
    let _cleanup = Remove(path.clone());
    // 100 MB of one letter: snappy stores it in a few MB, so only the page header tells.
    let huge = vec![b'a'; 100 << 20];
    write_questions(
        &path,
        &[b"What is 2+2?".to_vec(), huge, b"And 3+3?".to_vec()],
        1,
    );
    assert!(std::fs::metadata(&path).expect("written").len() < 10 << 20);
    let error = questions(&path, &LoadOptions::default()).expect_err("refused");
    assert!(
        error.starts_with(&format!(
            "{}: column `question`, row 2: a page of 104857604 bytes holds one value, over \
             max_record_bytes = 1048576; raise max_record_bytes",
            path.display()
        )),
        "{error}"
    );
    let skipping = LoadOptions {
        skip_malformed: true,
        ..LoadOptions::default()
    };
    assert!(
        questions(&path, &skipping).is_err(),
        "a page cannot be skipped"
    );
    let raised = LoadOptions {
        max_record_bytes: 200 << 20,
        ..LoadOptions::default()
    };
    let loaded = questions(&path, &raised).expect("under a raised bound");
    assert_eq!(loaded[1].len(), 100 << 20);
}

#[test]
fn a_long_value_among_short_ones_makes_its_row_malformed() {
    let path = scratch("long-among-short.parquet");
    let _cleanup = Remove(path.clone());
    let mut rows: Vec<Vec<u8>> = (0..10)
        .map(|i| format!("question {i}").into_bytes())
        .collect();
    rows[6] = vec![b'b'; 2000];
    // One page of ten values: its 2,1xx bytes could be ten values of at most 1000 bytes.
    write_questions(&path, &rows, 10);
    let small = LoadOptions {
        max_record_bytes: 1000,
        ..LoadOptions::default()
    };
    let error = questions(&path, &small).expect_err("row 7");
    assert_eq!(
        error,
        format!(
            "{}: row 7: column `question` holds a value of 2000 bytes, over max_record_bytes = \
             1000; load with skip_malformed to skip such rows",
            path.display()
        )
    );
    let skipping = LoadOptions {
        skip_malformed: true,
        ..small
    };
    let file = ParquetFile::open(&path).expect("opens");
    let loaded = file
        .load(&skipping, |row, _| {
            row::text(row::value(row, &["question"]).ok_or("none")?, "question")
        })
        .expect("skips");
    assert_eq!((loaded.tasks.len(), loaded.skipped), (9, 1));
}

#[test]
fn a_page_too_full_for_its_values_names_the_rows_it_spans() {
    let path = scratch("full-page.parquet");
    let _cleanup = Remove(path.clone());
    let rows: Vec<Vec<u8>> = (0..4).map(|_| vec![b'c'; 5000]).collect();
    write_questions(&path, &rows, 2);
    let small = LoadOptions {
        max_record_bytes: 1000,
        ..LoadOptions::default()
    };
    let error = questions(&path, &small).expect_err("the first page");
    assert!(
        error.contains(": column `question`, rows 1 to 2: a page of")
            && error.contains("holds 2 values, so at least one of them is longer than that"),
        "{error}"
    );
}

#[test]
fn the_bound_in_params_is_from_one_byte_to_a_gibibyte() {
    assert_eq!(check_max_record_bytes(4096), Ok(4096));
    assert_eq!(
        check_max_record_bytes(0),
        Err("max_record_bytes = 0 must be a number of bytes from 1 to 1073741824".to_owned())
    );
    assert!(check_max_record_bytes(1 << 31).is_err());
}
