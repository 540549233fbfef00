//! [`Decoding`]: one batch generated step by step. Finished sequences leave the batch and,
//! between steps, new requests may join it (continuous batching): a server answers a short
//! request that arrives while a long batch runs without waiting for the batch to end.

use std::collections::HashMap;
use std::ops::Range;

use tch::{Device, Tensor};
use tokenizers::Tokenizer;

use super::decode_steps::DecodeSteps;
use super::generate::{check, FinishReason, Generation, GenerationRequest};
use super::prefix_cache::PrefixCache;
use super::sampling::{Sampler, SamplingParams};
use super::stop::StopStrings;
use crate::model::error::ModelError;
use crate::model::layers::kv_cache::row_index;
use crate::model::layers::{AdapterRows, KvCache, SequenceKv};
use crate::model::llama::Llama;
use crate::rng::SeededRng;

/// When to drop finished rows from the batch. Dropping them copies the live rows' cache (about
/// a tenth of a row's decode step per live row, more with long contexts; measured in
/// docs/benchmarks.md); a finished row left in costs one row's decode step per step. So,
/// ski-rental style, the batch is compacted once the finished rows have wasted `COMPACT_AFTER`
/// × (live rows) row-steps since the last compaction: at once when many finish together, a few
/// steps later when one of many does.
const COMPACT_AFTER: f64 = 0.5;

/// A batch of requests being continued, one token per live sequence at each [`Self::step`].
///
/// Prompts are left-padded and prefilled in one pass into a KV cache; identical prompts for
/// the same adapter (a group of samples) are prefilled once and their cache rows shared. Each
/// step samples one token per unfinished sequence (see [`Sampler`]) and runs the decode step
/// that feeds them back. A sequence stops at any of the model's EOS tokens, at a stop string or
/// after `max_new_tokens`; finished sequences are dropped from the batch (unless the steps are a
/// CUDA graph's replays: see [`DecodeSteps`]). Requests with different LoRA adapters share the
/// batch, each row through its own adapter. Random numbers come from the shared stream, one per
/// sampled token in row order, or from a request's own seed. With a [`PrefixCache`], a prompt
/// that begins with tokens it holds prefills only the rest, and finished sequences are added.
#[derive(Debug)]
pub struct Decoding<'a> {
    model: &'a Llama,
    tokenizer: &'a Tokenizer,
    rng: &'a mut SeededRng,
    prefixes: Option<&'a mut PrefixCache>,
    requests: Vec<GenerationRequest>,
    outputs: Vec<Generation>,
    /// Per request, whether it has finished.
    finished: Vec<bool>,
    stops: Vec<Option<StopStrings>>,
    own_streams: Vec<Option<SeededRng>>,
    /// Per batch row, the request it continues (`None` once finished, until compaction).
    rows: Vec<Option<usize>>,
    live: Vec<bool>,
    /// Row-steps spent on finished rows since the last compaction.
    dead_steps: f64,
    cache: KvCache,
    adapters: AdapterRows,
    sampler: Sampler,
    steps: DecodeSteps,
    /// `[B, 1, vocab]`: the logits each row's next token is sampled from.
    logits: Tensor,
    tokens_host: Vec<i64>,
    logprobs_host: Vec<f32>,
}

impl<'a> Decoding<'a> {
    /// Checks `requests` against `model`, prefills their prompts (reusing and filling
    /// `prefixes`, if given) and prepares the first sample. Requests for no new tokens are
    /// finished at once.
    pub fn start(
        model: &'a Llama,
        tokenizer: &'a Tokenizer,
        requests: Vec<GenerationRequest>,
        rng: &'a mut SeededRng,
        mut prefixes: Option<&'a mut PrefixCache>,
    ) -> Result<Self, ModelError> {
        check(model, &requests)?;
        let device = model.var_store().device();
        let active: Vec<usize> = (0..requests.len())
            .filter(|&i| requests[i].max_new_tokens > 0)
            .collect();
        let params: Vec<SamplingParams> = active.iter().map(|&i| requests[i].params).collect();
        let sampler = Sampler::new(&params, model.config().vocab_size as i64, device)
            .with_backend(model.backend().clone());
        let mut cached = vec![0; requests.len()];
        let (cache, logits, adapters) = if active.is_empty() {
            (model.new_cache(0, 0)?, Tensor::new(), AdapterRows::base())
        } else {
            let most_new = active.iter().map(|&i| requests[i].max_new_tokens).max();
            let room = most_new.unwrap_or(0) as i64;
            let widest = model.config().max_position_embeddings as i64 - room;
            let prefixes = prefixes.as_deref_mut();
            let prefill = Prefill::run(model, &requests, &active, (room, widest), prefixes)?;
            for (&i, &prompt) in active.iter().zip(&prefill.prompt_of) {
                cached[i] = prefill.cached[prompt];
            }
            let mut cache = prefill.cache;
            let mut adapters = prefill.adapters;
            let mut logits = prefill.logits;
            if cache.batch() < active.len() as i64 {
                let index = row_index(&prefill.prompt_of, device);
                cache.retain(&prefill.prompt_of);
                adapters = adapters.select(&prefill.prompt_of);
                logits = logits.index_select(0, &index);
            }
            (cache, logits, adapters)
        };
        let mut decoding = Self {
            model,
            tokenizer,
            rng,
            prefixes,
            outputs: Vec::new(),
            finished: Vec::new(),
            stops: Vec::new(),
            own_streams: Vec::new(),
            requests: Vec::new(),
            rows: active.iter().map(|&i| Some(i)).collect(),
            live: vec![true; active.len()],
            dead_steps: 0.0,
            cache,
            adapters,
            sampler,
            steps: DecodeSteps::for_device(device)?,
            logits,
            tokens_host: Vec::with_capacity(active.len()),
            logprobs_host: Vec::with_capacity(active.len()),
        };
        decoding.register(requests);
        for (output, cached) in decoding.outputs.iter_mut().zip(cached) {
            output.cached_tokens = cached;
        }
        if !active.is_empty() {
            decoding.prepare_draws()?;
        }
        Ok(decoding)
    }

    /// Whether every sequence has finished.
    pub fn is_done(&self) -> bool {
        !self.live.contains(&true)
    }

    /// Sequences still being continued.
    pub fn live_rows(&self) -> usize {
        self.live.iter().filter(|&&l| l).count()
    }

    /// Whether request `request` (its index in the order requests were given, counting those
    /// admitted later) has finished.
    pub fn is_finished(&self, request: usize) -> bool {
        self.finished.get(request).copied().unwrap_or(false)
    }

    /// The continuation of the finished request `request`, moved out.
    pub fn take(&mut self, request: usize) -> Generation {
        std::mem::replace(&mut self.outputs[request], empty_generation(0))
    }

    /// Every continuation, in request order.
    pub fn into_outputs(self) -> Vec<Generation> {
        self.outputs
    }

    /// Samples the next token of every live sequence, finishes those that stop, and (when any
    /// are left) runs the decode step that feeds the tokens back.
    pub fn step(&mut self) -> Result<(), ModelError> {
        if self.is_done() {
            return Ok(());
        }
        let last = self.logits.select(1, -1);
        let (tokens, logprobs) = self.sampler.sample_prepared(&last)?;
        copy_to_host(&tokens, &mut self.tokens_host)?;
        copy_to_host(&logprobs, &mut self.logprobs_host)?;
        let eos = &self.model.config().eos_token_ids;
        for (row, slot) in self.rows.iter_mut().enumerate() {
            let Some(i) = *slot else { continue };
            let (token, out) = (self.tokens_host[row], &mut self.outputs[i]);
            out.tokens.push(token);
            out.logprobs.push(self.logprobs_host[row]);
            let request = &self.requests[i];
            let eos = !request.ignore_eos && eos.contains(&token);
            let finish = if eos || request.stop_tokens.contains(&token) {
                Some(FinishReason::Eos)
            } else if match &mut self.stops[i] {
                Some(stop) => stop.push(token, self.tokenizer)?,
                None => false,
            } {
                Some(FinishReason::Stop)
            } else if out.tokens.len() >= request.max_new_tokens {
                Some(FinishReason::Length)
            } else {
                None
            };
            if let Some(finish) = finish {
                out.finish = finish;
                self.finished[i] = true;
                *slot = None;
                self.live[row] = false;
                if let Some(prefixes) = self.prefixes.as_deref_mut() {
                    keep_sequence(prefixes, &self.cache, row, request, &out.tokens);
                }
            }
        }
        let alive = self.live_rows();
        if alive == 0 {
            return Ok(());
        }
        let dead = self.rows.len() - alive;
        self.dead_steps += dead as f64;
        let mut next = tokens;
        if self.steps.may_compact() && dead > 0 && self.dead_steps >= COMPACT_AFTER * alive as f64 {
            let keep = self.live_row_indices();
            next = next.index_select(0, &row_index(&keep, next.device()));
            self.cache.retain(&keep);
            self.adapters = self.adapters.select(&keep);
            self.sampler.retain(&keep);
            self.keep_rows(&keep);
        }
        self.prepare_draws()?;
        self.logits = self
            .steps
            .step(self.model, &next, &mut self.cache, &self.adapters)?;
        Ok(())
    }

    /// Adds `requests` to the running batch, to be sampled from the next [`Self::step`] on,
    /// and returns their indices; `None` (nothing changed) when they do not fit now: the batch
    /// has finished, its steps are a CUDA graph's (whose shapes are fixed), or the cache would
    /// need more slots than the model has positions. Finished rows leave the batch meanwhile.
    ///
    /// The new prompts are prefilled on their own, then every row's cache is laid out again
    /// ending at one slot (see [`KvCache::admit`]): the old rows' leading padding is dropped,
    /// and the new rows' prompts end where the old rows' tokens do. Each new sequence samples
    /// what it would alone, up to the rounding of batched arithmetic.
    pub fn admit(
        &mut self,
        requests: &[GenerationRequest],
    ) -> Result<Option<Range<usize>>, ModelError> {
        if self.is_done() || !self.steps.may_compact() {
            return Ok(None);
        }
        check(self.model, requests)?;
        let first = self.requests.len();
        let added = first..first + requests.len();
        let active: Vec<usize> = (0..requests.len())
            .filter(|&i| requests[i].max_new_tokens > 0)
            .collect();
        if active.is_empty() {
            self.register(requests.to_vec());
            return Ok(Some(added));
        }
        let keep = self.live_row_indices();
        let start = self.cache.leading_padding(&keep);
        let span = self.cache.len() - start;
        let longest = active.iter().map(|&i| requests[i].prompt.len()).max();
        let most_new = active.iter().map(|&i| requests[i].max_new_tokens).max();
        let most_new = most_new.unwrap_or(0) as i64;
        // The new layout ends at slot `len` (at least the kept rows' span and the new prompts'
        // prefill); the kept rows move right by as much as it grows, so with their old room
        // and the new rows' tokens it must fit the model's positions (or the old allocation).
        let limit = (self.model.config().max_position_embeddings as i64).max(self.cache.max_len());
        let widest = (limit - self.cache.max_len() + self.cache.len()).min(limit - most_new);
        if span.max(longest.unwrap_or(0) as i64) > widest {
            return Ok(None);
        }
        let prefixes = self.prefixes.as_deref_mut();
        let prefill = Prefill::run(self.model, requests, &active, (0, widest), prefixes)?;
        let len = span.max(prefill.cache.len());
        let shift = len - self.cache.len();
        let max_len = (self.cache.max_len() + shift).max(len + most_new);
        let device = self.model.var_store().device();
        self.cache.admit(
            (&keep, start),
            (&prefill.cache, &prefill.prompt_of),
            (len, max_len),
        );
        self.logits = Tensor::cat(
            &[
                self.logits.index_select(0, &row_index(&keep, device)),
                (prefill.logits).index_select(0, &row_index(&prefill.prompt_of, device)),
            ],
            0,
        );
        self.sampler.retain(&keep);
        self.keep_rows(&keep);
        self.register(requests.to_vec());
        let joining: Vec<usize> = active.iter().map(|&i| first + i).collect();
        for (&i, &prompt) in joining.iter().zip(&prefill.prompt_of) {
            self.outputs[i].cached_tokens = prefill.cached[prompt];
        }
        let params: Vec<SamplingParams> =
            joining.iter().map(|&i| self.requests[i].params).collect();
        let (own_streams, rng) = (&mut self.own_streams, &mut *self.rng);
        self.sampler.admit(&params, &mut |row| {
            let stream = own_streams[joining[row]].as_mut();
            stream.unwrap_or(&mut *rng).uniform()
        });
        self.rows.extend(joining.iter().map(|&i| Some(i)));
        self.live.resize(self.rows.len(), true);
        let slots: Vec<Option<usize>> = (self.rows.iter().flatten())
            .map(|&i| self.requests[i].adapter)
            .collect();
        self.adapters = AdapterRows::new(&slots, device, false);
        Ok(Some(added))
    }

    /// Takes in `requests` (checked): their outputs, stop watchers and own random streams;
    /// those for no new tokens are finished.
    fn register(&mut self, requests: Vec<GenerationRequest>) {
        for request in requests {
            self.outputs.push(empty_generation(request.max_new_tokens));
            self.finished.push(request.max_new_tokens == 0);
            self.stops
                .push(StopStrings::new(&request.stop, &request.prompt));
            self.own_streams.push(request.seed.map(SeededRng::new));
            self.requests.push(request);
        }
    }

    /// The batch rows of live sequences.
    fn live_row_indices(&self) -> Vec<usize> {
        (0..self.rows.len()).filter(|&r| self.live[r]).collect()
    }

    /// Keeps the host-side state of the rows `keep` (all live), as the cache kept them.
    fn keep_rows(&mut self, keep: &[usize]) {
        self.rows = keep.iter().map(|&r| self.rows[r]).collect();
        self.live = vec![true; keep.len()];
        self.dead_steps = 0.0;
    }

    /// Each row's uniform for the next sample, from its own stream or the shared one: the first
    /// after the prefill, the others before the decode step whose logits they sample (see
    /// [`Sampler::prepare_draws`]).
    fn prepare_draws(&mut self) -> Result<(), ModelError> {
        let Self {
            sampler,
            rows,
            live,
            own_streams,
            rng,
            ..
        } = self;
        sampler.prepare_draws(live, &mut |row| {
            let stream = rows[row].and_then(|i| own_streams[i].as_mut());
            stream.unwrap_or(&mut **rng).uniform()
        })
    }
}

/// The prefill of some requests' distinct prompts.
struct Prefill {
    cache: KvCache,
    /// `[U, 1, vocab]`: the logits after each distinct prompt.
    logits: Tensor,
    /// The distinct prompts' adapters.
    adapters: AdapterRows,
    /// Per active request, its distinct prompt.
    prompt_of: Vec<usize>,
    /// Per distinct prompt, its leading tokens whose keys and values came from a
    /// [`PrefixCache`].
    cached: Vec<usize>,
}

impl Prefill {
    /// Left-pads the prompts of `requests[active]` and runs them through `model` into a cache
    /// with `room` more slots than the prefill fills; identical prompts for the same adapter
    /// run once.
    ///
    /// With `prefixes`, each prompt's longest prefix held there (all but its last token at
    /// most) is copied into the cache instead, every row's ending at the same slot, and only
    /// the rest of each prompt runs, left-padded after them. That takes the longest prefix
    /// plus the longest rest in slots: when that is more than `widest`, nothing is reused.
    fn run(
        model: &Llama,
        requests: &[GenerationRequest],
        active: &[usize],
        (room, widest): (i64, i64),
        prefixes: Option<&mut PrefixCache>,
    ) -> Result<Self, ModelError> {
        let device = model.var_store().device();
        let mut distinct: HashMap<(&[i64], Option<usize>), usize> = HashMap::new();
        let mut unique: Vec<&[i64]> = Vec::new();
        let mut unique_adapters: Vec<Option<usize>> = Vec::new();
        let prompt_of: Vec<usize> = active
            .iter()
            .map(|&i| {
                let r = &requests[i];
                *distinct.entry((&r.prompt, r.adapter)).or_insert_with(|| {
                    unique.push(&r.prompt);
                    unique_adapters.push(r.adapter);
                    unique.len() - 1
                })
            })
            .collect();
        let mut hits: Vec<Option<SequenceKv>> = match prefixes {
            Some(prefixes) => (unique.iter().zip(&unique_adapters))
                .map(|(prompt, &adapter)| prefixes.lookup(adapter, prompt, prompt.len() - 1))
                .map(|hit| hit.map(|(_, kv)| kv))
                .collect(),
            None => Vec::new(),
        };
        let mut cached: Vec<usize> = (0..unique.len())
            .map(|i| {
                hits.get(i)
                    .and_then(Option::as_ref)
                    .map_or(0, SequenceKv::len)
            })
            .collect();
        let slots_for = |cached: &[usize]| {
            let reused = cached.iter().max().copied().unwrap_or(0);
            let rest = (unique.iter().zip(cached)).map(|(p, &n)| p.len() - n).max();
            (reused + rest.unwrap_or(0)) as i64
        };
        if slots_for(&cached) > widest {
            hits.clear();
            cached.fill(0);
        }
        let rests: Vec<&[i64]> = (unique.iter().zip(&cached))
            .map(|(prompt, &n)| &prompt[n..])
            .collect();
        let width = rests.iter().map(|p| p.len()).max().unwrap_or(0);
        let mut cache = model.new_cache(unique.len() as i64, slots_for(&cached) + room)?;
        cache.start_from(&hits);
        let (ids, mask) = left_pad(&rests, width, device);
        let adapters = AdapterRows::new(&unique_adapters, device, false);
        let logits = tch::no_grad(|| {
            model.forward_last_with(&ids, Some(&mask), Some(&mut cache), &adapters)
        })?;
        Ok(Self {
            cache,
            logits,
            adapters,
            prompt_of,
            cached,
        })
    }
}

/// An unfinished continuation with room for `max_new_tokens` tokens.
fn empty_generation(max_new_tokens: usize) -> Generation {
    Generation {
        tokens: Vec::with_capacity(max_new_tokens),
        logprobs: Vec::with_capacity(max_new_tokens),
        finish: FinishReason::Length,
        cached_tokens: 0,
    }
}

/// Adds finished row `row`'s sequence to `prefixes`: `request`'s prompt and its `tokens` but
/// the last (whose keys and values were never computed).
fn keep_sequence(
    prefixes: &mut PrefixCache,
    cache: &KvCache,
    row: usize,
    request: &GenerationRequest,
    tokens: &[i64],
) {
    let generated = &tokens[..tokens.len().saturating_sub(1)];
    let sequence: Vec<i64> = (request.prompt.iter().chain(generated)).copied().collect();
    let bytes = sequence.len() * cache.bytes_per_token();
    if prefixes.wants(request.adapter, &sequence, bytes) {
        prefixes.insert(request.adapter, sequence, cache.sequence(row));
    }
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
