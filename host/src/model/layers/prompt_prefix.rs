//! [`PromptPrefix`]: the keys and values of prompts computed once, for the several sampled
//! responses that continue each of them in a training batch.

use tch::{Kind, Tensor};

use super::AttentionContext;

/// Every layer's keys and values `[G, kv_heads, P, head_dim]` of `G` left-padded prompts, kept
/// with their autograd history.
///
/// A GRPO group's `n` samples share their prompt. Training on them as `n` whole sequences puts
/// the prompt through the forward and backward passes `n` times; with a prefix it goes through
/// once and each response attends to (a gathered copy of) its keys and values, so the prompt's
/// gradient is the sum over the responses — the same as `n` separate passes, at a fraction of
/// the cost (the prompts were 8 × 108 of the 10,952 tokens of a GRPO iteration's update).
#[derive(Debug)]
pub struct PromptPrefix {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    /// `[G, P]` bool: real prompt tokens.
    valid: Tensor,
}

impl PromptPrefix {
    /// An empty prefix for prompts whose real tokens `valid` `[G, P]` marks; the prompt pass
    /// ([`super::Past::Record`]) fills it layer by layer.
    pub(crate) fn new(valid: &Tensor) -> Self {
        Self {
            valid: valid.to_kind(Kind::Bool),
            keys: Vec::new(),
            values: Vec::new(),
        }
    }

    /// The prompts' width `P` (padding included).
    pub(crate) fn width(&self) -> i64 {
        self.valid.size()[1]
    }

    /// The number of layers recorded.
    pub(crate) fn layers(&self) -> usize {
        self.keys.len()
    }

    /// The number of prompts `G`.
    pub(crate) fn prompts(&self) -> i64 {
        self.valid.size()[0]
    }

    /// Appends the next layer's keys and values.
    pub(crate) fn record(&mut self, keys: &Tensor, values: &Tensor) {
        self.keys.push(keys.shallow_clone());
        self.values.push(values.shallow_clone());
    }

    /// The context of new tokens `new_valid` `[B, T]` (real tokens first, right padding after)
    /// that continue prompts `rows` `[B]`: positions go on from each prompt's length, and a
    /// token attends to its prompt's real tokens and to the real new tokens up to itself.
    pub(crate) fn context(&self, rows: &Tensor, new_valid: &Tensor) -> AttentionContext {
        let prompt_valid = self.valid.index_select(0, rows);
        let prompt_lengths = prompt_valid.sum_dim_intlist(1, false, Kind::Int64);
        let key_valid = Tensor::cat(&[&prompt_valid, new_valid], 1);
        AttentionContext::new(&key_valid, &prompt_lengths, new_valid, self.width())
    }

    /// Layer `layer`'s keys and values for new tokens continuing prompts `rows`: each row's
    /// prompt keys followed by its new `keys` (and the same for values), `[B, kv_heads, P + T,
    /// head_dim]`.
    pub(crate) fn continue_with(
        &self,
        layer: usize,
        rows: &Tensor,
        keys: &Tensor,
        values: &Tensor,
    ) -> (Tensor, Tensor) {
        let join =
            |prefix: &Tensor, new: &Tensor| Tensor::cat(&[&prefix.index_select(0, rows), new], 2);
        (
            join(&self.keys[layer], keys),
            join(&self.values[layer], values),
        )
    }
}
