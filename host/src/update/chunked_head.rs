//! [`ChunkedHead`]: the response tokens' log-probabilities (and entropies) through the LM head a
//! chunk of positions at a time, so that the `[B, R, vocab]` logits and their gradients never
//! exist whole: 16 calls of 512 tokens over Qwen2.5's 151,936-token vocabulary make 5 GB of f32
//! log-probabilities, and the plain backward holds several such tensors at once. The update
//! takes it with activation checkpointing, which already trades compute for memory;
//! log-probabilities without autograd (the recomputed old ones, a reference's) always come
//! through [`ChunkedHead::logprobs_without_grad`], where chunks cost nothing.
//!
//! The forward computes the log-probabilities chunk by chunk, keeping none of their autograd
//! history, and hands them to the loss as leaves. Once the loss's backward has left their
//! gradients there, [`ChunkedHead::backward`] recomputes each chunk's logits, the same
//! operations on the same shapes, and carries those gradients through them into the LM head's
//! weight and the hidden states. The price is the LM head's product once more, as activation
//! checkpointing pays it for every layer. In one chunk (a small vocabulary or batch) these are
//! the plain update's operations on its shapes, so on the CPU the gradients are the same to the
//! bit.

use tch::Tensor;

use super::batch::target_logprobs;
use super::TrainingBatch;
use crate::model::error::ModelError;
use crate::model::llama::Llama;

/// Bytes of f32 log-probabilities one chunk may hold.
const CHUNK_BYTES: i64 = 64 << 20;

/// The LM head over a batch's response positions, chunk by chunk (see the module docs).
pub struct ChunkedHead<'a> {
    model: &'a Llama,
    /// The hidden states at each call's temperature, `[B·R, hidden]`, with their history.
    scaled: Tensor,
    /// The response tokens, `[B·R]`.
    targets: Tensor,
    /// Positions per chunk.
    rows: i64,
    /// `[B, R]` f32, an autograd leaf.
    logprobs: Tensor,
    /// `[B, R]` f32, an autograd leaf, when asked for.
    entropy: Option<Tensor>,
}

impl<'a> ChunkedHead<'a> {
    /// Positions per chunk for `model`: as many as keep a chunk's f32 log-probabilities within
    /// 64 MiB (341 for a 49,152-token vocabulary, 110 for 151,936). Smaller chunks cost more
    /// operators; larger ones, on the CPU, more fresh pages for the allocator to map.
    pub fn rows_for(model: &Llama) -> i64 {
        let vocab = model.config().vocab_size.max(1) as i64;
        (CHUNK_BYTES / (vocab * 4)).max(1)
    }

    /// The log-probabilities `[B, R]` of `batch`'s response tokens (and, when `with_entropy`,
    /// the entropies) from `hidden` `[B, R, hidden]` (the positions that predict them, with
    /// their autograd history), `rows` positions at a time; what [`TrainingBatch::token_logprobs`]
    /// gives from the whole logits, as autograd leaves for the loss.
    pub fn forward(
        model: &'a Llama,
        batch: &TrainingBatch,
        hidden: &Tensor,
        with_entropy: bool,
        rows: i64,
    ) -> Self {
        let size = hidden.size();
        let scaled = flat(&batch.at_temperatures(hidden));
        let targets = batch.targets.reshape([-1]);
        let (logprobs, entropy) = by_chunks(model, &scaled, &targets, with_entropy, rows);
        let leaf = |values: Tensor| values.view([size[0], size[1]]).set_requires_grad(true);
        Self {
            model,
            logprobs: leaf(logprobs),
            entropy: entropy.map(leaf),
            scaled,
            targets,
            rows,
        }
    }

    /// The log-probabilities `[B, R]` of `batch`'s response tokens under `model` through LoRA
    /// adapter `adapter` (`None`: the base), without autograd and without dropout, the LM head
    /// [`Self::rows_for`] positions at a time: the sampler's log-probabilities recomputed, or a
    /// reference's.
    pub fn logprobs_without_grad(
        model: &Llama,
        batch: &TrainingBatch,
        adapter: Option<usize>,
    ) -> Result<Tensor, ModelError> {
        Self::logprobs_without_grad_in_chunks(model, batch, adapter, Self::rows_for(model))
    }

    /// [`Self::logprobs_without_grad`], the LM head `rows` positions at a time.
    pub fn logprobs_without_grad_in_chunks(
        model: &Llama,
        batch: &TrainingBatch,
        adapter: Option<usize>,
        rows: i64,
    ) -> Result<Tensor, ModelError> {
        tch::no_grad(|| {
            let hidden = batch.response_hidden(model, adapter, false)?;
            let scaled = flat(&batch.at_temperatures(&hidden));
            let targets = batch.targets.reshape([-1]);
            let (logprobs, _) = by_chunks(model, &scaled, &targets, false, rows);
            Ok(logprobs.view_as(&batch.targets))
        })
    }

    /// The response tokens' log-probabilities `[B, R]` f32.
    pub fn logprobs(&self) -> &Tensor {
        &self.logprobs
    }

    /// Their entropies `[B, R]` f32, when asked for.
    pub fn entropy(&self) -> Option<&Tensor> {
        self.entropy.as_ref()
    }

    /// After the loss's backward: carries the gradients it left on [`Self::logprobs`] and
    /// [`Self::entropy`] through the LM head, chunk by chunk, into its weight and down the
    /// hidden states' history.
    pub fn backward(self) {
        let gradient = |leaf: &Tensor| {
            let grad = leaf.grad();
            grad.defined().then(|| grad.reshape([-1]))
        };
        let logprobs_grad = gradient(&self.logprobs);
        let entropy_grad = self.entropy.as_ref().and_then(gradient);
        if logprobs_grad.is_none() && entropy_grad.is_none() {
            return;
        }
        let detached = self.scaled.detach();
        let mut upstream = Vec::new();
        for (start, len) in chunks(detached.size()[0], self.rows) {
            let input = detached
                .narrow(0, start, len)
                .detach()
                .set_requires_grad(true);
            let (chosen, entropy) = chunk_logprobs(
                self.model,
                &input,
                &self.targets.narrow(0, start, len),
                entropy_grad.is_some(),
            );
            // Its gradient with respect to the chunk's log-probabilities (and entropies) is
            // what the loss left on them.
            let terms = [(Some(chosen), &logprobs_grad), (entropy, &entropy_grad)];
            let surrogate = terms
                .into_iter()
                .filter_map(|(values, grad)| {
                    Some(values?.dot(&grad.as_ref()?.narrow(0, start, len)))
                })
                .reduce(|a, b| a + b);
            if let Some(surrogate) = surrogate {
                surrogate.backward();
            }
            upstream.push(input.grad());
        }
        let upstream = Tensor::cat(&upstream, 0);
        self.scaled
            .reshape([-1])
            .dot(&upstream.reshape([-1]))
            .backward();
    }
}

/// `[B, R, hidden]` as `[B·R, hidden]`, a position a row.
fn flat(hidden: &Tensor) -> Tensor {
    hidden.reshape([-1, hidden.size()[2]])
}

/// The log-probabilities `[N]` of `targets` `[N]` (and their entropies) from `hidden`
/// `[N, hidden]`, `rows` positions at a time, without autograd history. With autograd enabled
/// each chunk runs as the backward will recompute it (on the same kernels), its history let go
/// at once.
fn by_chunks(
    model: &Llama,
    hidden: &Tensor,
    targets: &Tensor,
    with_entropy: bool,
    rows: i64,
) -> (Tensor, Option<Tensor>) {
    let detached = hidden.detach();
    let (mut logprobs, mut entropies) = (Vec::new(), Vec::new());
    for (start, len) in chunks(detached.size()[0], rows) {
        let (chosen, entropy) = chunk_logprobs(
            model,
            &detached.narrow(0, start, len),
            &targets.narrow(0, start, len),
            with_entropy,
        );
        logprobs.push(chosen.detach());
        entropies.extend(entropy.as_ref().map(Tensor::detach));
    }
    let entropy = with_entropy.then(|| Tensor::cat(&entropies, 0));
    (Tensor::cat(&logprobs, 0), entropy)
}

/// The log-probabilities of a chunk's `targets` (and their entropies) from its `hidden` states
/// `[rows, hidden]`, with autograd.
fn chunk_logprobs(
    model: &Llama,
    hidden: &Tensor,
    targets: &Tensor,
    with_entropy: bool,
) -> (Tensor, Option<Tensor>) {
    target_logprobs(&model.logits(hidden), targets, with_entropy)
}

/// `(start, length)` of each chunk of at most `rows` of `total` positions.
fn chunks(total: i64, rows: i64) -> impl Iterator<Item = (i64, i64)> {
    let rows = rows.max(1);
    (0..total)
        .step_by(rows as usize)
        .map(move |start| (start, rows.min(total - start)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_position_once_the_last_one_partial() {
        let all = |total, rows| chunks(total, rows).collect::<Vec<_>>();
        assert_eq!(all(10, 4), [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(all(8, 4), [(0, 4), (4, 4)]);
        assert_eq!(
            all(3, 0),
            [(0, 1), (1, 1), (2, 1)],
            "at least one row a chunk"
        );
        assert!(all(0, 4).is_empty());
    }
}
