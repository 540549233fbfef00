//! JSONL datasets with a configurable field mapping.

use std::io::BufRead;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{DatasetError, LoadOptions, Loaded, MathTask};
use crate::answer::{remove_thousands_separators, strip_unit_annotation};

/// How the reference answer is obtained from the answer field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerMode {
    /// GSM8K: a worked solution whose last `#### n` line holds the answer (thousands separators
    /// and a unit annotation such as `(apples)` removed).
    Gsm8kTail,
    /// MATH and most others: the field is the answer itself.
    Raw,
}

/// Which JSON fields hold a task's parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlFormat {
    /// The field with the problem statement.
    pub question_field: String,
    /// The field with the answer (or the solution, for [`AnswerMode::Gsm8kTail`]).
    pub answer_field: String,
    /// How to get the answer out of `answer_field`.
    pub answer_mode: AnswerMode,
    /// The field with the task id; `None` numbers the tasks `<data_source>-<line>`.
    #[serde(default)]
    pub id_field: Option<String>,
    /// The data source recorded on every task.
    pub data_source: String,
}

impl JsonlFormat {
    /// GSM8K (`question`, `answer` ending in `#### n`).
    pub fn gsm8k() -> Self {
        JsonlFormat {
            question_field: "question".into(),
            answer_field: "answer".into(),
            answer_mode: AnswerMode::Gsm8kTail,
            id_field: None,
            data_source: "openai/gsm8k".into(),
        }
    }

    /// MATH / MATH-500 (`problem`, `answer`, `unique_id`).
    pub fn math() -> Self {
        JsonlFormat {
            question_field: "problem".into(),
            answer_field: "answer".into(),
            answer_mode: AnswerMode::Raw,
            id_field: Some("unique_id".into()),
            data_source: "HuggingFaceH4/MATH-500".into(),
        }
    }

    /// The preset with this name (`gsm8k`, `math`), if there is one.
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "gsm8k" => Some(Self::gsm8k()),
            "math" | "math500" => Some(Self::math()),
            _ => None,
        }
    }

    /// Turns one JSON line into a task, or says why it is malformed.
    fn task(&self, line: &str, line_no: usize) -> Result<MathTask, String> {
        let value: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
        let question = text_field(&value, &self.question_field)?;
        let answer = text_field(&value, &self.answer_field)?;
        let ground_truth = match self.answer_mode {
            AnswerMode::Raw => answer.trim().to_string(),
            AnswerMode::Gsm8kTail => gsm8k_answer(&answer).ok_or_else(|| {
                format!("field `{}` has no `#### <answer>` line", self.answer_field)
            })?,
        };
        if ground_truth.is_empty() {
            return Err(format!(
                "field `{}` holds an empty answer",
                self.answer_field
            ));
        }
        let id = match &self.id_field {
            Some(field) => text_field(&value, field)?,
            None => format!("{}-{line_no}", self.data_source),
        };
        Ok(MathTask {
            id,
            question,
            ground_truth,
            data_source: self.data_source.clone(),
        })
    }
}

/// A field that is a string (or a number, written out).
fn text_field(value: &Value, field: &str) -> Result<String, String> {
    match value.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(_) => Err(format!("field `{field}` is not a string")),
        None => Err(format!("missing field `{field}`")),
    }
}

/// The answer after GSM8K's last `####`, read by the checker's own rules: without a unit
/// annotation (`18 (apples)`) and without thousands separators (`1,234`, but not the list
/// `8, 221`), so that the stored gold is what the checker compares against.
fn gsm8k_answer(solution: &str) -> Option<String> {
    let (_, tail) = solution.rsplit_once("####")?;
    let answer = remove_thousands_separators(strip_unit_annotation(tail.trim()));
    (!answer.is_empty()).then_some(answer)
}

/// Loads a JSONL dataset file.
pub fn load_jsonl(
    path: &Path,
    format: &JsonlFormat,
    options: &LoadOptions,
) -> Result<Loaded, DatasetError> {
    drmas_formats::load_jsonl(path, options, |line, line_no| format.task(line, line_no))
}

/// Reads JSONL from any reader; `name` is the file name used in errors.
///
/// Blank lines are ignored. A line that is not valid UTF-8 is malformed like any other.
pub fn read_jsonl(
    reader: impl BufRead,
    name: impl AsRef<Path>,
    format: &JsonlFormat,
    options: &LoadOptions,
) -> Result<Loaded, DatasetError> {
    drmas_formats::read_jsonl(reader, name.as_ref(), options, |line, line_no| {
        format.task(line, line_no)
    })
}
