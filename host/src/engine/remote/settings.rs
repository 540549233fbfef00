//! [`RemoteSettings`]: where a worker group's servers are and how patiently to use them.

use std::time::Duration;

use super::AdapterNeeds;

/// The servers of one worker group and the limits of talking to them.
#[derive(Debug, Clone)]
pub struct RemoteSettings {
    /// The worker group, for messages.
    pub group: String,
    /// Server base URLs (`http://host:port`): SGLang servers or `drmas-host serve` processes
    /// (or one router that forwards weight updates itself).
    pub urls: Vec<String>,
    /// A router in front of `urls` (sglang-router): generation goes through it, one prompt a
    /// request; probes and weight updates go to `urls` directly.
    pub router: Option<String>,
    /// The longest one request may take (generation included).
    pub request_timeout: Duration,
    /// The longest a connection may take to open.
    pub connect_timeout: Duration,
    /// Requests in flight at once, over all servers.
    pub max_in_flight: usize,
    /// Attempts at one request before the run stops with an error (at least 1).
    pub max_tries: u32,
    /// The wait after the first failed attempt; it doubles after each further one.
    pub first_backoff: Duration,
    /// The most prompts one request carries.
    pub max_batch_per_request: usize,
    /// What the servers speak.
    pub protocol: Protocol,
    /// How the servers load new weights, if they do.
    pub weight_loading: WeightLoading,
    /// What a LoRA group's adapters ask of each server (`None` without LoRA).
    pub adapter_needs: Option<AdapterNeeds>,
}

/// The routes a fleet loads the trainer's weights through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLoading {
    /// None: the servers keep the weights they started with (evaluation only).
    None,
    /// SGLang's `/update_weights_from_disk`; the servers report their model in
    /// `/get_model_info` (SGLang, `drmas-host serve`).
    Sglang,
    /// vLLM's development routes (`VLLM_SERVER_DEV_MODE=1`): `/collective_rpc` with
    /// `reload_weights`, `/reset_prefix_cache`, `/update_weight_version` and `/weight_info`.
    Vllm,
    /// vLLM's runtime LoRA routes (`--enable-lora`, `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`):
    /// each adapter of a LoRA group loaded as a model of its own over the frozen base the
    /// servers serve, named by the group, the adapter and the version.
    VllmAdapters,
    /// SGLang's LoRA routes (`--enable-lora`): each adapter of a LoRA group loaded under such
    /// a name, which requests give as their `lora_path`; the servers report their model in
    /// `/get_model_info` (SGLang, `drmas-host serve --max-loras`).
    SglangAdapters,
}

impl WeightLoading {
    /// Whether the servers load a LoRA group's adapters rather than whole weights.
    pub fn loads_adapters(self) -> bool {
        matches!(self, Self::VllmAdapters | Self::SglangAdapters)
    }
}

/// The HTTP protocol a fleet generates with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// SGLang's native `POST /generate` with `input_ids`.
    Sglang,
    /// OpenAI's `POST /v1/completions` with a token-id prompt, as vLLM serves it, asking for
    /// the model the servers serve under `model`.
    Openai {
        /// The served model's name.
        model: String,
    },
}

/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(8);
