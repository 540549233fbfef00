//! A parquet file declares its own sizes and counts (footer length, row groups, column chunk
//! offsets and lengths, page sizes): every single-byte corruption of a real file must load or
//! fail with an error naming the file — never panic, never allocate what a corrupt size claims.

mod common;

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use drmas_sdk::{DatasetSpec, Environment};
use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

const SCHEMA: &str = "message qa {
  REQUIRED BYTE_ARRAY question (UTF8);
  OPTIONAL group golden_answers (LIST) {
    REPEATED group list {
      OPTIONAL BYTE_ARRAY element (UTF8);
    }
  }
}";

/// One leaf column: its values, definition levels and repetition levels (`None`: required).
type Column<'a> = (&'a [&'a str], Option<&'a [i16]>, Option<&'a [i16]>);

/// Three questions with one or two golden answers each, in one row group.
fn write_qa(path: &Path) {
    let schema = Arc::new(parse_message_type(SCHEMA).expect("schema"));
    let file = File::create(path).expect("create");
    let properties = Arc::new(WriterProperties::builder().build());
    let mut writer = SerializedFileWriter::new(file, schema, properties).expect("writer");
    let mut group = writer.next_row_group().expect("row group");
    let columns: [Column<'_>; 2] = [
        (
            &["who wrote hamlet", "capital of france", "2+2"],
            None,
            None,
        ),
        (
            &["Shakespeare", "William Shakespeare", "Paris", "4"],
            Some(&[3, 3, 3, 3]),
            Some(&[0, 1, 0, 0]),
        ),
    ];
    for (values, def, rep) in columns {
        let mut column = group.next_column().expect("column").expect("a leaf");
        let values: Vec<ByteArray> = values.iter().map(|v| ByteArray::from(*v)).collect();
        column
            .typed::<ByteArrayType>()
            .write_batch(&values, def, rep)
            .expect("write");
        column.close().expect("close column");
    }
    group.close().expect("close row group");
    writer.close().expect("close file");
}

fn load(path: &Path) -> Result<usize, String> {
    let environment = common::tasks_only_environment();
    let spec = DatasetSpec {
        path: path.display().to_string(),
        ..Default::default()
    };
    environment
        .load_tasks(&spec)
        .map(|tasks| tasks.len())
        .map_err(|e| e.to_string())
}

#[test]
fn every_single_byte_corruption_loads_or_fails_with_an_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let original = dir.path().join("qa.parquet");
    write_qa(&original);
    assert_eq!(load(&original), Ok(3), "the intact file");
    let bytes = std::fs::read(&original).expect("read");
    let corrupt = dir.path().join("corrupt.parquet");
    let mut panicked = Vec::new();
    let mut unnamed = Vec::new();
    for position in 0..bytes.len() {
        for value in [0x00, 0x7f, 0xff] {
            if bytes[position] == value {
                continue;
            }
            let mut changed = bytes.clone();
            changed[position] = value;
            std::fs::write(&corrupt, &changed).expect("write");
            match catch_unwind(AssertUnwindSafe(|| load(&corrupt))) {
                Err(_) => panicked.push((position, value)),
                Ok(Err(message)) if !message.contains("corrupt.parquet") => {
                    unnamed.push((position, value, message));
                }
                Ok(_) => {}
            }
        }
    }
    assert!(
        panicked.is_empty(),
        "{} corruptions panicked: {panicked:?}",
        panicked.len()
    );
    assert!(
        unnamed.is_empty(),
        "errors without the file's name: {unnamed:?}"
    );
}
