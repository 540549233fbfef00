//! Failed episodes in the trainer (see `rollout::EpisodeOutcome::failure`): which prompt groups
//! they spoil — a group-normalised estimator needs every episode of a group for its baseline, so
//! a group with a failed episode is dropped whole — and the warnings that keep them from going
//! unnoticed, and the error of an iteration they leave nothing to train on.

use crate::rollout::Rollout;

/// Failures of one rollout logged one by one; the rest are counted in one line.
const LOGGED_FAILURES: usize = 3;

/// Which prompt groups of `rollout` (`group_size` consecutive episodes each) hold a failed
/// episode.
pub(super) fn groups_with_failures(rollout: &Rollout, group_size: usize) -> Vec<bool> {
    rollout
        .episodes
        .chunks(group_size.max(1))
        .map(|group| group.iter().any(|episode| episode.is_failed()))
        .collect()
}

/// Warns about `rollout`'s failed episodes (the first few each, then a count); `consequence`
/// says what happens to them ("its prompt group is dropped", "scored 0").
pub(super) fn warn_failures(rollout: &Rollout, label: &str, consequence: &str) {
    let failed = rollout.failed_episodes();
    let messages = rollout
        .episodes
        .iter()
        .enumerate()
        .filter_map(|(index, episode)| episode.failure.as_deref().map(|m| (index, m)));
    for (index, message) in messages.take(LOGGED_FAILURES) {
        tracing::warn!("{label}: episode {index} failed ({consequence}): {message}");
    }
    if failed > LOGGED_FAILURES {
        tracing::warn!(
            "{label}: {} more episodes failed, {failed} of {} in all (within [rollout] \
             max_episode_failure_rate)",
            failed - LOGGED_FAILURES,
            rollout.episodes.len()
        );
    }
}

/// The error of iteration `iteration` when every prompt group it rolled out (`generated`) held
/// a failed episode: no group is left to update on.
pub(super) fn nothing_left_to_train(generated: &Rollout, iteration: u32) -> anyhow::Error {
    let first = generated
        .episodes
        .iter()
        .find_map(|e| e.failure.as_deref())
        .unwrap_or_default();
    anyhow::anyhow!(
        "every prompt group of iteration {iteration} has a failed episode ({} of {} episodes \
         failed), so none is left to train on; the first failure: {first}",
        generated.failed_episodes(),
        generated.episodes.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::EpisodeOutcome;

    #[test]
    fn a_group_with_any_failed_episode_is_marked() {
        let episode = |failed: bool| EpisodeOutcome {
            failure: failed.then(|| "boom".to_owned()),
            ..EpisodeOutcome::default()
        };
        let rollout = Rollout {
            episodes: [false, false, true, false, false, true]
                .map(episode)
                .to_vec(),
            ..Rollout::default()
        };
        assert_eq!(groups_with_failures(&rollout, 2), [false, true, true]);
        assert_eq!(groups_with_failures(&rollout, 3), [true, true]);
        assert_eq!(rollout.failed_episodes(), 2);
    }
}
