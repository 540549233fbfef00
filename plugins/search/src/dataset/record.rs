//! One record as a reader found it, and the checks that make it a [`QaTask`] (shared by the JSONL
//! and parquet readers, so both give the same tasks for the same records).

use super::QaTask;

/// A record's fields before checking.
#[derive(Debug, Default)]
pub(super) struct QaRecord {
    /// The record's own id, if it has one.
    pub id: Option<String>,
    /// The question.
    pub question: String,
    /// The accepted answers.
    pub golden_answers: Vec<String>,
    /// Where the question comes from.
    pub data_source: Option<String>,
    /// Ids of passages that answer the question.
    pub gold_doc_ids: Vec<String>,
}

impl QaRecord {
    /// Checks the record and gives it an id (`<stem>:<number>` when it has none), or says what is
    /// wrong with it.
    pub fn into_task(self, stem: &str, number: usize) -> Result<QaTask, String> {
        if self.question.trim().is_empty() {
            return Err("\"question\" is empty".to_owned());
        }
        if self.golden_answers.is_empty() {
            return Err("\"golden_answers\" is empty".to_owned());
        }
        Ok(QaTask {
            id: self.id.unwrap_or_else(|| format!("{stem}:{number}")),
            question: self.question,
            golden_answers: self.golden_answers,
            data_source: self.data_source,
            gold_doc_ids: self.gold_doc_ids,
        })
    }
}
