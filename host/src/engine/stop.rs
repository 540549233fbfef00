//! [`StopStrings`]: watches one sequence's decoded text for stop strings, decoding only the
//! newest tokens each step.

use tokenizers::Tokenizer;

use crate::model::error::ModelError;

/// The most stop strings (and stop token ids) one request may have: a run file's agent or a
/// request to `drmas-host serve`.
pub const MAX_STOPS: usize = 64;
/// The longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 1024;

/// How many prompt tokens precede the generated ones when decoding, so that the first new
/// token decodes as it would in context (e.g. keeps its leading space).
const CONTEXT_TOKENS: usize = 4;

/// Incremental detokenisation of one sequence and the search for its stop strings in the text
/// each new token adds (plus the end of what came before, for stop strings that span tokens).
///
/// Text is added when the tokens since the last addition decode to more text that does not end
/// in an incomplete UTF-8 character (decoded as U+FFFD); only those tokens are decoded, with
/// one token of context before them.
#[derive(Debug)]
pub struct StopStrings {
    stops: Vec<String>,
    /// The longest stop string, in bytes.
    longest: usize,
    /// Prompt context then the generated tokens.
    ids: Vec<u32>,
    /// `ids[prefix..read]` is the context whose text has been added already.
    prefix: usize,
    read: usize,
    /// The end of the text so far: at least the last `longest - 1` bytes.
    tail: String,
}

impl StopStrings {
    /// Watches for `stops` (empty ones are ignored) in the continuation of `prompt`, or `None`
    /// when there is nothing to watch for.
    pub fn new(stops: &[String], prompt: &[i64]) -> Option<Self> {
        let stops: Vec<String> = stops.iter().filter(|s| !s.is_empty()).cloned().collect();
        let longest = stops.iter().map(String::len).max()?;
        let context = &prompt[prompt.len().saturating_sub(CONTEXT_TOKENS)..];
        Some(Self {
            stops,
            longest,
            ids: context.iter().map(|&t| t as u32).collect(),
            prefix: 0,
            read: context.len(),
            tail: String::new(),
        })
    }

    /// Adds the next generated `token`; true when the text now contains a stop string that it
    /// did not before (ending in this token's text).
    pub fn push(&mut self, token: i64, tokenizer: &Tokenizer) -> Result<bool, ModelError> {
        self.ids.push(token as u32);
        let decode = |ids: &[u32]| {
            tokenizer
                .decode(ids, false)
                .map_err(|e| ModelError::Input(format!("decoding generated tokens: {e}")))
        };
        let before = decode(&self.ids[self.prefix..self.read])?;
        let text = decode(&self.ids[self.prefix..])?;
        if text.len() <= before.len() || text.ends_with('\u{FFFD}') {
            return Ok(false);
        }
        let Some(new) = text.get(before.len()..) else {
            return Ok(false);
        };
        self.prefix = self.read;
        self.read = self.ids.len();
        // Search from `longest - 1` bytes before the new text: a stop string may start there.
        let old = self.tail.len();
        self.tail.push_str(new);
        let start = floor_boundary(&self.tail, old.saturating_sub(self.longest - 1));
        let window = &self.tail[start..];
        let found = self.stops.iter().any(|s| window.contains(s.as_str()));
        // Keep the tail short: only the last `longest - 1` bytes can be part of a later match.
        let keep = floor_boundary(&self.tail, self.tail.len().saturating_sub(self.longest));
        self.tail.drain(..keep);
        Ok(found)
    }
}

/// The largest char boundary of `text` at or before `index`.
fn floor_boundary(text: &str, index: usize) -> usize {
    let mut i = index.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}
