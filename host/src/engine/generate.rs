//! [`generate`]: a batch of [`GenerationRequest`]s continued to the end, and what each
//! continuation is.

use tokenizers::Tokenizer;

use super::decoding::Decoding;
use super::sampling::SamplingParams;
use crate::model::error::ModelError;
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
    /// Whether the model's EOS tokens leave the sequence going, so that it ends only at
    /// `stop_tokens`, a stop string or `max_new_tokens` (what serving benchmarks ask for, to
    /// generate fixed lengths).
    pub ignore_eos: bool,
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
            ignore_eos: false,
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
    /// Leading prompt tokens whose keys and values were reused from earlier sequences (a
    /// prefix cache) instead of being computed again.
    pub cached_tokens: usize,
}

/// Continues every request, all in one batch (see [`Decoding`]): prompts are left-padded and
/// prefilled in one pass into a KV cache allocated once, then each step samples one token per
/// unfinished sequence. A sequence stops at any of the model's EOS tokens, at a stop string or
/// after `max_new_tokens`; finished sequences are dropped from the batch.
///
/// Outputs are in the order of `requests`. Random numbers come from `rng`, one per sampled
/// token, so a seed fixes the outputs of a given batch (on CPU).
pub fn generate(
    model: &Llama,
    tokenizer: &Tokenizer,
    requests: &[GenerationRequest],
    rng: &mut SeededRng,
) -> Result<Vec<Generation>, ModelError> {
    let mut decoding = Decoding::start(model, tokenizer, requests.to_vec(), rng, None)?;
    while !decoding.is_done() {
        decoding.step()?;
    }
    Ok(decoding.into_outputs())
}

/// Checks every request against the model: a prompt, valid parameters, room for the tokens.
pub(super) fn check(model: &Llama, requests: &[GenerationRequest]) -> Result<(), ModelError> {
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
