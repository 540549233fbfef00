//! QA tasks from a JSONL file: one JSON object a line with Search-R1's fields.

use std::path::Path;

use serde::Deserialize;

use super::record::QaRecord;
use super::{file_stem, DatasetError, LoadOptions, QaDataset, QaTask};

/// One line of the file as written.
#[derive(Deserialize)]
struct RawTask {
    #[serde(default)]
    id: Option<IdValue>,
    question: String,
    golden_answers: Answers,
    #[serde(default)]
    data_source: Option<String>,
    #[serde(default)]
    gold_doc_ids: Vec<String>,
}

/// Task ids are strings or integers depending on the dataset.
#[derive(Deserialize)]
#[serde(untagged)]
enum IdValue {
    Text(String),
    Number(i64),
}

/// `golden_answers` is a list in Search-R1's data; a lone string is accepted too.
#[derive(Deserialize)]
#[serde(untagged)]
enum Answers {
    List(Vec<String>),
    One(String),
}

/// Loads QA tasks from a JSONL file, skipping blank lines.
pub fn load_qa_jsonl(path: &Path, options: &LoadOptions) -> Result<QaDataset, DatasetError> {
    let stem = file_stem(path);
    drmas_formats::load_jsonl(path, options, |line, line_number| {
        parse_task(line, &stem, line_number).map_err(|reason| {
            format!(
                "not a QA task ({reason}); each line must be a JSON object with \"question\" \
                 (string) and \"golden_answers\" (non-empty list of strings)"
            )
        })
    })
}

/// Parses and checks one line.
fn parse_task(line: &str, stem: &str, line_number: usize) -> Result<QaTask, String> {
    let raw: RawTask = serde_json::from_str(line).map_err(|error| error.to_string())?;
    let golden_answers = match raw.golden_answers {
        Answers::List(answers) => answers,
        Answers::One(answer) => vec![answer],
    };
    let id = raw.id.map(|id| match id {
        IdValue::Text(id) => id,
        IdValue::Number(id) => id.to_string(),
    });
    QaRecord {
        id,
        question: raw.question,
        golden_answers,
        data_source: raw.data_source,
        gold_doc_ids: raw.gold_doc_ids,
    }
    .into_task(stem, line_number)
}
