//! Parquet QA datasets, written here with the parquet crate: flat columns and Search-R1's verl
//! layout give the same tasks as their JSONL equivalents; missing and mistyped columns, `limit`
//! and `skip_malformed`.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use drmas_sdk::{DatasetSpec, Environment};
use drmas_search::dataset::{load_qa, load_qa_jsonl, load_qa_parquet, DatasetError, LoadOptions};
use drmas_search::SearchEnvironment;
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

/// One leaf column: its values (nulls left out) with definition and, for lists, repetition levels.
enum Leaf<'a> {
    Text(&'a [&'a str], &'a [i16], Option<&'a [i16]>),
    Long(&'a [i64], &'a [i16], Option<&'a [i16]>),
}

/// Writes a one-row-group parquet file with `schema`, one [`Leaf`] per leaf column in order.
fn write_parquet(path: &Path, schema: &str, leaves: &[Leaf<'_>]) {
    let schema = Arc::new(parse_message_type(schema).expect("the schema parses"));
    let file = File::create(path).expect("create the parquet file");
    let properties = Arc::new(WriterProperties::builder().build());
    let mut writer = SerializedFileWriter::new(file, schema, properties).expect("a writer");
    let mut group = writer.next_row_group().expect("a row group");
    for leaf in leaves {
        let mut column = group
            .next_column()
            .expect("the next column")
            .expect("a leaf column for each Leaf");
        match leaf {
            Leaf::Text(values, def, rep) => {
                let values: Vec<ByteArray> = values.iter().map(|v| ByteArray::from(*v)).collect();
                column
                    .typed::<ByteArrayType>()
                    .write_batch(&values, Some(*def), *rep)
                    .expect("write strings");
            }
            Leaf::Long(values, def, rep) => {
                column
                    .typed::<Int64Type>()
                    .write_batch(values, Some(*def), *rep)
                    .expect("write integers");
            }
        }
        column.close().expect("close the column");
    }
    assert!(
        group.next_column().expect("no more columns").is_none(),
        "a Leaf for every leaf column"
    );
    group.close().expect("close the row group");
    writer.close().expect("close the file");
}

fn write_text(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path
}

const FLAT_SCHEMA: &str = "message flat {
  OPTIONAL BYTE_ARRAY id (UTF8);
  OPTIONAL BYTE_ARRAY question (UTF8);
  OPTIONAL group golden_answers (LIST) {
    REPEATED group list {
      OPTIONAL BYTE_ARRAY element (UTF8);
    }
  }
  OPTIONAL BYTE_ARRAY data_source (UTF8);
  OPTIONAL group gold_doc_ids (LIST) {
    REPEATED group list {
      OPTIONAL BYTE_ARRAY element (UTF8);
    }
  }
}";

/// The JSONL twin of [`write_flat`]'s file.
const FLAT_JSONL: &str = r#"{"id": "q1", "question": "who wrote hamlet", "golden_answers": ["Shakespeare", "William Shakespeare"], "data_source": "nq"}
{"question": "capital of france", "golden_answers": ["Paris"], "gold_doc_ids": ["d7"]}
{"id": "17", "question": "2+2", "golden_answers": ["4"]}
"#;

/// Three rows in flat columns: full, without id and data_source, without data_source.
fn write_flat(path: &Path) {
    write_parquet(
        path,
        FLAT_SCHEMA,
        &[
            Leaf::Text(&["q1", "17"], &[1, 0, 1], None),
            Leaf::Text(
                &["who wrote hamlet", "capital of france", "2+2"],
                &[1, 1, 1],
                None,
            ),
            Leaf::Text(
                &["Shakespeare", "William Shakespeare", "Paris", "4"],
                &[3, 3, 3, 3],
                Some(&[0, 1, 0, 0]),
            ),
            Leaf::Text(&["nq"], &[1, 0, 0], None),
            Leaf::Text(&["d7"], &[0, 3, 0], Some(&[0, 0, 0])),
        ],
    );
}

const SEARCH_R1_SCHEMA: &str = "message search_r1 {
  OPTIONAL INT64 id;
  OPTIONAL BYTE_ARRAY question (UTF8);
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
    OPTIONAL group ground_truth {
      OPTIONAL group target (LIST) {
        REPEATED group list {
          OPTIONAL BYTE_ARRAY element (UTF8);
        }
      }
    }
    OPTIONAL BYTE_ARRAY style (UTF8);
  }
  OPTIONAL group extra_info {
    OPTIONAL INT64 index;
    OPTIONAL BYTE_ARRAY question (UTF8);
    OPTIONAL BYTE_ARRAY split (UTF8);
  }
}";

/// Search-R1 puts its instructions before the question in the prompt's user message.
const PREFIX: &str = "Answer the given question. You must conduct reasoning inside <think> and \
                      </think> first every time you get new information. Question: ";

/// Three rows in the verl layout, whose questions come from `question`, `extra_info.question` and
/// `prompt` in turn.
fn write_search_r1(path: &Path) {
    let prompts = [
        format!("{PREFIX}who wrote hamlet?"),
        format!("{PREFIX}capital of france?"),
        format!("{PREFIX}2+2?"),
    ];
    write_parquet(
        path,
        SEARCH_R1_SCHEMA,
        &[
            Leaf::Long(&[17], &[1, 0, 0], None),
            Leaf::Text(&["who wrote hamlet"], &[1, 0, 0], None),
            Leaf::Text(&["nq", "nq", "nq"], &[1, 1, 1], None),
            Leaf::Text(
                &[
                    prompts[0].as_str(),
                    prompts[1].as_str(),
                    "You are a helpful assistant.",
                    prompts[2].as_str(),
                ],
                &[4, 4, 4, 4],
                Some(&[0, 0, 0, 1]),
            ),
            Leaf::Text(
                &["user", "user", "system", "user"],
                &[4, 4, 4, 4],
                Some(&[0, 0, 0, 1]),
            ),
            Leaf::Text(
                &["Shakespeare", "William Shakespeare", "Paris", "4"],
                &[5, 5, 5, 5],
                Some(&[0, 1, 0, 0]),
            ),
            Leaf::Text(&["rule", "rule", "rule"], &[2, 2, 2], None),
            Leaf::Long(&[0, 1, 2], &[2, 2, 2], None),
            Leaf::Text(&["not used", "capital of france"], &[2, 2, 1], None),
            Leaf::Text(&["test", "test", "test"], &[2, 2, 2], None),
        ],
    );
}

/// The JSONL twin of [`write_search_r1`]'s file.
fn search_r1_jsonl() -> String {
    let third = serde_json::json!({
        "question": format!("{PREFIX}2+2?"),
        "golden_answers": ["4"],
        "data_source": "nq",
    });
    format!(
        "{}\n{}\n{third}\n",
        r#"{"id": 17, "question": "who wrote hamlet", "golden_answers": ["Shakespeare", "William Shakespeare"], "data_source": "nq"}"#,
        r#"{"question": "capital of france", "golden_answers": ["Paris"], "data_source": "nq"}"#,
    )
}

/// A search environment whose retriever is never called (loading tasks does not search).
fn environment() -> SearchEnvironment {
    common::tasks_only_environment()
}

/// The environment's tasks from `path`.
fn env_tasks(path: &Path) -> Vec<drmas_sdk::Task> {
    let spec = DatasetSpec {
        path: path.display().to_string(),
        ..Default::default()
    };
    environment()
        .load_tasks(&spec)
        .expect("the environment loads the tasks")
}

#[test]
fn flat_parquet_gives_the_tasks_of_its_jsonl_twin() {
    let dir = tempfile::tempdir().expect("temp dir");
    let parquet = dir.path().join("train.parquet");
    write_flat(&parquet);
    let jsonl = write_text(dir.path(), "train.jsonl", FLAT_JSONL);

    let from_parquet = load_qa_parquet(&parquet, &LoadOptions::default()).expect("parquet");
    let from_jsonl = load_qa_jsonl(&jsonl, &LoadOptions::default()).expect("jsonl");
    assert_eq!(from_parquet.skipped, 0);
    assert_eq!(from_parquet.tasks, from_jsonl.tasks);
    let ids: Vec<&str> = from_parquet.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["q1", "train:2", "17"],
        "missing ids become <stem>:<row>"
    );
    assert_eq!(from_parquet.tasks[1].gold_doc_ids, ["d7"]);

    let tasks = env_tasks(&parquet);
    assert_eq!(tasks.len(), 3);
    assert_eq!(tasks, env_tasks(&jsonl), "identical Task payloads");
}

#[test]
fn search_r1_parquet_gives_the_tasks_of_its_jsonl_twin() {
    let dir = tempfile::tempdir().expect("temp dir");
    let parquet = dir.path().join("search_r1.parquet");
    write_search_r1(&parquet);
    let jsonl = write_text(dir.path(), "search_r1.jsonl", &search_r1_jsonl());

    let from_parquet = load_qa(&parquet, &LoadOptions::default()).expect("parquet");
    let from_jsonl = load_qa(&jsonl, &LoadOptions::default()).expect("jsonl");
    assert_eq!(from_parquet.tasks, from_jsonl.tasks);
    let questions: Vec<&str> = from_parquet
        .tasks
        .iter()
        .map(|t| t.question.as_str())
        .collect();
    assert_eq!(
        questions[..2],
        ["who wrote hamlet", "capital of france"],
        "`question` first, then `extra_info.question`"
    );
    assert!(
        questions[2].starts_with("Answer the given question.") && questions[2].ends_with("2+2?"),
        "the prompt's last user message, Search-R1's prefix kept: {}",
        questions[2]
    );
    assert_eq!(from_parquet.tasks[0].id, "17", "integer ids");
    assert_eq!(
        from_parquet.tasks[0].golden_answers,
        ["Shakespeare", "William Shakespeare"]
    );
    assert_eq!(
        env_tasks(&parquet),
        env_tasks(&jsonl),
        "identical Task payloads"
    );
}

#[test]
fn a_missing_column_names_the_file_and_the_column() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("no_answers.parquet");
    write_parquet(
        &path,
        "message m { OPTIONAL BYTE_ARRAY question (UTF8); OPTIONAL BYTE_ARRAY data_source (UTF8); }",
        &[
            Leaf::Text(&["who wrote hamlet"], &[1], None),
            Leaf::Text(&["nq"], &[1], None),
        ],
    );
    let skipping = LoadOptions {
        skip_malformed: true,
        ..LoadOptions::default()
    };
    let error = load_qa_parquet(&path, &skipping).expect_err("no answers column");
    assert!(
        matches!(&error, DatasetError::MissingColumn { path: p, column } if p == &path
            && column.contains("`golden_answers`")),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with(&path.display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("reward_model.ground_truth.target"),
        "{message}"
    );

    let path = dir.path().join("no_question.parquet");
    write_parquet(
        &path,
        "message m { OPTIONAL BYTE_ARRAY golden_answers (UTF8); }",
        &[Leaf::Text(&["Paris"], &[1], None)],
    );
    let error = load_qa_parquet(&path, &skipping).expect_err("no question column");
    assert!(
        matches!(&error, DatasetError::MissingColumn { column, .. } if column.contains("`question`")),
        "{error:?}"
    );
}

#[test]
fn a_column_of_the_wrong_type_names_the_file_and_the_column() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("int_question.parquet");
    write_parquet(
        &path,
        "message m { OPTIONAL INT64 question; OPTIONAL BYTE_ARRAY golden_answers (UTF8); }",
        &[Leaf::Long(&[3], &[1], None), Leaf::Text(&["x"], &[1], None)],
    );
    let error = load_qa_parquet(&path, &LoadOptions::default()).expect_err("integer question");
    match &error {
        DatasetError::ColumnType {
            path: p,
            column,
            expected,
            found,
        } => {
            assert_eq!(p, &path);
            assert_eq!(column, "question");
            assert_eq!(*expected, "a string");
            assert_eq!(found, "an integer");
        }
        other => panic!("expected ColumnType, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("{}: column `question`", path.display())),
        "{message}"
    );

    let path = dir.path().join("int_targets.parquet");
    write_parquet(
        &path,
        "message m {
          OPTIONAL BYTE_ARRAY question (UTF8);
          OPTIONAL group reward_model {
            OPTIONAL group ground_truth {
              OPTIONAL group target (LIST) { REPEATED group list { OPTIONAL INT64 element; } }
            }
          }
        }",
        &[
            Leaf::Text(&["2+2"], &[1], None),
            Leaf::Long(&[4], &[5], Some(&[0])),
        ],
    );
    let error = load_qa_parquet(&path, &LoadOptions::default()).expect_err("integer answers");
    assert!(
        matches!(&error, DatasetError::ColumnType { column, found, .. }
            if column == "reward_model.ground_truth.target" && found == "a list of integers"),
        "{error:?}"
    );
}

/// Five rows in flat columns; rows 2 (empty answers), 3 (null question) and 4 (blank question)
/// are malformed.
fn write_malformed(path: &Path) {
    write_parquet(
        path,
        FLAT_SCHEMA,
        &[
            Leaf::Text(&[], &[0, 0, 0, 0, 0], None),
            Leaf::Text(&["ok", "no answers", "   ", "fine"], &[1, 1, 0, 1, 1], None),
            Leaf::Text(
                &["yes", "x", "x", "ok"],
                &[3, 1, 3, 3, 3],
                Some(&[0, 0, 0, 0, 0]),
            ),
            Leaf::Text(&[], &[0, 0, 0, 0, 0], None),
            Leaf::Text(&[], &[0, 0, 0, 0, 0], Some(&[0, 0, 0, 0, 0])),
        ],
    );
}

#[test]
fn malformed_rows_fail_with_file_and_row_or_are_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.parquet");
    write_malformed(&path);

    let error = load_qa_parquet(&path, &LoadOptions::default()).expect_err("row 2 is malformed");
    match &error {
        DatasetError::MalformedRow {
            path: p,
            row,
            reason,
        } => {
            assert_eq!(p, &path);
            assert_eq!(*row, 2);
            assert!(reason.contains("golden_answers"), "{reason}");
        }
        other => panic!("expected MalformedRow, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("{}: row 2: ", path.display())),
        "{message}"
    );
    assert!(message.contains("skip_malformed"), "{message}");

    let skipping = LoadOptions {
        skip_malformed: true,
        ..LoadOptions::default()
    };
    let dataset = load_qa_parquet(&path, &skipping).expect("skipping");
    assert_eq!(dataset.skipped, 3);
    let questions: Vec<&str> = dataset.tasks.iter().map(|t| t.question.as_str()).collect();
    assert_eq!(questions, ["ok", "fine"]);
    assert_eq!(dataset.tasks[1].id, "bad:5");
}

#[test]
fn limit_keeps_the_first_parquet_tasks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("train.parquet");
    write_flat(&path);
    let two = LoadOptions {
        limit: Some(2),
        ..LoadOptions::default()
    };
    let ids: Vec<String> = load_qa_parquet(&path, &two)
        .expect("load")
        .tasks
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids, ["q1", "train:2"]);
    let none = LoadOptions {
        limit: Some(0),
        ..LoadOptions::default()
    };
    assert!(load_qa_parquet(&path, &none)
        .expect("load")
        .tasks
        .is_empty());

    // The limit counts tasks, not rows: skipped rows do not use it up.
    let bad = dir.path().join("bad.parquet");
    write_malformed(&bad);
    let two_skipping = LoadOptions {
        limit: Some(2),
        skip_malformed: true,
        ..LoadOptions::default()
    };
    let dataset = load_qa_parquet(&bad, &two_skipping).expect("load");
    assert_eq!(dataset.tasks.len(), 2);
    assert_eq!(dataset.skipped, 3);

    let spec = DatasetSpec {
        path: path.display().to_string(),
        limit: Some(1),
        ..Default::default()
    };
    assert_eq!(environment().load_tasks(&spec).expect("tasks").len(), 1);
}

#[test]
fn a_file_that_is_not_parquet_is_reported_as_such() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_text(dir.path(), "train.parquet", FLAT_JSONL);
    let error = load_qa(&path, &LoadOptions::default()).expect_err("JSONL named .parquet");
    assert!(matches!(&error, DatasetError::Parquet { .. }), "{error:?}");
    assert!(error.to_string().contains("train.parquet"), "{error}");
    let missing = load_qa(Path::new("/no/such/qa.parquet"), &LoadOptions::default())
        .expect_err("missing file");
    assert!(matches!(missing, DatasetError::Io { .. }), "{missing:?}");
}
