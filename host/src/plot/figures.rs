//! Which charts a run gets and what each shows, built from its metrics.
//!
//! - `reward.png`: `reward/mean` with a `± reward/std` band, and every `eval/avg@K` and
//!   `eval/pass@K` as marked lines (evals are sparse).
//! - `grad_norm.png`: one solid line per `grad_norm/agent/NAME`, one dashed line per
//!   `grad_norm/group/NAME`; log-scale y when the norms span more than two decades.
//! - `amplification.png`: one line per `advantage/amplification/NAME`.
//! - `format.png`: one solid line per `invalid_rate/NAME` (the share of an agent's calls whose
//!   output had an invalid format), one dashed line in the agent's colour per
//!   `truncated_rate/NAME` (its calls cut off at `max_new_tokens`, which usually fail their
//!   format), and one dashed line per environment rate (`env/NAME` whose
//!   values all lie in [0, 1], such as the math task's `env/answered`): what a small model learns
//!   first, while its reward still barely moves.
//! - `kl.png`: how far the policy drifted from its reference, one solid line per
//!   `kl_in_reward/kl/NAME` (the KL the rewards paid) and one dashed line per `loss/kl/NAME` that
//!   is not all 0 (the loss's KL term); only for runs with either.
//!
//! An agent keeps its colour across charts.

use std::collections::BTreeMap;

use super::chart::{Band, Chart, Line, Stroke, YScale};
use super::series::MetricSeries;

/// Mean training reward per iteration.
pub const REWARD_MEAN: &str = "reward/mean";
/// Mean penalised reward of the calls an iteration trained on.
pub const TRAINED_REWARD_MEAN: &str = "advantage/reward_mean";
/// Calls an iteration trained on.
pub const TRAINED_CALLS: &str = "advantage/calls";
/// Prefix of the per-agent share of calls whose output had an invalid format.
pub const INVALID_RATE_PREFIX: &str = "invalid_rate/";
/// Prefix of the per-agent share of calls cut off at their `max_new_tokens`.
pub const TRUNCATED_RATE_PREFIX: &str = "truncated_rate/";
/// Standard deviation of the training reward per iteration.
pub const REWARD_STD: &str = "reward/std";
/// Prefix of the eval scores (`eval/avg@4`, `eval/pass@4`, ...).
pub const EVAL_PREFIX: &str = "eval/";
/// Prefix of per-agent gradient norms.
pub const GRAD_NORM_AGENT_PREFIX: &str = "grad_norm/agent/";
/// Prefix of per-worker-group gradient norms.
pub const GRAD_NORM_GROUP_PREFIX: &str = "grad_norm/group/";
/// Prefix of per-agent advantage amplification.
pub const AMPLIFICATION_PREFIX: &str = "advantage/amplification/";
/// Prefix of the per-agent KL against the reference that the rewards paid.
pub const KL_IN_REWARD_PREFIX: &str = "kl_in_reward/kl/";
/// Prefix of the per-worker-group KL term of the loss.
pub const LOSS_KL_PREFIX: &str = "loss/kl/";
/// Prefix of the environment's episode metrics.
pub const ENV_PREFIX: &str = "env/";
/// Prompt groups an iteration rolled out under dynamic sampling.
pub const GENERATED_GROUPS: &str = "dynamic_sampling/generated_groups";
/// Prompt groups an iteration kept for training under dynamic sampling.
pub const KEPT_GROUPS: &str = "dynamic_sampling/kept_groups";

const X_LABEL: &str = "iteration";

/// Every chart of a run, by file name; some may be empty.
pub fn all(metrics: &MetricSeries) -> Vec<(&'static str, Chart)> {
    let colors = AgentColors::new(metrics);
    vec![
        ("reward.png", reward(metrics)),
        ("grad_norm.png", grad_norm(metrics, &colors)),
        ("amplification.png", amplification(metrics, &colors)),
        ("format.png", format(metrics, &colors)),
        ("kl.png", kl(metrics, &colors)),
    ]
}

/// Reward per iteration with its spread, and eval scores.
pub fn reward(metrics: &MetricSeries) -> Chart {
    let mut chart = Chart::new("Reward", X_LABEL, "reward / score");
    if let Some(mean) = metrics.series(REWARD_MEAN) {
        if let Some(std) = metrics.series(REWARD_STD) {
            let std: BTreeMap<u64, f64> = std.iter().copied().collect();
            let points = mean
                .iter()
                .filter_map(|&(iteration, mean)| {
                    let std = std.get(&iteration)?;
                    Some((iteration as i64, mean - std, mean + std))
                })
                .collect();
            chart.bands.push(Band {
                label: "reward ± std".to_string(),
                points,
                color: 0,
            });
        }
        chart.lines.push(Line {
            label: "reward (mean)".to_string(),
            points: points(mean),
            stroke: Stroke::Solid,
            color: 0,
        });
    }
    let evals = metrics
        .with_prefix(EVAL_PREFIX)
        .filter(|(name, _)| name.starts_with("avg@") || name.starts_with("pass@"));
    for (color, (name, series)) in (1..).zip(evals) {
        chart.lines.push(Line {
            label: format!("eval {name}"),
            points: points(series),
            stroke: Stroke::Marked,
            color,
        });
    }
    chart
}

/// Gradient norm per agent (solid) and per worker group (dashed).
pub fn grad_norm(metrics: &MetricSeries, colors: &AgentColors) -> Chart {
    let title = if metrics.with_prefix(GRAD_NORM_GROUP_PREFIX).next().is_some() {
        "Gradient norm: agents (solid), worker groups (dashed)"
    } else {
        "Gradient norm per agent"
    };
    let mut chart = Chart::new(title, X_LABEL, "gradient L2 norm");
    chart.y_scale = YScale::Auto;
    push_agent_lines(
        &mut chart,
        (metrics, GRAD_NORM_AGENT_PREFIX),
        colors,
        Stroke::Solid,
        |agent| agent.to_string(),
    );
    push_dashed_lines(
        &mut chart,
        metrics.with_prefix(GRAD_NORM_GROUP_PREFIX),
        colors,
        |group| format!("group {group}"),
    );
    chart
}

/// Advantage amplification per agent.
pub fn amplification(metrics: &MetricSeries, colors: &AgentColors) -> Chart {
    let mut chart = Chart::new(
        "Advantage amplification per agent",
        X_LABEL,
        "amplification",
    );
    push_agent_lines(
        &mut chart,
        (metrics, AMPLIFICATION_PREFIX),
        colors,
        Stroke::Solid,
        |agent| agent.to_string(),
    );
    chart
}

/// Each agent's invalid-format rate (solid) and share of calls cut off at their
/// `max_new_tokens` (dashed, same colour), and the environment's rates (dashed).
pub fn format(metrics: &MetricSeries, colors: &AgentColors) -> Chart {
    let mut chart = Chart::new(
        "Format per agent: invalid (solid), cut off (dashed); environment rates (dashed)",
        X_LABEL,
        "share",
    );
    push_agent_lines(
        &mut chart,
        (metrics, INVALID_RATE_PREFIX),
        colors,
        Stroke::Solid,
        |agent| format!("{agent} invalid"),
    );
    push_agent_lines(
        &mut chart,
        (metrics, TRUNCATED_RATE_PREFIX),
        colors,
        Stroke::Dashed,
        |agent| format!("{agent} cut off"),
    );
    let rates = metrics
        .with_prefix(ENV_PREFIX)
        .filter(|(_, series)| series.iter().all(|&(_, v)| (0.0..=1.0).contains(&v)));
    push_dashed_lines(&mut chart, rates, colors, |name| name.to_string());
    chart
}

/// The KL to the reference per agent, as the rewards paid it (solid), and per worker group, as
/// the loss's term measured it (dashed; groups whose term was always 0 are left out).
pub fn kl(metrics: &MetricSeries, colors: &AgentColors) -> Chart {
    let mut chart = Chart::new(
        "KL to the reference: in the reward per agent (solid), in the loss per group (dashed)",
        X_LABEL,
        "KL per token",
    );
    push_agent_lines(
        &mut chart,
        (metrics, KL_IN_REWARD_PREFIX),
        colors,
        Stroke::Solid,
        |agent| agent.to_string(),
    );
    let terms = metrics
        .with_prefix(LOSS_KL_PREFIX)
        .filter(|(_, series)| series.iter().any(|&(_, v)| v != 0.0));
    push_dashed_lines(&mut chart, terms, colors, |group| format!("loss {group}"));
    chart
}

/// One palette index per agent name, the same in every chart.
#[derive(Debug, Clone, Default)]
pub struct AgentColors {
    names: Vec<String>,
}

impl AgentColors {
    /// Every agent named by a per-agent key, sorted.
    pub fn new(metrics: &MetricSeries) -> Self {
        let mut names: Vec<String> = metrics
            .with_prefix(GRAD_NORM_AGENT_PREFIX)
            .chain(metrics.with_prefix(AMPLIFICATION_PREFIX))
            .chain(metrics.with_prefix(INVALID_RATE_PREFIX))
            .map(|(name, _)| name.to_string())
            .collect();
        names.sort();
        names.dedup();
        Self { names }
    }

    /// The palette index of an agent (past the known ones if it is not among them).
    pub fn agent(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|known| known == name)
            .unwrap_or(self.names.len())
    }

    /// How many agents have a colour; further colours are free for other lines.
    pub fn agents(&self) -> usize {
        self.names.len()
    }
}

/// One solid line per agent key under `prefix`, in the agent's colour, labelled by `label`.
fn push_agent_lines(
    chart: &mut Chart,
    (metrics, prefix): (&MetricSeries, &str),
    colors: &AgentColors,
    stroke: Stroke,
    label: impl Fn(&str) -> String,
) {
    for (agent, series) in metrics.with_prefix(prefix) {
        chart.lines.push(Line {
            label: label(agent),
            points: points(series),
            stroke,
            color: colors.agent(agent),
        });
    }
}

/// One dashed line per named series (a worker group's, an environment rate's), in the colours
/// after the agents', labelled by `label`.
fn push_dashed_lines<'a>(
    chart: &mut Chart,
    named: impl Iterator<Item = (&'a str, &'a [(u64, f64)])>,
    colors: &AgentColors,
    label: impl Fn(&str) -> String,
) {
    for (index, (name, series)) in named.enumerate() {
        chart.lines.push(Line {
            label: label(name),
            points: points(series),
            stroke: Stroke::Dashed,
            color: colors.agents() + index,
        });
    }
}

fn points(series: &[(u64, f64)]) -> Vec<(i64, f64)> {
    series
        .iter()
        .map(|&(iteration, value)| (iteration as i64, value))
        .collect()
}
