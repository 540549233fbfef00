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

use std::path::Path;

use drmas_formats::row::{first_value, id, last_user_message, text, texts, value};
use drmas_formats::{Expect, ParquetFile};
use parquet::record::Row;

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

/// The columns a file needs at least one of, for the question and for the answers.
const REQUIRED: [&[&[&str]]; 2] = [&[QUESTION[0], QUESTION[1], PROMPT], &ANSWERS];

/// Loads QA tasks from a parquet file. Row numbers (in errors and default ids) are 1-based.
pub fn load_qa_parquet(path: &Path, options: &LoadOptions) -> Result<QaDataset, DatasetError> {
    let file = ParquetFile::open(path)?;
    file.check_columns(&KNOWN, &REQUIRED)?;
    let stem = file_stem(path);
    file.load(options, |row, number| {
        record(row)
            .and_then(|record| record.into_task(&stem, number))
            .map_err(|reason| format!("not a QA task ({reason})"))
    })
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
    let id = value(row, &["id"])
        .map(|field| id(field, "id"))
        .transpose()?;
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
