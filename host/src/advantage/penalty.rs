//! The invalid-action penalty: an agent call whose output has an invalid format loses a fixed,
//! per-agent amount of reward.

use super::Sample;

/// Per-agent invalid-format penalty: r' = r − coef_agent × (1 − valid), where r is the call's
/// own reward when its orchestra gave one ([`Sample::call_reward`]) and the episode reward
/// otherwise.
///
/// Applied per call before any estimator, so an invalid call's advantage drops relative to the
/// valid calls of its group while the episode reward itself stays untouched in the [`Sample`].
#[derive(Debug, Clone, PartialEq)]
pub struct Penalty {
    /// Coefficient of each agent, indexed like [`Sample::agent`].
    coefs: Vec<f64>,
}

impl Penalty {
    /// A penalty with one coefficient per agent of the run, in agent order.
    pub fn new(coefs: Vec<f64>) -> Self {
        Self { coefs }
    }

    /// The same coefficient for each of `agents` agents (the run file's
    /// `invalid_action_penalty`).
    pub fn uniform(coef: f64, agents: usize) -> Self {
        Self {
            coefs: vec![coef; agents],
        }
    }

    /// The penalised reward of one call.
    ///
    /// # Panics
    /// If the sample's agent has no coefficient: the table must cover every agent of the run.
    pub fn reward(&self, sample: &Sample) -> f64 {
        let coef = self
            .coefs
            .get(usize::from(sample.agent))
            .unwrap_or_else(|| {
                panic!(
                    "no invalid-action penalty for agent {} (the table covers {} agents)",
                    sample.agent,
                    self.coefs.len()
                )
            });
        let reward = unshaped_reward(sample);
        if sample.valid {
            reward
        } else {
            reward - coef
        }
    }

    /// The penalised reward of every call, in order: the `rewards` an
    /// [`Estimator`](super::Estimator) takes.
    pub fn apply(&self, samples: &[Sample]) -> Vec<f64> {
        samples.iter().map(|sample| self.reward(sample)).collect()
    }
}

/// The reward a call starts from before any shaping: its own reward when its orchestra gave it
/// one ([`Sample::call_reward`]), else the episode's.
pub fn unshaped_reward(sample: &Sample) -> f64 {
    sample.call_reward.unwrap_or(sample.reward)
}

#[cfg(test)]
mod tests {
    use super::{Penalty, Sample};

    #[test]
    fn a_calls_own_reward_replaces_the_episode_reward_before_the_penalty() {
        let episode = Sample {
            reward: 1.0,
            valid: true,
            ..Sample::default()
        };
        let own = Sample {
            call_reward: Some(0.25),
            ..episode
        };
        let own_invalid = Sample {
            valid: false,
            ..own
        };
        let penalty = Penalty::uniform(0.5, 1);
        assert_eq!(
            penalty.apply(&[episode, own, own_invalid]),
            [1.0, 0.25, -0.25]
        );
    }
}
