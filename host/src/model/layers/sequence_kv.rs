//! [`SequenceKv`]: one sequence's keys and values, taken out of a [`super::KvCache`] to be
//! reused by a later prompt that begins with the same tokens.

use tch::Tensor;

/// Every layer's keys and values `[kv_heads, n, head_dim]` of one sequence's `n` tokens, in
/// order, padding left out.
#[derive(Debug)]
pub struct SequenceKv {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
}

impl SequenceKv {
    /// The keys and values of each layer, `[kv_heads, n, head_dim]` alike.
    pub(crate) fn new(keys: Vec<Tensor>, values: Vec<Tensor>) -> Self {
        Self { keys, values }
    }

    /// The number of tokens `n`.
    pub fn len(&self) -> usize {
        self.keys.first().map_or(0, |k| k.size()[1] as usize)
    }

    /// Whether it holds no token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes its tensors hold.
    pub fn bytes(&self) -> usize {
        (self.keys.iter().chain(&self.values))
            .map(|t| t.numel() * t.kind().elt_size_in_bytes())
            .sum()
    }

    /// The first `tokens` tokens' keys and values (views, nothing copied).
    pub fn prefix(&self, tokens: usize) -> Self {
        let take = |t: &Tensor| t.narrow(1, 0, tokens as i64);
        Self {
            keys: self.keys.iter().map(take).collect(),
            values: self.values.iter().map(take).collect(),
        }
    }

    /// Layer `layer`'s keys and values.
    pub(crate) fn layer(&self, layer: usize) -> (&Tensor, &Tensor) {
        (&self.keys[layer], &self.values[layer])
    }
}
