//! The experiment's charts: per-agent gradient norms per estimator (one line per seed and
//! agent) and the training reward of every estimator (mean over seeds).

use std::collections::BTreeMap;

use super::runs::RunRecord;
use crate::plot::chart::{Chart, Line, Stroke, YScale};
use crate::plot::figures::{GRAD_NORM_AGENT_PREFIX, REWARD_MEAN};

/// The file name of an estimator's gradient-norm chart.
pub fn grad_norm_file(estimator: &str) -> String {
    format!("grad_norm-{estimator}.png")
}

/// The file name of the reward chart.
pub const REWARD_FILE: &str = "reward.png";

/// Every chart of the experiment, as (file name, caption, chart); `records` may hold several
/// estimators, each chart takes its own.
pub fn all(estimators: &[String], records: &[RunRecord]) -> Vec<(String, String, Chart)> {
    let mut charts = vec![(
        REWARD_FILE.to_string(),
        "Training reward per iteration, mean over seeds".to_string(),
        reward(estimators, records),
    )];
    for estimator in estimators {
        charts.push((
            grad_norm_file(estimator),
            format!("Per-agent gradient norm, `{estimator}`, every seed"),
            grad_norm(estimator, records),
        ));
    }
    charts
}

/// `reward/mean` per iteration, one line per estimator, averaged over its seeds.
pub fn reward(estimators: &[String], records: &[RunRecord]) -> Chart {
    let mut chart = Chart::new(
        "Training reward (mean over seeds)",
        "iteration",
        "reward/mean",
    );
    for (color, estimator) in estimators.iter().enumerate() {
        let mut by_iteration: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for record in records.iter().filter(|r| &r.estimator == estimator) {
            for &(iteration, value) in record.metrics.series(REWARD_MEAN).unwrap_or_default() {
                by_iteration.entry(iteration).or_default().push(value);
            }
        }
        chart.lines.push(Line {
            label: estimator.clone(),
            points: by_iteration
                .into_iter()
                .map(|(i, values)| (i as i64, values.iter().sum::<f64>() / values.len() as f64))
                .collect(),
            stroke: Stroke::Solid,
            color,
        });
    }
    chart
}

/// `grad_norm/agent/ROLE` per iteration for one estimator: one line per seed and agent, an
/// agent's seeds in one stroke per seed.
pub fn grad_norm(estimator: &str, records: &[RunRecord]) -> Chart {
    let mut chart = Chart::new(
        &format!("Per-agent gradient norm: {estimator}"),
        "iteration",
        "gradient L2 norm",
    );
    chart.y_scale = YScale::Auto;
    let strokes = [Stroke::Solid, Stroke::Dashed, Stroke::Marked];
    let mut roles: Vec<String> = Vec::new();
    for (index, record) in records
        .iter()
        .filter(|r| r.estimator == estimator)
        .enumerate()
    {
        for (role, series) in record.metrics.with_prefix(GRAD_NORM_AGENT_PREFIX) {
            let color = match roles.iter().position(|r| r == role) {
                Some(position) => position,
                None => {
                    roles.push(role.to_string());
                    roles.len() - 1
                }
            };
            chart.lines.push(Line {
                label: format!("{role}, seed {}", record.seed),
                points: series.iter().map(|&(i, v)| (i as i64, v)).collect(),
                stroke: strokes[index % strokes.len()],
                color,
            });
        }
    }
    chart
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::plot::MetricSeries;

    fn record(estimator: &str, seed: u64, text: &str) -> RunRecord {
        RunRecord {
            estimator: estimator.into(),
            seed,
            metrics: MetricSeries::parse(text, Path::new("m")).expect("parses"),
        }
    }

    #[test]
    fn reward_is_averaged_over_seeds_and_norms_get_a_line_per_seed_and_agent() {
        let line = |r: f64| {
            format!(
                "{{\"iteration\": 1, \"reward/mean\": {r}, \"grad_norm/agent/a\": 1, \
                 \"grad_norm/agent/b\": 2}}"
            )
        };
        let records = [
            record("grpo", 0, &line(0.2)),
            record("grpo", 1, &line(0.4)),
            record("drmas", 0, &line(1.0)),
        ];
        let estimators = ["grpo".to_string(), "drmas".to_string()];
        let reward = reward(&estimators, &records);
        assert_eq!(reward.lines.len(), 2);
        assert_eq!(reward.lines[0].points.len(), 1);
        assert!((reward.lines[0].points[0].1 - 0.3).abs() < 1e-12);
        let norms = grad_norm("grpo", &records);
        let labels: Vec<&str> = norms.lines.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["a, seed 0", "b, seed 0", "a, seed 1", "b, seed 1"]);
        assert_eq!(norms.lines[2].color, 0, "an agent keeps its colour");
        assert_eq!(
            norms.lines[2].stroke,
            Stroke::Dashed,
            "a seed has its stroke"
        );
        let files: Vec<String> = all(&estimators, &records)
            .into_iter()
            .map(|c| c.0)
            .collect();
        assert_eq!(
            files,
            ["reward.png", "grad_norm-grpo.png", "grad_norm-drmas.png"]
        );
    }
}
