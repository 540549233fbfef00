//! QA tasks from a JSONL file: one JSON object a line with Search-R1's fields.

use std::fs::File;
use std::io::{BufRead, BufReader};
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
    let io_error = |source| DatasetError::Io {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(io_error)?;
    let stem = file_stem(path);
    let mut dataset = QaDataset {
        tasks: Vec::new(),
        skipped: 0,
    };
    for (index, line) in BufReader::new(file).lines().enumerate() {
        if options
            .limit
            .is_some_and(|limit| dataset.tasks.len() >= limit)
        {
            break;
        }
        let line = line.map_err(io_error)?;
        if line.trim().is_empty() {
            continue;
        }
        let line_number = index + 1;
        match parse_task(&line, &stem, line_number) {
            Ok(task) => dataset.tasks.push(task),
            Err(_) if options.skip_malformed => dataset.skipped += 1,
            Err(reason) => {
                return Err(DatasetError::Malformed {
                    path: path.to_owned(),
                    line: line_number,
                    reason,
                })
            }
        }
    }
    Ok(dataset)
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
