//! The command line: `drmas-host [train|eval|plugins|check] --plugins DIR --config FILE`,
//! `drmas-host experiment --config BASE`, `drmas-host convert MODEL OUT`, `drmas-host plot RUN_DIR`,
//! `drmas-host devices [--compare MODEL]`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Train and evaluate multi-agent LLM systems with reinforcement learning.
#[derive(Debug, Parser)]
#[command(name = "drmas-host", version, about, long_about = None)]
pub struct Cli {
    /// What to do; `train` when left out.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Options shared by every subcommand.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Options every subcommand accepts, before or after its name.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Folder holding plugins (built libraries, `*.so`, and/or plugin crates), or one plugin crate.
    #[arg(
        long,
        global = true,
        default_value = "./plugins",
        env = "DRMAS_PLUGINS"
    )]
    pub plugins: PathBuf,

    /// The run file (TOML); see docs/config.md.
    #[arg(long, global = true, env = "DRMAS_CONFIG")]
    pub config: Option<PathBuf>,

    /// Load what symbolic links in the plugins folder point to outside it (refused by default:
    /// see docs/plugins.md).
    #[arg(long, global = true)]
    pub follow_plugin_links: bool,
}

impl CommonArgs {
    /// Whether links out of the plugins folder are followed.
    pub fn plugin_links(&self) -> crate::plugins::ExternalLinks {
        if self.follow_plugin_links {
            crate::plugins::ExternalLinks::Follow
        } else {
            crate::plugins::ExternalLinks::Refuse
        }
    }
}

/// The subcommands.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Train the agents that the run file describes.
    Train(TrainArgs),
    /// Evaluate the agents that the run file describes (avg@k, pass@k per data source).
    Eval(EvalArgs),
    /// List every component the plugins folder offers, and the built-in estimators.
    Plugins,
    /// Check a run file without doing any work: everything `train` would refuse.
    Check(TrainArgs),
    /// Compare advantage estimators: train the base run file once per (estimator, seed) and
    /// write a report with gradient-norm spikes, rewards, evals and charts.
    Experiment(ExperimentArgs),
    /// Serve a model for rollouts over SGLang's native HTTP protocol (`/generate`,
    /// `/update_weights_from_disk`, `/get_model_info`, `/health`) and OpenAI's
    /// `/v1/completions` and `/v1/models` as vLLM serves them; see docs/scaling.md.
    Serve(ServeArgs),
    /// Draw PNG charts (reward, gradient norms, amplification) from a run's metrics.jsonl.
    Plot {
        /// The run folder (the run file's `[run] output_dir`); the charts are written there.
        run_dir: PathBuf,
    },
    /// Report the CUDA devices this build sees (JSON); with `--compare` check that a device
    /// computes what the CPU does, with `--update`/`--generate` time it (see docs/install.md).
    Devices(DevicesArgs),
    /// Convert a model (a GGUF file or an HF folder) into a Hugging Face folder that
    /// transformers and drmas load (see docs/install.md).
    Convert {
        /// The model to read: a `.gguf` file or an HF model folder.
        model: PathBuf,
        /// The folder to write (replaced whole if it exists).
        out: PathBuf,
        /// The dtype of the written weights.
        #[arg(long, value_enum, default_value_t = Dtype::F32)]
        dtype: Dtype,
        /// A LoRA adapter folder in PEFT's layout (such as one a LoRA run's checkpoint holds
        /// per agent) to merge into the weights written: the output is a plain model that
        /// computes what MODEL with the adapter computes.
        #[arg(long, value_name = "DIR")]
        merge_adapter: Option<PathBuf>,
    },
}

/// A weight dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    /// 32-bit float.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    F16,
}

impl Dtype {
    /// The libtorch kind.
    pub fn kind(self) -> tch::Kind {
        match self {
            Self::F32 => tch::Kind::Float,
            Self::Bf16 => tch::Kind::BFloat16,
            Self::F16 => tch::Kind::Half,
        }
    }
}

/// Options of `train` (and of `check`, which checks what `train` with them would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct TrainArgs {
    /// Continue from the newest checkpoint in the run folder instead of starting over.
    #[arg(long)]
    pub resume: bool,
}

/// Options of `eval`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct EvalArgs {
    /// A checkpoint folder of a run of this run file (`RUN/checkpoints/iteration_NNNNN`) whose
    /// weights to evaluate, at that iteration's eval seed: it scores what the run's own
    /// evaluation after that iteration scored.
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<PathBuf>,
}

/// Options of `devices`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct DevicesArgs {
    /// A model (GGUF file or HF folder) whose logits and greedy generations to compare on
    /// `--device` against the CPU in f32; repeat for several. Fails when one is outside the
    /// tolerance.
    #[arg(long)]
    pub compare: Vec<PathBuf>,
    /// The device to compare against the CPU: `cuda:N`, or `cpu` (to check a dtype there).
    #[arg(long, default_value = "cuda:0")]
    pub device: crate::config::Device,
    /// The dtype of the model on `--device`.
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// The most new tokens of each generation (`--compare`'s greedy ones, `--generate`'s).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=32768))]
    pub new_tokens: u16,
    /// A model whose sampled generation to time on `--device` alone: `--batch` random prompts
    /// of `--prompt-tokens` tokens, continued by up to `--new-tokens` tokens at temperature 1;
    /// repeat for several.
    #[arg(long, value_name = "MODEL")]
    pub generate: Vec<PathBuf>,
    /// Prompts of `--generate`'s batch.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub batch: u16,
    /// Tokens of each of `--generate`'s prompts.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=32768))]
    pub prompt_tokens: u16,
    /// A model whose update step (one optimizer step over a fixed batch of `--agents` agents' calls)
    /// to compare on `--device` in `--dtype` against the CPU in f32: policy loss, entropy and
    /// the group's and each agent's gradient norms; repeat for several. Fails when one is
    /// outside the tolerance (1e-3 relative in f32, 1e-1 in bf16/f16).
    #[arg(long, value_name = "MODEL")]
    pub compare_update: Vec<PathBuf>,
    /// A model whose update step to run and time on `--device` alone (no CPU side): for
    /// long-response measurements with `--response-tokens` and `--activation-checkpointing`.
    #[arg(long, value_name = "MODEL")]
    pub update: Vec<PathBuf>,
    /// Calls in the update step's batch (every four share a prompt of 32 tokens).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(2..=1024))]
    pub calls: u16,
    /// Agents the update step's calls alternate between. Each trains in forward and backward
    /// passes of its own, for its own gradient norm: 1 is the step of a plain trainer, more
    /// measure what per-agent norms cost.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub agents: u16,
    /// The longest response of the update step's batch, in tokens.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(2..=32768))]
    pub response_tokens: u16,
    /// Run the update step with activation checkpointing.
    #[arg(long)]
    pub activation_checkpointing: bool,
    /// Also run each `--generate` (17 tokens per row) and `--update`/`--compare-update` step
    /// once more under libtorch's profiler, and report its busiest host operators and device
    /// kernels with their times and counts (`profile` in the JSON).
    #[arg(long)]
    pub profile: bool,
}

/// Options of `experiment`; the base run file is the global `--config`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ExperimentArgs {
    /// The estimators to compare, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "grpo,grpo_step,drmas_traj,drmas"
    )]
    pub estimators: Vec<String>,
    /// The seeds each estimator runs with, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    pub seeds: Vec<u64>,
    /// The experiment folder (runs in ESTIMATOR/seed-N); default: the base file's
    /// `[run] output_dir` followed by `-experiment`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The markdown report; default: OUT/report.md.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Delete each run's checkpoints once it has finished (the report reads only metrics;
    /// a SmolLM2 checkpoint with optimizer state is 1.6 GB).
    #[arg(long)]
    pub drop_checkpoints: bool,
}

/// Options of `serve`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ServeArgs {
    /// The model to serve: an HF folder or a `.gguf` file.
    #[arg(long)]
    pub model: PathBuf,
    /// The name `/v1/completions` requests give as `model` (default: `--model` as given).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port to listen on (0 picks a free one; the URL is printed).
    #[arg(long, default_value_t = 30000)]
    pub port: u16,
    /// Where the model runs: `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: crate::config::Device,
    /// The weights' dtype.
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// Seed of the stream that requests without `sampling_seed` draw from.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The most sequences in one engine batch, and prompts in one request.
    #[arg(long, default_value_t = 64)]
    pub max_batch: usize,
    /// Generation requests (`/generate`, `/v1/completions`) in progress at once; more are answered 503 (clients retry).
    #[arg(long, default_value_t = 64)]
    pub max_running_requests: usize,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
    /// How long a batch waits for more requests to join it, in milliseconds.
    #[arg(long, default_value_t = 5)]
    pub batch_wait_ms: u64,
    /// How long a client may pause while sending a request or reading an answer, or leave a
    /// kept-alive connection idle, before the server closes its connection, in seconds.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,
    /// libtorch's CPU threads (0: libtorch's default).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// LoRA adapters held at once, loaded and unloaded through vLLM's runtime LoRA routes
    /// (`POST /v1/load_lora_adapter`, `/v1/unload_lora_adapter`) and named by requests as
    /// their `model`; 0 serves no adapters. A LoRA group's sync holds two versions of its
    /// adapters for a moment: give it twice its adapters.
    #[arg(long, default_value_t = 0)]
    pub max_loras: usize,
    /// Holds adapters of any rank up to this one, and of any scale and target modules, each
    /// padded into slots of this rank on every projection (vLLM's and SGLang's flag; needs
    /// `--max-loras`). Without it the first adapter loaded sets the rank, scale and target
    /// modules of all.
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=MAX_LORA_RANK), requires = "max_loras")]
    pub max_lora_rank: Option<i64>,
    /// With `--max-lora-rank`, the projections the slots adapt (SGLang's flag), instead of
    /// every one: adapters may target only these, and rows through an adapter skip the others.
    #[arg(long, num_args = 1.., value_parser = clap::builder::PossibleValuesParser::new(crate::model::lora::TARGET_MODULES), requires = "max_lora_rank")]
    pub lora_target_modules: Option<Vec<String>>,
    /// MiB of finished sequences' keys and values kept (on the model's device) so that a prompt
    /// beginning with one — a conversation's next turn, a shared system prompt — prefills only
    /// the rest, as SGLang's radix cache does; the least recently used leave first, and a weight
    /// update empties it. 0 keeps none.
    #[arg(long, default_value_t = 1024)]
    pub prefix_cache_mb: usize,
}

/// The largest `--max-lora-rank` (vLLM's largest choice).
const MAX_LORA_RANK: i64 = 512;

impl ServeArgs {
    /// The server's options.
    pub fn options(&self) -> crate::serve::ServeOptions {
        crate::serve::ServeOptions {
            model: self.model.clone(),
            served_model_name: self
                .served_model_name
                .clone()
                .unwrap_or_else(|| self.model.display().to_string()),
            addr: format!("{}:{}", self.host, self.port),
            device: crate::trainer::tch_device(self.device),
            kind: self.dtype.kind(),
            seed: self.seed,
            max_batch: self.max_batch,
            max_running_requests: self.max_running_requests,
            max_body_bytes: self.max_body_bytes,
            batch_wait: std::time::Duration::from_millis(self.batch_wait_ms),
            idle_timeout: std::time::Duration::from_secs(self.idle_timeout_secs),
            threads: self.threads,
            max_loras: self.max_loras,
            max_lora_rank: self.max_lora_rank,
            lora_target_modules: self.lora_target_modules.clone(),
            prefix_cache_bytes: self.prefix_cache_mb.saturating_mul(1 << 20),
        }
    }
}
