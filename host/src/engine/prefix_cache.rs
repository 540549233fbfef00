//! [`PrefixCache`]: the keys and values of finished sequences, kept so that a later prompt that
//! begins with the same tokens — the next turn of a conversation, which resends the history, or
//! a system prompt many requests share — prefills only the tokens after them.

use crate::model::layers::SequenceKv;

/// Finished sequences' keys and values by adapter and tokens, within a budget of bytes; the
/// least recently used leave first. Entries hold the weights' keys and values: after a weight
/// update they are stale, and the owner calls [`Self::clear`] (or [`Self::forget_adapter`] when
/// an adapter's slot changes hands).
///
/// A lookup compares the prompt with every entry of its adapter, so it costs at most the tokens
/// cached; that is bounded by the budget.
#[derive(Debug)]
pub struct PrefixCache {
    budget: usize,
    bytes: usize,
    /// Counts lookups and insertions, to order entries by last use.
    clock: u64,
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    adapter: Option<usize>,
    tokens: Vec<i64>,
    kv: SequenceKv,
    bytes: usize,
    used: u64,
}

impl PrefixCache {
    /// An empty cache that keeps at most `budget` bytes of keys and values.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            bytes: 0,
            clock: 0,
            entries: Vec::new(),
        }
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The number of sequences held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The longest run of tokens, at most `limit`, that `prompt` shares from its start with a
    /// sequence held for `adapter`, and their keys and values (views); `None` when it shares
    /// none. The sequence counts as used.
    pub fn lookup(
        &mut self,
        adapter: Option<usize>,
        prompt: &[i64],
        limit: usize,
    ) -> Option<(usize, SequenceKv)> {
        let limit = limit.min(prompt.len());
        let (best, shared) = (self.entries.iter().enumerate())
            .filter(|(_, entry)| entry.adapter == adapter)
            .map(|(i, entry)| (i, common_prefix(&entry.tokens, &prompt[..limit])))
            .max_by_key(|&(i, shared)| (shared, std::cmp::Reverse(i)))?;
        if shared == 0 {
            return None;
        }
        self.clock += 1;
        let entry = &mut self.entries[best];
        entry.used = self.clock;
        Some((shared, entry.kv.prefix(shared)))
    }

    /// Whether [`Self::insert`] would keep a sequence of `tokens` taking `bytes` for `adapter`:
    /// not when it is larger than the whole budget or a sequence held already begins with it
    /// (which then counts as used). Lets the caller skip copying the keys and values out.
    pub fn wants(&mut self, adapter: Option<usize>, tokens: &[i64], bytes: usize) -> bool {
        if tokens.is_empty() || bytes > self.budget {
            return false;
        }
        self.clock += 1;
        let clock = self.clock;
        match (self.entries.iter_mut())
            .find(|entry| entry.adapter == adapter && entry.tokens.starts_with(tokens))
        {
            Some(covering) => {
                covering.used = clock;
                false
            }
            None => true,
        }
    }

    /// Keeps `kv`, the keys and values of `tokens`, for prompts through `adapter`. Sequences
    /// held for it that `tokens` begins with are dropped (the new one serves them), then the
    /// least recently used leave until the budget holds.
    pub fn insert(&mut self, adapter: Option<usize>, tokens: Vec<i64>, kv: SequenceKv) {
        if !self.wants(adapter, &tokens, kv.bytes()) || kv.len() != tokens.len() {
            return;
        }
        self.remove_where(|entry| entry.adapter == adapter && tokens.starts_with(&entry.tokens));
        let bytes = kv.bytes();
        self.bytes += bytes;
        self.entries.push(Entry {
            adapter,
            tokens,
            kv,
            bytes,
            used: self.clock,
        });
        while self.bytes > self.budget {
            let oldest = (self.entries.iter().enumerate())
                .min_by_key(|(_, entry)| entry.used)
                .map(|(i, _)| i);
            let Some(oldest) = oldest else { break };
            self.bytes -= self.entries.swap_remove(oldest).bytes;
        }
    }

    /// Drops everything (the weights changed).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Drops the sequences made through the adapter in slot `slot` (it was unloaded or
    /// replaced).
    pub fn forget_adapter(&mut self, slot: usize) {
        self.remove_where(|entry| entry.adapter == Some(slot));
    }

    fn remove_where(&mut self, gone: impl Fn(&Entry) -> bool) {
        let bytes = &mut self.bytes;
        self.entries.retain(|entry| {
            let drop = gone(entry);
            if drop {
                *bytes -= entry.bytes;
            }
            !drop
        });
    }
}

/// The number of leading tokens `a` and `b` share.
fn common_prefix(a: &[i64], b: &[i64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::*;

    /// Bytes per token of [`kv`]: 4 tensors of 2 heads × 4 dims of 4 bytes.
    const TOKEN: usize = 128;

    /// Keys and values of `tokens` tokens for two layers, each element equal to the token's
    /// index (so a view's contents show which tokens it holds).
    fn kv(tokens: usize) -> SequenceKv {
        let layer = || {
            Tensor::arange(tokens as i64, (Kind::Float, Device::Cpu))
                .view([1, -1, 1])
                .expand([2, tokens as i64, 4], false)
                .contiguous()
        };
        SequenceKv::new(vec![layer(), layer()], vec![layer(), layer()])
    }

    #[test]
    fn a_prompt_reuses_the_longest_prefix_held_for_its_adapter() {
        let mut cache = PrefixCache::new(1 << 20);
        cache.insert(None, vec![1, 2, 3, 4], kv(4));
        cache.insert(None, vec![1, 2, 9], kv(3));
        cache.insert(Some(0), vec![1, 2, 3, 4, 5, 6], kv(6));
        let hit = |cache: &mut PrefixCache, adapter, prompt: &[i64], limit| {
            cache.lookup(adapter, prompt, limit).map(|(n, kv)| {
                let (keys, _) = kv.layer(1);
                assert_eq!(keys.size(), [2, n as i64, 4]);
                assert_eq!(keys.double_value(&[0, n as i64 - 1, 3]), (n - 1) as f64);
                n
            })
        };
        assert_eq!(hit(&mut cache, None, &[1, 2, 3, 4, 5, 6, 7], 6), Some(4));
        assert_eq!(hit(&mut cache, None, &[1, 2, 9, 9], 3), Some(3));
        // The limit leaves the prompt's last token to be computed.
        assert_eq!(hit(&mut cache, None, &[1, 2, 3, 4], 3), Some(3));
        assert_eq!(hit(&mut cache, Some(0), &[1, 2, 3, 4, 5, 6, 7], 6), Some(6));
        assert_eq!(hit(&mut cache, Some(1), &[1, 2, 3], 2), None);
        assert_eq!(hit(&mut cache, None, &[7, 1, 2], 2), None);
    }

    #[test]
    fn a_longer_sequence_replaces_the_ones_it_begins_with_and_the_budget_holds() {
        let mut cache = PrefixCache::new(10 * TOKEN);
        cache.insert(None, vec![1, 2], kv(2));
        cache.insert(None, vec![1, 2, 3, 4], kv(4));
        assert_eq!(
            (cache.len(), cache.bytes()),
            (1, 4 * TOKEN),
            "[1, 2] is served by [1..4]"
        );
        assert!(!cache.wants(None, &[1, 2, 3], 3 * TOKEN), "held already");
        assert!(
            cache.wants(Some(0), &[1, 2, 3], 3 * TOKEN),
            "another adapter's"
        );
        assert!(
            !cache.wants(None, &[5; 11], 11 * TOKEN),
            "larger than the budget"
        );

        cache.insert(None, vec![5, 6, 7], kv(3));
        // [1..4] is used, so [5, 6, 7] is the least recently used when room is needed.
        assert!(cache.lookup(None, &[1, 2, 3, 4, 0], 4).is_some());
        cache.insert(None, vec![8, 9, 10, 11, 12], kv(5));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.bytes(), 9 * TOKEN);
        assert!(cache.lookup(None, &[5, 6, 7, 0], 3).is_none(), "evicted");
        assert!(cache.lookup(None, &[8, 9, 0], 2).is_some());

        cache.insert(Some(2), vec![1], kv(1));
        cache.forget_adapter(2);
        assert!(cache.lookup(Some(2), &[1, 0], 1).is_none());
        assert_eq!(cache.bytes(), 9 * TOKEN);
        cache.clear();
        assert!(cache.is_empty());
        assert_eq!(cache.bytes(), 0);
    }
}
