//! The range of every number in a run file. TOML accepts `inf`, `nan` and negative numbers
//! wherever a float goes, and a learning rate of `inf` ruins every weight in one step, so each
//! number is checked here — finite, in range — and every value out of range is reported at once,
//! each with its line:col. `check` and `train` both parse through this.

use std::borrow::Cow;

use super::locate::Step;
use super::{
    ConfigError, KlController, LossAggregation, LrDecay, PolicyLoss, RunConfig, RunFile, SAVE_NEVER,
};
use crate::engine::sampling::{temperature_is_valid, MIN_TEMPERATURE};
use crate::engine::stop::{MAX_STOPS, MAX_STOP_BYTES};

/// Episodes one iteration may roll out (`prompts_per_batch × group_size`) at most.
pub const MAX_EPISODES_PER_ITERATION: usize = 1 << 20;
/// Samples per evaluation question (`[eval] k`) at most.
pub const MAX_EVAL_K: usize = 1024;
/// How long (`[rollout] batch_wait_ms`) an idle worker group may wait for more calls at most.
pub const MAX_BATCH_WAIT_MS: u64 = 600_000;
/// The longest plugin-call limit (`[rollout] plugin_call_timeout_s`) accepted: a day.
pub const MAX_PLUGIN_CALL_TIMEOUT_S: u64 = 86_400;
/// Rollouts one iteration may run under dynamic sampling at most.
pub const MAX_ROLLOUT_BATCHES: u64 = 1024;
/// Passes over an iteration's calls (`[algorithm.loss] ppo_epochs`) at most.
pub const MAX_PPO_EPOCHS: u64 = 1024;
/// The largest LoRA rank accepted (no model this host loads is wider).
pub const MAX_LORA_RANK: i64 = 65_536;

/// What a float must be.
#[derive(Debug, Clone, Copy)]
enum Range {
    /// Finite and > 0 (LoRA alpha, epsilons).
    Positive,
    /// In (0, 1] (learning rates: AdamW moves each weight by about the rate per step).
    LearningRate,
    /// Finite and ≥ 0 (coefficients that only make sense one way).
    NonNegative,
    /// 0 (greedy) or finite and at least [`MIN_TEMPERATURE`] (temperatures).
    Temperature,
    /// Any finite number (penalties, the entropy coefficient).
    Finite,
    /// In (0, 1] (top-p).
    Probability,
    /// In [0, 1) (lower clip ratio, dropout).
    Fraction,
    /// In [0, 1] (the floor of a learning-rate decay).
    UnitInterval,
    /// 0 (off) or finite and > 1 (the dual-clip constant).
    OffOrAboveOne,
    /// Finite and ≥ 1 (the cap of an importance weight).
    AtLeastOne,
}

impl Range {
    fn contains(self, x: f64) -> bool {
        match self {
            Range::Positive => x.is_finite() && x > 0.0,
            Range::LearningRate => x > 0.0 && x <= 1.0,
            Range::NonNegative => x.is_finite() && x >= 0.0,
            Range::Temperature => temperature_is_valid(x),
            Range::Finite => x.is_finite(),
            Range::Probability => x > 0.0 && x <= 1.0,
            Range::Fraction => (0.0..1.0).contains(&x),
            Range::UnitInterval => (0.0..=1.0).contains(&x),
            Range::OffOrAboveOne => x == 0.0 || (x.is_finite() && x > 1.0),
            Range::AtLeastOne => x.is_finite() && x >= 1.0,
        }
    }

    fn describe(self) -> Cow<'static, str> {
        let fixed = match self {
            Range::Temperature => {
                return format!(
                    "0 (greedy) or a finite number ≥ {MIN_TEMPERATURE:e} (the logits are divided \
                     by it: closer to 0 they overflow, and every update would be skipped as \
                     non-finite)"
                )
                .into()
            }
            Range::Positive => "a finite number > 0",
            Range::LearningRate => {
                "a number in (0, 1] (AdamW moves each weight by about the learning rate per \
                 step; LLM fine-tuning uses 1e-7 to 1e-3)"
            }
            Range::NonNegative => "a finite number ≥ 0",
            Range::Finite => "a finite number",
            Range::Probability => "a number in (0, 1]",
            Range::Fraction => "a number in [0, 1)",
            Range::UnitInterval => "a number in [0, 1]",
            Range::OffOrAboveOne => "0 (off) or a finite number > 1",
            Range::AtLeastOne => "a finite number ≥ 1",
        };
        fixed.into()
    }
}

/// Checks every number of `config`; the error lists each value out of range with its line:col.
pub(super) fn check_numbers(config: &RunConfig, file: &RunFile) -> Result<(), ConfigError> {
    let mut problems = Problems {
        file,
        found: Vec::new(),
    };
    let save_every = config.run.save_every;
    if !(SAVE_NEVER..=i64::from(u32::MAX)).contains(&save_every) {
        problems.section("[run]".into(), &["run"]).report(
            "save_every",
            save_every,
            "-1 (never), 0 (at the end only) or an integer ≥ 1 (every N iterations and at the end)",
        );
    }
    for (key, data) in [
        ("train_data", Some(&config.environment.train_data)),
        ("eval_data", config.environment.eval_data.as_ref()),
    ] {
        if let Some(limit) = data.and_then(|d| d.limit) {
            let mut s = problems.section(format!("[environment] {key}"), &["environment", key]);
            s.size("limit", limit as u64, 1, u64::MAX);
        }
    }
    // CISPO's weight may go down to 0 (clip_low = 1: no lower bound, as MiniMax-M1 runs it);
    // a surrogate's clipped ratio must stay above 0.
    let clip_low_range = match config.algorithm.loss.policy_loss {
        PolicyLoss::Cispo => Range::UnitInterval,
        PolicyLoss::Ppo | PolicyLoss::Gspo => Range::Fraction,
    };
    for (index, agent) in config.agents.iter().enumerate() {
        let label = format!("[[agents]] role `{}`:", agent.role.get_ref());
        let mut s = problems.section(label, &[Step::Key("agents"), Step::Index(index)]);
        let floats = [
            ("learning_rate", agent.learning_rate, Range::LearningRate),
            ("temperature", agent.temperature, Range::Temperature),
            ("top_p", agent.top_p, Range::Probability),
            ("clip_low", agent.clip_low, clip_low_range),
            ("clip_high", agent.clip_high, Range::NonNegative),
            ("entropy_coef", agent.entropy_coef, Range::Finite),
            ("kl_coef", agent.kl_coef, Range::NonNegative),
            (
                "invalid_action_penalty",
                agent.invalid_action_penalty,
                Range::Finite,
            ),
        ];
        for (field, value, range) in floats {
            if let Some(value) = value {
                s.float(field, value, range);
            }
        }
        if let Some(size) = agent.micro_batch_size {
            s.size("micro_batch_size", size as u64, 1, u64::MAX);
        }
        if let Some(tokens) = agent.micro_batch_tokens {
            s.size("micro_batch_tokens", tokens as u64, 1, u64::MAX);
            if agent.micro_batch_size.is_some() {
                s.report(
                    "micro_batch_tokens",
                    tokens,
                    "left out when the agent sets micro_batch_size (one size, by calls or by tokens)",
                );
            }
        }
        if let Some(tokens) = agent.max_new_tokens {
            s.size("max_new_tokens", tokens as u64, 1, u64::MAX);
        }
        if agent.stop.len() > MAX_STOPS {
            s.report(
                "stop",
                format!("[… {} strings]", agent.stop.len()),
                &format!("at most {MAX_STOPS} strings"),
            );
        }
        if let Some(bad) = agent
            .stop
            .iter()
            .find(|stop| stop.is_empty() || stop.len() > MAX_STOP_BYTES)
        {
            let shown = if bad.is_empty() {
                "[…, \"\", …]".to_owned()
            } else {
                format!("[…, a string of {} bytes, …]", bad.len())
            };
            s.report(
                "stop",
                shown,
                &format!("a list of non-empty strings of at most {MAX_STOP_BYTES} bytes each"),
            );
        }
    }
    for (name, group) in &config.worker_groups {
        let mut s = problems.section(
            format!("[worker_groups.{name}]"),
            &["worker_groups", name.as_str()],
        );
        s.float("learning_rate", group.learning_rate, Range::LearningRate);
        s.size(
            "micro_batch_size",
            group.micro_batch_size as u64,
            1,
            u64::MAX,
        );
        if let Some(tokens) = group.micro_batch_tokens {
            s.size("micro_batch_tokens", tokens as u64, 1, u64::MAX);
        }
        if let Some(lora) = &group.lora {
            let mut s = problems.section(
                format!("[worker_groups.{name}.lora]"),
                &["worker_groups", name.as_str(), "lora"],
            );
            if !(1..=MAX_LORA_RANK).contains(&lora.rank) {
                s.report(
                    "rank",
                    lora.rank,
                    &format!("an integer from 1 to {MAX_LORA_RANK}"),
                );
            }
            s.float("alpha", lora.alpha, Range::Positive);
            s.float("dropout", lora.dropout, Range::Fraction);
        }
    }
    // Episodes one iteration rolls out.
    let per_iteration = config
        .rollout
        .prompts_per_batch
        .saturating_mul(config.rollout.group_size);
    let algorithm = &config.algorithm;
    problems
        .section("[algorithm]".into(), &["algorithm"])
        .float(
            "invalid_action_penalty",
            algorithm.invalid_action_penalty,
            Range::Finite,
        );
    let loss = &algorithm.loss;
    let mut s = problems.section("[algorithm.loss]".into(), &["algorithm", "loss"]);
    s.float("clip_low", loss.clip_low, clip_low_range);
    s.float("clip_high", loss.clip_high, Range::NonNegative);
    s.float("dual_clip", loss.dual_clip, Range::OffOrAboveOne);
    s.float("entropy_coef", loss.entropy_coef, Range::Finite);
    s.float("kl_coef", loss.kl_coef, Range::NonNegative);
    s.float("grad_clip", loss.grad_clip, Range::NonNegative);
    s.float("weight_decay", loss.weight_decay, Range::NonNegative);
    for beta in loss.adam_betas {
        s.float("adam_betas", beta, Range::Fraction);
    }
    s.float("adam_epsilon", loss.adam_epsilon, Range::Positive);
    s.float("min_lr_ratio", loss.min_lr_ratio, Range::UnitInterval);
    s.size("ppo_epochs", loss.ppo_epochs as u64, 1, MAX_PPO_EPOCHS);
    // Each mini-batch holds at least one episode.
    let episodes = per_iteration.clamp(1, MAX_EPISODES_PER_ITERATION);
    if !(1..=episodes).contains(&loss.mini_batches) {
        s.report(
            "mini_batches",
            loss.mini_batches,
            &format!(
                "an integer from 1 to [rollout] prompts_per_batch × group_size ({episodes}): \
                 each mini-batch holds at least one episode"
            ),
        );
    }
    if loss.policy_loss == PolicyLoss::Gspo && loss.aggregation != LossAggregation::SeqMeanTokenMean
    {
        s.report(
            "aggregation",
            loss.aggregation.name(),
            "seq-mean-token-mean with policy_loss = \"gspo\" (GSPO averages each response's \
             token losses, then the responses)",
        );
    }
    if loss.lr_schedule == LrDecay::Constant && loss.min_lr_ratio != 0.0 {
        s.report(
            "min_lr_ratio",
            loss.min_lr_ratio,
            "left out with lr_schedule = \"constant\": it is the floor of a \"linear\" or \
             \"cosine\" decay",
        );
    }
    if let Some(factor) = loss.loss_scale_factor {
        s.float("loss_scale_factor", factor, Range::Positive);
    }
    let dynamic = &algorithm.dynamic_sampling;
    problems
        .section(
            "[algorithm.dynamic_sampling]".into(),
            &["algorithm", "dynamic_sampling"],
        )
        .size(
            "max_rollout_batches",
            dynamic.max_rollout_batches as u64,
            1,
            MAX_ROLLOUT_BATCHES,
        );
    let overlong = &algorithm.overlong_penalty;
    let mut s = problems.section(
        "[algorithm.overlong_penalty]".into(),
        &["algorithm", "overlong_penalty"],
    );
    s.float("factor", overlong.factor, Range::NonNegative);
    let kl = &algorithm.kl_in_reward;
    let mut s = problems.section(
        "[algorithm.kl_in_reward]".into(),
        &["algorithm", "kl_in_reward"],
    );
    s.float("coef", kl.coef, Range::NonNegative);
    s.float("target", kl.target, Range::Positive);
    s.float("horizon", kl.horizon, Range::Positive);
    if kl.controller == KlController::Adaptive && kl.coef == 0.0 {
        s.report(
            "controller",
            kl.controller.name(),
            "\"fixed\" while coef = 0 (off): the adaptive controller scales coef, and 0 stays 0; \
             set coef to the starting coefficient",
        );
    }
    let critic = algorithm.critic_settings();
    let mut s = problems.section("[algorithm.critic]".into(), &["algorithm", "critic"]);
    s.float("learning_rate", critic.learning_rate, Range::LearningRate);
    s.float("weight_decay", critic.weight_decay, Range::NonNegative);
    s.float("cliprange_value", critic.cliprange_value, Range::Positive);
    s.float("grad_clip", critic.grad_clip, Range::NonNegative);
    s.size(
        "micro_batch_size",
        critic.micro_batch_size as u64,
        1,
        u64::MAX,
    );
    if let Some(tokens) = critic.micro_batch_tokens {
        s.size("micro_batch_tokens", tokens as u64, 1, u64::MAX);
    }
    if let Some(cap) = algorithm.rollout_correction.tis_cap {
        problems
            .section(
                "[algorithm.rollout_correction]".into(),
                &["algorithm", "rollout_correction"],
            )
            .float("tis_cap", cap, Range::AtLeastOne);
    }

    let rollout = &config.rollout;
    let mut s = problems.section("[rollout]".into(), &["rollout"]);
    let episodes = MAX_EPISODES_PER_ITERATION as u64;
    s.size(
        "prompts_per_batch",
        rollout.prompts_per_batch as u64,
        1,
        episodes,
    );
    s.size("group_size", rollout.group_size as u64, 1, episodes);
    if per_iteration > MAX_EPISODES_PER_ITERATION {
        s.report(
            "group_size",
            rollout.group_size,
            &format!(
                "small enough that prompts_per_batch × group_size ({per_iteration}) is at most \
                 {MAX_EPISODES_PER_ITERATION} episodes per iteration"
            ),
        );
    }
    s.float("temperature", rollout.temperature, Range::Temperature);
    s.float("top_p", rollout.top_p, Range::Probability);
    s.size(
        "max_prompt_tokens",
        rollout.max_prompt_tokens as u64,
        1,
        u64::MAX,
    );
    s.size(
        "max_response_tokens",
        rollout.max_response_tokens as u64,
        1,
        u64::MAX,
    );
    s.size("batch_wait_ms", rollout.batch_wait_ms, 0, MAX_BATCH_WAIT_MS);
    s.size(
        "plugin_call_timeout_s",
        rollout.plugin_call_timeout_s,
        0,
        MAX_PLUGIN_CALL_TIMEOUT_S,
    );
    s.float(
        "max_episode_failure_rate",
        rollout.max_episode_failure_rate,
        Range::Fraction,
    );

    let eval = &config.eval;
    let mut s = problems.section("[eval]".into(), &["eval"]);
    s.size("k", eval.k as u64, 0, MAX_EVAL_K as u64);
    s.float("temperature", eval.temperature, Range::Temperature);
    s.float("top_p", eval.top_p, Range::Probability);

    problems.finish()
}

/// The values out of range found so far.
struct Problems<'f> {
    file: &'f RunFile,
    found: Vec<ConfigError>,
}

impl<'f> Problems<'f> {
    /// Checks of the section at `path`, named `label` in messages.
    fn section<'p, S: Into<Step<'p>> + Copy>(
        &'p mut self,
        label: String,
        path: &[S],
    ) -> Section<'p, 'f> {
        Section {
            problems: self,
            label,
            path: path.iter().map(|&step| step.into()).collect(),
        }
    }

    fn finish(mut self) -> Result<(), ConfigError> {
        match self.found.len() {
            0 => Ok(()),
            1 => Err(self.found.remove(0)),
            _ => Err(ConfigError::Several(self.found)),
        }
    }
}

/// The checks of one table of the run file.
struct Section<'p, 'f> {
    problems: &'p mut Problems<'f>,
    label: String,
    path: Vec<Step<'p>>,
}

impl Section<'_, '_> {
    /// `field` must be in `range`.
    fn float(&mut self, field: &str, value: f64, range: Range) {
        if !range.contains(value) {
            self.report(field, value, &range.describe());
        }
    }

    /// `field` must be a whole number from `min` to `max`.
    fn size(&mut self, field: &str, value: u64, min: u64, max: u64) {
        if !(min..=max).contains(&value) {
            let expected = if max == u64::MAX {
                format!("an integer ≥ {min}")
            } else {
                format!("an integer from {min} to {max}")
            };
            self.report(field, value, &expected);
        }
    }

    /// Records that `field = value` is not `expected`.
    fn report(&mut self, field: &str, value: impl std::fmt::Display, expected: &str) {
        let mut path = self.path.clone();
        path.push(Step::Key(field));
        let file = self.problems.file;
        let error = file.invalid_at(
            &path,
            format!("{} {field} = {value} must be {expected}", self.label),
        );
        self.problems.found.push(error);
    }
}
