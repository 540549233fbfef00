//! QA tasks from a parquet file, in flat columns or in Search-R1's verl layout.
//!
//! Each task field is taken from the first of its columns that the file has and that is not null
//! in the row (dotted names are nested struct fields):
//!
//! - question: `question` (string), else `extra_info.question` (string), else the `content` of
//!   the last `user` message in `prompt` (a list of `{role, content}` structs);
//! - golden_answers: `golden_answers`, else `reward_model.ground_truth.target` (a list of
//!   strings, or one string);
//! - data_source: `data_source` (string), optional;
//! - id: `id` (string or integer), optional: `<file stem>:<row>` (1-based) without it;
//! - gold_doc_ids: `gold_doc_ids` (list of strings), optional.
//!
//! The question taken from `prompt` is the message as written: in Search-R1's files it starts with
//! Search-R1's own instructions (`Answer the given question. You must conduct reasoning ...`),
//! which stay in the task's question. Search-R1's files also have a `question` column, which is
//! preferred.
//!
//! The schema is checked before any row is read: a file with no column for the question or for the
//! answers, or with a known column of the wrong type, is an error naming the file and the column
//! whatever `skip_malformed` says. Rows are then checked one by one like JSONL lines.

use std::fs::File;
use std::path::Path;

use parquet::basic::{ConvertedType, LogicalType, Repetition, Type as PhysicalType};
use parquet::errors::ParquetError;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{Field, Row};
use parquet::schema::types::Type;

use super::record::QaRecord;
use super::{file_stem, DatasetError, LoadOptions, QaDataset};

/// The columns a question may come from, in order of preference (before `prompt`).
const QUESTION: [&[&str]; 2] = [&["question"], &["extra_info", "question"]];
/// The chat messages whose last user message is the question when no question column has one.
const PROMPT: &[&str] = &["prompt"];
/// The columns the answers may come from, in order of preference.
const ANSWERS: [&[&str]; 2] = [
    &["golden_answers"],
    &["reward_model", "ground_truth", "target"],
];

/// Loads QA tasks from a parquet file. Row numbers (in errors and default ids) are 1-based.
pub fn load_qa_parquet(path: &Path, options: &LoadOptions) -> Result<QaDataset, DatasetError> {
    let file = File::open(path).map_err(|source| DatasetError::Io {
        path: path.to_owned(),
        source,
    })?;
    let parquet_error = |error: ParquetError| DatasetError::Parquet {
        path: path.to_owned(),
        reason: error.to_string(),
    };
    let reader = SerializedFileReader::new(file).map_err(parquet_error)?;
    check_schema(reader.metadata().file_metadata().schema(), path)?;
    let stem = file_stem(path);
    let mut dataset = QaDataset {
        tasks: Vec::new(),
        skipped: 0,
    };
    for (index, row) in reader
        .get_row_iter(None)
        .map_err(parquet_error)?
        .enumerate()
    {
        if options
            .limit
            .is_some_and(|limit| dataset.tasks.len() >= limit)
        {
            break;
        }
        let row = row.map_err(parquet_error)?;
        let number = index + 1;
        match record(&row).and_then(|record| record.into_task(&stem, number)) {
            Ok(task) => dataset.tasks.push(task),
            Err(_) if options.skip_malformed => dataset.skipped += 1,
            Err(reason) => {
                return Err(DatasetError::MalformedRow {
                    path: path.to_owned(),
                    row: number,
                    reason,
                })
            }
        }
    }
    Ok(dataset)
}

/// What a schema node holds, as far as the reader cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Integer,
    List,
    Struct,
    Other,
}

/// The kind of a schema node.
fn kind(node: &Type) -> Kind {
    let info = node.get_basic_info();
    if info.has_repetition() && info.repetition() == Repetition::REPEATED {
        return Kind::List;
    }
    if node.is_group() {
        let list = info.converted_type() == ConvertedType::LIST
            || matches!(info.logical_type_ref(), Some(LogicalType::List));
        return if list { Kind::List } else { Kind::Struct };
    }
    match node.get_physical_type() {
        PhysicalType::BYTE_ARRAY | PhysicalType::FIXED_LEN_BYTE_ARRAY => Kind::Text,
        PhysicalType::INT32 | PhysicalType::INT64 => Kind::Integer,
        _ => Kind::Other,
    }
}

/// A schema node in words, for errors: `a string`, `a list of integers`, …
fn describe(node: &Type) -> String {
    match kind(node) {
        Kind::Text => "a string".to_owned(),
        Kind::Integer => "an integer".to_owned(),
        Kind::Struct => "a struct".to_owned(),
        Kind::List => match list_leaf(node) {
            Some(leaf) if kind(leaf) == Kind::Text => "a list of strings".to_owned(),
            Some(leaf) if kind(leaf) == Kind::Integer => "a list of integers".to_owned(),
            Some(leaf) => format!("a list of {}", leaf.get_physical_type()),
            None => "a list of structs".to_owned(),
        },
        Kind::Other => format!("a {} column", node.get_physical_type()),
    }
}

/// The primitive element of a list of primitives (`None` for a list of structs).
fn list_leaf(node: &Type) -> Option<&Type> {
    if node.is_primitive() {
        return Some(node);
    }
    match node.get_fields() {
        [only] => list_leaf(only),
        _ => None,
    }
}

/// The schema node at `path` (top-level column, then struct fields), if the file has it.
fn find<'a>(schema: &'a Type, path: &[&str]) -> Option<&'a Type> {
    path.iter().try_fold(schema, |node, name| {
        if kind(node) != Kind::Struct {
            return None;
        }
        node.get_fields()
            .iter()
            .find(|field| field.name() == *name)
            .map(|field| &**field)
    })
}

/// How a known column must look.
#[derive(Clone, Copy)]
enum Expect {
    /// A string.
    Text,
    /// A string or an integer.
    TextOrInteger,
    /// A list of strings.
    Texts,
    /// A list of strings, or one string.
    TextOrTexts,
    /// A list (of `{role, content}` messages).
    Messages,
}

impl Expect {
    fn words(self) -> &'static str {
        match self {
            Self::Text => "a string",
            Self::TextOrInteger => "a string or an integer",
            Self::Texts => "a list of strings",
            Self::TextOrTexts => "a list of strings or a string",
            Self::Messages => "a list of {role, content} structs",
        }
    }

    fn accepts(self, node: &Type) -> bool {
        let texts =
            kind(node) == Kind::List && list_leaf(node).is_some_and(|l| kind(l) == Kind::Text);
        match self {
            Self::Text => kind(node) == Kind::Text,
            Self::TextOrInteger => matches!(kind(node), Kind::Text | Kind::Integer),
            Self::Texts => texts,
            Self::TextOrTexts => texts || kind(node) == Kind::Text,
            Self::Messages => kind(node) == Kind::List,
        }
    }
}

/// The columns the reader uses and how each must look.
const KNOWN: [(&[&str], Expect); 8] = [
    (QUESTION[0], Expect::Text),
    (QUESTION[1], Expect::Text),
    (PROMPT, Expect::Messages),
    (ANSWERS[0], Expect::TextOrTexts),
    (ANSWERS[1], Expect::TextOrTexts),
    (&["data_source"], Expect::Text),
    (&["id"], Expect::TextOrInteger),
    (&["gold_doc_ids"], Expect::Texts),
];

/// Checks that the file has a question and an answers column and that the known columns it has
/// are of usable types.
fn check_schema(schema: &Type, path: &Path) -> Result<(), DatasetError> {
    for (column, expect) in KNOWN {
        if let Some(node) = find(schema, column) {
            if !expect.accepts(node) {
                return Err(DatasetError::ColumnType {
                    path: path.to_owned(),
                    column: column.join("."),
                    expected: expect.words(),
                    found: describe(node),
                });
            }
        }
    }
    let missing = |column: &str| DatasetError::MissingColumn {
        path: path.to_owned(),
        column: column.to_owned(),
    };
    if !QUESTION
        .iter()
        .chain([&PROMPT])
        .any(|c| find(schema, c).is_some())
    {
        return Err(missing(
            "`question` (nor `extra_info.question` nor `prompt`)",
        ));
    }
    if !ANSWERS.iter().any(|c| find(schema, c).is_some()) {
        return Err(missing(
            "`golden_answers` (nor `reward_model.ground_truth.target`)",
        ));
    }
    Ok(())
}

/// The non-null value at `path` in `row` (top-level column, then struct fields).
fn value<'a>(row: &'a Row, path: &[&str]) -> Option<&'a Field> {
    let (first, rest) = path.split_first()?;
    let field = row
        .get_column_iter()
        .find(|(name, _)| name.as_str() == *first)
        .map(|(_, field)| field)?;
    match (field, rest) {
        (Field::Null, _) => None,
        (field, []) => Some(field),
        (Field::Group(inner), rest) => value(inner, rest),
        _ => None,
    }
}

/// The first of `columns` that has a value in `row`, with its dotted name.
fn first_value<'a>(row: &'a Row, columns: &[&[&str]]) -> Option<(String, &'a Field)> {
    columns
        .iter()
        .find_map(|column| value(row, column).map(|field| (column.join("."), field)))
}

/// A string value.
fn text(field: &Field, column: &str) -> Result<String, String> {
    match field {
        Field::Str(text) => Ok(text.clone()),
        Field::Bytes(bytes) => {
            String::from_utf8(bytes.data().to_vec()).map_err(|_| format!("`{column}` is not UTF-8"))
        }
        _ => Err(format!("`{column}` is not a string")),
    }
}

/// A list of strings (or one string).
fn texts(field: &Field, column: &str) -> Result<Vec<String>, String> {
    match field {
        Field::ListInternal(list) => list
            .elements()
            .iter()
            .map(|element| match element {
                Field::Null => Err(format!("`{column}` has a null element")),
                element => text(element, column),
            })
            .collect(),
        field => text(field, column).map(|one| vec![one]),
    }
}

/// The content of the last `user` message in a `prompt` value.
fn last_user_message(field: &Field) -> Result<String, String> {
    let Field::ListInternal(messages) = field else {
        return Err("`prompt` is not a list of messages".to_owned());
    };
    messages
        .elements()
        .iter()
        .rev()
        .find_map(|message| match message {
            Field::Group(message)
                if matches!(value(message, &["role"]), Some(Field::Str(role)) if role == "user") =>
            {
                value(message, &["content"]).and_then(|content| text(content, "content").ok())
            }
            _ => None,
        })
        .ok_or_else(|| "`prompt` has no user message with string content".to_owned())
}

/// Reads one row's fields (checked later by [`QaRecord::into_task`]).
fn record(row: &Row) -> Result<QaRecord, String> {
    let question = match first_value(row, &QUESTION) {
        Some((column, field)) => text(field, &column)?,
        None => match value(row, PROMPT) {
            Some(prompt) => last_user_message(prompt)?,
            None => {
                return Err(
                    "no question: `question`, `extra_info.question` and `prompt` are null"
                        .to_owned(),
                )
            }
        },
    };
    let golden_answers = match first_value(row, &ANSWERS) {
        Some((column, field)) => texts(field, &column)?,
        None => {
            return Err(
                "no answers: `golden_answers` and `reward_model.ground_truth.target` are null"
                    .to_owned(),
            )
        }
    };
    let id = match value(row, &["id"]) {
        None => None,
        Some(Field::Int(id)) => Some(id.to_string()),
        Some(Field::Long(id)) => Some(id.to_string()),
        Some(Field::UInt(id)) => Some(id.to_string()),
        Some(Field::ULong(id)) => Some(id.to_string()),
        Some(field) => Some(text(field, "id")?),
    };
    let data_source = value(row, &["data_source"])
        .map(|field| text(field, "data_source"))
        .transpose()?;
    let gold_doc_ids = value(row, &["gold_doc_ids"])
        .map(|field| texts(field, "gold_doc_ids"))
        .transpose()?
        .unwrap_or_default();
    Ok(QaRecord {
        id,
        question,
        golden_answers,
        data_source,
        gold_doc_ids,
    })
}
