//! `POST /v1/completions` and `GET /v1/models`: OpenAI's completions protocol as vLLM shapes
//! it (token-id prompts, `logprobs`, `return_tokens_as_token_ids`, `stop_reason`), checked
//! and turned into engine requests, and the engine's generations turned into vLLM's answer.

use serde_json::Value;

use super::batcher::Served;
use super::generate_route::{self, RequestLimits, Wanted};
use super::refusal::Refusal;
use crate::engine::remote::openai_wire::{
    ChoiceLogprobs, CompletionBody, CompletionChoice, ModelCard, ModelList, Prompt,
    PromptTokensDetails, Usage, DEFAULT_MAX_TOKENS, TOKEN_ID_PREFIX,
};
use crate::engine::remote::wire::WireSamplingParams;
use crate::engine::{FinishReason, Generation, GenerationRequest};

/// A checked `/v1/completions` request.
#[derive(Debug)]
pub struct Parsed {
    /// One engine request per choice, prompt-major (prompt × n + sample).
    pub requests: Vec<GenerationRequest>,
    /// What each choice's answer includes.
    pub wanted: Vec<Wanted>,
    /// Write tokens as `token_id:N`.
    pub tokens_as_ids: bool,
    /// Each prompt's length, counted once in `usage`.
    pub prompt_tokens: usize,
    /// Samples per prompt (`n`).
    pub samples: usize,
    /// Each choice's LoRA adapter: the one the request names as its `model` (`None`: the
    /// served model).
    pub adapters: Vec<Option<String>>,
}

/// Parses and checks a `/v1/completions` body against the served model (`name` is its served
/// name) and `limits`; every refusal names the field at fault.
pub fn parse(
    body: &[u8],
    served: &Served,
    name: &str,
    limits: RequestLimits,
) -> Result<Parsed, Refusal> {
    let bad = |message: String| Refusal::new(400, message);
    let body: CompletionBody = serde_json::from_slice(body).map_err(|e| {
        bad(format!(
            "malformed request ({e}); expected {{\"model\": string, \"prompt\": [int] or \
             [[int]], \"max_tokens\": int, \"logprobs\": 0, …}}"
        ))
    })?;
    let adapter = if body.model == name {
        None
    } else if served.holds(&body.model) {
        Some(body.model.clone())
    } else {
        let also = if served.adapters.is_empty() {
            String::new()
        } else {
            format!(" and the LoRA adapters {}", served.adapter_list())
        };
        return Err(Refusal::new(
            404,
            format!(
                "The model `{}` does not exist: this server serves `{name}`{also} (GET \
                 /v1/models)",
                body.model
            ),
        ));
    };
    if body.stream == Some(true) || body.echo == Some(true) {
        return Err(bad(
            "`stream` and `echo` are not served here: leave them out or false".into(),
        ));
    }
    if let Some(k) = body.logprobs.filter(|&k| k > 0) {
        return Err(bad(format!(
            "logprobs {k}: only 0 (each sampled token's own logprob) is served here"
        )));
    }
    let prompts = match body.prompt {
        Prompt::Ids(ids) => vec![ids],
        Prompt::Batch(lists) => lists,
        Prompt::Text(_) => {
            return Err(bad(
                "text prompts are not served here: send token ids in `prompt`".into(),
            ))
        }
    };
    let n = body.n.unwrap_or(1);
    let rows = prompts.len().saturating_mul(n);
    if prompts.is_empty() || n == 0 {
        return Err(bad("`prompt` holds no prompt, or `n` is 0".into()));
    }
    if rows > limits.max_batch {
        return Err(Refusal::new(
            413,
            format!(
                "{} prompts × n {n} = {rows} sequences in one request, over the limit of {}; \
                 send fewer a request, or raise the server's --max-batch",
                prompts.len(),
                limits.max_batch
            ),
        ));
    }
    let wire = WireSamplingParams {
        max_new_tokens: Some(body.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
        temperature: body.temperature,
        top_p: body.top_p,
        top_k: body.top_k,
        stop: body.stop,
        stop_token_ids: body.stop_token_ids,
        sampling_seed: None,
        skip_special_tokens: body.skip_special_tokens,
        ignore_eos: body.ignore_eos,
    };
    let prompt_tokens = prompts.iter().map(Vec::len).sum();
    let logprobs = body.logprobs.is_some();
    let (requests, wanted): (Vec<GenerationRequest>, Vec<Wanted>) = prompts
        .iter()
        .enumerate()
        .flat_map(|(i, prompt)| (0..n).map(move |sample| (i, prompt, sample)))
        .map(|(i, prompt, sample)| {
            // As vLLM does, the sample-th of n draws from seed + sample.
            let seed = body.seed.map(|s| s.wrapping_add(sample as i64) as u64);
            let wire = WireSamplingParams {
                sampling_seed: seed,
                ..wire.clone()
            };
            let budget = "max_tokens";
            generate_route::request(i, prompt.clone(), wire, logprobs, served, limits, budget)
                .map_err(bad)
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();
    Ok(Parsed {
        adapters: vec![adapter; requests.len()],
        requests,
        wanted,
        tokens_as_ids: body.return_tokens_as_token_ids == Some(true),
        prompt_tokens,
        samples: n,
    })
}

/// vLLM's choice `index` for `generation` of `request`: its text (up to a matched stop string,
/// left out), logprobs as asked, `finish_reason` and `stop_reason`. `token_text` decodes one
/// token for `logprobs.tokens` when they are not written as ids.
pub fn choice(
    index: usize,
    request: &GenerationRequest,
    generation: Generation,
    wanted: &Wanted,
    text: String,
    token_text: impl Fn(i64) -> String,
    tokens_as_ids: bool,
) -> CompletionChoice {
    let (finish_reason, stop_reason, text) = match generation.finish {
        FinishReason::Length => ("length", Value::Null, text),
        FinishReason::Eos => {
            let last = generation.tokens.last().copied();
            let reason = last
                .filter(|t| request.stop_tokens.contains(t))
                .map_or(Value::Null, Value::from);
            ("stop", reason, text)
        }
        FinishReason::Stop => {
            let matched = request
                .stop
                .iter()
                .filter(|s| !s.is_empty())
                .filter_map(|s| text.find(s.as_str()).map(|at| (at, s)))
                .min();
            match matched {
                Some((at, stop)) => ("stop", Value::from(stop.as_str()), text[..at].to_owned()),
                None => ("stop", Value::Null, text),
            }
        }
    };
    let logprobs = wanted.logprobs.then(|| {
        let tokens: Vec<String> = generation
            .tokens
            .iter()
            .map(|&t| {
                if tokens_as_ids {
                    format!("{TOKEN_ID_PREFIX}{t}")
                } else {
                    token_text(t)
                }
            })
            .collect();
        let mut offset = 0;
        let text_offset = tokens
            .iter()
            .map(|token| {
                let at = offset;
                offset += token.chars().count();
                at
            })
            .collect();
        // vLLM writes -9999.0 for a logprob of -inf (JSON has no infinity).
        let logprobs: Vec<f64> = generation
            .logprobs
            .iter()
            .map(|&lp| f64::from(lp).max(-9999.0))
            .collect();
        ChoiceLogprobs {
            text_offset,
            top_logprobs: tokens
                .iter()
                .zip(&logprobs)
                .map(|(token, &lp)| Some([(token.clone(), lp)].into()))
                .collect(),
            token_logprobs: logprobs.into_iter().map(Some).collect(),
            tokens,
        }
    });
    CompletionChoice {
        index,
        text,
        logprobs,
        finish_reason: Some(finish_reason.into()),
        stop_reason: Some(stop_reason),
    }
}

/// `usage` of an answer: each prompt counted once (with the tokens of it the prefix cache
/// served; `choices` are prompt-major, `samples` per prompt), every choice's tokens.
pub fn usage(prompt_tokens: usize, choices: &[Generation], samples: usize) -> Usage {
    let completion_tokens = choices.iter().map(|g| g.tokens.len()).sum();
    let cached_tokens = (choices.chunks(samples.max(1)))
        .map(|prompt| prompt[0].cached_tokens)
        .sum();
    Usage {
        prompt_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        completion_tokens,
        prompt_tokens_details: Some(PromptTokensDetails { cached_tokens }),
    }
}

/// `GET /v1/models`: the model served, under `name`, then each LoRA adapter loaded (its
/// folder as `root`, the model as `parent`, as vLLM lists them), created at `created` (Unix
/// seconds).
pub fn models(served: &Served, name: &str, created: u64) -> ModelList {
    let card = |id: &str, root: String, parent: Option<String>| ModelCard {
        id: id.to_owned(),
        object: "model".into(),
        created,
        owned_by: "drmas".into(),
        root: Some(root),
        parent,
        max_model_len: Some(served.context_length),
    };
    let base = card(name, served.model_path.clone(), None);
    let adapters = served.adapters.iter().map(|adapter| {
        let folder = adapter.folder.display().to_string();
        card(&adapter.name, folder, Some(name.to_owned()))
    });
    ModelList {
        object: "list".into(),
        data: std::iter::once(base).chain(adapters).collect(),
    }
}
