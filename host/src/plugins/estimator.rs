//! [`PluginEstimator`]: a plugin's estimator behind the host's [`Estimator`] trait, its answer
//! checked so a faulty plugin stops the run with a message instead of training on garbage.

use anyhow::bail;
use drmas_sdk::PluginError;

use crate::advantage::{Estimator, Sample};

use super::hosted::Hosted;

/// An estimator a plugin offers, named in the run file like a built-in one.
#[derive(Debug)]
pub struct PluginEstimator {
    name: String,
    component: Hosted<dyn drmas_sdk::Estimator>,
}

impl PluginEstimator {
    /// The estimator `name`, built by a plugin.
    pub fn new(name: impl Into<String>, component: Hosted<dyn drmas_sdk::Estimator>) -> Self {
        Self {
            name: name.into(),
            component,
        }
    }
}

impl Estimator for PluginEstimator {
    fn name(&self) -> &str {
        &self.name
    }

    fn origin(&self) -> Option<&str> {
        Some(self.component.origin())
    }

    /// The plugin's advantages, once it has given one finite advantage per sample and 0 to
    /// every padding sample; its errors and panics come back naming it.
    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> anyhow::Result<Vec<f64>> {
        assert_eq!(
            samples.len(),
            rewards.len(),
            "advantage estimation needs one reward per sample"
        );
        let (owned_samples, owned_rewards) = (samples.to_vec(), rewards.to_vec());
        let advantages = self
            .component
            .call("advantages", move |estimator| {
                estimator.advantages(&owned_samples, &owned_rewards)
            })?
            .map_err(PluginError::from)?;
        let origin = self.component.origin();
        if advantages.len() != samples.len() {
            bail!(
                "{origin} returned {} advantages for {} samples; an estimator must return one \
                 advantage per sample, in the order of the samples",
                advantages.len(),
                samples.len()
            );
        }
        for (index, (sample, &advantage)) in samples.iter().zip(&advantages).enumerate() {
            if !advantage.is_finite() {
                bail!(
                    "{origin} returned the advantage {advantage} for sample {index} (prompt group \
                     {}, trajectory {}, agent {}, reward {}); advantages must be finite numbers",
                    sample.uid,
                    sample.trajectory,
                    sample.agent,
                    rewards[index]
                );
            }
            if sample.padding && advantage != 0.0 {
                bail!(
                    "{origin} gave padding sample {index} the advantage {advantage}; padding \
                     samples only fill the batch and must get 0"
                );
            }
        }
        Ok(advantages)
    }
}
