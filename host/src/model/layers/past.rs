//! [`Past`]: where a forward pass finds, or leaves, the keys and values of earlier tokens.

use tch::Tensor;

use super::{KvCache, PromptPrefix};

/// What attention does with the keys and values beyond the new tokens' own.
#[derive(Debug)]
pub enum Past<'a> {
    /// Nothing before: the new tokens are whole sequences.
    None,
    /// Generation: the cached tokens come first, and the new ones are added to the cache.
    Cache(&'a mut KvCache),
    /// Training, first pass: the new tokens are prompts whose keys and values are recorded,
    /// with autograd, for [`Past::Prefix`].
    Record(&'a mut PromptPrefix),
    /// Training, second pass: row `i` of the new tokens continues prompt `rows[i]` of the
    /// prefix (`rows` `[B]` int64), so a prompt several responses share runs through the
    /// network once and its gradient sums theirs.
    Prefix(&'a PromptPrefix, &'a Tensor),
}

impl Past<'_> {
    /// Layer `layer`'s keys and values to attend to, given the new tokens' `keys`/`values`
    /// `[B, kv_heads, T, head_dim]` at slot `offset` (recording or caching them on the way).
    pub(crate) fn keys_values(
        &mut self,
        layer: usize,
        offset: i64,
        keys: Tensor,
        values: Tensor,
    ) -> (Tensor, Tensor) {
        match self {
            Past::None => (keys, values),
            Past::Cache(cache) => cache.store(layer, offset, &keys, &values),
            Past::Record(prefix) => {
                prefix.record(&keys, &values);
                (keys, values)
            }
            Past::Prefix(prefix, rows) => prefix.continue_with(layer, rows, &keys, &values),
        }
    }
}
