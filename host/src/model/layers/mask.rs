//! [`AttentionContext`]: where each new token sits (its RoPE position) and what it may attend to.

use tch::{Kind, Tensor};

/// The positions and attention mask of one forward pass, shared by every layer.
///
/// Cache slot `s` is the same column for the whole batch, while a sequence's RoPE positions
/// count only its real (unpadded) tokens, so padding changes nothing about a sequence's output:
/// left padding for prompts and generation, right padding for the responses that continue a
/// [`super::PromptPrefix`].
#[derive(Debug)]
pub struct AttentionContext {
    /// RoPE position of every new token, `[B, T]` int64.
    pub positions: Tensor,
    /// Which keys each new token attends to, `[B, 1, T, S]` bool (true = attend), where the
    /// `S` keys are the cache slots `0..offset + T`.
    pub mask: Tensor,
    /// The cache slot of the first new token (unused when the slot is held on the device).
    pub offset: i64,
    /// Rows whose first cache slots another row holds too (see [`SharedCacheRows`]).
    pub shared: Option<SharedCacheRows>,
}

/// Rows of a cache whose first `slots` slots hold the same keys and values as another row's:
/// the sampled continuations of one prompt, prefilled once and copied to each. A decode
/// step's attention may read those slots from that one row for all of them, so the prompt's
/// keys and values come from memory once per step instead of once per sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedCacheRows {
    /// The slots shared, from the first.
    pub slots: usize,
    /// Per row, the row whose copy of the shared slots to read (the row itself when no other
    /// row shares them).
    pub source: Vec<usize>,
}

impl AttentionContext {
    /// The context of `T` new tokens at cache slots `offset..offset + T`.
    ///
    /// `key_valid` `[B, offset + T]` (bool) marks the real tokens among all slots so far;
    /// `seen` `[B]` (int64) counts the real tokens before `offset` and `new_valid` `[B, T]`
    /// marks the real new ones. A token attends to the real tokens at or before its slot, and
    /// always to itself, so that padding rows stay finite.
    pub fn new(key_valid: &Tensor, seen: &Tensor, new_valid: &Tensor, offset: i64) -> Self {
        let t = new_valid.size()[1];
        let device = key_valid.device();
        let positions = (seen.unsqueeze(1) + new_valid.to_kind(Kind::Int64).cumsum(1, Kind::Int64)
            - 1)
        .clamp_min(0);
        let total = offset + t;
        let query_slots = Tensor::arange_start(offset, total, (Kind::Int64, device)).unsqueeze(1);
        let key_slots = Tensor::arange(total, (Kind::Int64, device)).unsqueeze(0);
        let causal = key_slots.le_tensor(&query_slots);
        let itself = key_slots.eq_tensor(&query_slots);
        let mask = causal
            .logical_and(&key_valid.unsqueeze(1).unsqueeze(1))
            .logical_or(&itself);
        Self {
            positions,
            mask,
            offset,
            shared: None,
        }
    }

    /// The context of one new token per row at a cache slot the device holds (see
    /// [`super::KvCache::hold_slot_on_device`]): `key_valid` `[B, S]` marks the real tokens of
    /// all `S` cache slots, the new one included and none after it, and `seen` `[B]` counts
    /// each row's real tokens before it. The same as [`Self::new`] over the slots filled so
    /// far, computed from device tensors only.
    pub(crate) fn at_held_slot(key_valid: &Tensor, seen: &Tensor) -> Self {
        let size = key_valid.size();
        Self {
            positions: seen.unsqueeze(1),
            mask: key_valid.view([size[0], 1, 1, size[1]]),
            offset: 0,
            shared: None,
        }
    }

    /// The context of a whole batch with no cache: `valid` `[B, T]` marks real tokens.
    pub fn full(valid: &Tensor) -> Self {
        let valid = valid.to_kind(Kind::Bool);
        let b = valid.size()[0];
        let seen = Tensor::zeros([b], (Kind::Int64, valid.device()));
        Self::new(&valid, &seen, &valid, 0)
    }
}
