//! verl's parquet layout: `data_source`, `prompt` (a list of `{role, content}` chat messages whose
//! last user message is the question), `reward_model.ground_truth`, and optionally
//! `extra_info.index` for the id.

use std::path::Path;

use drmas_formats::row::{id, last_user_message, text, value};
use drmas_formats::ParquetFile;
use parquet::record::{Field, Row};

use super::{DatasetError, LoadOptions, Loaded, MathTask};

/// Loads a dataset in verl's parquet layout. Row numbers in errors are 1-based.
pub fn load_parquet(path: &Path, options: &LoadOptions) -> Result<Loaded, DatasetError> {
    ParquetFile::open(path)?.load(options, task)
}

/// Turns one verl row into a task, or says why it is malformed.
fn task(row: &Row, row_no: usize) -> Result<MathTask, String> {
    let data_source = value(row, &["data_source"])
        .and_then(|field| text(field, "data_source").ok())
        .ok_or("missing string column `data_source`")?;
    let prompt = value(row, &["prompt"]).ok_or("missing list column `prompt`")?;
    let question = last_user_message(prompt)?;
    let Some(Field::Group(reward_model)) = value(row, &["reward_model"]) else {
        return Err("missing struct column `reward_model`".into());
    };
    let ground_truth = match value(reward_model, &["ground_truth"]) {
        Some(field) => text(field, "reward_model.ground_truth")?.trim().to_string(),
        None => return Err("`reward_model.ground_truth` is not a string".into()),
    };
    if ground_truth.is_empty() {
        return Err("empty `reward_model.ground_truth`".into());
    }
    let index = value(row, &["extra_info", "index"]).and_then(|field| id(field, "index").ok());
    let id = format!(
        "{data_source}-{}",
        index.unwrap_or_else(|| row_no.to_string())
    );
    Ok(MathTask {
        id,
        question,
        ground_truth,
        data_source,
    })
}
