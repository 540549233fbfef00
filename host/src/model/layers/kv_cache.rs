//! [`KvCache`]: preallocated keys and values of every layer, for incremental decoding.

use tch::{Device, Kind, Tensor};

use super::{AttentionContext, SequenceKv, SharedCacheRows};

/// Keys and values `[B, kv_heads, max_len, head_dim]` per layer, allocated once and filled
/// slot by slot with `narrow().copy_()`, plus which slots hold real tokens.
#[derive(Debug)]
pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    /// `[B, max_len]` bool: slots holding real (not padding) tokens.
    key_valid: Tensor,
    /// `[B]` int64: real tokens per sequence so far (the next token's RoPE position).
    seen: Tensor,
    /// `[1]` int64 on the cache's device once [`Self::hold_slot_on_device`] was called: the
    /// slot the next token is written to.
    slot: Option<Tensor>,
    len: i64,
    max_len: i64,
    /// Per row, which row of the cache as first filled it continues.
    origin: Vec<usize>,
    /// Rows of one origin, when two or more are left: they hold the same keys and values in
    /// their first slots (set by [`Self::retain`]).
    shared: Option<SharedCacheRows>,
}

impl KvCache {
    /// An empty cache of `layers` layers for `batch` sequences of up to `max_len` tokens.
    pub fn new(
        layers: usize,
        batch: i64,
        kv_heads: i64,
        head_dim: i64,
        max_len: i64,
        (kind, device): (Kind, Device),
    ) -> Self {
        let shape = [batch, kv_heads, max_len, head_dim];
        let alloc = || Tensor::zeros(shape, (kind, device));
        Self {
            keys: (0..layers).map(|_| alloc()).collect(),
            values: (0..layers).map(|_| alloc()).collect(),
            key_valid: Tensor::zeros([batch, max_len], (Kind::Bool, device)),
            seen: Tensor::zeros([batch], (Kind::Int64, device)),
            slot: None,
            len: 0,
            max_len,
            origin: (0..usize::try_from(batch).unwrap_or(0)).collect(),
            shared: None,
        }
    }

    /// The number of sequences.
    pub fn batch(&self) -> i64 {
        self.seen.size()[0]
    }

    /// Slots filled so far (the same for every sequence; padding included).
    pub fn len(&self) -> i64 {
        self.len
    }

    /// Whether nothing has been cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of slots allocated.
    pub fn max_len(&self) -> i64 {
        self.max_len
    }

    /// From now on, decode steps (one token per row) write at a slot the device holds and
    /// advances, and attend to all `max_len` slots through the mask: a step's operations, shapes
    /// and host-side arguments are then the same at every step, so a step can be captured once
    /// and replayed as a CUDA graph ([`crate::engine::decode_steps`]). Each step reads the whole
    /// cache instead of the slots filled so far.
    pub fn hold_slot_on_device(&mut self) {
        let device = self.seen.device();
        self.slot = Some(Tensor::from_slice(&[self.len]).to_device(device));
    }

    /// Whether the slot is held on the device (see [`Self::hold_slot_on_device`]).
    pub fn holds_slot_on_device(&self) -> bool {
        self.slot.is_some()
    }

    /// Records a step that ran without this cache's host side (a CUDA graph's replay wrote the
    /// slot and advanced it on the device).
    pub(crate) fn note_replayed_step(&mut self) {
        self.len += 1;
    }

    /// Keeps only the sequences at `rows` (indices into the batch, in the order given; an
    /// index may repeat), dropping the others. Lets finished sequences stop costing compute,
    /// and a prompt prefilled once continue as several sequences, which then share its slots
    /// (see [`SharedCacheRows`]).
    ///
    /// When the batch shrinks, the kept rows' filled slots are moved to the front of each
    /// layer's tensor, which is then viewed as `B'` rows: no new cache is allocated. (Allocating
    /// one per call made glibc keep every replaced 24 MiB tensor resident — its mmap threshold
    /// rises when a mapped block is freed — and batch-64 generation peaked at 1.28 × weights +
    /// cache.) When it grows, the rows are copied into a new cache of the same `max_len`.
    pub fn retain(&mut self, rows: &[usize]) {
        let used = self.len;
        let device = self.seen.device();
        let index = row_index(rows, device);
        let kept_rows = index.size()[0];
        for cache in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let kept = if kept_rows <= cache.size()[0] {
                cache.narrow(0, 0, kept_rows)
            } else {
                let mut size = cache.size();
                size[0] = kept_rows;
                Tensor::empty(size.as_slice(), (cache.kind(), cache.device()))
            };
            if used > 0 {
                // `index_select` copies before anything is overwritten, so moving rows within
                // the same tensor is safe.
                kept.narrow(2, 0, used)
                    .copy_(&cache.narrow(2, 0, used).index_select(0, &index));
            }
            *cache = kept;
        }
        self.key_valid = self.key_valid.index_select(0, &index);
        self.seen = self.seen.index_select(0, &index);
        // Copies made now hold all slots so far alike; rows of one origin kept from before
        // hold their shared ones alike (and no more, once each has decoded).
        let slots = self
            .shared
            .as_ref()
            .map_or(usize::try_from(used).unwrap_or(0), |shared| shared.slots);
        self.origin = if slots == 0 {
            // Copies of empty rows share nothing, now or later.
            (0..rows.len()).collect()
        } else {
            rows.iter().map(|&r| self.origin[r]).collect()
        };
        self.shared = shared_rows(&self.origin, slots);
    }

    /// Bytes one token's keys and values take, over every layer.
    pub fn bytes_per_token(&self) -> usize {
        (self.keys.iter().chain(&self.values))
            .map(|t| {
                let size = t.size();
                (size[1] * size[3]) as usize * t.kind().elt_size_in_bytes()
            })
            .sum()
    }

    /// Row `row`'s keys and values of the real tokens cached so far, copied out in order.
    /// Reads which slots hold them from the device.
    pub fn sequence(&self, row: usize) -> SequenceKv {
        let row = row as i64;
        let slots = (self.key_valid.get(row).narrow(0, 0, self.len))
            .nonzero()
            .squeeze_dim(1);
        let take = |t: &Tensor| t.get(row).index_select(1, &slots);
        SequenceKv::new(
            self.keys.iter().map(take).collect(),
            self.values.iter().map(take).collect(),
        )
    }

    /// Fills an empty cache's first slots with `prefixes` (per row, the keys and values of the
    /// tokens its sequence begins with, or `None`), each ending at the same slot with padding
    /// before it, so that the tokens prefilled next continue them.
    pub(crate) fn start_from(&mut self, prefixes: &[Option<SequenceKv>]) {
        let len = prefixes.iter().flatten().map(SequenceKv::len).max();
        let len = len.unwrap_or(0) as i64;
        if self.len != 0 || len == 0 {
            return;
        }
        let mut seen = vec![0i64; prefixes.len()];
        for (row, prefix) in prefixes.iter().enumerate() {
            let Some(prefix) = prefix else { continue };
            let n = prefix.len() as i64;
            seen[row] = n;
            let slots = |t: &Tensor| t.get(row as i64).narrow(1, len - n, n);
            for layer in 0..self.keys.len() {
                let (keys, values) = prefix.layer(layer);
                slots(&self.keys[layer]).copy_(keys);
                slots(&self.values[layer]).copy_(values);
            }
            let _ = self
                .key_valid
                .get(row as i64)
                .narrow(0, len - n, n)
                .fill_(1);
        }
        self.seen = Tensor::from_slice(&seen).to_device(self.seen.device());
        self.len = len;
    }

    /// Slots at the front that hold no real token in any of the rows `rows`: what
    /// [`Self::admit`] may drop once only those rows are kept. Reads one number from the device.
    pub fn leading_padding(&self, rows: &[usize]) -> i64 {
        if self.len == 0 || rows.is_empty() {
            return 0;
        }
        let index = row_index(rows, self.seen.device());
        let any = self
            .key_valid
            .narrow(1, 0, self.len)
            .index_select(0, &index)
            .any_dim(0, false)
            .to_kind(Kind::Int64);
        let held = Vec::<i64>::try_from(any).unwrap_or_default();
        held.iter().position(|&h| h != 0).unwrap_or(held.len()) as i64
    }

    /// Keeps the rows `keep` (their slots after the first `start`, which none of them uses) and
    /// adds the rows of `joining` at `joining_rows` (indices into that cache; repeats copy a
    /// row), all in a new cache of `len` slots filled and `max_len` allocated. Each row's
    /// tokens end at slot `len`, padding before them: the same right alignment a batch prefilled
    /// together has, so a decode step treats old and new rows alike. What lets requests join a
    /// batch between decode steps (continuous batching); the caller checks that every row's
    /// tokens fit (`len` at least every kept row's span and every joining prompt, `max_len` room
    /// for their new tokens). The slot must not be held on the device.
    pub fn admit(
        &mut self,
        (keep, start): (&[usize], i64),
        (joining, joining_rows): (&KvCache, &[usize]),
        (len, max_len): (i64, i64),
    ) {
        let device = self.seen.device();
        // Rows taken as they are need no gather.
        let rows_of = |rows: &[usize], batch: i64| {
            let whole = rows.len() as i64 == batch && rows.iter().enumerate().all(|(i, &r)| i == r);
            (!whole).then(|| row_index(rows, device))
        };
        let kept = rows_of(keep, self.batch());
        let joined = rows_of(joining_rows, joining.batch());
        let span = self.len - start;
        let (k, j) = (keep.len() as i64, joining_rows.len() as i64);
        // Both parts right-aligned at `len`: the kept rows' slots `start..self.len` and the
        // joining rows' `0..joining.len`, zeros before them. Slots from `len` on are written
        // before they are read, so they are left as allocated.
        let place = |old: &Tensor, new: &Tensor| {
            let mut size = old.size();
            size[0] = k + j;
            size[2] = max_len;
            let merged = Tensor::empty(size.as_slice(), (old.kind(), old.device()));
            let (old, new) = (old.narrow(2, start, span), new.narrow(2, 0, joining.len));
            right_aligned(&merged.narrow(0, 0, k), &old, kept.as_ref(), 2, len);
            right_aligned(&merged.narrow(0, k, j), &new, joined.as_ref(), 2, len);
            merged
        };
        for (mine, theirs) in (self.keys.iter_mut()).zip(&joining.keys) {
            *mine = place(mine, theirs);
        }
        for (mine, theirs) in (self.values.iter_mut()).zip(&joining.values) {
            *mine = place(mine, theirs);
        }
        let valid = Tensor::zeros([k + j, max_len], (Kind::Bool, device));
        let old_valid = self.key_valid.narrow(1, start, span);
        let new_valid = joining.key_valid.narrow(1, 0, joining.len);
        right_aligned(&valid.narrow(0, 0, k), &old_valid, kept.as_ref(), 1, len);
        right_aligned(&valid.narrow(0, k, j), &new_valid, joined.as_ref(), 1, len);
        self.key_valid = valid;
        let pick = |seen: &Tensor, rows: Option<&Tensor>| match rows {
            Some(rows) => seen.index_select(0, rows),
            None => seen.shallow_clone(),
        };
        self.seen = Tensor::cat(
            &[
                pick(&self.seen, kept.as_ref()),
                pick(&joining.seen, joined.as_ref()),
            ],
            0,
        );
        // The kept rows' shared slots moved by `len - self.len`; the joining rows share none
        // (each is its own origin), nor do kept rows once no shared slot is left.
        let shift = len - self.len;
        let slots = self
            .shared
            .as_ref()
            .map_or(0, |shared| (shared.slots as i64 + shift).max(0) as usize);
        let fresh = self.origin.iter().max().map_or(0, |&most| most + 1);
        self.origin = if slots == 0 {
            (0..keep.len() + joining_rows.len()).collect()
        } else {
            (keep.iter().map(|&r| self.origin[r]))
                .chain(fresh..fresh + joining_rows.len())
                .collect()
        };
        self.shared = shared_rows(&self.origin, slots);
        self.len = len;
        self.max_len = max_len;
    }

    /// Whether `batch` sequences of `tokens` new tokens each fit: `Err` says why not. With the
    /// slot held on the device a step takes one token per sequence.
    pub(crate) fn check_room(&self, batch: i64, tokens: i64) -> Result<(), String> {
        if self.batch() != batch || self.len + tokens > self.max_len {
            return Err(format!(
                "{batch} sequences of {tokens} tokens do not fit a cache of {} sequences holding \
                 {} of {} tokens",
                self.batch(),
                self.len,
                self.max_len
            ));
        }
        if self.slot.is_some() && tokens != 1 {
            return Err(format!(
                "{tokens} tokens per sequence: a cache whose slot the device holds takes one at \
                 a time"
            ));
        }
        Ok(())
    }

    /// Marks the next `valid.size()[1]` slots as holding tokens where `valid` `[B, T]` is
    /// true, and returns the new tokens' positions and mask over the slots so far (with the slot
    /// held on the device: over all `max_len` slots, unfilled ones masked). The caller checks
    /// [`Self::check_room`] first and [`Self::advance`]s after the forward pass.
    pub(crate) fn reserve(&mut self, valid: &Tensor) -> AttentionContext {
        if let Some(slot) = &self.slot {
            let _ = self.key_valid.index_copy_(1, slot, valid);
            return AttentionContext::at_held_slot(&self.key_valid, &self.seen);
        }
        let t = valid.size()[1];
        self.key_valid.narrow(1, self.len, t).copy_(valid);
        AttentionContext {
            shared: self.shared.clone(),
            ..AttentionContext::new(
                &self.key_valid.narrow(1, 0, self.len + t),
                &self.seen,
                valid,
                self.len,
            )
        }
    }

    /// Writes layer `layer`'s new `keys`/`values` `[B, kv_heads, T, head_dim]` at slot
    /// `offset` and returns all of the layer's keys and values so far (with the slot held on
    /// the device: at that slot, and all `max_len` slots returned).
    pub(crate) fn store(
        &mut self,
        layer: usize,
        offset: i64,
        keys: &Tensor,
        values: &Tensor,
    ) -> (Tensor, Tensor) {
        if let Some(slot) = &self.slot {
            let _ = self.keys[layer].index_copy_(2, slot, keys);
            let _ = self.values[layer].index_copy_(2, slot, values);
            return (
                self.keys[layer].shallow_clone(),
                self.values[layer].shallow_clone(),
            );
        }
        let t = keys.size()[2];
        self.keys[layer].narrow(2, offset, t).copy_(keys);
        self.values[layer].narrow(2, offset, t).copy_(values);
        (
            self.keys[layer].narrow(2, 0, offset + t),
            self.values[layer].narrow(2, 0, offset + t),
        )
    }

    /// Commits a forward pass of `valid` `[B, T]` new tokens: advances the length and the
    /// per-sequence token counts.
    pub(crate) fn advance(&mut self, valid: &Tensor) {
        self.len += valid.size()[1];
        self.seen += valid
            .to_kind(Kind::Int64)
            .sum_dim_intlist(1, false, Kind::Int64);
        if let Some(slot) = &mut self.slot {
            *slot += 1;
        }
    }
}

/// `rows` as an int64 index tensor on `device`, for `index_select` along the batch.
pub(crate) fn row_index(rows: &[usize], device: Device) -> Tensor {
    Tensor::from_slice(&rows.iter().map(|&r| r as i64).collect::<Vec<_>>()).to_device(device)
}

/// Writes the slots of `from` (along `axis`; its rows `rows`, or all) into `part` so that they
/// end at slot `len`, with zeros in the slots before them.
fn right_aligned(part: &Tensor, from: &Tensor, rows: Option<&Tensor>, axis: i64, len: i64) {
    if part.size()[0] == 0 {
        return;
    }
    let slots = from.size()[axis as usize];
    if len > slots {
        let _ = part.narrow(axis, 0, len - slots).zero_();
    }
    if slots > 0 {
        let mut target = part.narrow(axis, len - slots, slots);
        match rows {
            Some(rows) => target.copy_(&from.index_select(0, rows)),
            None => target.copy_(from),
        }
    }
}

/// The rows of `origin` that share an origin with an earlier row, each reading its first
/// `slots` slots from the first row of its origin; `None` when every origin has one row.
fn shared_rows(origin: &[usize], slots: usize) -> Option<SharedCacheRows> {
    let mut first = std::collections::HashMap::new();
    let source: Vec<usize> = (origin.iter().enumerate())
        .map(|(row, origin)| *first.entry(origin).or_insert(row))
        .collect();
    let shares = source.iter().enumerate().any(|(row, &from)| row != from);
    (shares && slots > 0).then_some(SharedCacheRows { slots, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prompt's copies share the slots filled when they were copied, each reading them from
    /// the first copy still in the batch; rows dropped later take nothing from the others.
    #[test]
    fn copies_of_a_row_share_its_slots_until_no_two_are_left() {
        let mut cache = KvCache::new(1, 2, 1, 16, 10, (Kind::Float, Device::Cpu));
        let prompt = Tensor::ones([2, 3], (Kind::Bool, Device::Cpu));
        let _ = cache.reserve(&prompt);
        cache.advance(&prompt);
        assert_eq!(cache.shared, None, "no copies yet");
        cache.retain(&[0, 0, 1, 1, 1]);
        let shared = |cache: &KvCache| cache.shared.clone().map(|s| (s.slots, s.source));
        assert_eq!(shared(&cache), Some((3, vec![0, 0, 2, 2, 2])));
        let step = Tensor::ones([5, 1], (Kind::Bool, Device::Cpu));
        let context = cache.reserve(&step);
        assert_eq!(context.shared.map(|s| s.source), Some(vec![0, 0, 2, 2, 2]));
        cache.advance(&step);
        // The first copy of each prompt finishes; the next one holds the slots.
        cache.retain(&[1, 3, 4]);
        assert_eq!(shared(&cache), Some((3, vec![0, 1, 1])));
        cache.retain(&[0, 2]);
        assert_eq!(shared(&cache), None, "one copy of each prompt");

        // Copies of rows holding nothing yet share nothing, then or after.
        let mut empty = KvCache::new(1, 1, 1, 16, 10, (Kind::Float, Device::Cpu));
        empty.retain(&[0, 0, 0]);
        let tokens = Tensor::ones([3, 2], (Kind::Bool, Device::Cpu));
        let _ = empty.reserve(&tokens);
        empty.advance(&tokens);
        empty.retain(&[0, 1]);
        assert_eq!(shared(&empty), None);
    }
}
