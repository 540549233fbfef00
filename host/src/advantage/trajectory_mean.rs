//! Trajectory-mean rewards: the value a trajectory is scored by when every call of it should
//! count, and count once.
//!
//! Dr. MAS's GRPO (since its "update adv" change of January 2026) scores a trajectory by the mean
//! of all its calls' penalised rewards and gives every call of the trajectory that one
//! normalised advantage; with its agent-wise grouping the mean runs over one agent's calls.

use super::grouping::{CachedMap, GroupBy};
use super::Sample;

/// Each sample's reward replaced by the mean reward of the calls it shares a trajectory with:
/// all of them (`GroupBy::Prompt`), or those of its own agent (`GroupBy::PromptAgent`).
/// A trajectory is identified by (`uid`, `trajectory`). Padding samples keep their reward and
/// enter no mean.
pub(super) fn trajectory_means(samples: &[Sample], rewards: &[f64], by: GroupBy) -> Vec<f64> {
    let mut trajectories = CachedMap::default();
    let mut units = CachedMap::default();
    // Dense unit index of each sample (`u32::MAX` for padding), and each unit's (sum, count).
    let mut unit_of = Vec::with_capacity(samples.len());
    let mut totals: Vec<(f64, u32)> = Vec::new();
    for (sample, &reward) in samples.iter().zip(rewards) {
        if sample.padding {
            unit_of.push(u32::MAX);
            continue;
        }
        let key = (u64::from(sample.uid) << 32) | u64::from(sample.trajectory);
        let next = trajectories.len() as u32;
        let (trajectory, _) = trajectories.get_or_insert(key, next);
        let unit_key = match by {
            GroupBy::Prompt => u64::from(trajectory),
            GroupBy::PromptAgent => (u64::from(trajectory) << 16) | u64::from(sample.agent),
        };
        let next = units.len() as u32;
        let (unit, new) = units.get_or_insert(unit_key, next);
        if new {
            totals.push((0.0, 0));
        }
        let total = &mut totals[unit as usize];
        total.0 += reward;
        total.1 += 1;
        unit_of.push(unit);
    }
    unit_of
        .iter()
        .zip(rewards)
        .map(|(&unit, &reward)| match totals.get(unit as usize) {
            Some(&(sum, count)) => sum / f64::from(count),
            None => reward,
        })
        .collect()
}
