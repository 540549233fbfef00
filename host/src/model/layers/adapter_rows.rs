//! [`AdapterRows`]: which LoRA adapter each row of a batch goes through, so one batch can mix
//! agents that own different adapters of one base model.

use tch::{Device, Tensor};

/// How a forward pass applies adapters, worked out once and shared by every projection.
#[derive(Debug)]
pub enum Routing {
    /// No row uses an adapter: the base model.
    Base,
    /// Every row uses this adapter: two plain matmuls per projection.
    One(usize),
    /// Rows use different adapters (or none): each row's `A` and `B` are gathered for a
    /// batched matmul. Measured against grouping rows per adapter (an `index_select` and an
    /// `index_add` per adapter present) at a decode step of batch 64 over 4 adapters, gathering
    /// took about half the time (docs/results.md): fewer, larger operations. Only the adapters
    /// rows use are gathered from, so the others get no gradient in training.
    Mixed {
        /// The adapters some row uses, ascending.
        used: Vec<usize>,
        /// Each row's adapter as a position in `used`, `[B]` int64 (0 for rows without one).
        index: Tensor,
        /// Which rows use an adapter, `[B]` bool; `None` when all do.
        present: Option<Tensor>,
    },
}

/// The adapter ("slot") of every row of a batch, `None` for the base model alone.
#[derive(Debug)]
pub struct AdapterRows {
    slots: Vec<Option<usize>>,
    routing: Routing,
    training: bool,
    device: Device,
}

impl AdapterRows {
    /// Every row through the base model alone (no adapter).
    pub fn base() -> Self {
        Self {
            slots: Vec::new(),
            routing: Routing::Base,
            training: false,
            device: Device::Cpu,
        }
    }

    /// Row `i` through adapter `slots[i]` (`None`: the base model), indices on `device`.
    /// In `training`, LoRA dropout is applied.
    pub fn new(slots: &[Option<usize>], device: Device, training: bool) -> Self {
        let first = slots.first().copied().flatten();
        let routing = if slots.iter().all(Option::is_none) {
            Routing::Base
        } else if let Some(slot) = first.filter(|&s| slots.iter().all(|&o| o == Some(s))) {
            Routing::One(slot)
        } else {
            let mut used: Vec<usize> = slots.iter().flatten().copied().collect();
            used.sort_unstable();
            used.dedup();
            let position = |slot: usize| used.binary_search(&slot).unwrap_or(0) as i64;
            let index: Vec<i64> = slots.iter().map(|s| s.map_or(0, position)).collect();
            let present: Vec<bool> = slots.iter().map(Option::is_some).collect();
            Routing::Mixed {
                used,
                index: Tensor::from_slice(&index).to_device(device),
                present: present
                    .contains(&false)
                    .then(|| Tensor::from_slice(&present).to_device(device)),
            }
        };
        Self {
            slots: slots.to_vec(),
            routing,
            training,
            device,
        }
    }

    /// Whether no row uses an adapter.
    pub fn is_base(&self) -> bool {
        matches!(self.routing, Routing::Base)
    }

    /// Whether LoRA dropout applies (a training forward).
    pub fn training(&self) -> bool {
        self.training
    }

    /// How the projections apply the adapters.
    pub fn routing(&self) -> &Routing {
        &self.routing
    }

    /// The adapter of every row (empty for [`Self::base`]).
    pub fn slots(&self) -> &[Option<usize>] {
        &self.slots
    }

    /// The rows `rows` (indices into this batch, in that order, repeats allowed): what a
    /// KV cache that kept those rows ([`super::KvCache::retain`]) needs.
    pub fn select(&self, rows: &[usize]) -> Self {
        if self.is_base() {
            return Self::base();
        }
        let slots: Vec<Option<usize>> = rows.iter().map(|&r| self.slots[r]).collect();
        Self::new(&slots, self.device, self.training)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    fn describe(rows: &AdapterRows) -> String {
        let list = |t: &Tensor| format!("{:?}", Vec::<i64>::try_from(t.to_kind(Kind::Int64)).ok());
        match rows.routing() {
            Routing::Base => "base".to_owned(),
            Routing::One(slot) => format!("one {slot}"),
            Routing::Mixed {
                used,
                index,
                present,
            } => {
                format!(
                    "mixed {used:?} {} {}",
                    list(index),
                    present.as_ref().map_or("all".into(), list)
                )
            }
        }
    }

    #[test]
    fn routes_by_what_the_rows_use() {
        let mixed = AdapterRows::new(&[Some(1), None, Some(0), Some(1)], Device::Cpu, false);
        assert_eq!(
            describe(&mixed),
            "mixed [0, 1] Some([1, 0, 0, 1]) Some([1, 0, 1, 1])"
        );
        let two = AdapterRows::new(&[Some(1), Some(0)], Device::Cpu, false);
        assert_eq!(describe(&two), "mixed [0, 1] Some([1, 0]) all");
        let gaps = AdapterRows::new(&[Some(3), None, Some(1), Some(3)], Device::Cpu, false);
        assert_eq!(
            describe(&gaps),
            "mixed [1, 3] Some([1, 0, 0, 1]) Some([1, 0, 1, 1])"
        );
        let one = AdapterRows::new(&[Some(2), Some(2)], Device::Cpu, false);
        assert_eq!(describe(&one), "one 2");
        assert!(AdapterRows::new(&[None, None], Device::Cpu, false).is_base());
        assert!(AdapterRows::base().is_base());
    }

    #[test]
    fn selecting_rows_follows_the_kept_rows() {
        let mixed = AdapterRows::new(&[Some(1), None, Some(0)], Device::Cpu, true);
        let kept = mixed.select(&[2, 0, 0]);
        assert_eq!(kept.slots(), &[Some(0), Some(1), Some(1)]);
        assert_eq!(describe(&kept), "mixed [0, 1] Some([0, 1, 1]) all");
        assert!(kept.training());
        assert_eq!(describe(&mixed.select(&[0, 0])), "one 1");
        assert!(mixed.select(&[1]).is_base());
    }
}
