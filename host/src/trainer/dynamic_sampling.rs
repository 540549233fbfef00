//! DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476): a prompt group whose episodes all
//! earned the same reward carries no outcome signal — its group-normalised advantages are 0, or,
//! where calls' penalties differ, δ/ε — so it is dropped and replaced by groups from further
//! rollouts until the batch holds `prompts_per_batch` groups or the rollout cap is reached.
//! With `metric = "penalised_reward"` the test is on the calls' penalised rewards instead: a
//! group is dropped only when those are all equal, so estimators that normalise them within
//! the group give each of its calls advantage 0.
//!
//! A rollout's episodes come in prompt groups of `group_size` consecutive episodes (the trainer
//! repeats each task `group_size` times); these helpers select and join whole groups.

use crate::rollout::Rollout;

/// Which prompt groups of `rollout` have episode rewards that differ (a group of one episode
/// always counts, as in DAPO: its σ is not defined).
pub(super) fn groups_with_spread(rollout: &Rollout, group_size: usize) -> Vec<bool> {
    rollout
        .episodes
        .chunks(group_size.max(1))
        .map(|group| {
            let first = group[0].reward();
            group.len() == 1 || group.iter().any(|episode| episode.reward() != first)
        })
        .collect()
}

/// Which prompt groups of `rollout` have calls whose `rewards` (one per call, in call order: the
/// penalised rewards an estimator sees) differ. A group of one episode always counts.
pub(super) fn groups_with_call_spread(
    rollout: &Rollout,
    rewards: &[f64],
    group_size: usize,
) -> Vec<bool> {
    let group_size = group_size.max(1);
    let groups = rollout.episodes.len().div_ceil(group_size);
    let mut first: Vec<Option<f64>> = vec![None; groups];
    let mut spread = vec![group_size == 1; groups];
    for (call, &reward) in rollout.calls.iter().zip(rewards) {
        let group = call.episode / group_size;
        match first[group] {
            None => first[group] = Some(reward),
            Some(seen) if seen != reward => spread[group] = true,
            Some(_) => {}
        }
    }
    spread
}

/// `rollout` with only the prompt groups `keep` marks; episodes are renumbered in order and
/// every call follows its episode. Batch records and counters stay those of the whole rollout.
pub(super) fn keep_groups(rollout: Rollout, keep: &[bool], group_size: usize) -> Rollout {
    let group_size = group_size.max(1);
    let kept_episode = |episode: usize| keep.get(episode / group_size).copied().unwrap_or(false);
    // New index of each kept episode.
    let mut renumbered = vec![usize::MAX; rollout.episodes.len()];
    let mut next = 0;
    for (episode, slot) in renumbered.iter_mut().enumerate() {
        if kept_episode(episode) {
            *slot = next;
            next += 1;
        }
    }
    let calls = rollout
        .calls
        .into_iter()
        .filter(|call| kept_episode(call.episode))
        .map(|mut call| {
            call.episode = renumbered[call.episode];
            call
        })
        .collect();
    let episodes = rollout
        .episodes
        .into_iter()
        .enumerate()
        .filter(|(episode, _)| kept_episode(*episode))
        .map(|(_, outcome)| outcome)
        .collect();
    Rollout {
        calls,
        episodes,
        ..rollout
    }
}

/// Appends `more`'s episodes after `into`'s (its calls renumbered to follow), and adds up the
/// counters and batch records.
pub(super) fn append(into: &mut Rollout, more: Rollout) {
    let offset = into.episodes.len();
    into.calls.extend(more.calls.into_iter().map(|mut call| {
        call.episode += offset;
        call
    }));
    into.episodes.extend(more.episodes);
    into.truncated_prompts += more.truncated_prompts;
    into.generated_tokens += more.generated_tokens;
    into.generation_seconds += more.generation_seconds;
    into.batches.extend(more.batches);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::FinishReason;
    use crate::rollout::{AgentCall, EpisodeOutcome};

    /// A rollout of `rewards.len()` episodes, each with one call per agent of two, whose text
    /// names its episode.
    fn rollout(rewards: &[f64]) -> Rollout {
        let mut calls = Vec::new();
        for episode in 0..rewards.len() {
            for agent in 0..2 {
                calls.push(AgentCall {
                    episode,
                    index: agent,
                    agent,
                    step: 0,
                    prompt: vec![1],
                    cached_prompt_tokens: 0,
                    response: vec![2],
                    text: format!("episode {episode}"),
                    logprobs: vec![0.0],
                    temperature: 1.0,
                    valid: true,
                    breaks_contract: false,
                    finish: FinishReason::Stop,
                });
            }
        }
        Rollout {
            calls,
            episodes: rewards
                .iter()
                .map(|&r| EpisodeOutcome {
                    step_rewards: vec![r],
                    step_states: vec![0],
                    step_anchors: vec![String::new()],
                    call_rewards: Vec::new(),
                    metrics: Vec::new(),
                    steps: 1,
                    calls: 2,
                    failure: None,
                })
                .collect(),
            generated_tokens: 2 * rewards.len(),
            ..Rollout::default()
        }
    }

    #[test]
    fn a_group_has_spread_when_any_episode_reward_differs() {
        let r = rollout(&[0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.5]);
        assert_eq!(groups_with_spread(&r, 2), [false, false, true, true]);
    }

    #[test]
    fn a_group_has_call_spread_when_any_penalised_call_reward_differs() {
        // Three groups of two episodes, two calls each, every episode reward 0: only the
        // penalised call rewards can differ.
        let r = rollout(&[0.0; 6]);
        let rewards = [
            0.0, 0.0, 0.0, 0.0, // group 0: all equal
            0.0, -0.1, 0.0, 0.0, // group 1: one invalid call
            -0.1, -0.1, -0.1, -0.1, // group 2: all equally penalised
        ];
        assert_eq!(groups_with_spread(&r, 2), [false, false, false]);
        assert_eq!(
            groups_with_call_spread(&r, &rewards, 2),
            [false, true, false]
        );
        assert_eq!(groups_with_call_spread(&r, &[0.0; 12], 1), [true; 6]);
    }

    #[test]
    fn kept_groups_are_renumbered_with_their_calls_and_appended_after() {
        let r = keep_groups(
            rollout(&[0.0, 1.0, 1.0, 1.0, 0.0, 0.5]),
            &[true, false, true],
            2,
        );
        assert_eq!(r.episodes.len(), 4);
        let texts: Vec<(usize, &str)> = r
            .calls
            .iter()
            .map(|c| (c.episode, c.text.as_str()))
            .collect();
        assert_eq!(
            texts,
            [
                (0, "episode 0"),
                (0, "episode 0"),
                (1, "episode 1"),
                (1, "episode 1"),
                (2, "episode 4"),
                (2, "episode 4"),
                (3, "episode 5"),
                (3, "episode 5"),
            ]
        );
        assert_eq!(r.episodes[2].reward(), 0.0);
        assert_eq!(r.episodes[3].reward(), 0.5);

        let mut joined = r;
        append(&mut joined, rollout(&[2.0, 3.0]));
        assert_eq!(joined.episodes.len(), 6);
        assert_eq!(joined.episodes[5].reward(), 3.0);
        let last = joined.calls.last().expect("calls");
        assert_eq!((last.episode, last.text.as_str()), (5, "episode 1"));
        assert_eq!(joined.generated_tokens, 12 + 4);
    }
}
