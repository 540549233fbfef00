//! Whitening of per-token advantages, (A − mean) / √(var + 1e-8) with the unbiased variance, as
//! verl's `masked_whiten`: over the whole batch's response tokens or each agent's.

use serde::Deserialize;

use super::{PerToken, Sample};

/// Over which tokens the advantages are whitened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Whiten {
    /// Every token of the batch (verl's `masked_whiten`).
    Batch,
    /// Each agent's tokens on their own, so one agent's return scale does not set another's
    /// step size.
    Agent,
    /// Not at all: the raw advantages.
    None,
}

/// Whitens the rows of real samples in place, over the tokens `by` groups together.
pub(super) fn whiten(advantages: &mut PerToken, samples: &[Sample], by: Whiten) {
    let key = |sample: &Sample| match by {
        Whiten::Batch => Some(0u16),
        Whiten::Agent => Some(sample.agent),
        Whiten::None => None,
    };
    let mut groups: Vec<u16> = samples
        .iter()
        .filter(|s| !s.padding)
        .filter_map(key)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    for group in groups {
        let rows: Vec<usize> = (0..samples.len())
            .filter(|&i| !samples[i].padding && key(&samples[i]) == Some(group))
            .collect();
        let (mut sum, mut count) = (0.0, 0usize);
        for &i in &rows {
            sum += advantages.row(i).iter().sum::<f64>();
            count += advantages.row(i).len();
        }
        if count == 0 {
            continue;
        }
        let mean = sum / count as f64;
        let squares: f64 = rows
            .iter()
            .flat_map(|&i| advantages.row(i).iter())
            .map(|a| (a - mean) * (a - mean))
            .sum();
        // One token has no spread: it is only centred.
        let scale = if count > 1 {
            1.0 / (squares / (count - 1) as f64 + 1e-8).sqrt()
        } else {
            1.0
        };
        for &i in &rows {
            for a in advantages.row_mut(i) {
                *a = (*a - mean) * scale;
            }
        }
    }
}
