//! An iteration's [`Metrics`] and what each phase records in them (rollout, advantages, each
//! group's update, evaluation), and the [`MetricsLog`]: one flat JSON object per iteration in
//! `RUN_DIR/metrics.jsonl`, written and flushed as each iteration ends so a killed run keeps
//! every finished iteration.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Map, Value};

use super::eval::EvalReport;
use super::tensorboard::TensorBoardLog;
use super::WorkerGroup;
use crate::advantage::{Diagnostics, PerToken, Sample};
use crate::engine::FinishReason;
use crate::plot::figures::{GENERATED_GROUPS, KEPT_GROUPS};
use crate::rollout::{AgentCall, Rollout, TeamMember};
use crate::update::{UpdateReport, MISMATCH_THRESHOLD};

/// Named numbers of one iteration, keys like `reward/mean` or `grad_norm/agent/solver`.
#[derive(Debug, Clone, Default)]
pub struct Metrics(Map<String, Value>);

impl Metrics {
    /// An empty record for `iteration`.
    pub fn new(iteration: u32) -> Self {
        let mut map = Map::new();
        map.insert("iteration".into(), iteration.into());
        Self(map)
    }

    /// Sets `key` to `value` (non-finite values are written as `null`).
    pub fn set(&mut self, key: impl Into<String>, value: f64) {
        let value = serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number);
        self.0.insert(key.into(), value);
    }

    /// The value of `key`, if set and finite.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(Value::as_f64)
    }

    /// The keys set so far.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The record's fields, `iteration` among them.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.0
    }

    /// The record as one JSON line (no newline).
    pub fn to_line(&self) -> String {
        Value::Object(self.0.clone()).to_string()
    }
}

/// The run's metrics file, opened for appending, and its TensorBoard copy when the run asks
/// for one.
pub struct MetricsLog {
    path: PathBuf,
    writer: BufWriter<File>,
    tensorboard: Option<TensorBoardLog>,
}

impl MetricsLog {
    /// Opens `dir/metrics.jsonl` for appending (a resumed run continues the same file); with
    /// `tensorboard`, also a new TensorBoard event file holding what it has so far.
    pub fn open(dir: &Path, tensorboard: bool) -> anyhow::Result<Self> {
        let path = dir.join("metrics.jsonl");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let tensorboard = tensorboard.then(|| TensorBoardLog::open(dir)).transpose()?;
        Ok(Self {
            path,
            writer: BufWriter::new(file),
            tensorboard,
        })
    }

    /// Drops the records of iterations after `iteration` — of every iteration, the evaluation
    /// before training included, when `None` — from the run's JSONL files (`metrics.jsonl`,
    /// `samples.jsonl`): a resumed run redoes them. Also drops a torn last line a kill may have
    /// left.
    pub fn truncate_after(dir: &Path, iteration: Option<u32>) -> anyhow::Result<()> {
        for name in ["metrics.jsonl", "samples.jsonl"] {
            truncate_jsonl(&dir.join(name), iteration)?;
        }
        Ok(())
    }

    /// Adds `record`'s values to the line of its iteration in `dir/metrics.jsonl`, or appends
    /// the record when that iteration has no line: a resumed run completes the line of the
    /// iteration it resumes after with an evaluation that was cut short. Call it before
    /// [`Self::open`]: the file is replaced.
    pub fn amend(dir: &Path, record: &Metrics) -> anyhow::Result<()> {
        let path = dir.join("metrics.jsonl");
        let text = match std::fs::read_to_string(&path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            read => read.with_context(|| format!("reading {}", path.display()))?,
        };
        let iteration = record.0.get("iteration").cloned();
        let mut amended = String::with_capacity(text.len());
        let mut found = false;
        for line in text.lines() {
            match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(mut fields)) if fields.get("iteration") == iteration.as_ref() => {
                    fields.extend(record.0.clone());
                    amended.push_str(&Value::Object(fields).to_string());
                    found = true;
                }
                _ => amended.push_str(line),
            }
            amended.push('\n');
        }
        if !found {
            amended.push_str(&record.to_line());
            amended.push('\n');
        }
        replace_file(&path, &amended)
    }

    /// Appends one record and flushes it to disk.
    pub fn write(&mut self, metrics: &Metrics) -> anyhow::Result<()> {
        writeln!(self.writer, "{}", metrics.to_line())
            .and_then(|()| self.writer.flush())
            .with_context(|| format!("writing {}", self.path.display()))?;
        match &mut self.tensorboard {
            Some(tensorboard) => tensorboard.write(metrics),
            None => Ok(()),
        }
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder of the TensorBoard event file, when there is one.
    pub fn tensorboard_dir(&self) -> Option<PathBuf> {
        let file = self.tensorboard.as_ref()?.path();
        file.parent().map(Path::to_owned)
    }
}

/// Keeps the lines of `path` whose `iteration` is at most `iteration` (none when `None`; a
/// missing file is fine), replacing the file as [`replace_file`] does.
fn truncate_jsonl(path: &Path, iteration: Option<u32>) -> anyhow::Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let kept: String = text
        .lines()
        .filter(|line| {
            let line_iteration = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| v.get("iteration").and_then(Value::as_u64));
            matches!((line_iteration, iteration), (Some(i), Some(last)) if i <= u64::from(last))
        })
        .flat_map(|line| [line, "\n"])
        .collect();
    if kept == text {
        return Ok(());
    }
    replace_file(path, &kept)
}

/// Writes `text` to a temporary file renamed over `path`, so a kill in the middle leaves either
/// the old file or the new one.
fn replace_file(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".rewriting");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, text)
        .and_then(|()| std::fs::rename(&temporary, path))
        .with_context(|| format!("rewriting {}", path.display()))
}

/// Dynamic sampling's counts: the prompt groups rolled out (`dynamic_sampling/generated_groups`)
/// and those kept for training (`dynamic_sampling/kept_groups`), the rest having no reward
/// spread or arriving after the batch was full.
pub(super) fn record_dynamic_sampling(
    metrics: &mut Metrics,
    generated: &Rollout,
    kept: &Rollout,
    group_size: usize,
) {
    let groups = |rollout: &Rollout| (rollout.episodes.len() / group_size.max(1)) as f64;
    metrics.set(GENERATED_GROUPS, groups(generated));
    metrics.set(KEPT_GROUPS, groups(kept));
}

/// The rollout's rewards, calls per agent (count, invalid rate, response length), environment
/// metrics, timing and batching.
pub(super) fn record_rollout(
    metrics: &mut Metrics,
    rollout: &Rollout,
    team: &[TeamMember],
    seconds: f64,
) {
    // A failed episode's return is not a reward the team earned.
    let rewards: Vec<f64> = rollout
        .episodes
        .iter()
        .filter(|e| !e.is_failed())
        .map(|e| e.reward())
        .collect();
    let (mean, std) = mean_std(&rewards);
    metrics.set("reward/mean", mean);
    metrics.set("reward/std", std);
    metrics.set(
        "episode/calls_mean",
        rollout.calls.len() as f64 / rollout.episodes.len().max(1) as f64,
    );
    let mut env_metrics: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for episode in &rollout.episodes {
        for metric in &episode.metrics {
            env_metrics
                .entry(&metric.name)
                .or_default()
                .push(metric.value);
        }
    }
    for (name, values) in env_metrics {
        metrics.set(format!("env/{name}"), mean_std(&values).0);
    }
    for (index, member) in team.iter().enumerate() {
        let calls: Vec<_> = rollout.calls.iter().filter(|c| c.agent == index).collect();
        if calls.is_empty() {
            continue;
        }
        record_calls(metrics, &member.role, &calls);
    }
    metrics.set("time/rollout_s", seconds);
    metrics.set("time/generation_s", rollout.generation_seconds);
    metrics.set(
        "tokens_per_s/rollout",
        rollout.generated_tokens as f64 / rollout.generation_seconds.max(1e-9),
    );
    metrics.set("prompts/truncated", rollout.truncated_prompts as f64);
    let batches = rollout.batches.len().max(1) as f64;
    metrics.set("rollout/batches", rollout.batches.len() as f64);
    metrics.set(
        "rollout/mean_batch_rows",
        rollout.batches.iter().map(|b| b.rows).sum::<usize>() as f64 / batches,
    );
}

/// The per-agent keys of one agent's calls (`role`'s, at least one): how many, how many were
/// invalid or broke the role's contract, their lengths (and the prompt tokens a prefix cache
/// spared), and how many were cut off at their `max_new_tokens`.
fn record_calls(metrics: &mut Metrics, role: &str, calls: &[&AgentCall]) {
    let n = calls.len() as f64;
    let rate =
        |counted: fn(&AgentCall) -> bool| calls.iter().filter(|c| counted(c)).count() as f64 / n;
    let mean =
        |length: fn(&AgentCall) -> usize| calls.iter().map(|c| length(c)).sum::<usize>() as f64 / n;
    metrics.set(format!("calls/{role}"), n);
    metrics.set(format!("invalid_rate/{role}"), rate(|c| !c.valid));
    metrics.set(
        format!("contract_break_rate/{role}"),
        rate(|c| c.breaks_contract),
    );
    metrics.set(
        format!("truncated_rate/{role}"),
        rate(|c| c.finish == FinishReason::Length),
    );
    metrics.set(format!("response_len/{role}"), mean(|c| c.response.len()));
    let longest = calls.iter().map(|c| c.response.len()).max().unwrap_or(0);
    metrics.set(format!("response_len_max/{role}"), longest as f64);
    metrics.set(format!("prompt_len/{role}"), mean(|c| c.prompt.len()));
    metrics.set(
        format!("prompt_cached_len/{role}"),
        mean(|c| c.cached_prompt_tokens),
    );
}

/// `reward/penalised_mean`: the penalised reward (`rewards`, one per call) over the calls of
/// every episode of the rollout that did not fail — the episodes `reward/mean` covers, so
/// dynamic sampling's choice of groups does not move it (`advantage/reward_mean` is the mean over
/// the calls trained on).
pub(super) fn record_penalised_reward(metrics: &mut Metrics, rollout: &Rollout, rewards: &[f64]) {
    let counted: Vec<f64> = rollout
        .calls
        .iter()
        .zip(rewards)
        .filter(|(call, _)| !rollout.episodes[call.episode].is_failed())
        .map(|(_, &reward)| reward)
        .collect();
    metrics.set("reward/penalised_mean", mean_std(&counted).0);
}

/// The advantage diagnostics of an iteration: the reward statistics overall and per agent
/// (with how much a shared normalisation would amplify each agent's gradient) and each agent's
/// advantages.
pub(super) fn record_advantages(
    metrics: &mut Metrics,
    samples: &[Sample],
    rewards: &[f64],
    advantages: &[f64],
    team: &[TeamMember],
) {
    metrics.set("advantage/calls", samples.len() as f64);
    let diagnostics = Diagnostics::compute(samples, rewards);
    metrics.set("advantage/reward_mean", diagnostics.mean);
    metrics.set("advantage/reward_std", diagnostics.std);
    for agent in &diagnostics.agents {
        let role = &team[usize::from(agent.agent)].role;
        metrics.set(format!("advantage/reward_mean/{role}"), agent.mean);
        metrics.set(format!("advantage/reward_std/{role}"), agent.std);
        metrics.set(
            format!("advantage/amplification/{role}"),
            agent.amplification.unwrap_or(f64::NAN),
        );
        let own: Vec<f64> = samples
            .iter()
            .zip(advantages)
            .filter(|(s, _)| s.agent == agent.agent)
            .map(|(_, &a)| a)
            .collect();
        let (mean, std) = mean_std(&own);
        metrics.set(format!("advantage/mean/{role}"), mean);
        metrics.set(format!("advantage/std/{role}"), std);
    }
}

/// The critic's values and returns over every response token, and whether the policy waited
/// for it (`[algorithm.critic] warmup_iterations`).
pub(super) fn record_critic(
    metrics: &mut Metrics,
    values: &PerToken,
    returns: &PerToken,
    warmup: bool,
) {
    let mean =
        |table: &PerToken| table.values().iter().sum::<f64>() / table.values().len().max(1) as f64;
    metrics.set("critic/values_mean", mean(values));
    metrics.set("critic/returns_mean", mean(returns));
    if let Some(explained) = explained_variance(values.values(), returns.values()) {
        metrics.set("critic/vf_explained_var", explained);
    }
    metrics.set("critic/warmup", f64::from(u8::from(warmup)));
}

/// 1 − Var(returns − values) / Var(returns) over paired tokens (verl's
/// `critic/vf_explained_var`): 1 for a critic whose values are the returns, 0 for one no better
/// than their mean, negative for worse; `None` when the returns do not vary.
fn explained_variance(values: &[f64], returns: &[f64]) -> Option<f64> {
    let (_, spread) = mean_std(returns);
    if spread == 0.0 {
        return None;
    }
    let errors: Vec<f64> = returns.iter().zip(values).map(|(r, v)| r - v).collect();
    let (_, error_spread) = mean_std(&errors);
    Some(1.0 - (error_spread / spread).powi(2))
}

/// An evaluation's avg@k and pass@k, overall and per data source.
pub(super) fn record_eval(metrics: &mut Metrics, report: &EvalReport) {
    let k = report.overall.k;
    metrics.set(format!("eval/avg@{k}"), report.overall.avg_at_k);
    metrics.set(format!("eval/pass@{k}"), report.overall.pass_at_k);
    metrics.set("eval/mean_reward", report.overall.mean_reward);
    metrics.set("eval/failed_episodes", report.failed_episodes as f64);
    for (source, score) in &report.sources {
        metrics.set(format!("eval/{source}/avg@{k}"), score.avg_at_k);
        metrics.set(format!("eval/{source}/pass@{k}"), score.pass_at_k);
    }
}

/// A worker group's update: gradient norms (the group's and each agent's), learning rates, loss
/// parts, and where old log-probabilities were recomputed, the mismatch and its time.
pub(super) fn record_update(
    metrics: &mut Metrics,
    group: &WorkerGroup,
    report: &UpdateReport,
    team: &[TeamMember],
) {
    let lr = report.learning_rate;
    let name = &group.name;
    metrics.set(format!("grad_norm/group/{name}"), report.grad_norm);
    for (agent, norm) in &report.agent_grad_norms {
        metrics.set(format!("grad_norm/agent/{}", team[*agent].role), *norm);
    }
    metrics.set(format!("lr/{name}"), lr);
    // The adapters of the agents this update trained (not a frozen agent's).
    let trained = |role: &String| {
        report
            .agent_grad_norms
            .keys()
            .any(|&agent| team[agent].role == *role)
    };
    for (role, rate) in group
        .adapter_names
        .iter()
        .zip(&group.adapter_learning_rates)
        .filter(|&(role, _)| trained(role))
    {
        metrics.set(format!("lr/agent/{role}"), lr * rate / group.learning_rate);
    }
    metrics.set(format!("loss/policy/{name}"), report.stats.policy_loss);
    metrics.set(
        format!("loss/clip_fraction/{name}"),
        report.stats.clip_fraction,
    );
    metrics.set(
        format!("loss/dual_clip_fraction/{name}"),
        report.stats.dual_clip_fraction,
    );
    metrics.set(format!("loss/kl/{name}"), report.stats.kl);
    metrics.set(format!("loss/entropy/{name}"), report.stats.entropy);
    for (agent, mismatch) in &report.mismatch {
        let role = &team[*agent].role;
        metrics.set(
            format!("mismatch/{role}/log_ratio_mean"),
            mismatch.log_ratio_mean(),
        );
        metrics.set(
            format!("mismatch/{role}/log_ratio_abs_max"),
            mismatch.log_ratio_abs_max,
        );
        metrics.set(
            format!("mismatch/{role}/frac_above_{MISMATCH_THRESHOLD}"),
            mismatch.fraction_above_threshold(),
        );
        if let Some(fraction) = mismatch.capped_fraction() {
            metrics.set(format!("mismatch/{role}/tis_capped_frac"), fraction);
        }
    }
    if !report.mismatch.is_empty() {
        metrics.set(format!("time/recompute_s/{name}"), report.recompute_seconds);
    }
}

/// The update phase's time and throughput, and the run's skipped steps so far.
pub(super) fn record_update_time(
    metrics: &mut Metrics,
    seconds: f64,
    forward_tokens: usize,
    skipped_steps: u64,
) {
    metrics.set("time/update_s", seconds);
    metrics.set("tokens_per_s/update", forward_tokens as f64 / seconds);
    metrics.set("skipped_steps", skipped_steps as f64);
}

/// The one-line progress report of an iteration.
pub(super) fn iteration_line(metrics: &Metrics, total: u32) -> String {
    let get = |key: &str| metrics.get(key).unwrap_or(f64::NAN);
    let failed = match metrics.get("episodes/failed") {
        Some(failed) if failed > 0.0 => format!(
            "  failed episodes {failed} ({} groups dropped)",
            get("groups/dropped_failed")
        ),
        _ => String::new(),
    };
    format!(
        "iteration {:>3}/{total}  reward {:.3} ± {:.3} (with format penalty {:.3})  rollout {:.1}s \
         ({:.0} tok/s)  update {:.1}s{failed}",
        get("iteration"),
        get("reward/mean"),
        get("reward/std"),
        get("reward/penalised_mean"),
        get("time/rollout_s"),
        get("tokens_per_s/rollout"),
        get("time/update_s"),
    )
}

/// Mean and population standard deviation (0, 0 for no values).
fn mean_std(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::{explained_variance, record_calls, Metrics, MetricsLog};
    use crate::engine::FinishReason;
    use crate::rollout::AgentCall;

    #[test]
    fn an_agents_keys_count_its_invalid_and_cut_off_calls_and_measure_their_lengths() {
        let call = |prompt: usize, response: usize, finish, valid| AgentCall {
            finish,
            valid,
            cached_prompt_tokens: prompt - 10,
            ..AgentCall::synthetic(0, 0, vec![1; prompt], vec![2; response])
        };
        let calls = [
            call(10, 5, FinishReason::Eos, true),
            call(10, 8, FinishReason::Length, false),
            call(12, 8, FinishReason::Length, true),
            call(13, 2, FinishReason::Stop, true),
        ];
        let mut metrics = Metrics::new(1);
        record_calls(&mut metrics, "solver", &calls.iter().collect::<Vec<_>>());
        let get = |key: &str| metrics.get(key).unwrap_or_else(|| panic!("no {key}"));
        assert_eq!(get("calls/solver"), 4.0);
        assert_eq!(get("invalid_rate/solver"), 0.25);
        assert_eq!(get("contract_break_rate/solver"), 0.0);
        assert_eq!(get("truncated_rate/solver"), 0.5);
        assert_eq!(get("response_len/solver"), 5.75);
        assert_eq!(get("response_len_max/solver"), 8.0);
        assert_eq!(get("prompt_len/solver"), 11.25);
        assert_eq!(get("prompt_cached_len/solver"), 1.25);
    }

    #[test]
    fn amend_adds_to_its_iteration_line_or_appends_one() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("metrics.jsonl");
        std::fs::write(
            &path,
            "{\"iteration\":0,\"eval/avg@2\":0.5}\n{\"iteration\":1,\"reward/mean\":0.25}\n",
        )
        .expect("write");
        let mut eval = Metrics::new(1);
        eval.set("eval/avg@2", 0.75);
        MetricsLog::amend(dir.path(), &eval).expect("amend");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "{\"iteration\":0,\"eval/avg@2\":0.5}\n\
             {\"eval/avg@2\":0.75,\"iteration\":1,\"reward/mean\":0.25}\n"
        );
        let mut later = Metrics::new(2);
        later.set("eval/avg@2", 1.0);
        MetricsLog::amend(dir.path(), &later).expect("amend");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text.lines().last(),
            Some("{\"eval/avg@2\":1.0,\"iteration\":2}")
        );
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn explained_variance_by_hand() {
        let returns = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(explained_variance(&returns, &returns), Some(1.0));
        // A constant prediction leaves all the variance: 0, whatever the constant.
        assert_eq!(explained_variance(&[7.0; 4], &returns), Some(0.0));
        // Errors 0.5, -0.5, 0.5, -0.5: variance 0.25 against the returns' 1.25.
        let values = [0.5, 2.5, 2.5, 4.5];
        let explained = explained_variance(&values, &returns).expect("returns vary");
        assert!((explained - 0.8).abs() < 1e-12, "{explained}");
        assert_eq!(explained_variance(&values, &[2.0; 4]), None);
    }
}
