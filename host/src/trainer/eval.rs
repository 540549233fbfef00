//! avg@k and pass@k per data source, from k episodes per question.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A sample counts as solved when its reward reaches this (full credit).
pub const SOLVED_REWARD: f64 = 1.0 - 1e-9;

/// The scores of one data source (or of all of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceScore {
    /// Questions evaluated.
    pub questions: usize,
    /// Samples per question.
    pub k: usize,
    /// Mean over questions of the fraction of its k samples that were solved.
    pub avg_at_k: f64,
    /// Fraction of questions with at least one solved sample among k.
    pub pass_at_k: f64,
    /// Mean reward over every sample.
    pub mean_reward: f64,
}

/// An evaluation: per data source and overall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Scores per data source.
    pub sources: BTreeMap<String, SourceScore>,
    /// Scores over every question.
    pub overall: SourceScore,
    /// Episodes that failed (a plugin call of theirs failed, within `[rollout]
    /// max_episode_failure_rate`); each is scored as reward 0.
    pub failed_episodes: usize,
}

/// Where a run folder keeps the evaluation after `iteration` (0: before training).
pub fn eval_path(run_dir: &Path, iteration: u32) -> PathBuf {
    run_dir
        .join("eval")
        .join(format!("iteration_{iteration:05}.json"))
}

/// Scores `rewards[q]` (the k rewards of question q) with `sources[q]` its data source.
///
/// # Panics
/// If the slices differ in length or a question has a different number of samples than the
/// first.
pub fn score(sources: &[&str], rewards: &[Vec<f64>]) -> EvalReport {
    assert_eq!(sources.len(), rewards.len(), "one source per question");
    let mut by_source: BTreeMap<String, Vec<&[f64]>> = BTreeMap::new();
    for (source, samples) in sources.iter().zip(rewards) {
        by_source
            .entry((*source).to_owned())
            .or_default()
            .push(samples);
    }
    let all: Vec<&[f64]> = rewards.iter().map(Vec::as_slice).collect();
    EvalReport {
        sources: by_source
            .into_iter()
            .map(|(source, questions)| (source, score_questions(&questions)))
            .collect(),
        overall: score_questions(&all),
        failed_episodes: 0,
    }
}

fn score_questions(questions: &[&[f64]]) -> SourceScore {
    let k = questions.first().map_or(0, |q| q.len());
    assert!(
        questions.iter().all(|q| q.len() == k),
        "every question needs k samples"
    );
    let n = questions.len().max(1) as f64;
    let solved = |r: &f64| *r >= SOLVED_REWARD;
    let fraction = |q: &[f64]| q.iter().filter(|r| solved(r)).count() as f64 / k.max(1) as f64;
    SourceScore {
        questions: questions.len(),
        k,
        avg_at_k: questions.iter().map(|q| fraction(q)).sum::<f64>() / n,
        pass_at_k: questions.iter().filter(|q| q.iter().any(solved)).count() as f64 / n,
        mean_reward: questions.iter().flat_map(|q| q.iter()).sum::<f64>() / (n * k.max(1) as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avg_and_pass_at_k_on_a_crafted_case() {
        // Two sources; k = 4.
        let sources = ["gsm8k", "gsm8k", "math"];
        let rewards = vec![
            vec![1.0, 0.0, 0.0, 1.0], // 2/4 solved
            vec![0.0, 0.0, 0.0, 0.0], // none
            vec![1.0, 1.0, 1.0, 0.5], // 3/4 solved; 0.5 is not full credit
        ];
        let report = score(&sources, &rewards);
        let gsm = &report.sources["gsm8k"];
        assert_eq!(gsm.questions, 2);
        assert!((gsm.avg_at_k - 0.25).abs() < 1e-12);
        assert!((gsm.pass_at_k - 0.5).abs() < 1e-12);
        let math = &report.sources["math"];
        assert!((math.avg_at_k - 0.75).abs() < 1e-12);
        assert!((math.pass_at_k - 1.0).abs() < 1e-12);
        assert!((math.mean_reward - 0.875).abs() < 1e-12);
        assert!((report.overall.avg_at_k - (0.5 + 0.0 + 0.75) / 3.0).abs() < 1e-12);
        assert!((report.overall.pass_at_k - 2.0 / 3.0).abs() < 1e-12);
    }
}
