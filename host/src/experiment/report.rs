//! The experiment's markdown report: the setup, one table per metric group, the figures, and
//! a short paragraph of facts read off the tables (no interpretation).

use std::collections::BTreeSet;
use std::fmt::Write;

use super::stats::{MeanStd, PairedTest, SPIKE_FACTOR, SPIKE_MIN_HISTORY};
use super::summary::{EstimatorSummary, RunSummary, LAST_ITERATIONS};

/// The comparisons the paired tests make when both estimators ran: (a, b, what a − b isolates).
pub const COMPARISONS: [(&str, &str, &str); 4] = [
    (
        "drmas",
        "grpo_step",
        "agent identity (per-agent vs global statistics, per-step scores)",
    ),
    (
        "grpo_step",
        "grpo",
        "step weighting (per-step vs per-trajectory scores, global)",
    ),
    (
        "drmas",
        "drmas_traj",
        "step weighting (per-step vs per-trajectory scores, per agent)",
    ),
    ("gigpo_drmas", "gigpo", "agent identity under GiGPO"),
];

/// What the report says about how the experiment was run.
#[derive(Debug, Clone, Default)]
pub struct ReportContext {
    /// The command line that produced it.
    pub command_line: String,
    /// The base run file.
    pub base_config: String,
    /// `[run] iterations` of every run.
    pub iterations: u32,
    /// `[rollout] prompts_per_batch` of every run.
    pub prompts_per_batch: usize,
    /// `[rollout] group_size` of every run.
    pub group_size: usize,
    /// The seeds every estimator ran with.
    pub seeds: Vec<u64>,
    /// The figures: (caption, path relative to the report).
    pub figures: Vec<(String, String)>,
}

/// What an empty cell shows.
const MISSING: &str = "–";

/// The spike definition, as the report states it.
pub fn spike_definition() -> String {
    format!(
        "An iteration is a **gradient-norm spike** for an agent when that agent's gradient norm \
         (`grad_norm/agent/ROLE`) exceeds {SPIKE_FACTOR}× the median of its own gradient norms \
         in all previous iterations of the run; an agent needs at least {SPIKE_MIN_HISTORY} \
         previous values before any iteration can count. Iterations where the agent had no \
         gradient (norm 0: all its advantages were 0, or it made no call) are neither spikes nor \
         history. Spikes are counted per run and agent."
    )
}

/// The whole report.
pub fn render(context: &ReportContext, summaries: &[EstimatorSummary]) -> String {
    let mut out = String::from("# Estimator experiment\n\n");
    let seeds: Vec<String> = context.seeds.iter().map(u64::to_string).collect();
    let _ = writeln!(out, "Command: `{}`\n", context.command_line);
    let _ = writeln!(
        out,
        "Base run file `{}`, with only `[algorithm] estimator`, `[run] seed` and \
         `[run] output_dir` replaced per run: {} iterations, prompts_per_batch = {}, \
         group_size = {}; seeds {}. Statistics are the mean over seeds ± the half-width of its 95 % \
         confidence interval (Student's t with seeds − 1 degrees of freedom; the mean alone for \
         one seed).\n",
        context.base_config,
        context.iterations,
        context.prompts_per_batch,
        context.group_size,
        seeds.join(", ")
    );
    facts(&mut out, summaries);
    spikes(&mut out, summaries);
    grad_norms(&mut out, summaries);
    rewards(&mut out, summaries);
    lengths(&mut out, summaries);
    dynamic_sampling(&mut out, summaries);
    evals(&mut out, summaries);
    paired(&mut out, summaries);
    amplification(&mut out, summaries);
    if !context.figures.is_empty() {
        out.push_str("## Figures\n\n");
        for (caption, path) in &context.figures {
            let _ = writeln!(out, "![{caption}]({path})\n");
        }
    }
    out
}

fn facts(out: &mut String, summaries: &[EstimatorSummary]) {
    let mut sentences = Vec::new();
    if let Some(sentence) = best(summaries, "Fewest gradient-norm spikes per run", 2, |s| {
        s.spikes_total.map(|m| (-m.mean, m))
    }) {
        sentences.push(sentence);
    }
    if let Some(sentence) = best(summaries, "Highest final training reward", 3, |s| {
        s.final_reward.map(|m| (m.mean, m))
    }) {
        sentences.push(sentence);
    }
    let avg_key = summaries
        .iter()
        .flat_map(|s| s.eval_final.keys())
        .find(|key| key.starts_with("avg@"))
        .cloned();
    if let Some(key) = avg_key {
        let label = format!("Highest final eval {key}");
        if let Some(sentence) = best(summaries, &label, 3, |s| {
            s.eval_final.get(&key).map(|m| (m.mean, *m))
        }) {
            sentences.push(sentence);
        }
    }
    if sentences.is_empty() {
        return;
    }
    out.push_str("## Summary\n\n");
    out.push_str(&sentences.join(" "));
    out.push_str("\n\n");
}

/// "LABEL: `a` (m ± s)." naming every estimator tied for the largest score.
fn best(
    summaries: &[EstimatorSummary],
    label: &str,
    digits: usize,
    score: impl Fn(&EstimatorSummary) -> Option<(f64, MeanStd)>,
) -> Option<String> {
    let scored: Vec<(&str, f64, MeanStd)> = summaries
        .iter()
        .filter_map(|s| score(s).map(|(key, m)| (s.estimator.as_str(), key, m)))
        .collect();
    let top = scored.iter().map(|s| s.1).reduce(f64::max)?;
    let winners: Vec<String> = scored
        .iter()
        .filter(|s| s.1 == top)
        .map(|(name, _, m)| format!("`{name}` ({})", m.render(digits)))
        .collect();
    Some(format!(
        "{label} (mean over seeds): {}.",
        winners.join(" and ")
    ))
}

fn roles(summaries: &[EstimatorSummary]) -> Vec<String> {
    let roles: BTreeSet<String> = summaries.iter().flat_map(|s| s.roles()).collect();
    roles.into_iter().collect()
}

fn table(out: &mut String, header: &[String], rows: Vec<Vec<String>>) {
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(header.len()));
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
}

fn cell(value: Option<&MeanStd>, digits: usize) -> String {
    value.map_or(MISSING.to_string(), |m| m.render(digits))
}

fn number(value: Option<&f64>) -> String {
    value.map_or(MISSING.to_string(), |v| significant(*v))
}

/// `value` to three significant digits; scientific notation outside [1e-3, 1e4), where
/// gradient norms of 10⁵ next to norms of 1 must stay readable.
fn significant(value: f64) -> String {
    let magnitude = value.abs();
    if value == 0.0 || !value.is_finite() {
        value.to_string()
    } else if !(1e-3..1e4).contains(&magnitude) {
        format!("{value:.2e}")
    } else {
        let decimals = (2 - magnitude.log10().floor() as i64).max(0) as usize;
        format!("{value:.decimals$}")
    }
}

fn spikes(out: &mut String, summaries: &[EstimatorSummary]) {
    out.push_str("## Gradient-norm spikes\n\n");
    out.push_str(&spike_definition());
    out.push_str("\n\n");
    let roles = roles(summaries);
    let mut header = vec![
        "estimator".to_string(),
        "spikes per run, all agents".to_string(),
    ];
    header.extend(roles.iter().map(|r| format!("spikes `{r}`")));
    let rows = summaries
        .iter()
        .map(|s| {
            let mut row = vec![
                format!("`{}`", s.estimator),
                cell(s.spikes_total.as_ref(), 2),
            ];
            row.extend(roles.iter().map(|r| cell(s.spikes.get(r), 2)));
            row
        })
        .collect();
    table(out, &header, rows);
}

fn grad_norms(out: &mut String, summaries: &[EstimatorSummary]) {
    out.push_str("## Per-agent gradient norms\n\n");
    out.push_str(
        "Largest and median `grad_norm/agent/ROLE` over a run's iterations, mean over seeds.\n\n",
    );
    let roles = roles(summaries);
    let mut header = vec!["estimator".to_string()];
    for role in &roles {
        header.push(format!("max `{role}`"));
        header.push(format!("median `{role}`"));
    }
    let rows = summaries
        .iter()
        .map(|s| {
            let mut row = vec![format!("`{}`", s.estimator)];
            for role in &roles {
                row.push(number(s.grad_norm_max.get(role)));
                row.push(number(s.grad_norm_median.get(role)));
            }
            row
        })
        .collect();
    table(out, &header, rows);
}

fn rewards(out: &mut String, summaries: &[EstimatorSummary]) {
    out.push_str("## Training reward\n\n");
    let _ = writeln!(
        out,
        "`reward/mean` is the environment's reward over the rollout's episodes; \
         `advantage/reward_mean` is the penalised reward (invalid-format penalty and overlong \
         shaping applied) of the calls the estimator trained on (under dynamic sampling, only \
         the kept groups', which are the ones whose rewards differ), over the last \
         {LAST_ITERATIONS} iterations that trained on any call; `invalid_rate/ROLE` is the \
         share of an agent's calls whose output had no valid format. \"Last \
         {LAST_ITERATIONS}\": mean of the last {LAST_ITERATIONS} iterations (all, if fewer).\n"
    );
    let roles: BTreeSet<&String> = summaries
        .iter()
        .flat_map(|s| s.invalid_rate_last.keys())
        .collect();
    let mut header = vec![
        "estimator".to_string(),
        "`reward/mean`, last iteration".to_string(),
        format!("`reward/mean`, last {LAST_ITERATIONS}"),
        format!("`advantage/reward_mean`, last {LAST_ITERATIONS} trained"),
    ];
    header.extend(
        roles
            .iter()
            .map(|r| format!("`invalid_rate/{r}`, last {LAST_ITERATIONS}")),
    );
    let rows = summaries
        .iter()
        .map(|s| {
            let mut row = vec![
                format!("`{}`", s.estimator),
                cell(s.final_reward.as_ref(), 3),
                cell(s.final_reward_last.as_ref(), 3),
                cell(s.trained_reward_last.as_ref(), 3),
            ];
            row.extend(roles.iter().map(|r| cell(s.invalid_rate_last.get(*r), 3)));
            row
        })
        .collect();
    table(out, &header, rows);
}

fn lengths(out: &mut String, summaries: &[EstimatorSummary]) {
    let roles: BTreeSet<&String> = summaries
        .iter()
        .flat_map(|s| s.response_len_last.keys())
        .collect();
    if roles.is_empty() {
        return;
    }
    out.push_str("## Response lengths\n\n");
    let _ = writeln!(
        out,
        "Each agent's mean response length in tokens (`response_len/ROLE`) and share of calls \
         cut off at its `max_new_tokens` (`truncated_rate/ROLE`; runs from before that key \
         show {MISSING}), last {LAST_ITERATIONS} iterations: what an estimator's or a loss \
         aggregation's length bias moves.\n"
    );
    let mut header = vec!["estimator".to_string()];
    for role in &roles {
        header.push(format!("`response_len/{role}`"));
        header.push(format!("`truncated_rate/{role}`"));
    }
    let rows = summaries
        .iter()
        .map(|s| {
            let mut row = vec![format!("`{}`", s.estimator)];
            for role in &roles {
                row.push(cell(s.response_len_last.get(*role), 1));
                row.push(cell(s.truncated_rate_last.get(*role), 3));
            }
            row
        })
        .collect();
    table(out, &header, rows);
}

fn dynamic_sampling(out: &mut String, summaries: &[EstimatorSummary]) {
    if summaries.iter().all(|s| s.kept_groups_mean.is_none()) {
        return;
    }
    out.push_str(
        "## Dynamic sampling

",
    );
    out.push_str(
        "Prompt groups rolled out and kept for training per iteration (mean over a run's \
         iterations), and the iterations that kept none and so changed no weights.\n\n",
    );
    let header = [
        "estimator",
        "groups rolled out per iteration",
        "groups trained on per iteration",
        "iterations without a group",
    ]
    .map(String::from);
    let rows = summaries
        .iter()
        .map(|s| {
            vec![
                format!("`{}`", s.estimator),
                cell(s.generated_groups_mean.as_ref(), 2),
                cell(s.kept_groups_mean.as_ref(), 2),
                cell(s.iterations_without_groups.as_ref(), 2),
            ]
        })
        .collect();
    table(out, &header, rows);
}

fn evals(out: &mut String, summaries: &[EstimatorSummary]) {
    let keys: BTreeSet<&String> = summaries
        .iter()
        .flat_map(|s| s.eval_before.keys().chain(s.eval_final.keys()))
        .collect();
    if keys.is_empty() {
        return;
    }
    out.push_str("## Evaluation\n\n");
    out.push_str("Before training (iteration 0) and at the last evaluation.\n\n");
    let mut header = vec!["estimator".to_string()];
    for key in &keys {
        header.push(format!("{key} before"));
        header.push(format!("{key} final"));
    }
    let rows = summaries
        .iter()
        .map(|s| {
            let mut row = vec![format!("`{}`", s.estimator)];
            for key in &keys {
                row.push(cell(s.eval_before.get(*key), 3));
                row.push(cell(s.eval_final.get(*key), 3));
            }
            row
        })
        .collect();
    table(out, &header, rows);
}

/// How a paired comparison reads one outcome off a run.
type Outcome = Box<dyn Fn(&RunSummary) -> Option<f64>>;

/// The outcomes compared seed by seed: the final evals, then the training reward.
fn paired_outcomes(summaries: &[EstimatorSummary]) -> Vec<(String, Outcome)> {
    let eval_keys: BTreeSet<String> = summaries
        .iter()
        .flat_map(|s| s.eval_final.keys().cloned())
        .collect();
    let mut outcomes: Vec<(String, Outcome)> = eval_keys
        .into_iter()
        .map(|key| {
            let label = format!("eval {key} final");
            let read: Outcome = Box::new(move |run| run.eval_final.get(&key).copied());
            (label, read)
        })
        .collect();
    outcomes.push((
        format!("`reward/mean`, last {LAST_ITERATIONS}"),
        Box::new(|run| run.final_reward_last),
    ));
    outcomes
}

fn paired(out: &mut String, summaries: &[EstimatorSummary]) {
    let find = |name: &str| summaries.iter().find(|s| s.estimator == name);
    let mut rows = Vec::new();
    for (a, b, isolates) in COMPARISONS {
        let (Some(first), Some(second)) = (find(a), find(b)) else {
            continue;
        };
        for (label, read) in paired_outcomes(summaries) {
            let pairs: Vec<(f64, f64)> = first
                .runs
                .iter()
                .filter_map(|(seed, run)| Some((read(run)?, read(second.runs.get(seed)?)?)))
                .collect();
            let Some(test) = PairedTest::of(&pairs) else {
                continue;
            };
            rows.push(vec![
                format!("`{a}` − `{b}`: {isolates}"),
                label,
                format!("{:+.3} ± {:.3}", test.mean, test.ci95),
                test.t.map_or_else(|| "—".into(), |t| format!("{t:.2}")),
                test.p().map_or_else(|| "—".into(), |p| format!("{p:.3}")),
                test.n.to_string(),
            ]);
        }
    }
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "## Paired comparisons

",
    );
    out.push_str(
        "Seed by seed (the same seed samples the same first rollouts under every estimator): the \
         mean difference with its 95 % interval, and the paired t-test's two-sided p-value. An \
         interval that contains 0 (p ≥ 0.05) means these seeds cannot tell the two apart. When \
         every seed differs by the same nonzero amount (two evals one sample apart in each seed) \
         the t-test has no spread to weigh the difference against: t and p read —, and only more \
         seeds can tell.\n\n",
    );
    let header: Vec<String> = ["comparison", "metric", "mean difference", "t", "p", "seeds"]
        .map(String::from)
        .to_vec();
    table(out, &header, rows);
}

fn amplification(out: &mut String, summaries: &[EstimatorSummary]) {
    let roles: Vec<String> = roles(summaries)
        .into_iter()
        .filter(|r| {
            summaries
                .iter()
                .any(|s| s.amplification_mean.contains_key(r))
        })
        .collect();
    if roles.is_empty() {
        return;
    }
    out.push_str("## Measured amplification\n\n");
    out.push_str(
        "`advantage/amplification/ROLE` per iteration: its mean over a run (then over seeds) and \
         its largest value over every run.\n\n",
    );
    let mut header = vec!["estimator".to_string()];
    for role in &roles {
        header.push(format!("mean `{role}`"));
        header.push(format!("max `{role}`"));
    }
    let rows = summaries
        .iter()
        .map(|s| {
            let mut row = vec![format!("`{}`", s.estimator)];
            for role in &roles {
                row.push(number(s.amplification_mean.get(role)));
                row.push(number(s.amplification_max.get(role)));
            }
            row
        })
        .collect();
    table(out, &header, rows);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn stats(mean: f64, std: f64) -> MeanStd {
        MeanStd { mean, std, n: 2 }
    }

    fn summary(name: &str, spikes: f64, reward: f64) -> EstimatorSummary {
        EstimatorSummary {
            estimator: name.into(),
            seeds: vec![0, 1],
            spikes_total: Some(stats(spikes, 1.0)),
            spikes: BTreeMap::from([("solver".into(), stats(spikes, 1.0))]),
            grad_norm_max: BTreeMap::from([("solver".into(), 12.5)]),
            grad_norm_median: BTreeMap::from([("solver".into(), 0.00025)]),
            final_reward: Some(stats(reward, 0.05)),
            final_reward_last: Some(stats(reward, 0.0)),
            trained_reward_last: Some(stats(reward - 0.1, 0.0)),
            invalid_rate_last: BTreeMap::from([("solver".into(), stats(0.25, 0.1))]),
            response_len_last: BTreeMap::new(),
            truncated_rate_last: BTreeMap::new(),
            eval_before: BTreeMap::from([("avg@2".into(), stats(0.1, 0.0))]),
            eval_final: BTreeMap::from([("avg@2".into(), stats(reward, 0.0))]),
            amplification_mean: BTreeMap::from([("solver".into(), 1.5)]),
            amplification_max: BTreeMap::from([("solver".into(), 4.0)]),
            generated_groups_mean: None,
            kept_groups_mean: None,
            iterations_without_groups: None,
            runs: BTreeMap::new(),
        }
    }

    #[test]
    fn the_report_states_setup_tables_figures_and_facts() {
        let context = ReportContext {
            command_line: "drmas-host experiment --config base.toml".into(),
            base_config: "base.toml".into(),
            iterations: 12,
            prompts_per_batch: 4,
            group_size: 4,
            seeds: vec![0, 1],
            figures: vec![("reward".into(), "reward.png".into())],
        };
        let text = render(
            &context,
            &[summary("grpo", 2.0, 0.25), summary("drmas", 0.5, 0.5)],
        );
        for needle in [
            "Command: `drmas-host experiment --config base.toml`",
            "12 iterations, prompts_per_batch = 4, group_size = 4; seeds 0, 1",
            "exceeds 3× the median",
            "seeds 0, 1. Statistics are the mean over seeds ± the half-width of its 95 % \
             confidence interval",
            "| `grpo` | 2.00 ± 8.98 | 2.00 ± 8.98 |",
            "| `drmas` | 12.5 | 2.50e-4 |",
            "| `drmas` | 0.500 ± 0.449 | 0.500 ± 0.000 | 0.400 ± 0.000 | 0.250 ± 0.898 |",
            "`advantage/reward_mean`, last 3 trained | `invalid_rate/solver`, last 3 |",
            "| estimator | avg@2 before | avg@2 final |",
            "| `grpo` | 0.100 ± 0.000 | 0.250 ± 0.000 |",
            "| `grpo` | 1.50 | 4.00 |",
            "![reward](reward.png)",
            "Fewest gradient-norm spikes per run (mean over seeds): `drmas` (0.50 ± 8.98).",
            "Highest final training reward (mean over seeds): `drmas` (0.500 ± 0.449).",
            "Highest final eval avg@2 (mean over seeds): `drmas` (0.500 ± 0.000).",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn paired_comparisons_test_seed_by_seed_differences() {
        // drmas beats grpo_step by 1, 2, 3, 4, 5 (eval avg@2 × 10 … as numbers) over five
        // seeds: mean 3, t = 3√2 with 4 degrees of freedom. Its training reward is 0.25 above
        // in every seed: no spread, so no t-test.
        let run = |eval: f64, reward: f64| RunSummary {
            eval_final: BTreeMap::from([("avg@2".into(), eval)]),
            final_reward_last: Some(reward),
            ..RunSummary::default()
        };
        let mut drmas = summary("drmas", 0.0, 0.5);
        let mut step = summary("grpo_step", 0.0, 0.5);
        for seed in 0..5u64 {
            let d = seed as f64 + 1.0;
            drmas.runs.insert(seed, run(10.0 + d, 0.75));
            step.runs.insert(seed, run(10.0, 0.5));
        }
        // A seed only one estimator ran is not paired.
        drmas.runs.insert(9, run(100.0, 0.5));
        let text = render(&ReportContext::default(), &[step, drmas]);
        for needle in [
            "## Paired comparisons",
            "| `drmas` − `grpo_step`: agent identity (per-agent vs global statistics, per-step \
             scores) | eval avg@2 final | +3.000 ± 1.963 | 4.24 | 0.013 | 5 |",
            "| `drmas` − `grpo_step`: agent identity (per-agent vs global statistics, per-step \
             scores) | `reward/mean`, last 3 | +0.250 ± 0.000 | — | — | 5 |",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn dynamic_sampling_counts_get_a_table_only_when_logged() {
        let plain = render(&ReportContext::default(), &[summary("drmas", 0.0, 0.5)]);
        assert!(!plain.contains("## Dynamic sampling"), "{plain}");
        let dynamic = EstimatorSummary {
            generated_groups_mean: Some(stats(10.0, 1.0)),
            kept_groups_mean: Some(stats(3.5, 0.0)),
            iterations_without_groups: Some(stats(1.0, 0.0)),
            ..summary("drmas", 0.0, 0.5)
        };
        let text = render(&ReportContext::default(), &[dynamic]);
        for needle in [
            "## Dynamic sampling",
            "| estimator | groups rolled out per iteration | groups trained on per iteration | \
             iterations without a group |",
            "| `drmas` | 10.00 ± 8.98 | 3.50 ± 0.00 | 1.00 ± 0.00 |",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn response_lengths_get_a_table_only_when_logged() {
        let plain = render(&ReportContext::default(), &[summary("drmas", 0.0, 0.5)]);
        assert!(!plain.contains("## Response lengths"), "{plain}");
        let logged = EstimatorSummary {
            response_len_last: BTreeMap::from([("solver".into(), stats(41.25, 0.0))]),
            truncated_rate_last: BTreeMap::from([("solver".into(), stats(0.125, 0.0))]),
            ..summary("drmas", 0.0, 0.5)
        };
        // A run from before `truncated_rate` logged lengths only.
        let older = EstimatorSummary {
            response_len_last: BTreeMap::from([("solver".into(), stats(80.0, 0.0))]),
            ..summary("grpo", 0.0, 0.5)
        };
        let text = render(&ReportContext::default(), &[logged, older]);
        for needle in [
            "## Response lengths",
            "| estimator | `response_len/solver` | `truncated_rate/solver` |",
            "| `drmas` | 41.2 ± 0.0 | 0.125 ± 0.000 |",
            "| `grpo` | 80.0 ± 0.0 | – |",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn numbers_keep_three_significant_digits() {
        for (value, text) in [
            (51053.8471, "5.11e4"),
            (1.6757, "1.68"),
            (0.5743, "0.574"),
            (12.5, "12.5"),
            (-0.0005, "-5.00e-4"),
            (0.0, "0"),
        ] {
            assert_eq!(significant(value), text);
        }
    }

    #[test]
    fn ties_name_every_estimator() {
        let text = render(
            &ReportContext::default(),
            &[summary("grpo", 1.0, 0.5), summary("drmas", 1.0, 0.5)],
        );
        assert!(
            text.contains("spikes per run (mean over seeds): `grpo` (1.00 ± 8.98) and `drmas`"),
            "{text}"
        );
    }
}
