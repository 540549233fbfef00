//! Mini-batches: a worker group's calls split into the parts that each take one optimizer step
//! (verl's `ppo_mini_batch_size`, PPO's minibatches). The split is by episode, so every call of
//! an episode — whichever agent made it — trains in the same step, and each step sees each
//! agent's share of the episodes it holds.

use crate::rollout::AgentCall;

/// `calls` (indices into it) split into at most `count` mini-batches of consecutive episodes,
/// in episode order: the episodes the calls belong to are cut into `count` runs whose sizes
/// differ by at most one (the longer runs first). With fewer episodes than `count`, each
/// episode is a mini-batch of its own. Empty when `calls` is.
pub fn split_by_episode(calls: &[&AgentCall], count: usize) -> Vec<Vec<usize>> {
    let mut episodes: Vec<usize> = calls.iter().map(|call| call.episode).collect();
    episodes.sort_unstable();
    episodes.dedup();
    let parts = count.clamp(1, episodes.len().max(1));
    let (base, longer) = (episodes.len() / parts, episodes.len() % parts);
    // The part of each episode, in the order of `episodes`.
    let mut part_of = Vec::with_capacity(episodes.len());
    for part in 0..parts {
        let size = base + usize::from(part < longer);
        part_of.extend(std::iter::repeat_n(part, size));
    }
    let mut mini_batches = vec![Vec::new(); parts];
    for (index, call) in calls.iter().enumerate() {
        let position = episodes
            .binary_search(&call.episode)
            .expect("every call's episode was collected");
        mini_batches[part_of[position]].push(index);
    }
    mini_batches.retain(|part| !part.is_empty());
    mini_batches
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(episode: usize, agent: usize) -> AgentCall {
        AgentCall::synthetic(episode, agent, vec![1], vec![2])
    }

    #[test]
    fn episodes_are_cut_into_runs_of_near_equal_size_with_all_their_calls() {
        // Episodes 0..5, two agents each, the calls interleaved as a rollout records them.
        let calls: Vec<AgentCall> = (0..5)
            .flat_map(|episode| [call(episode, 0), call(episode, 1)])
            .rev()
            .collect();
        let refs: Vec<&AgentCall> = calls.iter().collect();
        let parts = split_by_episode(&refs, 2);
        let episodes = |part: &[usize]| {
            let mut e: Vec<usize> = part.iter().map(|&i| calls[i].episode).collect();
            e.dedup();
            e
        };
        assert_eq!(parts.len(), 2);
        assert_eq!(episodes(&parts[0]), vec![2, 1, 0]);
        assert_eq!(episodes(&parts[1]), vec![4, 3]);
        assert_eq!(parts[0].len(), 6, "both agents' calls of each episode");
        let mut all: Vec<usize> = parts.concat();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>(), "each call once");
    }

    #[test]
    fn one_mini_batch_holds_every_call_and_extra_parts_are_dropped() {
        let calls = [call(7, 0), call(3, 1), call(7, 1)];
        let refs: Vec<&AgentCall> = calls.iter().collect();
        assert_eq!(split_by_episode(&refs, 1), vec![vec![0, 1, 2]]);
        assert_eq!(split_by_episode(&refs, 0), vec![vec![0, 1, 2]]);
        assert_eq!(split_by_episode(&refs, 5), vec![vec![1], vec![0, 2]]);
        assert!(split_by_episode(&[], 4).is_empty());
    }
}
