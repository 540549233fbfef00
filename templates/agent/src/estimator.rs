//! {{estimator_name}}: an advantage estimator. A run file chooses it like a built-in one:
//! `[algorithm] estimator = "{{estimator_name}}"`, with its parameters in `[algorithm.params]`.

use std::collections::HashMap;

use drmas_sdk::{Component, Error, Estimator, Params, Result, Sample};
use serde::Deserialize;

/// Each call's advantage is `scale × (r − μ)`, where r is its penalised reward and μ the mean
/// reward of its prompt group's calls: a group-mean baseline without dividing by σ.
pub struct MyEstimator {
    scale: f64,
}

/// The estimator's parameters, from `[algorithm.params]` in the run file. Strict, so typos are
/// errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_scale")]
    scale: f64,
}

fn default_scale() -> f64 {
    1.0
}

impl Component for MyEstimator {
    const NAME: &'static str = "{{estimator_name}}";
    const DESCRIPTION: &'static str = "scale × (reward − the prompt group's mean reward)";

    fn from_config(params: &Params) -> Result<Self> {
        let config: Config = params.parse()?;
        if !(config.scale.is_finite() && config.scale > 0.0) {
            return Err(Error::new(format!("scale must be finite and > 0, got {}", config.scale)));
        }
        Ok(Self { scale: config.scale })
    }
}

impl Estimator for MyEstimator {
    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> Result<Vec<f64>> {
        // Sum and count of each prompt group's rewards; padding samples stay out of every
        // statistic and get 0.
        let mut groups: HashMap<u32, (f64, f64)> = HashMap::new();
        for (sample, reward) in samples.iter().zip(rewards).filter(|(s, _)| !s.padding) {
            let group = groups.entry(sample.uid).or_default();
            group.0 += reward;
            group.1 += 1.0;
        }
        Ok(samples
            .iter()
            .zip(rewards)
            .map(|(sample, reward)| match groups.get(&sample.uid) {
                Some((sum, count)) if !sample.padding => self.scale * (reward - sum / count),
                _ => 0.0,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(uid: u32, trajectory: u32) -> Sample {
        Sample { uid, trajectory, ..Sample::default() }
    }

    #[test]
    fn centres_each_prompt_group_and_scales() {
        let estimator = MyEstimator::from_config(&"scale = 2.0".into()).expect("config");
        let padding = Sample { padding: true, ..call(0, 2) };
        let samples = [call(0, 0), call(0, 1), call(1, 2), padding];
        let advantages = estimator.advantages(&samples, &[1.0, 0.0, 5.0, 7.0]).expect("advantages");
        assert_eq!(advantages, [1.0, -1.0, 0.0, 0.0]);
    }

    #[test]
    fn refuses_a_scale_that_is_not_positive() {
        let error = MyEstimator::from_config(&"scale = 0.0".into()).err().expect("refused");
        assert!(error.message().contains("scale must be finite and > 0"), "{error}");
    }
}
