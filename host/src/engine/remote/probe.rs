//! Probing a worker group's servers before any work: each must be healthy and serve the
//! group's model (`/health`; `/get_model_info` where the servers load weights SGLang's way;
//! `/v1/models` for the OpenAI protocol's model name; `/weight_info` where they load weights
//! vLLM's way, which only a server in development mode answers; vLLM's or SGLang's LoRA routes
//! where they load a LoRA group's adapters, and the LoRA limits in `/get_server_info` where a
//! server reports them).

use anyhow::bail;

use super::connection::{Connection, Failure};
use super::generator::RemoteGenerator;
use super::lora_wire::{
    LoraLimits, UnloadLoraAdapterBody, ADAPTER_NOT_FOUND, SERVER_INFO_PATH,
    SGLANG_UNLOAD_LORA_ADAPTER_PATH, UNLOAD_LORA_ADAPTER_PATH,
};
use super::openai_wire::{ModelList, MODELS_PATH};
use super::settings::{Protocol, WeightLoading};
use super::vllm_wire::{WeightInfo, WEIGHT_INFO_PATH};
use super::wire::{ModelInfo, HEALTH_PATH, MODEL_INFO_PATH};
use crate::model::config::LlamaConfig;

/// What a probe learnt from one server.
struct Answers {
    /// `/get_model_info`, where the servers speak SGLang's protocol.
    info: Option<ModelInfo>,
    /// The names in `/v1/models`, with the OpenAI protocol.
    names: Option<Vec<String>>,
    /// The LoRA limits in `/get_server_info`, where the servers load a LoRA group's adapters
    /// and report them.
    lora_limits: Option<LoraLimits>,
}

impl RemoteGenerator {
    /// Checks that every server, and the router when there is one, answers `/health` and
    /// serves a model like `model` (the group's own): same architecture and, where the server
    /// reports them, same model type and vocabulary (a router answers with one of its
    /// servers'); with the OpenAI protocol, the run file's model name among `/v1/models`; for
    /// a LoRA group, the rank, projections and number of adapters within the limits a server
    /// reports. Errors name the server and both models, or the limit and the flag that raises it.
    pub fn probe(&self, model: &LlamaConfig) -> anyhow::Result<()> {
        let group = &self.settings.group;
        let servers = self.servers.iter().map(|server| (server, false));
        for (connection, router) in servers.chain(self.router.iter().map(|r| (r, true))) {
            let url = connection.url();
            let tries = self.settings.max_tries.max(1);
            let mut answer = Err(Failure::Transient(String::new()));
            for attempt in 1..=tries {
                std::thread::sleep(self.backoff(attempt));
                answer = self.ask(connection, router);
                if !matches!(answer, Err(Failure::Transient(_))) {
                    break;
                }
            }
            let answers = match answer {
                Ok(answers) => answers,
                Err(reason) => bail!(
                    "worker group `{group}`: server {url} is not usable ({reason}); start it (a \
                     router: with its servers registered) or fix [worker_groups.{group}.rollout] \
                     urls or router"
                ),
            };
            if let (Some(names), Protocol::Openai { model: name }) =
                (&answers.names, &self.settings.protocol)
            {
                if !names.contains(name) {
                    bail!(
                        "worker group `{group}`: server {url} serves no model named `{name}` (its \
                         /v1/models: {}); set [worker_groups.{group}.rollout] model_name to the \
                         name it serves",
                        names.join(", ")
                    );
                }
            }
            if let (Some(limits), Some(needs)) =
                (&answers.lora_limits, &self.settings.adapter_needs)
            {
                if let Some(misfit) = needs.misfit(limits, group) {
                    bail!("worker group `{group}`: server {url} {misfit}");
                }
            }
            let Some(info) = answers.info else {
                continue;
            };
            let ours = model.architecture.hf_class();
            let theirs = info.architectures.clone().unwrap_or_default();
            let same = info.is_generation
                && (theirs.is_empty() || theirs.iter().any(|a| a == ours))
                && info
                    .model_type
                    .as_deref()
                    .is_none_or(|t| t == model.architecture.model_type())
                && info.vocab_size.is_none_or(|v| v == model.vocab_size);
            if !same {
                bail!(
                    "worker group `{group}`: server {url} serves another model than the group's: \
                     {} ({}, vocabulary {}) against {ours} (vocabulary {}); start it with the \
                     group's model",
                    info.model_path,
                    theirs.join(", "),
                    info.vocab_size
                        .map_or("not reported".into(), |v| v.to_string()),
                    model.vocab_size
                );
            }
        }
        Ok(())
    }

    /// One probe of `connection`: `/health`, then what the protocol and the weight sync
    /// report the model by (and, but on a `router`, which loads nothing, the LoRA routes).
    fn ask(&self, connection: &Connection, router: bool) -> Result<Answers, Failure> {
        connection.get_ok(HEALTH_PATH)?;
        let names = match self.settings.protocol {
            Protocol::Openai { .. } => Some(
                connection
                    .get::<ModelList>(MODELS_PATH)?
                    .data
                    .into_iter()
                    .map(|card| card.id)
                    .collect(),
            ),
            Protocol::Sglang => None,
        };
        if self.settings.weight_loading == WeightLoading::SglangAdapters && !router {
            sglang_lora_routes(connection)?;
        }
        // A server that does not answer the route (vLLM) or answers it otherwise reports no
        // limits; the first sync's refusal then names them.
        let lora_limits = if router || !self.settings.weight_loading.loads_adapters() {
            None
        } else {
            match connection.get::<LoraLimits>(SERVER_INFO_PATH) {
                Ok(limits) => Some(limits),
                Err(Failure::Fatal(_)) => None,
                Err(transient) => return Err(transient),
            }
        };
        let info = match self.settings.weight_loading {
            WeightLoading::Sglang | WeightLoading::SglangAdapters => {
                Some(connection.get::<ModelInfo>(MODEL_INFO_PATH).map_err(
                    |failure| match failure {
                        Failure::Fatal(reason) => Failure::Fatal(format!(
                            "{reason}; weight_sync = \"sglang\" needs servers that speak SGLang's \
                         {MODEL_INFO_PATH} and /update_weights_from_disk (SGLang, drmas-host \
                         serve; for vLLM set weight_sync = \"vllm\")"
                        )),
                        transient => transient,
                    },
                )?)
            }
            WeightLoading::Vllm => {
                connection.get::<WeightInfo>(WEIGHT_INFO_PATH).map_err(
                    |failure| match failure {
                        Failure::Fatal(reason) => Failure::Fatal(format!(
                            "{reason}; weight_sync = \"vllm\" needs vLLM started with \
                             VLLM_SERVER_DEV_MODE=1, which serves the routes that load new \
                             weights (/collective_rpc, /reset_prefix_cache, \
                             /update_weight_version, /weight_info)"
                        )),
                        transient => transient,
                    },
                )?;
                None
            }
            WeightLoading::VllmAdapters => {
                lora_routes(connection)?;
                None
            }
            WeightLoading::None => None,
        };
        Ok(Answers {
            info,
            names,
            lora_limits,
        })
    }
}

/// Whether `connection` serves SGLang's LoRA routes, asked by unloading an adapter no run
/// names: SGLang answers that it failed (`"success": false`); a server without the routes, that
/// it has no such route.
fn sglang_lora_routes(connection: &Connection) -> Result<(), Failure> {
    let body = UnloadLoraAdapterBody {
        lora_name: "drmas-probe".to_owned(),
    };
    match connection.post_for_text(SGLANG_UNLOAD_LORA_ADAPTER_PATH, &body) {
        Err(Failure::Fatal(reason)) if !reason.contains("\"success\"") => {
            Err(Failure::Fatal(format!(
                "{reason}; a LoRA group on backend = \"sglang\" needs SGLang started with \
                 --enable-lora (--max-lora-rank at least the group's rank, --lora-target-modules \
                 covering its target_modules), or drmas-host serve started with --max-loras \
                 (twice the group's adapters), which serve {SGLANG_UNLOAD_LORA_ADAPTER_PATH} and \
                 /load_lora_adapter"
            )))
        }
        Err(Failure::Transient(reason)) => Err(Failure::Transient(reason)),
        _ => Ok(()),
    }
}

/// Whether `connection` serves vLLM's LoRA routes, asked by unloading an adapter no run names
/// (`/`-less, unlike [`served_adapter_name`](super::served_adapter_name)'s): vLLM answers that
/// it holds no such adapter; a server without the routes, that it has no such route.
fn lora_routes(connection: &Connection) -> Result<(), Failure> {
    let body = UnloadLoraAdapterBody {
        lora_name: "drmas-probe".to_owned(),
    };
    match connection.post_for_text(UNLOAD_LORA_ADAPTER_PATH, &body) {
        Err(Failure::Fatal(reason)) if !reason.contains(ADAPTER_NOT_FOUND) => {
            Err(Failure::Fatal(format!(
                "{reason}; weight_sync = \"vllm\" on a LoRA group needs vLLM started with \
                 --enable-lora (--max-loras at least the group's adapters, --max-lora-rank at \
                 least its rank) and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or drmas-host serve \
                 started with --max-loras (twice the group's adapters), which serve \
                 {UNLOAD_LORA_ADAPTER_PATH} and /v1/load_lora_adapter"
            )))
        }
        Err(Failure::Transient(reason)) => Err(Failure::Transient(reason)),
        _ => Ok(()),
    }
}
