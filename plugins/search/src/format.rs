//! Retrieved passages as the model sees them, byte for byte as Search-R1 writes them
//! (`_passages2string` in `search_r1/llm_agent/generation.py`).
//!
//! Search-R1 takes the title as the first line of `contents`, quotes included, so a passage
//! whose `contents` is `"\"Paris\"\ntext"` reads `Doc 1(Title: "Paris") text`.

use crate::corpus::split_contents;
use crate::retriever::Hit;

/// One `Doc {i}(Title: {first line}) {rest}\n` line per hit, numbered from 1.
pub fn format_passages(hits: &[Hit]) -> String {
    hits.iter()
        .enumerate()
        .map(|(i, hit)| {
            let (title, text) = split_contents(&hit.contents);
            format!("Doc {}(Title: {title}) {text}\n", i + 1)
        })
        .collect()
}

/// The passages wrapped as Search-R1's observation: `<information>{passages, trimmed}</information>`.
///
/// Search-R1 appends this to the rollout between blank lines (`"\n\n" + block + "\n\n"`).
pub fn format_information(hits: &[Hit]) -> String {
    format!(
        "<information>{}</information>",
        format_passages(hits).trim()
    )
}
