//! `POST /generate`: SGLang's request JSON checked and turned into engine requests, and the
//! engine's generations turned into SGLang's answer JSON.

use serde_json::Value;

use super::batcher::Served;
use super::refusal::Refusal;
use crate::engine::remote::wire::{
    FinishReasonWire, GenerateBody, GenerateOutput, MetaInfo, OneOrEach, WireSamplingParams,
    DEFAULT_MAX_NEW_TOKENS,
};
use crate::engine::{FinishReason, Generation, GenerationRequest, SamplingParams};

/// Limits on one request's contents (the body size is bounded before parsing).
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// The most prompts in one request.
    pub max_batch: usize,
    /// The most stop strings (and stop token ids) per prompt.
    pub max_stops: usize,
    /// The longest stop string, in bytes.
    pub max_stop_bytes: usize,
}

/// What one prompt of a request asked for beyond the engine request.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// `meta_info.output_token_logprobs`.
    pub logprobs: bool,
    /// Leave special tokens out of `text`.
    pub skip_special_tokens: bool,
    /// The token budget, reported by a `length` finish.
    pub max_new_tokens: usize,
}

/// A checked `/generate` request.
#[derive(Debug)]
pub struct Parsed {
    /// One engine request per prompt.
    pub requests: Vec<GenerationRequest>,
    /// What each prompt's answer includes.
    pub wanted: Vec<Wanted>,
    /// Whether `input_ids` was a batch (the answer is then a list).
    pub batch: bool,
    /// Each prompt's LoRA adapter (`lora_path`, a loaded adapter's name; `None`: the base).
    pub adapters: Vec<Option<String>>,
}

/// Parses and checks a `/generate` body against the served model and `limits`; every refusal
/// names the field (and prompt) at fault.
pub fn parse(body: &[u8], served: &Served, limits: RequestLimits) -> Result<Parsed, Refusal> {
    let bad = |message: String| Refusal::new(400, message);
    let mut value: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON: {e}")))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| bad("the body must be a JSON object with `input_ids`".into()))?;
    if object.contains_key("text") {
        return Err(bad(
            "`text` prompts are not served here: send token ids in `input_ids`".into(),
        ));
    }
    let sampling = object.remove("sampling_params");
    let body: GenerateBody = serde_json::from_value(value).map_err(|e| {
        bad(format!(
            "malformed request ({e}); expected {{\"input_ids\": [int] or [[int]], \
             \"sampling_params\": {{...}} or [{{...}}], \"return_logprob\": bool}}"
        ))
    })?;
    if body.stream == Some(true) {
        return Err(bad(
            "`stream` is not served here: leave it out or false".into()
        ));
    }
    let (prompts, batch) = match body.input_ids {
        OneOrEach::One(ids) => (vec![ids], false),
        OneOrEach::Each(lists) => (lists, true),
    };
    let n = prompts.len();
    if n == 0 {
        return Err(bad("`input_ids` holds no prompt".into()));
    }
    if n > limits.max_batch {
        return Err(Refusal::new(
            413,
            format!(
                "{n} prompts in one request, over the limit of {}; send fewer a request, or raise \
                 the server's --max-batch",
                limits.max_batch
            ),
        ));
    }
    let params = sampling_params(sampling, n)?;
    let logprobs = per_prompt(body.return_logprob, n, false, "return_logprob")?;
    let adapters = per_prompt(body.lora_path, n, None, "lora_path")?;
    if let Some(name) = adapters.iter().flatten().find(|name| !served.holds(name)) {
        return Err(Refusal::new(
            400,
            format!(
                "lora_path `{name}` names no loaded LoRA adapter (loaded: [{}]); load it with \
                 POST /load_lora_adapter",
                served.adapter_list()
            ),
        ));
    }
    let mut requests = Vec::with_capacity(n);
    let mut wanted = Vec::with_capacity(n);
    for (i, ((prompt, params), logprobs)) in
        prompts.into_iter().zip(params).zip(logprobs).enumerate()
    {
        // SGLang's `ignore_eos` ignores `stop_token_ids` too (vLLM's does not).
        let params = match params.ignore_eos {
            Some(true) => WireSamplingParams {
                stop_token_ids: None,
                ..params
            },
            _ => params,
        };
        let (request, want) = request(
            i,
            prompt,
            params,
            logprobs,
            served,
            limits,
            "max_new_tokens",
        )
        .map_err(bad)?;
        requests.push(request);
        wanted.push(want);
    }
    Ok(Parsed {
        requests,
        wanted,
        batch,
        adapters,
    })
}

/// `sampling_params` (absent, one object, or one per prompt) as one set per prompt.
fn sampling_params(value: Option<Value>, n: usize) -> Result<Vec<WireSamplingParams>, Refusal> {
    let bad = |message: String| Refusal::new(400, message);
    let one = |value: Value, at: &str| {
        serde_json::from_value::<WireSamplingParams>(value).map_err(|e| bad(format!("{at}: {e}")))
    };
    match value {
        None | Some(Value::Null) => Ok(vec![WireSamplingParams::default(); n]),
        Some(Value::Array(list)) => {
            if list.len() != n {
                return Err(bad(format!(
                    "`sampling_params` lists {} sets for {n} prompts",
                    list.len()
                )));
            }
            list.into_iter()
                .enumerate()
                .map(|(i, v)| one(v, &format!("sampling_params[{i}]")))
                .collect()
        }
        Some(value) => Ok(vec![one(value, "sampling_params")?; n]),
    }
}

/// A field given once for all prompts or once per prompt, as one value per prompt.
fn per_prompt<T: Clone>(
    value: Option<OneOrEach<T>>,
    n: usize,
    default: T,
    field: &str,
) -> Result<Vec<T>, Refusal> {
    match value {
        None => Ok(vec![default; n]),
        Some(OneOrEach::One(v)) => Ok(vec![v; n]),
        Some(OneOrEach::Each(list)) if list.len() == n => Ok(list),
        Some(OneOrEach::Each(list)) => Err(Refusal::new(
            400,
            format!("`{field}` lists {} values for {n} prompts", list.len()),
        )),
    }
}

/// Prompt `i` as an engine request, checked against the model and the limits; `budget` is
/// what the protocol calls `max_new_tokens`, for messages.
pub(super) fn request(
    i: usize,
    prompt: Vec<i64>,
    wire: WireSamplingParams,
    logprobs: bool,
    served: &Served,
    limits: RequestLimits,
    budget: &str,
) -> Result<(GenerationRequest, Wanted), String> {
    let at = |what: String| format!("prompt {i}: {what}");
    if prompt.is_empty() {
        return Err(at("`input_ids` is empty".into()));
    }
    let vocab = served.vocab_size as i64;
    if let Some(bad) = prompt.iter().find(|&&t| t < 0 || t >= vocab) {
        return Err(at(format!(
            "token id {bad} is not in the vocabulary 0..{vocab}"
        )));
    }
    let top_k = match wire.top_k {
        None | Some(-1) => 0,
        Some(k) if k >= 1 => k as usize,
        Some(k) => return Err(at(format!("top_k must be -1 (off) or ≥ 1, found {k}"))),
    };
    let params = SamplingParams {
        temperature: wire.temperature.unwrap_or(1.0),
        top_p: wire.top_p.unwrap_or(1.0),
        top_k,
    };
    params.check().map_err(at)?;
    let max_new_tokens = wire.max_new_tokens.unwrap_or(DEFAULT_MAX_NEW_TOKENS);
    let total = prompt.len().saturating_add(max_new_tokens);
    if total > served.context_length {
        return Err(at(format!(
            "{} prompt tokens plus {budget} {max_new_tokens} is {total}, more than the model's \
             context of {} tokens; lower {budget} or shorten the prompt",
            prompt.len(),
            served.context_length
        )));
    }
    let stop = match wire.stop {
        None => Vec::new(),
        Some(OneOrEach::One(s)) => vec![s],
        Some(OneOrEach::Each(list)) => list,
    };
    let stop_tokens = wire.stop_token_ids.unwrap_or_default();
    if stop.len() > limits.max_stops || stop_tokens.len() > limits.max_stops {
        return Err(at(format!(
            "more than {} stop strings or stop token ids",
            limits.max_stops
        )));
    }
    if let Some(long) = stop.iter().find(|s| s.len() > limits.max_stop_bytes) {
        return Err(at(format!(
            "a stop string of {} bytes, over the limit of {}",
            long.len(),
            limits.max_stop_bytes
        )));
    }
    let request = GenerationRequest {
        prompt,
        params,
        max_new_tokens,
        stop,
        adapter: None,
        stop_tokens,
        ignore_eos: wire.ignore_eos.unwrap_or(false),
        seed: wire.sampling_seed,
    };
    let wanted = Wanted {
        logprobs,
        skip_special_tokens: wire.skip_special_tokens.unwrap_or(true),
        max_new_tokens,
    };
    Ok((request, wanted))
}

/// SGLang's answer for one prompt: its `text`, `output_ids` and `meta_info`.
pub fn output(
    id: String,
    request: &GenerationRequest,
    generation: Generation,
    wanted: &Wanted,
    text: String,
    weight_version: &str,
) -> GenerateOutput {
    let finish = match generation.finish {
        FinishReason::Eos => FinishReasonWire {
            kind: "stop".into(),
            matched: generation.tokens.last().map(|&t| Value::from(t)),
            length: None,
            message: None,
        },
        FinishReason::Stop => FinishReasonWire {
            kind: "stop".into(),
            matched: request
                .stop
                .iter()
                .find(|s| !s.is_empty() && text.contains(s.as_str()))
                .map(|s| Value::from(s.as_str())),
            length: None,
            message: None,
        },
        FinishReason::Length => FinishReasonWire {
            kind: "length".into(),
            matched: None,
            length: Some(wanted.max_new_tokens),
            message: None,
        },
    };
    let logprobs = wanted.logprobs.then(|| {
        generation
            .logprobs
            .iter()
            .zip(&generation.tokens)
            .map(|(&lp, &t)| (f64::from(lp), t, None))
            .collect()
    });
    GenerateOutput {
        text,
        meta_info: MetaInfo {
            id: Some(id),
            finish_reason: Some(finish),
            prompt_tokens: request.prompt.len(),
            completion_tokens: generation.tokens.len(),
            cached_tokens: generation.cached_tokens,
            output_token_logprobs: logprobs,
            weight_version: Some(weight_version.to_owned()),
        },
        output_ids: Some(generation.tokens),
    }
}
