//! [`parse_tokenizer`]: a tokenizer from the bytes of a `tokenizer.json`, never a panic.

use drmas_sdk::catch_quietly;
use tokenizers::Tokenizer;

/// Parses `bytes` as a `tokenizer.json`. The tokenizers crate panics on some malformed files
/// instead of failing (a decoder it cannot read, for one): such a panic becomes an error like
/// the crate's own, so a damaged model folder is the user's to replace, never a crash of the
/// run, and nothing on stderr but that error. Only the crate's parsing runs inside.
pub fn parse_tokenizer(bytes: &[u8]) -> Result<Tokenizer, String> {
    match catch_quietly(|| Tokenizer::from_bytes(bytes)) {
        Ok(parsed) => parsed.map_err(|e| e.to_string()),
        Err(panic) => Err(format!(
            "malformed, the tokenizers crate stopped on it: {}",
            panic.message()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decoder_it_cannot_read_is_an_error_not_a_panic() {
        // The tokenizers crate unwraps the error of a decoder it cannot read.
        let json = r#"{"version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [], "normalizer": null, "pre_tokenizer": null,
            "post_processor": null, "decoder": {"type": "ByteLevel", 7: 1},
            "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}"#;
        let error = parse_tokenizer(json.as_bytes()).expect_err("a malformed decoder");
        assert!(error.contains("malformed"), "{error}");
        let fine = json.replace(r#"{"type": "ByteLevel", 7: 1}"#, "null");
        assert!(parse_tokenizer(fine.as_bytes()).is_ok());
    }
}
