//! Episode failures: an episode whose own plugin calls failed (an error, a panic caught at the
//! boundary, a call past its time limit) or that broke an episode rule (the 256 calls or steps
//! limits, a role no agent fills, a bad call reward) is marked failed and the rollout goes on,
//! as long as the failures stay within `[rollout] max_episode_failure_rate`. Anything else — a
//! stop signal, a generation error, the host's own faults — still ends the rollout at once.

use drmas_sdk::{PluginError, Task};

use super::EpisodeOutcome;
use crate::plugins::PluginCallError;

/// The context every error of an episode carries: which task it ran.
pub(super) fn episode_of(task: &Task) -> String {
    format!("episode of task `{}`", task.id)
}

/// An episode broke one of the host's rules for episodes (see the module docs).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct BrokenEpisode(pub String);

/// Whether `error` is its episode's own failure rather than the host's: a plugin's error or
/// caught panic, a plugin call past its time limit (or on an object such a call still holds),
/// or a broken episode rule. A call whose thread could not start or ended without an answer
/// (host code around it panicked) is the host's.
pub(super) fn is_episode_failure(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause.is::<PluginError>()
            || cause.is::<BrokenEpisode>()
            || matches!(
                cause.downcast_ref::<PluginCallError>(),
                Some(PluginCallError::TimedOut { .. } | PluginCallError::Abandoned { .. })
            )
    })
}

/// More episodes of a rollout failed than `[rollout] max_episode_failure_rate` allows; the
/// first failure is this error's source.
#[derive(Debug, thiserror::Error)]
pub enum TooManyFailures {
    /// The rate is 0: the first failure stops the run.
    #[error(
        "an episode failed, and [rollout] max_episode_failure_rate = 0 stops the run at the first \
         failure (set it to the fraction of episodes that may fail, e.g. 0.01, to drop a failed \
         episode's prompt group and go on)"
    )]
    First,
    /// Over a rate above 0.
    #[error(
        "{failed} of the rollout's {episodes} episodes failed, more than [rollout] \
         max_episode_failure_rate = {rate} allows; the first failure"
    )]
    OverRate {
        /// Episodes failed when the rollout stopped.
        failed: usize,
        /// Episodes in the rollout.
        episodes: usize,
        /// The bound.
        rate: f64,
    },
}

/// A rollout's failures so far against its bound.
pub(super) struct FailureCount {
    episodes: usize,
    rate: f64,
    failed: usize,
    first: Option<anyhow::Error>,
}

impl FailureCount {
    /// No failures yet among `episodes` episodes, of which the fraction `rate` may fail.
    pub fn new(episodes: usize, rate: f64) -> Self {
        Self {
            episodes,
            rate,
            failed: 0,
            first: None,
        }
    }

    /// Counts `error` of one episode: returns the episode's failed outcome when it is an episode
    /// failure within the bound, else the error that ends the rollout (`error` itself when it is
    /// not the episode's own; over the bound, the first failure under a [`TooManyFailures`]
    /// context).
    pub fn record(&mut self, error: anyhow::Error) -> anyhow::Result<EpisodeOutcome> {
        if !is_episode_failure(&error) {
            return Err(error);
        }
        self.failed += 1;
        let message = format!("{error:#}");
        let first = self.first.take().unwrap_or(error);
        if self.failed as f64 / self.episodes.max(1) as f64 <= self.rate {
            self.first = Some(first);
            return Ok(EpisodeOutcome::failed(message));
        }
        Err(first.context(if self.rate == 0.0 {
            TooManyFailures::First
        } else {
            TooManyFailures::OverRate {
                failed: self.failed,
                episodes: self.episodes,
                rate: self.rate,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn plugin_error(message: &str) -> anyhow::Error {
        anyhow::Error::from(PluginError::from(drmas_sdk::Error::new(message)))
            .context("episode of task `3`")
    }

    #[test]
    fn plugin_errors_time_outs_and_broken_rules_are_the_episodes_and_nothing_else_is() {
        assert!(is_episode_failure(&plugin_error("boom")));
        assert!(is_episode_failure(
            &anyhow::Error::from(PluginCallError::TimedOut {
                origin: "environment `e`",
                method: "step",
                limit: Duration::from_secs(1),
            })
            .context("episode of task `1`")
        ));
        assert!(is_episode_failure(&anyhow::Error::from(BrokenEpisode(
            "256 calls".into()
        ))));
        assert!(!is_episode_failure(&anyhow::Error::from(
            PluginCallError::Lost {
                origin: "agent `a`",
                method: "parse",
            }
        )));
        assert!(!is_episode_failure(&anyhow::Error::from(
            PluginCallError::NoThread {
                origin: "agent `a`",
                method: "parse",
                reason: "out of threads".into(),
            }
        )));
        assert!(!is_episode_failure(&anyhow::anyhow!(
            "worker group 0's generator answered 1 of 2 requests"
        )));
    }

    #[test]
    fn failures_pass_within_the_rate_and_the_first_is_named_past_it() {
        let mut count = FailureCount::new(4, 0.5);
        assert_eq!(
            count.record(plugin_error("first")).expect("1 of 4").failure,
            Some("episode of task `3`: first".to_owned())
        );
        count.record(plugin_error("second")).expect("2 of 4");
        let error = count.record(plugin_error("third")).expect_err("3 of 4");
        assert_eq!(
            format!("{error:#}"),
            "3 of the rollout's 4 episodes failed, more than [rollout] max_episode_failure_rate \
             = 0.5 allows; the first failure: episode of task `3`: first"
        );
        let host = count
            .record(anyhow::anyhow!("generation failed"))
            .expect_err("not the episode's");
        assert_eq!(host.to_string(), "generation failed");

        let error = FailureCount::new(1000, 0.0)
            .record(plugin_error("only"))
            .expect_err("rate 0");
        assert!(
            format!("{error:#}").starts_with(
                "an episode failed, and [rollout] max_episode_failure_rate = 0 stops the run at \
                 the first failure"
            ) && format!("{error:#}").ends_with(": episode of task `3`: only"),
            "{error:#}"
        );
    }
}
