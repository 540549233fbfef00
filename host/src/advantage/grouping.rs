//! Assigns every sample of a batch to a dense statistics group and picks which samples supply a
//! score to their group (every call, or one per trajectory).
//!
//! Group keys are packed into a `u64` and looked up in a hash map with a cheap multiplicative
//! hasher behind a tiny cache of recent keys (neighbouring samples of a batch in rollout order
//! share a handful of keys), with no per-sample allocation.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::Sample;

/// Group of a padding sample: it belongs to no group.
pub(super) const NO_GROUP: u32 = u32::MAX;

/// What the statistics groups are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GroupBy {
    /// One group per prompt (`uid`): all agents share the statistics.
    Prompt,
    /// One group per (prompt, agent): each agent is normalised on its own.
    PromptAgent,
}

impl GroupBy {
    /// The scores Dr. MAS's outcome estimators (RLOO, REINFORCE++, pass@k) take under this
    /// grouping: one per trajectory when agents share the group, every call when each agent has
    /// its own (its `group_by_agent_id = true` keeps every call of the agent).
    pub(super) fn outcome_scores(self) -> Scores {
        match self {
            Self::Prompt => Scores::PerTrajectory,
            Self::PromptAgent => Scores::PerCall,
        }
    }

    fn key(self, sample: &Sample) -> u64 {
        match self {
            Self::Prompt => u64::from(sample.uid),
            Self::PromptAgent => (u64::from(sample.uid) << 16) | u64::from(sample.agent),
        }
    }
}

/// Which samples supply a score to their group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scores {
    /// Every call is one score (per-step statistics).
    PerCall,
    /// One score per trajectory within the group: the first call of that trajectory (in batch
    /// order) supplies it, however many calls the trajectory made (per-trajectory statistics).
    /// A trajectory is identified by (`uid`, `trajectory`).
    PerTrajectory,
}

/// The dense groups of a batch and the samples that score into them.
#[derive(Debug)]
pub(super) struct Grouping {
    /// Dense group index of each sample, [`NO_GROUP`] for padding.
    pub group: Vec<u32>,
    /// Indices of the samples whose reward is one score of their group, in batch order.
    pub scorers: Vec<u32>,
    /// Number of groups; group indices are `0..len`.
    pub len: usize,
}

impl Grouping {
    /// Groups `samples` by `by`, taking scores as `scores` says. Padding samples get
    /// [`NO_GROUP`] and never score.
    ///
    /// Every group has at least one scorer: the first sample that created it.
    pub(super) fn new(samples: &[Sample], by: GroupBy, scores: Scores) -> Self {
        assert!(
            u32::try_from(samples.len()).is_ok_and(|n| n < NO_GROUP),
            "a batch holds fewer than 2^32 - 1 samples"
        );
        let mut ids = CachedMap::default();
        // Per-trajectory scoring: dense index of each (uid, trajectory), and for each the set of
        // agents that already scored in it (a bit per agent below 64, a map entry above).
        let mut trajectories = CachedMap::default();
        let mut agents_scored: Vec<u64> = Vec::new();
        let mut wide_agents_scored = CachedMap::default();
        let mut group = Vec::with_capacity(samples.len());
        let mut scorers = Vec::with_capacity(samples.len());
        for (i, sample) in samples.iter().enumerate() {
            if sample.padding {
                group.push(NO_GROUP);
                continue;
            }
            let next = ids.len() as u32;
            let (id, _) = ids.get_or_insert(by.key(sample), next);
            group.push(id);
            let scores_now = match scores {
                Scores::PerCall => true,
                Scores::PerTrajectory => {
                    let key = (u64::from(sample.uid) << 32) | u64::from(sample.trajectory);
                    let next = trajectories.len() as u32;
                    let (t, new) = trajectories.get_or_insert(key, next);
                    if new {
                        agents_scored.push(0);
                    }
                    match (by, 1u64.checked_shl(u32::from(sample.agent))) {
                        (GroupBy::Prompt, _) => new,
                        (GroupBy::PromptAgent, Some(bit)) => {
                            let scored = &mut agents_scored[t as usize];
                            let first = *scored & bit == 0;
                            *scored |= bit;
                            first
                        }
                        (GroupBy::PromptAgent, None) => {
                            let key = (u64::from(t) << 16) | u64::from(sample.agent);
                            wide_agents_scored.get_or_insert(key, 0).1
                        }
                    }
                }
            };
            if scores_now {
                scorers.push(i as u32);
            }
        }
        Self {
            group,
            scorers,
            len: ids.len(),
        }
    }
}

/// Hash map keyed by packed integer keys.
type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

/// Number of slots of [`CachedMap`]'s cache: enough for the agents × calls of the few
/// trajectories a batch in rollout order interleaves, small enough to stay in L1.
const RECENT: usize = 64;

/// A `u64 → u32` map with a direct-mapped cache of recently used keys in front, so the
/// interleaved keys of neighbouring samples (the agents of one prompt group, the calls of one
/// trajectory) rarely reach the hash table. Values must be below [`CachedMap::FREE`].
#[derive(Debug)]
pub(super) struct CachedMap {
    map: KeyMap<u32>,
    /// `(key, value)` slots; a value of [`CachedMap::FREE`] marks a free slot.
    recent: Box<[(u64, u32); RECENT]>,
}

impl Default for CachedMap {
    fn default() -> Self {
        Self {
            map: KeyMap::default(),
            recent: Box::new([(0, Self::FREE); RECENT]),
        }
    }
}

impl CachedMap {
    /// Never a value: values are dense indices of a batch, which holds fewer than 2^32 − 1
    /// samples.
    const FREE: u32 = u32::MAX;

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// The value of `key`, inserting `value` if the key is new; `true` when it was inserted.
    pub(super) fn get_or_insert(&mut self, key: u64, value: u32) -> (u32, bool) {
        let mut hasher = KeyHasher::default();
        hasher.write_u64(key);
        let slot = &mut self.recent[(hasher.finish() >> 58) as usize % RECENT];
        if slot.0 == key && slot.1 != Self::FREE {
            return (slot.1, false);
        }
        let mut inserted = false;
        let found = *self.map.entry(key).or_insert_with(|| {
            inserted = true;
            value
        });
        *slot = (key, found);
        (found, inserted)
    }
}

/// Folded-multiply hasher for `u64` keys: one 64×64→128-bit multiply whose halves are xored,
/// which spreads both the high and the low key bits over the whole hash (unlike SipHash it is
/// not DoS-resistant, which batch ids do not need).
#[derive(Debug, Default, Clone, Copy)]
struct KeyHasher(u64);

impl KeyHasher {
    const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

    fn mix(&mut self, word: u64) {
        let product = u128::from(self.0 ^ word) * u128::from(Self::MULTIPLIER);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.mix(word);
    }
}
