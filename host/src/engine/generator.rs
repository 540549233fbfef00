//! [`Generator`]: what a worker group's rollouts generate with. The rollout hands it batches of
//! token-level requests and never touches a model, so the in-process engine ([`LocalGenerator`])
//! and a fleet of inference servers are interchangeable behind it.

use std::path::Path;
use std::sync::Mutex;

use anyhow::{anyhow, Context};
use tokenizers::Tokenizer;

use super::generate::{Generation, GenerationRequest};
use super::shared_batch::SharedBatch;
use crate::model::chat_codec::ChatCodec;
use crate::model::llama::Llama;
use crate::model::pretrained::Pretrained;
use crate::rng::SeededRng;

/// Continues batches of prompts for one worker group: token ids and sampling parameters in,
/// tokens, their sampling log-probabilities and a finish reason out (see [`GenerationRequest`]
/// and [`Generation`]).
///
/// The rollout calls it from a thread per batch and blocks on the answer, with at most
/// [`Generator::concurrent_batches`] batches of a group running at once; an implementation that
/// talks to servers may run requests concurrently inside.
pub trait Generator: Send + Sync {
    /// How many batches may run on it at once, each from its own thread: 1 (the default) for
    /// the in-process engine, whose model runs one batch at a time; more for servers, which
    /// batch what arrives while they run (continuous batching).
    fn concurrent_batches(&self) -> usize {
        1
    }

    /// Continues every request; the outputs are in the order of `requests`. Random numbers
    /// come from `rng`, so a seed fixes what an in-process generator samples.
    fn generate(
        &self,
        requests: &[GenerationRequest],
        rng: &mut SeededRng,
    ) -> anyhow::Result<Vec<Generation>>;
}

/// The in-process engine on a worker group's own model.
///
/// It holds the model exclusively for the rollout: a decoding locks it while it runs, so worker
/// threads may share the generator while the model itself is never shared. A batch handed in
/// while another runs joins it between decode steps ([`SharedBatch`]): under the `async`
/// schedule a call that becomes ready meanwhile need not wait for the whole batch.
pub struct LocalGenerator<'m> {
    model: Mutex<&'m mut Llama>,
    tokenizer: &'m Tokenizer,
    source: &'m Path,
    batches: SharedBatch,
}

impl<'m> LocalGenerator<'m> {
    /// Splits a loaded model into the generator over its network and the chat codec the
    /// rollout renders prompts and decodes outputs with.
    pub fn split(pretrained: &'m mut Pretrained) -> (Self, ChatCodec<'m>) {
        let Pretrained {
            model,
            tokenizer,
            chat_template,
            source,
        } = pretrained;
        let generator = Self {
            model: Mutex::new(model),
            tokenizer,
            source,
            batches: SharedBatch::default(),
        };
        (generator, ChatCodec::new(tokenizer, chat_template))
    }

    /// The generator keeping up to `bytes` of the keys and values of the sequences it finished,
    /// so that a prompt beginning with one (an agent's next turn) prefills only the rest. The
    /// generator lives for one rollout, on one version of the weights.
    pub fn with_prefix_cache(self, bytes: usize) -> Self {
        Self {
            batches: SharedBatch::with_prefix_cache(bytes),
            ..self
        }
    }
}

impl Generator for LocalGenerator<'_> {
    /// Two: the batch running and one joining it; a third waits, which bounds the rows (and
    /// the cache) of a decoding to two batches'.
    fn concurrent_batches(&self) -> usize {
        2
    }

    fn generate(
        &self,
        requests: &[GenerationRequest],
        rng: &mut SeededRng,
    ) -> anyhow::Result<Vec<Generation>> {
        (self.batches)
            .generate(&self.model, self.tokenizer, requests.to_vec(), rng)
            .map_err(|error| anyhow!(error))
            .with_context(|| format!("generating with {}", self.source.display()))
    }
}
