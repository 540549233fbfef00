//! The JSON of SGLang's native HTTP protocol, the subset drmas speaks as a client
//! ([`super::RemoteGenerator`]) and serves (`drmas-host serve`): `POST /generate` with token
//! ids, `POST /update_weights_from_disk`, `GET /get_model_info`, `GET /health`. Field names and
//! shapes follow SGLang's `GenerateReqInput`, `SamplingParams` and
//! `UpdateWeightFromDiskReqInput`, so either side can be a real SGLang server or client.

use serde::{Deserialize, Serialize};

/// `POST /generate`.
pub const GENERATE_PATH: &str = "/generate";
/// `POST /update_weights_from_disk`.
pub const UPDATE_WEIGHTS_PATH: &str = "/update_weights_from_disk";
/// `GET /get_model_info`.
pub const MODEL_INFO_PATH: &str = "/get_model_info";
/// `GET /health`.
pub const HEALTH_PATH: &str = "/health";

/// One value for every input, or one per input (SGLang's `Union[List[T], T]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrEach<T> {
    /// One list per input (a batch).
    Each(Vec<T>),
    /// A single input, or one value for all.
    One(T),
}

/// The body of `POST /generate`: token ids, not text (drmas renders prompts itself).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenerateBody {
    /// One prompt's token ids, or a batch of them.
    pub input_ids: OneOrEach<Vec<i64>>,
    /// How to sample: one set for every prompt, or one per prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_params: Option<OneOrEach<WireSamplingParams>>,
    /// Whether to return each output token's logprob (`meta_info.output_token_logprobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_logprob: Option<OneOrEach<bool>>,
    /// The loaded LoRA adapter (by name) to generate through: one for every prompt, or one
    /// per prompt (`null`: the base model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_path: Option<OneOrEach<Option<String>>>,
    /// Streaming: not served by drmas; here to name the mistake.
    #[serde(default, skip_serializing)]
    pub stream: Option<bool>,
}

/// SGLang's `SamplingParams`, the fields drmas uses. Unknown fields are refused rather than
/// ignored, so a server never samples otherwise than asked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireSamplingParams {
    /// The most tokens to generate (SGLang's default: 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
    /// 0 is greedy (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus mass in (0, 1] (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Keep the k most likely tokens; -1 (the default) keeps all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    /// Stop strings: one or a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<OneOrEach<String>>,
    /// Tokens that end a sequence like EOS does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<i64>>,
    /// The request's own random stream (SGLang's `sampling_seed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_seed: Option<u64>,
    /// Whether `text` leaves special tokens out (default true); token ids are unaffected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    /// Whether EOS tokens (and, in SGLang's protocol, `stop_token_ids`) leave the sequence
    /// going (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
}

/// SGLang's default `max_new_tokens`.
pub const DEFAULT_MAX_NEW_TOKENS: usize = 128;

/// One output of `POST /generate` (a batch answers a list of them, in input order).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenerateOutput {
    /// The generated text.
    pub text: String,
    /// The generated token ids (the EOS or stop token included).
    #[serde(default)]
    pub output_ids: Option<Vec<i64>>,
    /// Finish reason, counts, logprobs, weight version.
    pub meta_info: MetaInfo,
}

/// `meta_info` of an output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetaInfo {
    /// The request id.
    #[serde(default)]
    pub id: Option<String>,
    /// Why generation stopped.
    pub finish_reason: Option<FinishReasonWire>,
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: usize,
    /// Generated tokens.
    #[serde(default)]
    pub completion_tokens: usize,
    /// Leading prompt tokens whose keys and values the server reused from earlier requests
    /// (its prefix cache) instead of computing them.
    #[serde(default)]
    pub cached_tokens: usize,
    /// `[logprob, token_id, text]` per output token (text is `null`), when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_token_logprobs: Option<Vec<(f64, i64, Option<String>)>>,
    /// The weights that generated it (the `weight_version` of the last weight update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<String>,
}

/// SGLang's finish reason: `{"type": "stop", "matched": <token id or string>}`,
/// `{"type": "length", "length": n}` or `{"type": "abort", "message": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishReasonWire {
    /// `stop`, `length` or `abort`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The stop token id (a number) or stop string that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<serde_json::Value>,
    /// With `length`: the token budget reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<usize>,
    /// With `abort`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The body of `POST /update_weights_from_disk`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdateWeightsBody {
    /// The HF model folder with the new weights.
    pub model_path: String,
    /// The version the server reports once it serves them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<String>,
    /// The weights' format; drmas serves only `auto` (an HF folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_format: Option<String>,
}

/// The answer of `POST /update_weights_from_disk`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdateWeightsAnswer {
    /// Whether the server now serves the new weights.
    pub success: bool,
    /// What happened.
    pub message: String,
    /// Requests paused during the update (always 0 here: updates wait for running batches).
    #[serde(default)]
    pub num_paused_requests: usize,
}

/// The answer of `GET /get_model_info`. SGLang reports the first six fields; `drmas-host
/// serve` adds the vocabulary and context sizes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ModelInfo {
    /// What the server loaded.
    pub model_path: String,
    /// Where its tokenizer came from.
    #[serde(default)]
    pub tokenizer_path: Option<String>,
    /// Whether it generates text (not an embedding model).
    #[serde(default = "yes")]
    pub is_generation: bool,
    /// The weights it serves now.
    #[serde(default)]
    pub weight_version: Option<String>,
    /// HF `model_type` (`llama`, `qwen2`, …).
    #[serde(default)]
    pub model_type: Option<String>,
    /// HF `architectures`.
    #[serde(default)]
    pub architectures: Option<Vec<String>>,
    /// Tokens in the vocabulary (drmas only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<usize>,
    /// Positions the model takes, prompt and output together (drmas only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_length: Option<usize>,
}

fn yes() -> bool {
    true
}

/// An error answer: `{"error": {"message": ...}}`, as SGLang writes it, with the error's
/// `type` where vLLM's routes name one (`NotFoundError`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorAnswer {
    /// The error.
    pub error: ErrorMessage,
}

/// The inside of an [`ErrorAnswer`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorMessage {
    /// What went wrong and what to do.
    pub message: String,
    /// The kind of error, as vLLM names it.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl ErrorAnswer {
    /// An error answer saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            error: ErrorMessage {
                message: message.into(),
                kind: None,
            },
        }
    }
}
