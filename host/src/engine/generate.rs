//! [`generate`]: batched sampling with a KV cache, one prefill pass then one token per step,
//! finished sequences dropped from the batch.

use std::collections::HashMap;

use tch::{Device, Tensor};
use tokenizers::Tokenizer;

use super::decode_steps::DecodeSteps;
use super::sampling::{Sampler, SamplingParams};
use super::stop::StopStrings;
use crate::model::error::ModelError;
use crate::model::layers::AdapterRows;
use crate::model::llama::Llama;
use crate::rng::SeededRng;

/// One sequence to continue.
#[derive(Debug, Clone)]
pub struct GenerationRequest {
    /// The prompt's token ids (not empty).
    pub prompt: Vec<i64>,
    /// How to pick each token.
    pub params: SamplingParams,
    /// The most tokens to add.
    pub max_new_tokens: usize,
    /// Stops once the decoded continuation contains any of these (empty ones are ignored).
    pub stop: Vec<String>,
    /// The model's LoRA adapter that continues it (`None`: the base model).
    pub adapter: Option<usize>,
    /// Tokens that end the sequence like the model's EOS tokens do (kept as its last token).
    pub stop_tokens: Vec<i64>,
    /// The request's own random stream: its tokens are drawn from `SeededRng::new(seed)`,
    /// whatever else shares the batch (what a server needs to answer a request the same way
    /// however it batches it). `None`: the batch's shared stream, in row order.
    pub seed: Option<u64>,
}

impl GenerationRequest {
    /// `prompt` continued by up to `max_new_tokens` tokens picked by `params`, from the base
    /// model and the batch's random stream, stopping only at the model's EOS tokens.
    pub fn new(prompt: Vec<i64>, params: SamplingParams, max_new_tokens: usize) -> Self {
        Self {
            prompt,
            params,
            max_new_tokens,
            stop: Vec::new(),
            adapter: None,
            stop_tokens: Vec::new(),
            seed: None,
        }
    }
}

/// Why a sequence stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// It produced one of the model's EOS tokens (the last token).
    Eos,
    /// Its decoded text gained one of the request's stop strings (in the last token's text).
    Stop,
    /// It reached `max_new_tokens`.
    Length,
}

impl FinishReason {
    /// Its name in the run's `samples.jsonl`: `eos`, `stop` or `length`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Eos => "eos",
            Self::Stop => "stop",
            Self::Length => "length",
        }
    }
}

/// A finished continuation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The new tokens, including the EOS token or the one completing a stop string.
    pub tokens: Vec<i64>,
    /// `log_softmax(logits / T)` over the whole vocabulary at each token, `T` the request's
    /// temperature (1 when greedy), before any top-k/top-p truncation: what a training forward
    /// computes for the same tokens.
    pub logprobs: Vec<f32>,
    /// Why it stopped.
    pub finish: FinishReason,
}

/// When to drop finished rows from the batch. Dropping them copies the live rows' cache (about
/// a tenth of a row's decode step per live row, more with long contexts; measured in
/// docs/benchmarks.md); a finished row left in costs one row's decode step per step. So,
/// ski-rental style, the batch is compacted once the finished rows have wasted `COMPACT_AFTER`
/// × (live rows) row-steps since the last compaction: at once when many finish together, a few
/// steps later when one of many does.
const COMPACT_AFTER: f64 = 0.5;

/// Continues every request, all in one batch: prompts are left-padded and prefilled in one
/// pass into a KV cache allocated once, then each step samples one token per unfinished
/// sequence (see [`Sampler`]). A sequence stops at any of the model's EOS tokens, at a stop
/// string or after `max_new_tokens`; finished sequences are dropped from the batch (unless the
/// steps are a CUDA graph's replays: see [`DecodeSteps`]). Requests
/// with different LoRA adapters share the batch, each row through its own adapter.
///
/// Outputs are in the order of `requests`. Random numbers come from `rng`, one per sampled
/// token, so a seed fixes the outputs of a given batch (on CPU).
pub fn generate(
    model: &Llama,
    tokenizer: &Tokenizer,
    requests: &[GenerationRequest],
    rng: &mut SeededRng,
) -> Result<Vec<Generation>, ModelError> {
    check(model, requests)?;
    let mut outputs: Vec<Generation> = requests
        .iter()
        .map(|r| Generation {
            tokens: Vec::with_capacity(r.max_new_tokens),
            logprobs: Vec::with_capacity(r.max_new_tokens),
            finish: FinishReason::Length,
        })
        .collect();
    // The batch: which request each row continues (None once finished, until compaction).
    let mut rows: Vec<Option<usize>> = (0..requests.len())
        .filter(|&i| requests[i].max_new_tokens > 0)
        .map(Some)
        .collect();
    if rows.is_empty() {
        return Ok(outputs);
    }
    let device = model.var_store().device();
    let active: Vec<&GenerationRequest> = rows.iter().flatten().map(|&i| &requests[i]).collect();
    let longest = active.iter().map(|r| r.prompt.len()).max().unwrap_or(0);
    let most_new = active.iter().map(|r| r.max_new_tokens).max().unwrap_or(0);
    let mut stops: Vec<Option<StopStrings>> = (0..requests.len()).map(|_| None).collect();
    for &i in rows.iter().flatten() {
        stops[i] = StopStrings::new(&requests[i].stop, &requests[i].prompt);
    }
    let params: Vec<SamplingParams> = active.iter().map(|r| r.params).collect();
    let mut sampler = Sampler::new(&params, model.config().vocab_size as i64, device)
        .with_backend(model.backend().clone());
    let eos = &model.config().eos_token_ids;
    let mut own_streams: Vec<Option<SeededRng>> = requests
        .iter()
        .map(|r| r.seed.map(SeededRng::new))
        .collect();

    // Identical prompts for the same adapter (a group of samples per prompt) are prefilled
    // once, then their cache rows are copied to every sequence that shares them.
    let mut first: HashMap<(&[i64], Option<usize>), usize> = HashMap::new();
    let mut unique: Vec<&[i64]> = Vec::new();
    let mut unique_adapters: Vec<Option<usize>> = Vec::new();
    let prompt_of: Vec<usize> = active
        .iter()
        .map(|r| {
            *first.entry((&r.prompt, r.adapter)).or_insert_with(|| {
                unique.push(&r.prompt);
                unique_adapters.push(r.adapter);
                unique.len() - 1
            })
        })
        .collect();
    let mut cache = model.new_cache(unique.len() as i64, (longest + most_new) as i64)?;
    let (ids, mask) = left_pad(&unique, longest, device);
    let mut adapters = AdapterRows::new(&unique_adapters, device, false);
    let mut logits =
        tch::no_grad(|| model.forward_last_with(&ids, Some(&mask), Some(&mut cache), &adapters))?;
    if unique.len() < active.len() {
        let index = Tensor::from_slice(&prompt_of.iter().map(|&u| u as i64).collect::<Vec<_>>())
            .to_device(device);
        cache.retain(&prompt_of);
        adapters = adapters.select(&prompt_of);
        logits = logits.index_select(0, &index);
    }
    let mut steps = DecodeSteps::for_device(device)?;
    let mut live: Vec<bool> = vec![true; rows.len()];
    let mut tokens_host: Vec<i64> = Vec::with_capacity(rows.len());
    let mut logprobs_host: Vec<f32> = Vec::with_capacity(rows.len());
    let mut dead_steps = 0.0;
    // Each row's uniform for the next sample, from its own stream or the shared one: the first
    // after the prefill, the others before the decode step whose logits they sample (see
    // `Sampler::prepare_draws`).
    let mut prepare_draws = |sampler: &mut Sampler, rows: &[Option<usize>], live: &[bool]| {
        sampler.prepare_draws(live, &mut |row| {
            let stream = rows[row].and_then(|i| own_streams[i].as_mut());
            stream.unwrap_or(&mut *rng).uniform()
        })
    };
    prepare_draws(&mut sampler, &rows, &live)?;
    loop {
        let last = logits.select(1, -1);
        let (tokens, logprobs) = sampler.sample_prepared(&last)?;
        copy_to_host(&tokens, &mut tokens_host)?;
        copy_to_host(&logprobs, &mut logprobs_host)?;
        for (row, slot) in rows.iter_mut().enumerate() {
            let Some(i) = *slot else { continue };
            let (token, out) = (tokens_host[row], &mut outputs[i]);
            out.tokens.push(token);
            out.logprobs.push(logprobs_host[row]);
            let finish = if eos.contains(&token) || requests[i].stop_tokens.contains(&token) {
                Some(FinishReason::Eos)
            } else if match &mut stops[i] {
                Some(stop) => stop.push(token, tokenizer)?,
                None => false,
            } {
                Some(FinishReason::Stop)
            } else if out.tokens.len() >= requests[i].max_new_tokens {
                Some(FinishReason::Length)
            } else {
                None
            };
            if let Some(finish) = finish {
                out.finish = finish;
                *slot = None;
                live[row] = false;
            }
        }
        let alive = live.iter().filter(|&&l| l).count();
        if alive == 0 {
            break;
        }
        let dead = rows.len() - alive;
        dead_steps += dead as f64;
        let mut next = tokens;
        if steps.may_compact() && dead > 0 && dead_steps >= COMPACT_AFTER * alive as f64 {
            let keep: Vec<usize> = (0..rows.len()).filter(|&r| live[r]).collect();
            let index = Tensor::from_slice(&keep.iter().map(|&r| r as i64).collect::<Vec<_>>())
                .to_device(device);
            cache.retain(&keep);
            adapters = adapters.select(&keep);
            sampler.retain(&keep);
            next = next.index_select(0, &index);
            rows = keep.iter().map(|&r| rows[r]).collect();
            live.truncate(alive);
            live.fill(true);
            dead_steps = 0.0;
        }
        prepare_draws(&mut sampler, &rows, &live)?;
        logits = steps.step(model, &next, &mut cache, &adapters)?;
    }
    Ok(outputs)
}

/// Checks every request against the model: a prompt, valid parameters, room for the tokens.
fn check(model: &Llama, requests: &[GenerationRequest]) -> Result<(), ModelError> {
    let positions = model.config().max_position_embeddings;
    let vocab = model.config().vocab_size as i64;
    for (i, request) in requests.iter().enumerate() {
        let fail = |what: String| Err(ModelError::Input(format!("generation request {i}: {what}")));
        if request.prompt.is_empty() {
            return fail("the prompt has no tokens".to_owned());
        }
        if let Some(bad) = request.prompt.iter().find(|&&t| t < 0 || t >= vocab) {
            return fail(format!(
                "token id {bad} is not in the vocabulary 0..{vocab}"
            ));
        }
        if let Err(e) = request.params.check() {
            return fail(e);
        }
        let total = request.prompt.len() + request.max_new_tokens;
        if total > positions {
            return fail(format!(
                "a prompt of {} tokens plus up to {} new ones is {total} tokens, more than the \
                 model's {positions} positions",
                request.prompt.len(),
                request.max_new_tokens
            ));
        }
    }
    Ok(())
}

/// Copies `tensor` (any shape, on any device) into `host`, replacing what it held.
fn copy_to_host<T: tch::kind::Element + Copy + Default>(
    tensor: &Tensor,
    host: &mut Vec<T>,
) -> Result<(), ModelError> {
    let n = tensor.numel();
    host.clear();
    host.resize(n, T::default());
    tensor.to_device(Device::Cpu).f_copy_data(host, n)?;
    Ok(())
}

/// `prompts` left-padded to `len` tokens: ids `[B, len]` (padding 0) and mask (1 = token).
fn left_pad(prompts: &[&[i64]], len: usize, device: Device) -> (Tensor, Tensor) {
    let mut ids = Vec::with_capacity(prompts.len() * len);
    let mut mask = Vec::with_capacity(prompts.len() * len);
    for prompt in prompts {
        let pad = len - prompt.len();
        ids.extend(std::iter::repeat_n(0, pad).chain(prompt.iter().copied()));
        mask.extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, prompt.len())));
    }
    let shape = [prompts.len() as i64, len as i64];
    (
        Tensor::from_slice(&ids).view(shape).to_device(device),
        Tensor::from_slice(&mask).view(shape).to_device(device),
    )
}
