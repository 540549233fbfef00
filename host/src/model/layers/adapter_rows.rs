//! [`AdapterRows`]: which LoRA adapter each row of a batch goes through, so one batch can mix
//! agents that own different adapters of one base model.

use tch::{Device, Kind, Tensor};

/// The adapter ("slot") of every row of a batch, `None` for the base model alone, grouped once
/// per forward pass so every projection reuses the groups.
///
/// Rows are grouped by adapter (an `index_select` of the rows' inputs and an `index_add` of
/// their updates per adapter present) rather than gathering a copy of each row's `A` and `B`
/// for a batched matmul: at decode with batch 64 that gather would move ~20 MB of adapter
/// weights per row and step for SmolLM2 at rank 16, far more than the base weights, while a
/// group costs one small copy of its rows' activations.
#[derive(Debug)]
pub struct AdapterRows {
    slots: Vec<Option<usize>>,
    /// Each adapter present with its rows (`None`: every row of the batch).
    groups: Vec<(usize, Option<Tensor>)>,
    training: bool,
    device: Device,
}

impl AdapterRows {
    /// Every row through the base model alone (no adapter).
    pub fn base() -> Self {
        Self {
            slots: Vec::new(),
            groups: Vec::new(),
            training: false,
            device: Device::Cpu,
        }
    }

    /// Row `i` through adapter `slots[i]` (`None`: the base model), indices on `device`.
    /// In `training`, LoRA dropout is applied.
    pub fn new(slots: &[Option<usize>], device: Device, training: bool) -> Self {
        let mut present: Vec<usize> = slots.iter().flatten().copied().collect();
        present.sort_unstable();
        present.dedup();
        let everyone = |slot: usize| slots.iter().all(|&s| s == Some(slot));
        let groups = present
            .into_iter()
            .map(|slot| {
                if everyone(slot) {
                    return (slot, None);
                }
                let rows: Vec<i64> = slots
                    .iter()
                    .enumerate()
                    .filter(|(_, &s)| s == Some(slot))
                    .map(|(row, _)| row as i64)
                    .collect();
                (
                    slot,
                    Some(
                        Tensor::from_slice(&rows)
                            .to_device(device)
                            .to_kind(Kind::Int64),
                    ),
                )
            })
            .collect();
        Self {
            slots: slots.to_vec(),
            groups,
            training,
            device,
        }
    }

    /// Whether no row uses an adapter.
    pub fn is_base(&self) -> bool {
        self.groups.is_empty()
    }

    /// Whether LoRA dropout applies (a training forward).
    pub fn training(&self) -> bool {
        self.training
    }

    /// Each adapter used with its rows (`None`: all rows).
    pub fn groups(&self) -> &[(usize, Option<Tensor>)] {
        &self.groups
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

    fn rows(groups: &[(usize, Option<Tensor>)]) -> Vec<(usize, Option<Vec<i64>>)> {
        groups
            .iter()
            .map(|(slot, index)| {
                (
                    *slot,
                    index
                        .as_ref()
                        .map(|t| Vec::<i64>::try_from(t).expect("indices")),
                )
            })
            .collect()
    }

    #[test]
    fn groups_rows_by_adapter() {
        let mixed = AdapterRows::new(&[Some(1), None, Some(0), Some(1)], Device::Cpu, false);
        assert_eq!(
            rows(mixed.groups()),
            vec![(0, Some(vec![2])), (1, Some(vec![0, 3]))]
        );
        let one = AdapterRows::new(&[Some(2), Some(2)], Device::Cpu, false);
        assert_eq!(rows(one.groups()), vec![(2, None)]);
        assert!(AdapterRows::new(&[None, None], Device::Cpu, false).is_base());
        assert!(AdapterRows::base().is_base());
    }

    #[test]
    fn selecting_rows_follows_the_kept_rows() {
        let mixed = AdapterRows::new(&[Some(1), None, Some(0)], Device::Cpu, true);
        let kept = mixed.select(&[2, 0, 0]);
        assert_eq!(kept.slots(), &[Some(0), Some(1), Some(1)]);
        assert_eq!(
            rows(kept.groups()),
            vec![(0, Some(vec![0])), (1, Some(vec![1, 2]))]
        );
        assert!(kept.training());
        assert!(mixed.select(&[1]).is_base());
    }
}
