//! Dataset readers on the real GSM8K and MATH-500 files, malformed input, and a verl parquet file
//! written with the parquet crate.

use std::fs::File;
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;

use drmas_math::answer::score;
use drmas_math::dataset::{
    load_jsonl, load_parquet, read_jsonl, DatasetError, JsonlFormat, LoadOptions,
};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data")
        .join(rel)
}

#[test]
fn real_files_load_with_their_counts_and_answers() {
    let all = LoadOptions::default();
    let train = load_jsonl(&data("gsm8k/train.jsonl"), &JsonlFormat::gsm8k(), &all).expect("loads");
    let test = load_jsonl(&data("gsm8k/test.jsonl"), &JsonlFormat::gsm8k(), &all).expect("loads");
    let math = load_jsonl(&data("math500/test.jsonl"), &JsonlFormat::math(), &all).expect("loads");
    assert_eq!(
        (train.tasks.len(), test.tasks.len(), math.tasks.len()),
        (7473, 1319, 500)
    );
    assert_eq!(train.skipped + test.skipped + math.skipped, 0);

    let first = &test.tasks[0];
    assert!(first.question.starts_with("Janet"));
    assert_eq!(first.ground_truth, "18");
    assert_eq!(first.id, "openai/gsm8k-1");
    assert_eq!(first.data_source, "openai/gsm8k");

    let m = &math.tasks[0];
    assert_eq!(m.ground_truth, "\\left( 3, \\frac{\\pi}{2} \\right)");
    assert_eq!(m.id, "test/precalculus/807.json");
    assert_eq!(m.data_source, "HuggingFaceH4/MATH-500");
    assert!(m.question.starts_with("Convert the point $(0,3)$"));
}

#[test]
fn limit_stops_early() {
    let opts = LoadOptions {
        limit: Some(25),
        ..LoadOptions::default()
    };
    let loaded =
        load_jsonl(&data("math500/test.jsonl"), &JsonlFormat::math(), &opts).expect("loads");
    assert_eq!(loaded.tasks.len(), 25);
    let none = LoadOptions {
        limit: Some(0),
        ..LoadOptions::default()
    };
    let loaded =
        load_jsonl(&data("math500/test.jsonl"), &JsonlFormat::math(), &none).expect("loads");
    assert!(loaded.tasks.is_empty());
}

const MIXED: &str = r#####"{"question": "1+1?", "answer": "so 2\n#### 2"}

{"question": "bad json"
{"question": "no marker", "answer": "2"}
{"question": "big", "answer": "#### 1,234"}
{"answer": "#### 3"}
"#####;

#[test]
fn malformed_line_errors_name_file_and_line() {
    let err = read_jsonl(
        Cursor::new(MIXED),
        "mixed.jsonl",
        &JsonlFormat::gsm8k(),
        &LoadOptions::default(),
    )
    .expect_err("line 3 is malformed");
    match &err {
        DatasetError::Malformed { path, line, .. } => {
            assert_eq!((path.to_str(), *line), (Some("mixed.jsonl"), 3))
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(
        err.to_string().starts_with("mixed.jsonl:3: invalid JSON"),
        "{err}"
    );

    let missing = load_jsonl(
        &data("nowhere.jsonl"),
        &JsonlFormat::gsm8k(),
        &LoadOptions::default(),
    );
    assert!(matches!(missing, Err(DatasetError::Io { .. })));
}

#[test]
fn skip_mode_skips_and_counts() {
    let opts = LoadOptions {
        skip_malformed: true,
        ..LoadOptions::default()
    };
    let loaded = read_jsonl(
        Cursor::new(MIXED),
        "mixed.jsonl",
        &JsonlFormat::gsm8k(),
        &opts,
    )
    .expect("skips");
    let truths: Vec<&str> = loaded
        .tasks
        .iter()
        .map(|t| t.ground_truth.as_str())
        .collect();
    assert_eq!(truths, ["2", "1234"]);
    assert_eq!(loaded.skipped, 3);
    assert_eq!(loaded.tasks[1].id, "openai/gsm8k-5");
}

/// GSM8K-style golds with a unit in parentheses: the loader and the checker read the same gold.
const ANNOTATED: &str = r#####"{"question": "How many apples?", "answer": "3 + 15 = 18\n#### 18 (apples)"}
{"question": "How many grams?", "answer": "#### 1,250 (grams)"}
{"question": "Which two numbers?", "answer": "#### 8, 221"}
"#####;

#[test]
fn gsm8k_golds_are_read_as_the_checker_reads_them() {
    let loaded = read_jsonl(
        Cursor::new(ANNOTATED),
        "annotated.jsonl",
        &JsonlFormat::gsm8k(),
        &LoadOptions::default(),
    )
    .expect("loads");
    let truths: Vec<&str> = loaded
        .tasks
        .iter()
        .map(|t| t.ground_truth.as_str())
        .collect();
    assert_eq!(truths, ["18", "1250", "8, 221"]);
    for (raw, loaded) in [("18 (apples)", "18"), ("1,250 (grams)", "1250")] {
        for response in [
            "\\boxed{18}",
            "\\boxed{1250}",
            "\\boxed{1,250}",
            "\\boxed{17}",
        ] {
            assert_eq!(
                score(response, raw),
                score(response, loaded),
                "{response} vs {raw}"
            );
        }
    }
    assert_eq!(score("\\boxed{18}", "18 (apples)"), 1.0);
    assert_eq!(score("\\boxed{8221}", truths[2]), 0.0);
    assert_eq!(score("\\boxed{221, 8}", truths[2]), 1.0);
}

#[test]
fn invalid_utf8_is_malformed_not_a_panic() {
    let bytes: &[u8] = b"{\"problem\": \"\xff\", \"answer\": \"1\", \"unique_id\": \"a\"}\n";
    let err = read_jsonl(
        Cursor::new(bytes),
        "bin.jsonl",
        &JsonlFormat::math(),
        &LoadOptions::default(),
    )
    .expect_err("not UTF-8");
    assert!(
        err.to_string().starts_with("bin.jsonl:1: invalid UTF-8"),
        "{err}"
    );
}

/// verl's layout as pyarrow writes it (every field optional, 3-level lists).
const VERL_SCHEMA: &str = "
message schema {
  OPTIONAL BYTE_ARRAY data_source (UTF8);
  OPTIONAL group prompt (LIST) {
    REPEATED group list {
      OPTIONAL group element {
        OPTIONAL BYTE_ARRAY content (UTF8);
        OPTIONAL BYTE_ARRAY role (UTF8);
      }
    }
  }
  OPTIONAL group reward_model {
    OPTIONAL BYTE_ARRAY ground_truth (UTF8);
    OPTIONAL BYTE_ARRAY style (UTF8);
  }
  OPTIONAL group extra_info {
    OPTIONAL INT64 index;
  }
}";

/// Writes one column's values.
type ColumnWrite = Box<dyn Fn(&mut parquet::file::writer::SerializedColumnWriter<'_>)>;

fn bytes(items: &[&str]) -> Vec<ByteArray> {
    items.iter().map(|s| ByteArray::from(*s)).collect()
}

/// Writes three rows: two good ones (the first with a system message) and one without a user message.
fn write_verl_parquet(path: &PathBuf) {
    let schema = Arc::new(parse_message_type(VERL_SCHEMA).expect("schema parses"));
    let file = File::create(path).expect("creates file");
    let props = Arc::new(WriterProperties::builder().build());
    let mut writer = SerializedFileWriter::new(file, schema, props).expect("writer");
    let mut group = writer.next_row_group().expect("row group");
    // Row messages: [system, user], [user], [assistant]. Leaf definition level 4 = all present.
    let rep = [0i16, 1, 0, 0];
    let def = [4i16, 4, 4, 4];
    let columns: Vec<ColumnWrite> = vec![
        Box::new(|c| {
            c.typed::<ByteArrayType>()
                .write_batch(
                    &bytes(&["openai/gsm8k", "openai/gsm8k", "openai/gsm8k"]),
                    Some(&[1, 1, 1]),
                    None,
                )
                .map(|_| ())
                .expect("data_source");
        }),
        Box::new(move |c| {
            let content = bytes(&["You are helpful.", "What is 2+3?", "What is 4*5?", "Hi"]);
            c.typed::<ByteArrayType>()
                .write_batch(&content, Some(&def), Some(&rep))
                .map(|_| ())
                .expect("content");
        }),
        Box::new(move |c| {
            let role = bytes(&["system", "user", "user", "assistant"]);
            c.typed::<ByteArrayType>()
                .write_batch(&role, Some(&def), Some(&rep))
                .map(|_| ())
                .expect("role");
        }),
        Box::new(|c| {
            c.typed::<ByteArrayType>()
                .write_batch(&bytes(&["5", "20", "1"]), Some(&[2, 2, 2]), None)
                .map(|_| ())
                .expect("ground_truth");
        }),
        Box::new(|c| {
            c.typed::<ByteArrayType>()
                .write_batch(&bytes(&["rule", "rule", "rule"]), Some(&[2, 2, 2]), None)
                .map(|_| ())
                .expect("style");
        }),
        Box::new(|c| {
            c.typed::<Int64Type>()
                .write_batch(&[7, 8, 9], Some(&[2, 2, 2]), None)
                .map(|_| ())
                .expect("index");
        }),
    ];
    for write in &columns {
        let mut column = group
            .next_column()
            .expect("column")
            .expect("one more column");
        write(&mut column);
        column.close().expect("closes column");
    }
    group.close().expect("closes row group");
    writer.close().expect("closes file");
}

#[test]
fn verl_parquet_round_trip() {
    let path = std::env::temp_dir().join(format!("drmas-math-verl-{}.parquet", std::process::id()));
    write_verl_parquet(&path);

    let err = load_parquet(&path, &LoadOptions::default()).expect_err("row 3 has no user message");
    assert!(
        matches!(&err, DatasetError::MalformedRow { row: 3, .. }),
        "{err}"
    );

    let skip = LoadOptions {
        skip_malformed: true,
        ..LoadOptions::default()
    };
    let loaded = load_parquet(&path, &skip).expect("loads");
    assert_eq!(loaded.skipped, 1);
    let got: Vec<(&str, &str, &str)> = loaded
        .tasks
        .iter()
        .map(|t| (t.id.as_str(), t.question.as_str(), t.ground_truth.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("openai/gsm8k-7", "What is 2+3?", "5"),
            ("openai/gsm8k-8", "What is 4*5?", "20")
        ]
    );

    let one = LoadOptions {
        limit: Some(1),
        ..LoadOptions::default()
    };
    assert_eq!(load_parquet(&path, &one).expect("loads").tasks.len(), 1);

    let not_parquet = data("gsm8k/test.jsonl");
    assert!(matches!(
        load_parquet(&not_parquet, &skip),
        Err(DatasetError::Parquet { .. })
    ));
    std::fs::remove_file(&path).expect("removes temp file");
}
