//! Activation checkpointing of the shared-prompt training forward: [`Llama::forward_checkpointed`]
//! keeps only each decoder layer's input, and [`Checkpoints::backward`] recomputes one layer at a
//! time from it to carry the gradient down, so a long response's per-layer activations
//! (attention weights, MLP intermediates) never all live at once.
//!
//! libtorch offers no `torch.utils.checkpoint`; this is its segment-wise form with one layer per
//! segment. A layer is a function of the prompts' and the responses' hidden states together (the
//! responses attend to the keys and values the prompts make in the same layer), so both streams
//! are kept and recomputed side by side. LoRA dropout draws its masks from libtorch's generator:
//! each layer reseeds it with the same value in the forward and in its recomputation, so both
//! draw the same masks.

use tch::{Kind, Tensor};

use super::{Ids, Llama};
use crate::model::error::ModelError;
use crate::model::layers::{AdapterRows, AttentionContext, Past, PromptPrefix, RotaryAngles};

/// What [`Llama::forward_checkpointed`] keeps for the backward pass: each layer's input, the
/// batch's token ids and attention contexts, and the seeds of its dropout draws.
pub struct Checkpoints<'a> {
    model: &'a Llama,
    batch: CheckpointedBatch<'a>,
    /// The input of each layer (the embeddings first), without autograd history.
    layer_inputs: Vec<Streams>,
    /// The last layer's output as autograd leaves: the loss's gradient reaches them first.
    top: Streams,
    /// Layer `l` reseeds libtorch's generator with `seed + l` before it runs.
    seed: i64,
}

/// The inputs of a checkpointed forward, checked.
struct CheckpointedBatch<'a> {
    prompt_ids: &'a Tensor,
    /// Real prompt tokens `[G, P]`.
    prompt_valid: Tensor,
    prompt_context: AttentionContext,
    /// RoPE angles of the prompt positions, gathered once for every layer and recomputation.
    prompt_angles: RotaryAngles,
    prompt_rows: AdapterRows,
    responses: Option<Continuations<'a>>,
}

/// The response side of a checkpointed batch.
struct Continuations<'a> {
    ids: &'a Tensor,
    /// The prompt each row continues `[B]`.
    prompts: &'a Tensor,
    context: AttentionContext,
    /// RoPE angles of the response positions.
    angles: RotaryAngles,
    rows: AdapterRows,
}

/// Hidden states of the prompts and (when there are any) the responses at one layer boundary.
struct Streams {
    prompts: Tensor,
    responses: Option<Tensor>,
}

impl Streams {
    /// The same values as new autograd leaves that collect their gradient.
    fn leaves(&self) -> Self {
        let leaf = |t: &Tensor| t.detach().set_requires_grad(true);
        Self {
            prompts: leaf(&self.prompts),
            responses: self.responses.as_ref().map(leaf),
        }
    }

    /// The same values without autograd history.
    fn detached(&self) -> Self {
        Self {
            prompts: self.prompts.detach(),
            responses: self.responses.as_ref().map(Tensor::detach),
        }
    }

    /// The gradients the leaves collected (zeros where nothing reached one).
    fn gradients(&self) -> Self {
        let gradient = |t: &Tensor| {
            let g = t.grad();
            if g.defined() {
                g.detach()
            } else {
                t.zeros_like()
            }
        };
        Self {
            prompts: gradient(&self.prompts),
            responses: self.responses.as_ref().map(gradient),
        }
    }

    /// `Σ self · weights` in f32: its gradient with respect to `self` is `weights`.
    fn dot(&self, weights: &Streams) -> Tensor {
        let dot = |a: &Tensor, b: &Tensor| (a * b).sum(Kind::Float);
        let mut total = dot(&self.prompts, &weights.prompts);
        if let (Some(a), Some(b)) = (&self.responses, &weights.responses) {
            total += dot(a, b);
        }
        total
    }
}

impl Llama {
    /// [`Self::forward_prompts`] followed by [`Self::forward_continuations`] (without
    /// responses when `responses` is `None`: `(ids [B, T], attention mask, prompt of each row
    /// [B], adapter rows)`), keeping only each layer's input: returns the final hidden states of
    /// the prompts `[G, P, hidden]` and of the responses `[B, T, hidden]`, and the
    /// [`Checkpoints`] whose [`Checkpoints::backward`] must run after the loss's own backward to
    /// carry its gradient into the layers.
    pub fn forward_checkpointed<'a>(
        &'a self,
        prompt_ids: &'a Tensor,
        prompt_mask: Option<&Tensor>,
        prompt_rows: AdapterRows,
        responses: Option<(&'a Tensor, Option<&Tensor>, &'a Tensor, AdapterRows)>,
    ) -> Result<(Tensor, Option<Tensor>, Checkpoints<'a>), ModelError> {
        let prompt_valid = self.checked_valid(prompt_ids, prompt_mask, &prompt_rows, Ids::Given)?;
        self.check_positions(prompt_valid.size()[1])?;
        // The embeddings' dtype, which the layers compute in.
        let kind = self.embed_tokens.kind();
        let responses = responses
            .map(|(ids, mask, prompts, rows)| {
                let valid = self.checked_valid(ids, mask, &rows, Ids::Given)?;
                self.check_positions(prompt_valid.size()[1] + valid.size()[1])?;
                let context = PromptPrefix::new(&prompt_valid).context(prompts, &valid);
                Ok::<_, ModelError>(Continuations {
                    ids,
                    prompts,
                    angles: self.rotary.angles(&context.positions, kind),
                    context,
                    rows,
                })
            })
            .transpose()?;
        let prompt_context = AttentionContext::full(&prompt_valid);
        let batch = CheckpointedBatch {
            prompt_ids,
            prompt_angles: self.rotary.angles(&prompt_context.positions, kind),
            prompt_context,
            prompt_valid,
            prompt_rows,
            responses,
        };
        let seed = Tensor::randint(i64::from(i32::MAX), [1], (Kind::Int64, tch::Device::Cpu))
            .int64_value(&[0]);
        let mut layer_inputs = vec![self.embed(&batch).detached()];
        for layer in 0..self.layers.len() {
            tch::manual_seed(seed + layer as i64);
            let output = self.layer_of_both(layer, &layer_inputs[layer], &batch);
            layer_inputs.push(output.detached());
        }
        let top = layer_inputs
            .pop()
            .map(|last| last.leaves())
            .ok_or_else(|| {
                ModelError::Input("a model without decoder layers cannot be trained".into())
            })?;
        let prompt_hidden = self.norm.forward(&top.prompts, &*self.backend);
        let response_hidden = top
            .responses
            .as_ref()
            .map(|r| self.norm.forward(r, &*self.backend));
        Ok((
            prompt_hidden,
            response_hidden,
            Checkpoints {
                model: self,
                batch,
                layer_inputs,
                top,
                seed,
            },
        ))
    }

    /// The token embeddings of both streams.
    fn embed(&self, batch: &CheckpointedBatch<'_>) -> Streams {
        let embed = |ids: &Tensor| Tensor::embedding(&self.embed_tokens, ids, -1, false, false);
        Streams {
            prompts: embed(batch.prompt_ids),
            responses: batch.responses.as_ref().map(|r| embed(r.ids)),
        }
    }

    /// Decoder layer `layer` over both streams: the prompts, recording their keys and values,
    /// then the responses attending to them.
    fn layer_of_both(
        &self,
        layer: usize,
        input: &Streams,
        batch: &CheckpointedBatch<'_>,
    ) -> Streams {
        let block = &self.layers[layer];
        let backend = &*self.backend;
        // A prefix of this one layer, so the layer reads it at index 0.
        let mut prefix = PromptPrefix::new(&batch.prompt_valid);
        let prompts = block.forward(
            &input.prompts,
            &batch.prompt_angles,
            &batch.prompt_context,
            (&mut Past::Record(&mut prefix), 0),
            &batch.prompt_rows,
            backend,
        );
        let responses = batch
            .responses
            .as_ref()
            .zip(input.responses.as_ref())
            .map(|(r, x)| {
                block.forward(
                    x,
                    &r.angles,
                    &r.context,
                    (&mut Past::Prefix(&prefix, r.prompts), 0),
                    &r.rows,
                    backend,
                )
            });
        Streams { prompts, responses }
    }
}

impl Checkpoints<'_> {
    /// Carries the gradient that the loss's backward left on the last layer's output down
    /// through every layer, recomputing each from its kept input, and into the embeddings:
    /// afterwards every weight holds the gradient a plain forward and backward would have given.
    pub fn backward(self) {
        let model = self.model;
        let mut upstream = self.top.gradients();
        for (layer, input) in self.layer_inputs.iter().enumerate().rev() {
            let input = input.leaves();
            tch::manual_seed(self.seed + layer as i64);
            let output = model.layer_of_both(layer, &input, &self.batch);
            output.dot(&upstream).backward();
            upstream = input.gradients();
        }
        // A frozen embedding (LoRA) has no gradient to receive.
        if model.embed_tokens.requires_grad() {
            model.embed(&self.batch).dot(&upstream).backward();
        }
    }
}
