//! A Hugging Face `tokenizer.json` built from GGUF `tokenizer.ggml.*` metadata.
//!
//! Only byte-level BPE vocabularies (`tokenizer.ggml.model = gpt2`, used by Llama 3, SmolLM,
//! Qwen and most recent models) are supported; SentencePiece (`llama`) files are refused.
//! The pre-tokenizer split regex follows `tokenizer.ggml.pre`, as in llama.cpp's `llama-vocab`
//! and the original models' `tokenizer.json` files.

use serde_json::{json, Map, Value};
use tokenizers::Tokenizer;

use super::reader::GgufFile;
use super::GgufError;
use crate::model::tokenizer_json::parse_tokenizer;

/// `tokenizer.ggml.token_type` of control (special) tokens such as `<|im_end|>`.
const TOKEN_CONTROL: i64 = 3;
/// `tokenizer.ggml.token_type` of user-defined added tokens.
const TOKEN_USER_DEFINED: i64 = 4;

/// Llama 3's split: like GPT-2's but case-insensitive contractions and numbers in threes.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's split: Llama 3's with single digits.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Builds the HF `tokenizer.json` value for `file`.
pub fn hf_tokenizer_json(file: &GgufFile) -> Result<Value, GgufError> {
    let meta = file.metadata();
    let fail = |what: String| GgufError::Tokenizer {
        path: file.path().to_owned(),
        what,
    };
    let model = meta.str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(fail(format!(
            "tokenizer.ggml.model is {model}; only byte-level BPE (gpt2) is supported"
        )));
    }
    let pre = meta.opt_str("tokenizer.ggml.pre")?.unwrap_or("default");
    let (pre_tokenizer, ignore_merges) =
        pre_tokenizer(pre).ok_or_else(|| fail(format!("unsupported tokenizer.ggml.pre {pre}")))?;

    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    let types = meta
        .opt_integers("tokenizer.ggml.token_type")?
        .unwrap_or_default();
    let mut vocab = Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, &token) in tokens.iter().enumerate() {
        if vocab.insert(token.to_owned(), json!(id)).is_some() {
            return Err(fail(format!(
                "token {token:?} appears twice in tokenizer.ggml.tokens"
            )));
        }
        let ty = types.get(id).copied();
        if ty == Some(TOKEN_CONTROL) || ty == Some(TOKEN_USER_DEFINED) {
            added.push(json!({
                "id": id,
                "content": token,
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": ty == Some(TOKEN_CONTROL),
            }));
        }
    }
    let merges = meta
        .strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|merge| {
            let (a, b) = merge
                .split_once(' ')
                .ok_or_else(|| fail(format!("merge {merge:?} is not two tokens")))?;
            Ok(json!([a, b]))
        })
        .collect::<Result<Vec<_>, GgufError>>()?;

    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor(file, &tokens)?,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": ignore_merges,
            "vocab": vocab,
            "merges": merges,
        },
    }))
}

/// The pre-tokenizer for `tokenizer.ggml.pre`, and whether BPE skips merges for words already
/// in the vocabulary (Llama 3 does).
fn pre_tokenizer(pre: &str) -> Option<(Value, bool)> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |regex: &str| json!({"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false});
    let sequence =
        |first: Value, second: Value| json!({"type": "Sequence", "pretokenizers": [first, second]});
    Some(match pre {
        // ByteLevel's own regex is GPT-2's.
        "default" | "gpt2" => (byte_level(true), false),
        // llama.cpp splits every digit, then applies GPT-2's regex.
        "smollm" | "starcoder" | "refact" => (
            sequence(
                json!({"type": "Digits", "individual_digits": true}),
                byte_level(true),
            ),
            false,
        ),
        "llama-bpe" | "llama3" => (sequence(split(LLAMA3_SPLIT), byte_level(false)), true),
        "qwen2" => (sequence(split(QWEN2_SPLIT), byte_level(false)), false),
        _ => return None,
    })
}

/// Prepends BOS when `tokenizer.ggml.add_bos_token` says so; otherwise only byte-level offsets.
fn post_processor(file: &GgufFile, tokens: &[&str]) -> Result<Value, GgufError> {
    let meta = file.metadata();
    let add_bos = meta
        .opt_bool("tokenizer.ggml.add_bos_token")?
        .unwrap_or(false);
    let bos = meta.opt_usize("tokenizer.ggml.bos_token_id")?;
    let (true, Some(bos)) = (add_bos, bos) else {
        return Ok(
            json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}),
        );
    };
    let &token = tokens.get(bos).ok_or_else(|| GgufError::Tokenizer {
        path: file.path().to_owned(),
        what: format!(
            "bos_token_id {bos} is outside the vocabulary of {}",
            tokens.len()
        ),
    })?;
    let special = |token: &str| json!({"SpecialToken": {"id": token, "type_id": 0}});
    let sequence = |id: &str, type_id: u32| json!({"Sequence": {"id": id, "type_id": type_id}});
    let mut special_tokens = Map::new();
    special_tokens.insert(
        token.to_owned(),
        json!({"id": token, "ids": [bos], "tokens": [token]}),
    );
    Ok(json!({
        "type": "TemplateProcessing",
        "single": [special(token), sequence("A", 0)],
        "pair": [special(token), sequence("A", 0), special(token), sequence("B", 1)],
        "special_tokens": special_tokens,
    }))
}

/// Loads a tokenizer from [`hf_tokenizer_json`]'s value.
pub fn load(file: &GgufFile, json: &Value) -> Result<Tokenizer, GgufError> {
    let fail = |what: String| GgufError::Tokenizer {
        path: file.path().to_owned(),
        what,
    };
    let bytes = serde_json::to_vec(json).map_err(|e| fail(e.to_string()))?;
    parse_tokenizer(&bytes).map_err(|e| fail(format!("the tokenizers crate refused it: {e}")))
}

/// The Jinja chat template (`tokenizer.chat_template`), if the file has one.
pub fn chat_template(file: &GgufFile) -> Result<Option<&str>, GgufError> {
    file.metadata().opt_str("tokenizer.chat_template")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT-2's split (contractions, letters, numbers, other symbols, spaces), which `ByteLevel`
    /// applies itself when `use_regex` is true.
    const GPT2_SPLIT: &str =
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

    #[test]
    fn every_named_pre_tokenizer_parses() {
        for pre in ["default", "gpt2", "smollm", "llama-bpe", "qwen2"] {
            let (value, _) = pre_tokenizer(pre).expect("known pre-tokenizer");
            let parsed: Result<tokenizers::PreTokenizerWrapper, _> = serde_json::from_value(value);
            assert!(parsed.is_ok(), "{pre}: {parsed:?}");
        }
        assert!(pre_tokenizer("no-such-pre").is_none());
    }

    #[test]
    fn byte_level_split_is_gpt2s() {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
        let text = "It's 2024:  hello\tworld!! ok";
        let split = |value: Value| -> Vec<String> {
            let pre: tokenizers::PreTokenizerWrapper =
                serde_json::from_value(value).expect("valid pre-tokenizer");
            let mut s = PreTokenizedString::from(text);
            pre.pre_tokenize(&mut s).expect("pre-tokenizes");
            s.get_splits(OffsetReferential::Original, OffsetType::Byte)
                .into_iter()
                .map(|(piece, _, _)| piece.to_owned())
                .collect()
        };
        let builtin = split(pre_tokenizer("gpt2").expect("known").0);
        let explicit = split(json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GPT2_SPLIT}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
        ]}));
        assert_eq!(builtin, explicit);
    }
}
