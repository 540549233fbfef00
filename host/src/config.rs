//! The run file: a strict TOML schema (`deny_unknown_fields`), so a typo is an error with the
//! file, line:column and the accepted names rather than a silently ignored key.
//!
//! Every key is documented in docs/config.md. Component parameters (`params` tables) belong to
//! the plugin or estimator that owns them; they are handed over as TOML text and parsed there by
//! that component's own strict struct.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;
use toml::Spanned;

pub use kl_in_reward::{KlController, KlInRewardSection};
pub use rollout_backend::{check_trainable, GroupRolloutSection, RolloutBackend, WeightSync};
pub use rollout_correction::{OldLogprobs, RolloutCorrectionSection};

mod kl_in_reward;
mod off_policy;
mod rollout_backend;
mod rollout_correction;

/// A run file that could not be read or does not describe a valid run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read at all.
    #[error("cannot read run file {path}: {source}")]
    Read {
        /// The run file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The TOML is malformed or does not fit the schema; the message carries line:column.
    #[error("{origin}: {message}")]
    Schema {
        /// Where the text came from (usually the file path).
        origin: String,
        /// The parser's message, including line, column and a snippet.
        message: String,
    },
    /// The TOML fits the schema but its parts do not fit together.
    #[error("{origin}:{line}:{column}: {message}")]
    Invalid {
        /// Where the text came from (usually the file path).
        origin: String,
        /// 1-based line of the offending value.
        line: usize,
        /// 1-based column of the offending value.
        column: usize,
        /// What is wrong and what to do.
        message: String,
    },
    /// Several values are wrong; one error per line, in file order of the checks.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Several(Vec<ConfigError>),
}

/// A whole run: what to train, with which models, by which algorithm.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Output folder, seed, iteration count and cadences.
    pub run: RunSection,
    /// The environment component and its datasets.
    pub environment: EnvironmentSection,
    /// The orchestra component that routes agent calls.
    pub orchestra: ComponentSection,
    /// One entry per orchestra role: which agent fills it and on which worker group.
    #[serde(default)]
    pub agents: Vec<AgentSection>,
    /// Model worker groups by name.
    #[serde(default)]
    pub worker_groups: BTreeMap<String, WorkerGroupSection>,
    /// Advantage estimator and policy loss.
    #[serde(default)]
    pub algorithm: AlgorithmSection,
    /// Batch shape and sampling during training rollouts.
    #[serde(default)]
    pub rollout: RolloutSection,
    /// Evaluation settings.
    #[serde(default)]
    pub eval: EvalSection,
}

/// `[run]`: where results go and how long to train.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    /// Folder for metrics, plots and checkpoints (created if missing).
    pub output_dir: PathBuf,
    /// Seed of every random choice (sampling, data order); runs on CPU are deterministic.
    #[serde(default)]
    pub seed: u64,
    /// Number of training iterations.
    pub iterations: u32,
    /// Evaluate every N iterations (0: only before and after training).
    #[serde(default)]
    pub eval_every: u32,
    /// Save a checkpoint every N iterations and at the end (0: only at the end; -1
    /// ([`SAVE_NEVER`]): never, not even when the run is cut short).
    #[serde(default)]
    pub save_every: i64,
    /// Also write the metrics as TensorBoard scalars in `output_dir/tensorboard/`.
    #[serde(default)]
    pub tensorboard: bool,
}

/// `[run] save_every = -1`: a run that writes no checkpoint (a benchmark or sweep that only
/// reads metrics, where a checkpoint with optimizer state is gigabytes per save).
pub const SAVE_NEVER: i64 = -1;

impl RunSection {
    /// Whether iteration `iteration` (the run's last when `last`) ends with a checkpoint.
    pub fn saves_after(&self, iteration: u32, last: bool) -> bool {
        match self.save_every {
            SAVE_NEVER => false,
            0 => last,
            every => last || i64::from(iteration) % every == 0,
        }
    }

    /// Whether the run writes checkpoints at all.
    pub fn saves(&self) -> bool {
        self.save_every != SAVE_NEVER
    }
}

/// A plugin component picked by name, with its own parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentSection {
    /// The component's registered name (`drmas-host plugins` lists them).
    pub name: Spanned<String>,
    /// Parameters, parsed by the component itself.
    #[serde(default)]
    pub params: toml::Table,
}

/// `[environment]`: the environment component and where its tasks come from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentSection {
    /// The component's registered name.
    pub name: Spanned<String>,
    /// Parameters, parsed by the environment itself.
    #[serde(default)]
    pub params: toml::Table,
    /// Tasks to train on.
    pub train_data: DatasetSection,
    /// Held-out tasks to evaluate on.
    pub eval_data: Option<DatasetSection>,
}

/// A dataset: a path (or a name the environment understands, e.g. a built-in generator) and a split.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSection {
    /// File path (JSONL / parquet), relative to the run file, or an environment-defined source.
    pub path: String,
    /// Split name passed to the environment (e.g. `train`, `test`).
    #[serde(default)]
    pub split: Option<String>,
    /// Read at most this many tasks.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `[[agents]]`: one orchestra role filled by an agent component on a worker group.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// The orchestra's role this agent fills (e.g. `solver`).
    pub role: Spanned<String>,
    /// The agent component's registered name, from any plugin (e.g. `Solver Agent`).
    pub agent: Spanned<String>,
    /// Name of the worker group whose model serves and trains this agent.
    pub worker_group: Spanned<String>,
    /// Parameters, parsed by the agent itself (e.g. prompt templates).
    #[serde(default)]
    pub params: toml::Table,
    /// Overrides the group's learning rate for this agent's samples.
    pub learning_rate: Option<f64>,
    /// Overrides the group's micro-batch size for this agent's samples.
    pub micro_batch_size: Option<usize>,
    /// Overrides the group's micro-batch size for this agent's samples with a budget of padded
    /// tokens (see [`WorkerGroupSection::micro_batch_tokens`]).
    pub micro_batch_tokens: Option<usize>,
    /// Overrides the rollout temperature for this agent's calls.
    pub temperature: Option<f64>,
    /// Overrides the rollout top-p for this agent's calls.
    pub top_p: Option<f64>,
    /// Overrides the rollout response length for this agent's calls.
    pub max_new_tokens: Option<usize>,
    /// Strings that end this agent's calls when its continuation gains one (kept as the
    /// response's end), as a tool-calling agent stops at the end of its call.
    #[serde(default)]
    pub stop: Vec<String>,
    /// Overrides the loss's lower clip ratio for this agent.
    pub clip_low: Option<f64>,
    /// Overrides the loss's upper clip ratio for this agent.
    pub clip_high: Option<f64>,
    /// Overrides the entropy bonus coefficient for this agent.
    pub entropy_coef: Option<f64>,
    /// Overrides the KL coefficient for this agent.
    pub kl_coef: Option<f64>,
    /// Overrides the invalid-action penalty for this agent.
    pub invalid_action_penalty: Option<f64>,
    /// `false`: the agent acts in every episode but is never trained — its calls leave its
    /// worker group's update (a fixed judge or partner); `true` by default.
    pub train: Option<bool>,
}

impl AgentSection {
    /// Whether the agent's calls train its worker group's model (`train`, true by default).
    pub fn trains(&self) -> bool {
        self.train != Some(false)
    }

    /// The training settings the agent sets, which a frozen agent (`train = false`) may not.
    fn training_overrides(&self) -> [(&'static str, bool); 7] {
        [
            ("learning_rate", self.learning_rate.is_some()),
            ("micro_batch_size", self.micro_batch_size.is_some()),
            ("micro_batch_tokens", self.micro_batch_tokens.is_some()),
            ("clip_low", self.clip_low.is_some()),
            ("clip_high", self.clip_high.is_some()),
            ("entropy_coef", self.entropy_coef.is_some()),
            ("kl_coef", self.kl_coef.is_some()),
        ]
    }
}

/// `[worker_groups.NAME]`: one model (and its optimizer) serving one or more agents.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerGroupSection {
    /// HF model folder or `.gguf` file, relative to the run file; `builtin:smollm2-135m` is the
    /// embedded default.
    pub model: String,
    /// Weight and compute precision.
    #[serde(default)]
    pub dtype: Dtype,
    /// Where the model lives.
    #[serde(default)]
    pub device: Device,
    /// AdamW learning rate.
    #[serde(default = "defaults::learning_rate")]
    pub learning_rate: f64,
    /// Samples per forward/backward pass (gradients accumulate over micro-batches).
    #[serde(default = "defaults::micro_batch_size")]
    pub micro_batch_size: usize,
    /// Padded tokens per forward/backward pass, in place of `micro_batch_size` when set: each
    /// micro-batch takes as many calls as keep `calls × (longest prompt + longest response)`
    /// within it, and at least one (verl's dynamic batch size).
    pub micro_batch_tokens: Option<usize>,
    /// Frozen reference model for the KL term; none means no KL.
    pub reference_model: Option<String>,
    /// Move weights and optimizer state to CPU while the group is idle.
    #[serde(default)]
    pub offload: bool,
    /// Keep only each decoder layer's input during the update's forward and recompute the
    /// layer in the backward: less activation memory for long responses, one more forward.
    #[serde(default)]
    pub activation_checkpointing: bool,
    /// Train LoRA adapters on the frozen model instead of every weight.
    pub lora: Option<LoraSection>,
    /// Where the group's rollouts are generated: in process, or on inference servers.
    #[serde(default)]
    pub rollout: GroupRolloutSection,
}

/// `[worker_groups.NAME.lora]`: LoRA adapters (PEFT's semantics) instead of full fine-tuning.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraSection {
    /// Rank `r` of each adapter.
    #[serde(default = "defaults::lora_rank")]
    pub rank: i64,
    /// `lora_alpha`: updates are scaled by `alpha / rank`.
    #[serde(default = "defaults::lora_alpha")]
    pub alpha: f64,
    /// Dropout probability on an adapted projection's input during updates.
    #[serde(default)]
    pub dropout: f64,
    /// The adapted projections (HF names); all seven when left out.
    #[serde(default = "defaults::lora_targets")]
    pub target_modules: Vec<String>,
    /// Each agent of the group trains its own adapter (true) or they share one (false).
    #[serde(default = "defaults::per_agent")]
    pub per_agent: bool,
    /// A folder of PEFT adapters the group's adapters start from instead of LoRA's fresh
    /// initialisation, one per adapter named as a checkpoint's `adapters/` names them (each
    /// agent's role, or `shared`); relative to the run file.
    #[serde(default)]
    pub init_from: Option<String>,
}

/// Weight precision of a worker group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 32-bit float (the default; exact on CPU).
    #[default]
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
}

/// A compute device: `cpu` or `cuda:N`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum Device {
    /// The host CPU.
    #[default]
    Cpu,
    /// The N-th CUDA device.
    Cuda(usize),
}

impl FromStr for Device {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device `{other}`, expected `cpu` or `cuda:N`")),
        }
    }
}

impl TryFrom<String> for Device {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// `[algorithm]`: how rewards become advantages and advantages become a loss.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgorithmSection {
    /// Estimator name from the registry (`drmas`, `grpo`, `rloo`, ...).
    #[serde(default = "defaults::estimator")]
    pub estimator: Spanned<String>,
    /// The estimator's own parameters (e.g. `norm_by_std = false`).
    #[serde(default)]
    pub params: toml::Table,
    /// Reward subtracted from an agent call whose output has an invalid format.
    #[serde(default)]
    pub invalid_action_penalty: f64,
    /// The policy loss.
    #[serde(default)]
    pub loss: LossSection,
    /// DAPO's dynamic sampling of prompt groups.
    #[serde(default)]
    pub dynamic_sampling: DynamicSamplingSection,
    /// DAPO's overlong reward shaping.
    #[serde(default)]
    pub overlong_penalty: crate::advantage::OverlongPenalty,
    /// Where the PPO ratio's old log-probabilities come from; left out, each worker group's
    /// default ([`OldLogprobs::for_group`]).
    #[serde(default)]
    pub old_logprobs: Option<OldLogprobs>,
    /// Truncated importance sampling against the sampler–trainer mismatch.
    #[serde(default)]
    pub rollout_correction: RolloutCorrectionSection,
    /// The critic of estimators that have one (`ppo`), when the file sets it (see
    /// [`Self::critic_settings`]).
    #[serde(default)]
    pub critic: Option<CriticSection>,
    /// A KL penalty against the reference in the rewards.
    #[serde(default)]
    pub kl_in_reward: KlInRewardSection,
}

impl AlgorithmSection {
    /// The critic's settings: the file's `[algorithm.critic]` or the defaults.
    pub fn critic_settings(&self) -> CriticSection {
        self.critic.unwrap_or_default()
    }
}

impl Default for AlgorithmSection {
    fn default() -> Self {
        Self {
            estimator: defaults::estimator(),
            params: toml::Table::new(),
            invalid_action_penalty: 0.0,
            loss: LossSection::default(),
            dynamic_sampling: DynamicSamplingSection::default(),
            overlong_penalty: crate::advantage::OverlongPenalty::default(),
            old_logprobs: None,
            rollout_correction: RolloutCorrectionSection::default(),
            critic: None,
            kl_in_reward: KlInRewardSection::default(),
        }
    }
}

/// `[algorithm.critic]`: the value model of an estimator with a critic (`ppo`) — per worker
/// group, a copy of the group's model with a value head, trained on the estimator's returns by
/// its own optimizer (verl's critic worker, colocated with its group).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CriticSection {
    /// Peak learning rate of the critic's AdamW (no warmup).
    pub learning_rate: f64,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f64,
    /// Value predictions further than this from the values the returns were computed with are
    /// clipped in the loss (verl's `cliprange_value`).
    pub cliprange_value: f64,
    /// Clips the critic's gradient norm (0: off).
    pub grad_clip: f64,
    /// Calls per critic forward/backward pass.
    pub micro_batch_size: usize,
    /// Padded tokens per critic forward/backward pass, in place of `micro_batch_size` when set
    /// (as [`WorkerGroupSection::micro_batch_tokens`]).
    pub micro_batch_tokens: Option<usize>,
    /// Iterations at the start in which only the critic trains and the policy waits (verl's
    /// `critic_warmup`).
    pub warmup_iterations: u32,
}

impl Default for CriticSection {
    fn default() -> Self {
        Self {
            learning_rate: 1e-5,
            weight_decay: 0.01,
            cliprange_value: 0.5,
            grad_clip: 1.0,
            micro_batch_size: 4,
            micro_batch_tokens: None,
            warmup_iterations: 0,
        }
    }
}

/// `[algorithm.dynamic_sampling]`: DAPO's dynamic sampling — prompt groups whose episodes all
/// earned the same reward are dropped and replaced by groups from further rollouts.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DynamicSamplingSection {
    /// Drop groups without reward spread and roll out more to replace them.
    pub enabled: bool,
    /// The most rollouts of `prompts_per_batch` prompts one iteration runs (the first one
    /// included; DAPO's `max_num_gen_batches`). Past it, the iteration trains on the groups
    /// it kept.
    pub max_rollout_batches: usize,
    /// What must differ within a prompt group for it to be kept (verl's `filter_groups.metric`).
    pub metric: SpreadMetric,
}

impl Default for DynamicSamplingSection {
    fn default() -> Self {
        Self {
            enabled: false,
            max_rollout_batches: 4,
            metric: SpreadMetric::Reward,
        }
    }
}

/// The quantity dynamic sampling looks at to decide whether a prompt group carries signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpreadMetric {
    /// The episodes' rewards (DAPO's accuracy): a group whose episodes all earned the same
    /// reward is dropped.
    Reward,
    /// Each call's reward after the invalid-action penalty and overlong shaping, the rewards the
    /// estimator sees: a group is dropped only when they are all equal, where estimators that
    /// normalise them within the group give each of its calls advantage 0. For tasks whose
    /// outcome is almost always the same (a small model on a hard task) but whose calls' formats
    /// differ.
    PenalisedReward,
}

/// `[algorithm.loss]`: PPO-style clipped surrogate and its regularisers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LossSection {
    /// Whose probability ratio the surrogate clips, each token's (PPO) or each response's
    /// (GSPO), or CISPO's clipped importance weights instead of a surrogate.
    pub policy_loss: PolicyLoss,
    /// Lower clip: ratios below 1 − clip_low are clipped.
    pub clip_low: f64,
    /// Upper clip: ratios above 1 + clip_high are clipped (DAPO's decoupled clip).
    pub clip_high: f64,
    /// Dual-clip constant c for negative advantages (0 disables it).
    pub dual_clip: f64,
    /// How per-token losses are averaged (over the whole mini-batch, see
    /// [`crate::update::Aggregation`]).
    pub aggregation: LossAggregation,
    /// The constant `seq-mean-token-sum-norm` divides by (verl's `loss_scale_factor`); left out,
    /// each agent's `max_new_tokens`.
    pub loss_scale_factor: Option<f64>,
    /// Entropy bonus coefficient.
    pub entropy_coef: f64,
    /// KL-to-reference coefficient (needs a `reference_model`).
    pub kl_coef: f64,
    /// KL estimator.
    pub kl_type: KlType,
    /// Clip gradients to this global norm (0 disables).
    pub grad_clip: f64,
    /// Optimizer steps per pass over an iteration's calls: each worker group's episodes split
    /// into this many mini-batches (verl's `ppo_mini_batch_size`, as a count).
    pub mini_batches: usize,
    /// Passes over an iteration's calls, each through the same mini-batches (verl's
    /// `ppo_epochs`, TRL's `num_iterations`).
    pub ppo_epochs: usize,
    /// Linear learning-rate warmup, in optimizer steps (`mini_batches × ppo_epochs` per
    /// iteration).
    pub warmup_steps: u32,
    /// What the learning rate does after the warmup.
    pub lr_schedule: LrDecay,
    /// The floor of a linear or cosine decay, as a fraction of the peak learning rate.
    pub min_lr_ratio: f64,
    /// AdamW decoupled weight decay.
    pub weight_decay: f64,
    /// AdamW's β₁ and β₂, the decay rates of its moments.
    pub adam_betas: [f64; 2],
    /// AdamW's ε, added to the second moment's square root.
    pub adam_epsilon: f64,
}

impl Default for LossSection {
    fn default() -> Self {
        Self {
            policy_loss: PolicyLoss::Ppo,
            clip_low: 0.2,
            clip_high: 0.28,
            dual_clip: 3.0,
            aggregation: LossAggregation::TokenMean,
            loss_scale_factor: None,
            entropy_coef: 0.0,
            kl_coef: 0.0,
            kl_type: KlType::LowVarKl,
            grad_clip: 1.0,
            mini_batches: 1,
            ppo_epochs: 1,
            warmup_steps: 0,
            lr_schedule: LrDecay::Constant,
            min_lr_ratio: 0.0,
            weight_decay: 0.01,
            adam_betas: [0.9, 0.999],
            adam_epsilon: 1e-8,
        }
    }
}

/// How token losses are reduced to one number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossAggregation {
    /// Mean over every response token of the batch.
    TokenMean,
    /// Sum over a sequence's tokens, mean over sequences.
    SeqMeanTokenSum,
    /// Mean over a sequence's tokens, mean over sequences.
    SeqMeanTokenMean,
    /// Sum over a sequence's tokens divided by a fixed constant, mean over sequences (Dr. GRPO).
    SeqMeanTokenSumNorm,
}

impl LossAggregation {
    /// The name the run file uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::TokenMean => "token-mean",
            Self::SeqMeanTokenSum => "seq-mean-token-sum",
            Self::SeqMeanTokenMean => "seq-mean-token-mean",
            Self::SeqMeanTokenSumNorm => "seq-mean-token-sum-norm",
        }
    }
}

/// The clipped surrogate's probability ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyLoss {
    /// PPO's: each token's ratio π/π_old, clipped token by token.
    Ppo,
    /// GSPO's (Zheng et al. 2025, arXiv 2507.18071): each response's ratio, the geometric mean
    /// of its tokens' (exp of their mean log-ratio), clipped response by response.
    Gspo,
    /// CISPO's (MiniMax-M1, arXiv 2506.13585): no clipped surrogate; each token's policy
    /// gradient weighted by its ratio clipped to [1 − clip_low, 1 + clip_high], so no token's
    /// gradient is dropped.
    Cispo,
}

/// What a worker group's learning rate does after its warmup (see
/// [`crate::update::LrSchedule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LrDecay {
    /// Stays at the peak.
    Constant,
    /// Falls linearly to `min_lr_ratio` × the peak at the run's last optimizer step.
    Linear,
    /// Falls along half a cosine to `min_lr_ratio` × the peak at the run's last optimizer
    /// step.
    Cosine,
}

/// KL estimators between policy and reference (Schulman's k1/k2/k3, and verl's `abs`); verl's
/// names for them (`kl`, `mse`, `k3`) are taken too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KlType {
    /// k3: exp(ref − logp) − (ref − logp) − 1, low variance, non-negative.
    #[serde(alias = "k3")]
    LowVarKl,
    /// k1: logp − ref.
    #[serde(alias = "kl")]
    K1,
    /// k2: ½ (logp − ref)².
    #[serde(alias = "mse")]
    K2,
    /// |logp − ref|.
    Abs,
}

impl KlType {
    /// The name the run file uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::LowVarKl => "low_var_kl",
            Self::K1 => "k1",
            Self::K2 => "k2",
            Self::Abs => "abs",
        }
    }
}

/// `[rollout]`: the batch shape and sampling settings of training rollouts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutSection {
    /// Distinct tasks per iteration (B).
    pub prompts_per_batch: usize,
    /// Episodes per task sharing one `uid` (n).
    pub group_size: usize,
    /// Sampling temperature.
    pub temperature: f64,
    /// Nucleus sampling mass.
    pub top_p: f64,
    /// Keep only the k most likely tokens (0 disables).
    pub top_k: usize,
    /// Prompts longer than this are truncated from the left (counted and warned about).
    pub max_prompt_tokens: usize,
    /// Maximum new tokens per agent call.
    pub max_response_tokens: usize,
    /// How episodes take turns on the worker groups.
    pub schedule: Schedule,
    /// Under `schedule = "async"`: how long an idle worker group waits for more calls while
    /// episodes are still in plugin code, before generating the calls it has.
    pub batch_wait_ms: u64,
    /// The longest one call into plugin code (an agent's `parse`, an environment's `step`, ...)
    /// may take before the run stops naming it; 0: no limit.
    pub plugin_call_timeout_s: u64,
    /// The fraction of a rollout's episodes that may fail (a plugin call of the episode erred,
    /// panicked or timed out) before the run stops; a failed episode's prompt group is dropped
    /// from the batch. 0: the first failure stops the run.
    pub max_episode_failure_rate: f64,
    /// The next iteration's rollout runs on the servers while this iteration's update runs,
    /// sampled by the weights one update behind (verl's one-step off-policy): the update no
    /// longer waits for generation, nor generation for the update. Needs every worker group on
    /// servers; the old log-probabilities are recomputed.
    pub one_step_off_policy: bool,
}

/// How a rollout batches agent calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// Every episode advances, then every waiting call is generated, group by group, and so
    /// on: the largest batches, and a run that is bit-for-bit reproducible from its seed.
    #[default]
    Rounds,
    /// Each worker group generates as soon as it has calls and nothing more is coming soon;
    /// episodes advance as soon as their own call is done. A slow environment delays only its
    /// own episodes, and groups on different devices generate at the same time. Batches then
    /// depend on timing, so runs are not bit-reproducible.
    Async,
}

impl Default for RolloutSection {
    fn default() -> Self {
        Self {
            prompts_per_batch: 8,
            group_size: 4,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_prompt_tokens: 1024,
            max_response_tokens: 256,
            schedule: Schedule::Rounds,
            batch_wait_ms: 50,
            plugin_call_timeout_s: 60,
            max_episode_failure_rate: 0.0,
            one_step_off_policy: false,
        }
    }
}

/// `[eval]`: avg@k / pass@k evaluation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalSection {
    /// Samples per question.
    pub k: usize,
    /// Sampling temperature.
    pub temperature: f64,
    /// Nucleus sampling mass.
    pub top_p: f64,
}

impl Default for EvalSection {
    fn default() -> Self {
        Self {
            k: 4,
            temperature: 0.6,
            top_p: 0.95,
        }
    }
}

mod defaults {
    use toml::Spanned;

    pub fn learning_rate() -> f64 {
        1e-6
    }
    pub fn micro_batch_size() -> usize {
        8
    }
    pub fn lora_rank() -> i64 {
        16
    }
    pub fn lora_alpha() -> f64 {
        32.0
    }
    pub fn lora_targets() -> Vec<String> {
        crate::model::lora::TARGET_MODULES
            .map(str::to_owned)
            .to_vec()
    }
    pub fn per_agent() -> bool {
        true
    }
    pub fn estimator() -> Spanned<String> {
        Spanned::new(0..0, "drmas".to_owned())
    }
}

impl RunConfig {
    /// The optimizer steps each worker group takes in the whole run: `mini_batches ×
    /// ppo_epochs` per iteration.
    pub fn optimizer_steps(&self) -> u64 {
        let loss = &self.algorithm.loss;
        u64::from(self.run.iterations) * (loss.mini_batches * loss.ppo_epochs) as u64
    }

    /// Reads and checks a run file. Relative paths inside stay relative to the file's folder;
    /// use [`RunFile::resolve`] to make one absolute.
    pub fn load(path: &Path) -> Result<(Self, RunFile), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let file = RunFile {
            origin: path.display().to_string(),
            text,
            dir: parent_dir(path),
        };
        let config = Self::parse(&file)?;
        Ok((config, file))
    }

    /// Parses and checks run-file text; `file.origin` names it in errors.
    pub fn parse(file: &RunFile) -> Result<Self, ConfigError> {
        let config: RunConfig =
            toml::from_str(&file.text).map_err(|error| ConfigError::Schema {
                origin: file.origin.clone(),
                message: error.to_string().trim_end().to_owned(),
            })?;
        config.check(file)?;
        Ok(config)
    }

    /// Whether some agent of worker group `group` trains: a group none of whose agents does
    /// never changes its weights.
    pub fn group_trains(&self, group: &str) -> bool {
        self.agents
            .iter()
            .any(|a| a.worker_group.get_ref() == group && a.trains())
    }

    /// Checks what the schema cannot: references between sections and value ranges.
    fn check(&self, file: &RunFile) -> Result<(), ConfigError> {
        if self.agents.is_empty() {
            return Err(file.invalid(0, "no [[agents]]: add one per orchestra role".into()));
        }
        let mut roles: BTreeMap<&str, &Spanned<String>> = BTreeMap::new();
        for agent in &self.agents {
            if let Some(first) = roles.insert(agent.role.get_ref(), &agent.role) {
                let (line, _) = file.line_column(first.span().start);
                return Err(file.invalid(
                    agent.role.span().start,
                    format!(
                        "role `{}` is filled twice (first at line {line})",
                        agent.role.get_ref()
                    ),
                ));
            }
            if !self
                .worker_groups
                .contains_key(agent.worker_group.get_ref())
            {
                let known: Vec<&str> = self.worker_groups.keys().map(String::as_str).collect();
                return Err(file.invalid(
                    agent.worker_group.span().start,
                    format!(
                        "agent `{}` names worker group `{}`, which is not defined; defined: [{}]",
                        agent.agent.get_ref(),
                        agent.worker_group.get_ref(),
                        known.join(", ")
                    ),
                ));
            }
        }
        for (index, agent) in self.agents.iter().enumerate() {
            if agent.trains() {
                continue;
            }
            if let Some((field, _)) = agent.training_overrides().into_iter().find(|(_, set)| *set) {
                return Err(file.invalid_at(
                    &[Step::Key("agents"), Step::Index(index), Step::Key(field)],
                    format!(
                        "agent `{}` has train = false, so its {field} would change nothing; \
                         remove it, or train the agent",
                        agent.role.get_ref()
                    ),
                ));
            }
        }
        for (name, group) in &self.worker_groups {
            rollout_backend::check(name, group, file)?;
        }
        validate::check_numbers(self, file)?;
        rollout_correction::check(self, file)?;
        off_policy::check(self, file)
    }
}

/// The text of a run file and where it came from, kept to locate errors found after parsing.
#[derive(Debug, Clone)]
pub struct RunFile {
    /// How errors name the file.
    pub origin: String,
    /// The file's text.
    pub text: String,
    /// Folder against which relative paths in the file are resolved.
    pub dir: PathBuf,
}

impl RunFile {
    /// A run file from text, e.g. an embedded default; relative paths resolve against `dir`.
    pub fn from_text(origin: impl Into<String>, text: impl Into<String>, dir: PathBuf) -> Self {
        Self {
            origin: origin.into(),
            text: text.into(),
            dir,
        }
    }

    /// 1-based line and column of a byte offset.
    pub fn line_column(&self, offset: usize) -> (usize, usize) {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    }

    /// An error about the value at byte `offset`.
    pub fn invalid(&self, offset: usize, message: String) -> ConfigError {
        let (line, column) = self.line_column(offset);
        ConfigError::Invalid {
            origin: self.origin.clone(),
            line,
            column,
            message,
        }
    }

    /// An error about the value at `path` (`[worker_groups, shared, learning_rate]`), located at
    /// its table when the file leaves the value out.
    pub fn invalid_at(&self, path: &[Step<'_>], message: String) -> ConfigError {
        self.invalid(locate::offset_of(&self.text, path), message)
    }

    /// A path from the file made absolute against the file's folder.
    pub fn resolve(&self, path: &str) -> PathBuf {
        self.dir.join(path)
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

mod locate;
mod validate;

pub use locate::Step;

#[cfg(test)]
mod tests;
