//! The JSON of OpenAI's completions protocol as vLLM serves it, the subset drmas speaks as a
//! client ([`super::RemoteGenerator`] with `backend = "openai"`) and serves (`drmas-host
//! serve`): `POST /v1/completions` with a token-id prompt and `logprobs`, and `GET /v1/models`.
//! Field names and shapes follow vLLM's `CompletionRequest`, `CompletionResponse` and
//! `ModelList` (its OpenAI-compatible server), which extend OpenAI's with `top_k`,
//! `stop_token_ids`, `return_tokens_as_token_ids` and `stop_reason`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::wire::OneOrEach;

/// `POST /v1/completions`.
pub const COMPLETIONS_PATH: &str = "/v1/completions";
/// `GET /v1/models`.
pub const MODELS_PATH: &str = "/v1/models";
/// The prefix of a token written as its id (`"token_id:42"`), as vLLM writes tokens when a
/// request sets `return_tokens_as_token_ids`.
pub const TOKEN_ID_PREFIX: &str = "token_id:";
/// OpenAI's default `max_tokens` for completions.
pub const DEFAULT_MAX_TOKENS: usize = 16;

/// A prompt: token ids, a batch of them, or text (which drmas refuses: it renders prompts
/// itself and never re-tokenises).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// One prompt's token ids.
    Ids(Vec<i64>),
    /// A batch of token-id prompts.
    Batch(Vec<Vec<i64>>),
    /// Text, or a batch of texts.
    Text(OneOrEach<String>),
}

/// The body of `POST /v1/completions`, the fields drmas uses. Unknown fields are refused by
/// `drmas-host serve` rather than ignored, so it never samples otherwise than asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionBody {
    /// The served model's name (`GET /v1/models`).
    pub model: String,
    /// The prompt as token ids.
    pub prompt: Prompt,
    /// The most tokens to generate (OpenAI's default: 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// 0 is greedy (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus mass in (0, 1] (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Keep the k most likely tokens; -1 (or absent) keeps all (vLLM's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    /// The request's own random stream; vLLM takes a signed 64-bit integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Stop strings: one or a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<OneOrEach<String>>,
    /// Tokens that end a sequence like EOS does (vLLM's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<i64>>,
    /// How many most likely alternatives to list beside each sampled token's logprob; 0 asks
    /// for the sampled token's logprob alone (absent: no logprobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<usize>,
    /// Samples per prompt (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    /// Write each token of `logprobs.tokens` as `token_id:N` (vLLM's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_tokens_as_token_ids: Option<bool>,
    /// Whether `text` leaves special tokens out (default true); token ids are unaffected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    /// Whether EOS tokens leave the sequence going; `stop_token_ids` still end it (vLLM's
    /// extension, default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// Streaming: not served by drmas; here to name the mistake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Prompt echoed before the output: not served by drmas; here to name the mistake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<bool>,
}

/// The answer of `POST /v1/completions`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompletionAnswer {
    /// The completion's id.
    pub id: String,
    /// `text_completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The model that answered.
    pub model: String,
    /// One choice per prompt and sample, prompt-major (`index` = prompt × n + sample).
    pub choices: Vec<CompletionChoice>,
    /// Token counts.
    pub usage: Usage,
}

/// One generated sequence.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompletionChoice {
    /// Its place among the answer's choices.
    pub index: usize,
    /// The generated text (up to a matched stop string, which is left out).
    pub text: String,
    /// The sampled tokens and their logprobs, when asked for.
    #[serde(default)]
    pub logprobs: Option<ChoiceLogprobs>,
    /// `stop` (EOS, a stop token or string), `length` (the token budget), `abort`.
    pub finish_reason: Option<String>,
    /// With `stop`: the stop string (text) or stop token id (number) that ended it; `null` for
    /// EOS (vLLM's extension).
    #[serde(default)]
    pub stop_reason: Option<serde_json::Value>,
}

/// OpenAI's completion logprobs: one entry per sampled token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChoiceLogprobs {
    /// Where each token's text starts, in characters of the joined tokens.
    #[serde(default)]
    pub text_offset: Vec<usize>,
    /// Each sampled token's logprob (vLLM writes -9999.0 for -inf).
    pub token_logprobs: Vec<Option<f64>>,
    /// Each sampled token: `token_id:N` with `return_tokens_as_token_ids`, else its text.
    pub tokens: Vec<String>,
    /// Per token, the most likely tokens and their logprobs (the sampled one included).
    #[serde(default)]
    pub top_logprobs: Vec<Option<BTreeMap<String, f64>>>,
}

/// Token counts of an answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens (each prompt once).
    pub prompt_tokens: usize,
    /// Prompt and generated tokens.
    pub total_tokens: usize,
    /// Generated tokens, over every choice.
    pub completion_tokens: usize,
    /// What the prompt tokens included (vLLM sends it when started with
    /// `--enable-prompt-tokens-details`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose keys and values came from the prefix cache.
    pub cached_tokens: usize,
}

/// The answer of `GET /v1/models`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelList {
    /// `list`.
    pub object: String,
    /// The served models.
    pub data: Vec<ModelCard>,
}

/// One served model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelCard {
    /// The name requests give as `model`.
    pub id: String,
    /// `model`.
    pub object: String,
    /// Unix seconds.
    #[serde(default)]
    pub created: u64,
    /// Who serves it.
    #[serde(default)]
    pub owned_by: String,
    /// Where its weights came from (vLLM's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// The model a LoRA adapter adapts (vLLM's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Positions the model takes, prompt and output together (vLLM's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<usize>,
}
