//! The experiment's numbers: each run's gradient-norm spikes, norms, rewards, evals and
//! amplification ([`RunSummary`]), then the same per estimator over seeds
//! ([`EstimatorSummary`]).

use std::collections::BTreeMap;

use super::runs::RunRecord;
use super::stats::{self, MeanStd};
use crate::plot::figures::{
    AMPLIFICATION_PREFIX, EVAL_PREFIX, GENERATED_GROUPS, GRAD_NORM_AGENT_PREFIX,
    INVALID_RATE_PREFIX, KEPT_GROUPS, REWARD_MEAN, TRAINED_CALLS, TRAINED_REWARD_MEAN,
    TRUNCATED_RATE_PREFIX,
};
use crate::plot::MetricSeries;

/// The trailing iterations the smoothed final reward averages.
pub const LAST_ITERATIONS: usize = 3;

/// Prefix of the per-agent mean response length in tokens.
const RESPONSE_LEN_PREFIX: &str = "response_len/";

/// What one run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSummary {
    /// Gradient-norm spikes per agent role ([`stats::spikes`]).
    pub spikes: BTreeMap<String, usize>,
    /// The largest gradient norm per agent role.
    pub grad_norm_max: BTreeMap<String, f64>,
    /// The median gradient norm per agent role.
    pub grad_norm_median: BTreeMap<String, f64>,
    /// `reward/mean` of the last iteration.
    pub final_reward: Option<f64>,
    /// Mean `reward/mean` of the last [`LAST_ITERATIONS`] iterations.
    pub final_reward_last: Option<f64>,
    /// Mean `advantage/reward_mean` — the penalised reward of the calls trained on — of the
    /// last [`LAST_ITERATIONS`] iterations that trained on some call (`advantage/calls` > 0;
    /// every iteration in metrics without that key).
    pub trained_reward_last: Option<f64>,
    /// Mean `invalid_rate/ROLE` of the last [`LAST_ITERATIONS`] iterations, per agent role.
    pub invalid_rate_last: BTreeMap<String, f64>,
    /// Mean `response_len/ROLE` (tokens) of the last [`LAST_ITERATIONS`] iterations, per
    /// agent role: what an estimator's length bias moves.
    pub response_len_last: BTreeMap<String, f64>,
    /// Mean `truncated_rate/ROLE` of the last [`LAST_ITERATIONS`] iterations, per agent role.
    pub truncated_rate_last: BTreeMap<String, f64>,
    /// Overall eval scores (`avg@K`, `pass@K`) before training (iteration 0).
    pub eval_before: BTreeMap<String, f64>,
    /// Overall eval scores of the last iteration that evaluated.
    pub eval_final: BTreeMap<String, f64>,
    /// Mean `advantage/amplification/ROLE` over iterations.
    pub amplification_mean: BTreeMap<String, f64>,
    /// Largest `advantage/amplification/ROLE` over iterations.
    pub amplification_max: BTreeMap<String, f64>,
    /// Under dynamic sampling: prompt groups rolled out per iteration, mean over iterations.
    pub generated_groups_mean: Option<f64>,
    /// Under dynamic sampling: prompt groups trained on per iteration, mean over iterations.
    pub kept_groups_mean: Option<f64>,
    /// Under dynamic sampling: iterations that kept no group, so trained nothing.
    pub iterations_without_groups: Option<f64>,
}

impl RunSummary {
    /// Summarises one run's metrics.
    pub fn of(metrics: &MetricSeries) -> Self {
        let mut summary = Self::default();
        for (role, series) in metrics.with_prefix(GRAD_NORM_AGENT_PREFIX) {
            let norms: Vec<f64> = series.iter().map(|p| p.1).collect();
            summary
                .spikes
                .insert(role.to_string(), stats::spikes(&norms).len());
            if let Some(max) = finite_max(&norms) {
                summary.grad_norm_max.insert(role.to_string(), max);
            }
            if let Some(median) = stats::median(&norms) {
                summary.grad_norm_median.insert(role.to_string(), median);
            }
        }
        if let Some(rewards) = metrics.series(REWARD_MEAN) {
            summary.final_reward = rewards.last().map(|p| p.1);
            summary.final_reward_last = last_iterations_mean(rewards);
        }
        if let Some(rewards) = metrics.series(TRAINED_REWARD_MEAN) {
            let calls = metrics.series(TRAINED_CALLS).unwrap_or_default();
            let trained: Vec<(u64, f64)> = rewards
                .iter()
                .filter(|(iteration, _)| {
                    calls
                        .iter()
                        .find(|(i, _)| i == iteration)
                        .is_none_or(|&(_, count)| count > 0.0)
                })
                .copied()
                .collect();
            summary.trained_reward_last = last_iterations_mean(&trained);
        }
        for (prefix, per_role) in [
            (INVALID_RATE_PREFIX, &mut summary.invalid_rate_last),
            (RESPONSE_LEN_PREFIX, &mut summary.response_len_last),
            (TRUNCATED_RATE_PREFIX, &mut summary.truncated_rate_last),
        ] {
            for (role, series) in metrics.with_prefix(prefix) {
                if let Some(mean) = last_iterations_mean(series) {
                    per_role.insert(role.to_string(), mean);
                }
            }
        }
        let evals: Vec<(&str, &[(u64, f64)])> = metrics
            .with_prefix(EVAL_PREFIX)
            .filter(|(name, _)| name.starts_with("avg@") || name.starts_with("pass@"))
            .collect();
        let last_eval = evals
            .iter()
            .filter(|(name, _)| name.starts_with("avg@"))
            .flat_map(|(_, points)| points.iter().map(|p| p.0))
            .max();
        for (name, points) in &evals {
            let at = |iteration: u64| points.iter().find(|p| p.0 == iteration).map(|p| p.1);
            if let Some(before) = at(0) {
                summary.eval_before.insert(name.to_string(), before);
            }
            if let Some(last) = last_eval.and_then(at) {
                summary.eval_final.insert(name.to_string(), last);
            }
        }
        for (role, series) in metrics.with_prefix(AMPLIFICATION_PREFIX) {
            let values: Vec<f64> = series.iter().map(|p| p.1).collect();
            if let Some(mean) = stats::mean(&values) {
                summary.amplification_mean.insert(role.to_string(), mean);
            }
            if let Some(max) = finite_max(&values) {
                summary.amplification_max.insert(role.to_string(), max);
            }
        }
        let values = |name| {
            metrics
                .series(name)
                .map(|series| series.iter().map(|p| p.1).collect::<Vec<f64>>())
        };
        summary.generated_groups_mean = values(GENERATED_GROUPS).and_then(|v| stats::mean(&v));
        if let Some(kept) = values(KEPT_GROUPS) {
            summary.kept_groups_mean = stats::mean(&kept);
            summary.iterations_without_groups =
                Some(kept.iter().filter(|&&k| k == 0.0).count() as f64);
        }
        summary
    }

    /// Spikes summed over agents.
    pub fn total_spikes(&self) -> usize {
        self.spikes.values().sum()
    }
}

/// One estimator's runs, summarised over seeds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EstimatorSummary {
    /// The estimator.
    pub estimator: String,
    /// The seeds summarised.
    pub seeds: Vec<u64>,
    /// Spikes per run summed over agents, mean ± std over seeds.
    pub spikes_total: Option<MeanStd>,
    /// Spikes per run per agent role, mean ± std over seeds.
    pub spikes: BTreeMap<String, MeanStd>,
    /// Largest gradient norm per agent role, mean over seeds.
    pub grad_norm_max: BTreeMap<String, f64>,
    /// Median gradient norm per agent role, mean over seeds.
    pub grad_norm_median: BTreeMap<String, f64>,
    /// Last iteration's training reward, mean ± std over seeds.
    pub final_reward: Option<MeanStd>,
    /// Mean training reward of the last [`LAST_ITERATIONS`] iterations, mean ± std over seeds.
    pub final_reward_last: Option<MeanStd>,
    /// The same for the penalised reward of the calls trained on
    /// ([`RunSummary::trained_reward_last`]).
    pub trained_reward_last: Option<MeanStd>,
    /// Invalid-format rate of the last [`LAST_ITERATIONS`] iterations per agent role, mean ±
    /// std over seeds.
    pub invalid_rate_last: BTreeMap<String, MeanStd>,
    /// Mean response length of the last [`LAST_ITERATIONS`] iterations per agent role, mean ±
    /// std over seeds.
    pub response_len_last: BTreeMap<String, MeanStd>,
    /// Share of calls cut off at `max_new_tokens` over the last [`LAST_ITERATIONS`]
    /// iterations per agent role, mean ± std over seeds.
    pub truncated_rate_last: BTreeMap<String, MeanStd>,
    /// Eval scores before training, mean ± std over seeds.
    pub eval_before: BTreeMap<String, MeanStd>,
    /// Eval scores at the last evaluation, mean ± std over seeds.
    pub eval_final: BTreeMap<String, MeanStd>,
    /// Mean amplification per agent role, mean over seeds.
    pub amplification_mean: BTreeMap<String, f64>,
    /// Largest amplification per agent role over every seed's iterations.
    pub amplification_max: BTreeMap<String, f64>,
    /// Prompt groups rolled out per iteration under dynamic sampling, mean ± std over seeds.
    pub generated_groups_mean: Option<MeanStd>,
    /// Prompt groups trained on per iteration under dynamic sampling, mean ± std over seeds.
    pub kept_groups_mean: Option<MeanStd>,
    /// Iterations per run that trained on no group, mean ± std over seeds.
    pub iterations_without_groups: Option<MeanStd>,
    /// Each run's own summary, by seed, for paired comparisons between estimators.
    pub runs: BTreeMap<u64, RunSummary>,
}

impl EstimatorSummary {
    /// Summarises `records` (one estimator's runs, one per seed).
    pub fn of(estimator: &str, records: &[&RunRecord]) -> Self {
        let runs: Vec<RunSummary> = records.iter().map(|r| RunSummary::of(&r.metrics)).collect();
        let totals: Vec<f64> = runs.iter().map(|r| r.total_spikes() as f64).collect();
        let singles = |pick: fn(&RunSummary) -> Option<f64>| {
            MeanStd::of(&runs.iter().filter_map(pick).collect::<Vec<_>>())
        };
        Self {
            estimator: estimator.to_string(),
            seeds: records.iter().map(|r| r.seed).collect(),
            spikes_total: MeanStd::of(&totals),
            spikes: over_seeds(runs.iter().map(|r| {
                r.spikes
                    .iter()
                    .map(|(role, &count)| (role.clone(), count as f64))
                    .collect()
            })),
            grad_norm_max: means(over_seeds(runs.iter().map(|r| r.grad_norm_max.clone()))),
            grad_norm_median: means(over_seeds(runs.iter().map(|r| r.grad_norm_median.clone()))),
            final_reward: singles(|r| r.final_reward),
            final_reward_last: singles(|r| r.final_reward_last),
            trained_reward_last: singles(|r| r.trained_reward_last),
            invalid_rate_last: over_seeds(runs.iter().map(|r| r.invalid_rate_last.clone())),
            response_len_last: over_seeds(runs.iter().map(|r| r.response_len_last.clone())),
            truncated_rate_last: over_seeds(runs.iter().map(|r| r.truncated_rate_last.clone())),
            eval_before: over_seeds(runs.iter().map(|r| r.eval_before.clone())),
            eval_final: over_seeds(runs.iter().map(|r| r.eval_final.clone())),
            amplification_mean: means(over_seeds(
                runs.iter().map(|r| r.amplification_mean.clone()),
            )),
            amplification_max: runs.iter().flat_map(|r| r.amplification_max.iter()).fold(
                BTreeMap::new(),
                |mut max, (role, &value)| {
                    let entry = max.entry(role.clone()).or_insert(value);
                    *entry = f64::max(*entry, value);
                    max
                },
            ),
            generated_groups_mean: singles(|r| r.generated_groups_mean),
            kept_groups_mean: singles(|r| r.kept_groups_mean),
            iterations_without_groups: singles(|r| r.iterations_without_groups),
            runs: records.iter().map(|r| r.seed).zip(runs).collect(),
        }
    }

    /// Every agent role any of its runs logged a gradient norm or amplification for.
    pub fn roles(&self) -> Vec<String> {
        let mut roles: Vec<String> = self
            .grad_norm_max
            .keys()
            .chain(self.amplification_mean.keys())
            .chain(self.spikes.keys())
            .cloned()
            .collect();
        roles.sort();
        roles.dedup();
        roles
    }
}

/// Groups runs' per-key values and takes mean ± std over the runs holding each key.
fn over_seeds(runs: impl Iterator<Item = BTreeMap<String, f64>>) -> BTreeMap<String, MeanStd> {
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for run in runs {
        for (key, value) in run {
            values.entry(key).or_default().push(value);
        }
    }
    values
        .into_iter()
        .filter_map(|(key, values)| MeanStd::of(&values).map(|stats| (key, stats)))
        .collect()
}

fn means(stats: BTreeMap<String, MeanStd>) -> BTreeMap<String, f64> {
    stats.into_iter().map(|(key, s)| (key, s.mean)).collect()
}

/// Mean of the last [`LAST_ITERATIONS`] values of `series` (all, if fewer).
fn last_iterations_mean(series: &[(u64, f64)]) -> Option<f64> {
    let values: Vec<f64> = series.iter().map(|p| p.1).collect();
    stats::mean(&values[values.len().saturating_sub(LAST_ITERATIONS)..])
}

fn finite_max(values: &[f64]) -> Option<f64> {
    values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    pub(crate) fn record(estimator: &str, seed: u64, text: &str) -> RunRecord {
        RunRecord {
            estimator: estimator.into(),
            seed,
            metrics: MetricSeries::parse(text, Path::new("metrics.jsonl")).expect("parses"),
        }
    }

    /// Five iterations; agent `a` spikes at iteration 4 (6 > 3 × median[1, 1, 2] = 3).
    const RUN: &str = r#"{"iteration": 0, "eval/avg@2": 0.25, "eval/pass@2": 0.5}
{"iteration": 1, "reward/mean": 0.1, "grad_norm/agent/a": 1, "grad_norm/agent/b": 2, "advantage/amplification/a": 1.0}
{"iteration": 2, "reward/mean": 0.2, "grad_norm/agent/a": 1, "grad_norm/agent/b": 2, "advantage/amplification/a": 3.0}
{"iteration": 3, "reward/mean": 0.3, "grad_norm/agent/a": 2, "grad_norm/agent/b": 2, "advantage/amplification/a": null}
{"iteration": 4, "reward/mean": 0.6, "grad_norm/agent/a": 6, "grad_norm/agent/b": 2, "eval/avg@2": 0.5, "eval/pass@2": 1.0, "eval/src/avg@2": 0.9, "response_len/a": 20, "truncated_rate/a": 0.25}
{"iteration": 5, "reward/mean": 0.9, "advantage/reward_mean": 0.8, "invalid_rate/a": 0.25, "grad_norm/agent/a": 1, "grad_norm/agent/b": 2, "response_len/a": 40, "response_len_max/a": 64, "truncated_rate/a": 0.5}
"#;

    /// Three iterations under dynamic sampling with 4 prompts per batch.
    const DYNAMIC: &str = r#"{"iteration": 1, "reward/mean": 0.1, "dynamic_sampling/generated_groups": 12, "dynamic_sampling/kept_groups": 0}
{"iteration": 2, "reward/mean": 0.2, "dynamic_sampling/generated_groups": 8, "dynamic_sampling/kept_groups": 4}
{"iteration": 3, "reward/mean": 0.3, "dynamic_sampling/generated_groups": 12, "dynamic_sampling/kept_groups": 2}
"#;

    #[test]
    fn dynamic_sampling_counts_are_averaged_over_iterations() {
        let run = RunSummary::of(&record("drmas", 0, DYNAMIC).metrics);
        assert_eq!(run.generated_groups_mean, Some(32.0 / 3.0));
        assert_eq!(run.kept_groups_mean, Some(2.0));
        assert_eq!(run.iterations_without_groups, Some(1.0));
        let plain = RunSummary::of(&record("drmas", 0, RUN).metrics);
        assert_eq!(
            (plain.kept_groups_mean, plain.iterations_without_groups),
            (None, None)
        );
    }

    #[test]
    fn one_run_summarised_by_hand() {
        let run = RunSummary::of(&record("drmas", 0, RUN).metrics);
        assert_eq!(run.spikes["a"], 1);
        assert_eq!(run.spikes["b"], 0);
        assert_eq!(run.total_spikes(), 1);
        assert_eq!(run.grad_norm_max["a"], 6.0);
        assert_eq!(run.grad_norm_median["a"], 1.0);
        assert_eq!(run.final_reward, Some(0.9));
        // (0.3 + 0.6 + 0.9) / 3
        assert!((run.final_reward_last.unwrap_or(0.0) - 0.6).abs() < 1e-12);
        // Logged in one iteration only: its mean is that value.
        assert_eq!(run.trained_reward_last, Some(0.8));
        assert_eq!(run.invalid_rate_last["a"], 0.25);
        assert!(!run.invalid_rate_last.contains_key("b"));
        // Two iterations logged them: their means, not `response_len_max`'s.
        assert_eq!(run.response_len_last["a"], 30.0);
        assert_eq!(run.truncated_rate_last["a"], 0.375);
        assert_eq!(run.response_len_last.len(), 1);
        assert_eq!(run.eval_before["avg@2"], 0.25);
        assert_eq!(run.eval_final["avg@2"], 0.5);
        assert_eq!(run.eval_final["pass@2"], 1.0);
        assert!(
            !run.eval_final.contains_key("src/avg@2"),
            "only overall scores"
        );
        assert_eq!(run.amplification_mean["a"], 2.0);
        assert_eq!(run.amplification_max["a"], 3.0);
    }

    #[test]
    fn seeds_are_averaged() {
        let calm = RUN.replace("\"grad_norm/agent/a\": 6", "\"grad_norm/agent/a\": 2");
        let calm = calm.replace("\"reward/mean\": 0.9", "\"reward/mean\": 0.5");
        let calm = calm.replace(
            "\"advantage/amplification/a\": 3.0",
            "\"advantage/amplification/a\": 5.0",
        );
        let (a, b) = (record("grpo", 0, RUN), record("grpo", 1, &calm));
        let summary = EstimatorSummary::of("grpo", &[&a, &b]);
        assert_eq!(summary.seeds, [0, 1]);
        let spikes = summary.spikes_total.expect("spikes");
        assert_eq!((spikes.mean, spikes.n), (0.5, 2));
        assert!((spikes.std - 0.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(summary.grad_norm_max["a"], 4.0);
        let reward = summary.final_reward.expect("reward");
        assert!((reward.mean - 0.7).abs() < 1e-12);
        assert!((reward.std - 0.08f64.sqrt()).abs() < 1e-12);
        assert_eq!(summary.amplification_mean["a"], 2.5);
        assert_eq!(summary.amplification_max["a"], 5.0);
        assert_eq!(summary.eval_before["avg@2"].std, 0.0);
        assert_eq!(summary.roles(), ["a", "b"]);
    }
}
