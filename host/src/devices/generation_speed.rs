//! [`generation_speed`]: sampled generation of a batch of random prompts on a device, timed —
//! drmas's side of the GPU speed table (`drmas-host devices --generate`), which
//! scripts/gpu/peer_speed.py sets against HF `generate` on the same model folder.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;
use tch::{Device, Kind};

use super::compare::{device_name, load};
use super::profile::{Profile, Profiler};
use super::synchronize;
use crate::engine::{generate, Generation, GenerationRequest, SamplingParams};
use crate::model::pretrained::Pretrained;
use crate::rng::SeededRng;

/// The batch of one [`generation_speed`] measurement.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GenerationShape {
    /// Prompts generated together.
    pub batch: usize,
    /// Tokens of each prompt (random ids below the vocabulary size).
    pub prompt_tokens: usize,
    /// The most new tokens of each row (a row also stops at an EOS token).
    pub new_tokens: usize,
}

/// What [`generation_speed`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct GenerationSpeed {
    /// The model.
    pub model: String,
    /// The device generated on.
    pub device: String,
    /// The weights' dtype.
    pub dtype: String,
    /// The batch.
    pub shape: GenerationShape,
    /// New tokens over every row, each row's counted up to and including its first EOS.
    pub tokens: usize,
    /// The longest row's new tokens: the decode steps taken.
    pub longest: usize,
    /// Seconds of the whole `generate` call (prefill included), after a warm-up call.
    pub seconds: f64,
    /// `tokens / seconds`.
    pub tokens_per_s: f64,
    /// Seconds of a call that generates one token per row (the prefill and one sampling step),
    /// the fastest of `PREFILL_REPEATS` calls.
    pub prefill_seconds: f64,
    /// `(seconds − prefill_seconds) / (longest − 1)`: one decode step of the whole batch. Both
    /// are wall-clock times, so on a loaded machine this can come out small or even negative.
    pub decode_step_ms: f64,
    /// Milliseconds of a call's first two decode steps: a call of three tokens per row (the
    /// fastest of `PREFILL_REPEATS`) less `prefill_seconds`. Under CUDA graphs these are the
    /// eager warm-up step and the capture with its first replay, which every `generate` call
    /// pays: against `2 × decode_step_ms` it is what making a call's graph costs.
    pub first_two_steps_ms: f64,
    /// Bytes of the weights, which every decode step reads once.
    pub weight_bytes: u64,
    /// Bytes of the KV cache a decode step reads, averaged over the steps (the context grows
    /// from the prompt to the prompt plus the longest row).
    pub kv_cache_bytes_per_step: u64,
    /// With `--profile`: a further call of [`PROFILED_TOKENS`] tokens per row (the prefill and
    /// `PROFILED_TOKENS − 1` decode steps) under libtorch's profiler.
    pub profile: Option<Profile>,
}

/// New tokens per row of the profiled call: enough decode steps to dwarf the one prefill, few
/// enough that the recording stays small.
pub const PROFILED_TOKENS: usize = 17;

/// Calls of one token per row timed for [`GenerationSpeed::prefill_seconds`]: the fastest is
/// kept, so one call stalled by the rest of the machine does not shift every decode step.
pub const PREFILL_REPEATS: usize = 3;

/// Loads `model` on `device` in `kind` and times sampled generation (temperature 1, no top-k or
/// top-p) of `shape`'s batch: one warm-up call of two tokens, `PREFILL_REPEATS` calls of one
/// token per row (the prefill) and as many of three, then the measured call; with `profile`,
/// one more call under libtorch's profiler ([`GenerationSpeed::profile`]).
pub fn generation_speed(
    model: &Path,
    device: Device,
    kind: Kind,
    shape: GenerationShape,
    profile: bool,
) -> anyhow::Result<GenerationSpeed> {
    if shape.batch == 0 || shape.prompt_tokens == 0 || shape.new_tokens < 2 {
        bail!("a generation measurement needs a batch, prompts and at least 2 new tokens");
    }
    let pretrained = load(model, device, kind)?;
    let config = pretrained.model.config();
    let positions = shape.prompt_tokens + shape.new_tokens;
    if positions > config.max_position_embeddings {
        bail!(
            "{}: {} prompt + {} new tokens exceed the model's {} positions",
            model.display(),
            shape.prompt_tokens,
            shape.new_tokens,
            config.max_position_embeddings
        );
    }
    let prompts = random_prompts(shape, config.vocab_size);
    let run = |new_tokens: usize| -> anyhow::Result<(Vec<Generation>, f64)> {
        let requests: Vec<GenerationRequest> = prompts
            .iter()
            .map(|prompt| {
                GenerationRequest::new(
                    prompt.clone(),
                    SamplingParams::with_temperature(1.0),
                    new_tokens,
                )
            })
            .collect();
        let started = Instant::now();
        let generations = generate(
            &pretrained.model,
            &pretrained.tokenizer,
            &requests,
            &mut SeededRng::new(1),
        )
        .with_context(|| format!("generating on {}", device_name(device)))?;
        Ok((generations, started.elapsed().as_secs_f64()))
    };
    run(2)?;
    let fastest = |new_tokens: usize| -> anyhow::Result<f64> {
        let mut seconds = f64::INFINITY;
        for _ in 0..PREFILL_REPEATS {
            seconds = seconds.min(run(new_tokens)?.1);
        }
        Ok(seconds)
    };
    let prefill_seconds = fastest(1)?;
    let first_two_steps_ms = (fastest(3)? - prefill_seconds) * 1e3;
    let (generations, seconds) = run(shape.new_tokens)?;
    let profile = profile
        .then(|| -> anyhow::Result<Profile> {
            let profiler = Profiler::start(device)?;
            run(PROFILED_TOKENS)?;
            synchronize(device);
            profiler.finish()
        })
        .transpose()?;
    let tokens: usize = generations.iter().map(|g| g.tokens.len()).sum();
    let longest = generations
        .iter()
        .map(|g| g.tokens.len())
        .max()
        .unwrap_or(0);
    let element = element_bytes(kind);
    let mean_context = shape.prompt_tokens as f64 + longest as f64 / 2.0;
    let kv_per_token =
        2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * element;
    Ok(GenerationSpeed {
        model: model.display().to_string(),
        device: device_name(device),
        dtype: format!("{kind:?}"),
        shape,
        tokens,
        longest,
        seconds,
        tokens_per_s: tokens as f64 / seconds,
        prefill_seconds,
        decode_step_ms: (seconds - prefill_seconds) / longest.saturating_sub(1).max(1) as f64 * 1e3,
        first_two_steps_ms,
        weight_bytes: weight_bytes(&pretrained),
        kv_cache_bytes_per_step: (shape.batch as f64 * mean_context * kv_per_token as f64) as u64,
        profile,
    })
}

/// `shape.batch` prompts of `shape.prompt_tokens` ids below `vocab`, from a fixed seed.
fn random_prompts(shape: GenerationShape, vocab: usize) -> Vec<Vec<i64>> {
    let mut rng = SeededRng::new(42);
    (0..shape.batch)
        .map(|_| {
            (0..shape.prompt_tokens)
                .map(|_| (rng.next_u64() % vocab as u64) as i64)
                .collect()
        })
        .collect()
}

fn weight_bytes(pretrained: &Pretrained) -> u64 {
    pretrained
        .model
        .var_store()
        .variables()
        .values()
        .map(|tensor| tensor.numel() as u64 * element_bytes(tensor.kind()) as u64)
        .sum()
}

fn element_bytes(kind: Kind) -> usize {
    match kind {
        Kind::BFloat16 | Kind::Half => 2,
        Kind::Double | Kind::Int64 => 8,
        Kind::Int8 | Kind::Uint8 | Kind::Bool => 1,
        _ => 4,
    }
}
