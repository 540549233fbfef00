//! [`Fleet`]: a worker group whose rollouts run on inference servers
//! (`[worker_groups.NAME.rollout] backend = "sglang"` or `"openai"`): its [`RemoteGenerator`],
//! checked before any work, and the folder its weights are pushed through.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::{Metrics, WorkerGroup};
use crate::config::{RolloutBackend, RunConfig, RunFile, WeightSync, WorkerGroupSection};
use crate::engine::remote::{
    served_adapter_name, AdapterNeeds, Protocol, RemoteGenerator, RemoteSettings, ServedAdapter,
    WeightLoading,
};
use crate::model::atomic_dir::Durability;
use crate::model::config::LlamaConfig;
use crate::model::gguf::GgufModel;
use crate::model::hf_folder::HfFolder;
use crate::model::save_hf::TiedHead;
use crate::preflight::resolve_model;

/// The servers of one worker group and where its weights go for them.
pub struct Fleet {
    /// Generates the group's rollouts on the servers.
    pub generator: RemoteGenerator,
    /// The folder the trainer writes the group's weights to and the servers load (an HF
    /// folder; for a LoRA group a folder per version holding a PEFT folder per adapter);
    /// `None` when they do not load new weights (`weight_sync = "none"`: evaluation only).
    weights: Option<PathBuf>,
}

impl Fleet {
    /// The fleet of `group` when its section names a remote backend, its servers probed
    /// against the group's model; `None` for a local group.
    pub fn for_group(
        group: &WorkerGroup,
        section: &WorkerGroupSection,
        file: &RunFile,
        out_dir: &Path,
    ) -> anyhow::Result<Option<Self>> {
        let Some(generator) = remote_generator(&group.name, section, group.adapter_names.len())
        else {
            return Ok(None);
        };
        generator.probe(group.pretrained.model.config())?;
        let rollout = &section.rollout;
        if rollout.sync_mode() == Some(WeightSync::Off) {
            return Ok(Some(Self {
                generator,
                weights: None,
            }));
        }
        let base = match &rollout.weights_dir {
            Some(dir) => file.resolve(dir),
            None => out_dir.join("weights"),
        };
        std::fs::create_dir_all(&base)
            .with_context(|| format!("creating the weights folder {}", base.display()))?;
        let base = std::fs::canonicalize(&base).unwrap_or(base);
        Ok(Some(Self {
            generator,
            weights: Some(base.join(&group.name)),
        }))
    }

    /// Whether the servers can load weights the trainer sends (`weight_sync` is not `none`).
    pub fn loads_weights(&self) -> bool {
        self.weights.is_some()
    }

    /// `rollout/servers/GROUP` (the servers still in the fleet) and
    /// `rollout/failed_attempts/GROUP` (generation attempts that failed and were tried again
    /// since the last record) of worker group `group`.
    pub fn record_health(&self, group: &str, metrics: &mut Metrics) {
        let generator = &self.generator;
        metrics.set(
            format!("rollout/servers/{group}"),
            generator.active_servers() as f64,
        );
        metrics.set(
            format!("rollout/failed_attempts/{group}"),
            generator.take_failed_attempts() as f64,
        );
    }

    /// Whether the servers were given this run's weights yet (servers that cannot load
    /// weights keep those they started with).
    pub fn synced(&self) -> bool {
        self.weights.is_none() || self.generator.weight_version().is_some()
    }

    /// Writes `group`'s weights and has every server load them as `version`; returns the
    /// seconds it took (writing and loading).
    pub fn sync(&self, group: &WorkerGroup, version: &str) -> anyhow::Result<f64> {
        let staged = self.stage(group, version)?;
        self.load(&group.name, staged)
    }

    /// Writes `group`'s weights for the servers to load as `version`: an HF folder, or a LoRA
    /// group's adapters as PEFT folders in `weights/VERSION/`. The servers go on serving the
    /// weights they hold until [`Self::load`].
    pub fn stage(&self, group: &WorkerGroup, version: &str) -> anyhow::Result<StagedWeights> {
        let weights = self.weights_folder(&group.name)?;
        let started = Instant::now();
        let adapters = if self.generator.weight_loading().loads_adapters() {
            write_adapters(group, &weights.join(version), version)?
        } else {
            // vLLM's in-place reload keeps a tied model's old LM head unless the folder holds
            // one (`lm_head.weight`, a copy of the embeddings).
            let head = match self.generator.weight_loading() {
                WeightLoading::Vllm => TiedHead::Written,
                WeightLoading::Sglang
                | WeightLoading::None
                | WeightLoading::VllmAdapters
                | WeightLoading::SglangAdapters => TiedHead::Omitted,
            };
            // Rewritten every iteration (beside, then renamed into place, so a server reading
            // the old folder keeps reading it) and loaded at once: the page cache serves the
            // servers, and a crash leaves the checkpoint to resume from, which pushes its own
            // weights first.
            group
                .pretrained
                .save_hf_with(weights, Durability::Cached, head)
                .with_context(|| {
                    format!(
                        "worker group `{}`: writing its weights for the servers",
                        group.name
                    )
                })?;
            Vec::new()
        };
        Ok(StagedWeights {
            version: version.to_owned(),
            adapters,
            write_seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Has every server load `staged`, weights group `group` wrote with [`Self::stage`]; a
    /// LoRA group's older versions are then removed. Returns the seconds of the writing and
    /// the loading.
    pub fn load(&self, group: &str, staged: StagedWeights) -> anyhow::Result<f64> {
        let weights = self.weights_folder(group)?;
        let started = Instant::now();
        let version = &staged.version;
        let what = if self.generator.weight_loading().loads_adapters() {
            self.generator.update_adapters(&staged.adapters, version)?;
            remove_other_versions(weights, version)?;
            "LoRA adapters"
        } else {
            self.generator.update_weights(weights, version)?;
            "weight version"
        };
        let seconds = staged.write_seconds + started.elapsed().as_secs_f64();
        tracing::info!("worker group `{group}`: servers serve {what} {version} ({seconds:.2}s)");
        Ok(seconds)
    }

    /// The folder the servers load `group`'s weights from; an error when they load none.
    fn weights_folder(&self, group: &str) -> anyhow::Result<&Path> {
        self.weights.as_deref().with_context(|| {
            format!(
                "worker group `{group}`: its servers cannot load new weights (weight_sync = \
                 \"none\"); only `drmas-host eval` runs on them"
            )
        })
    }
}

/// A worker group's weights written for its servers and not yet loaded by them.
pub struct StagedWeights {
    /// The version they are to be served as.
    version: String,
    /// A LoRA group's adapters under their served names; empty for full weights.
    adapters: Vec<ServedAdapter>,
    /// The seconds the writing took.
    write_seconds: f64,
}

/// Writes each adapter of LoRA group `group` as a PEFT folder in `folder`, to be served under
/// its name for `version`.
fn write_adapters(
    group: &WorkerGroup,
    folder: &Path,
    version: &str,
) -> anyhow::Result<Vec<ServedAdapter>> {
    let base = group.pretrained.source.display().to_string();
    group
        .adapter_names
        .iter()
        .enumerate()
        .map(|(slot, name)| {
            let dir = folder.join(name);
            group
                .pretrained
                .model
                .save_adapter(slot, &dir, &base)
                .with_context(|| {
                    format!(
                        "worker group `{}`: writing LoRA adapter `{name}` for the servers",
                        group.name
                    )
                })?;
            Ok(ServedAdapter {
                name: served_adapter_name(&group.name, name, version),
                folder: dir,
            })
        })
        .collect()
}

/// Removes everything in `weights` but the folder of `version`: older adapter versions (the
/// current one stays, since a server may read an adapter's folder again while it serves it,
/// after evicting it from memory).
fn remove_other_versions(weights: &Path, version: &str) -> anyhow::Result<()> {
    let older = std::fs::read_dir(weights)
        .with_context(|| format!("listing {}", weights.display()))?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name() != version);
    for entry in older {
        let path = entry.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(error) = removed {
            tracing::warn!("could not remove {}: {error}", path.display());
        }
    }
    Ok(())
}

/// The remote generator of worker group `name` (holding `adapters` LoRA adapters) when its
/// section names a remote backend.
fn remote_generator(
    name: &str,
    section: &WorkerGroupSection,
    adapters: usize,
) -> Option<RemoteGenerator> {
    let rollout = &section.rollout;
    let protocol = match rollout.backend.get_ref() {
        RolloutBackend::Local => return None,
        RolloutBackend::Sglang => Protocol::Sglang,
        RolloutBackend::Openai => Protocol::Openai {
            model: rollout
                .model_name
                .as_ref()
                .map(|name| name.get_ref().clone())
                .unwrap_or_default(),
        },
    };
    Some(RemoteGenerator::new(RemoteSettings {
        group: name.to_owned(),
        urls: rollout.urls.iter().map(|u| u.get_ref().clone()).collect(),
        router: rollout.router.as_ref().map(|u| u.get_ref().clone()),
        request_timeout: Duration::from_secs_f64(rollout.request_timeout_s),
        connect_timeout: Duration::from_secs_f64(rollout.connect_timeout_s),
        max_in_flight: rollout.max_in_flight,
        max_tries: rollout.max_tries,
        first_backoff: Duration::from_millis(250),
        max_batch_per_request: rollout.max_batch_per_request,
        protocol,
        weight_loading: match rollout.sync_mode() {
            Some(WeightSync::Sglang) if section.lora.is_some() => WeightLoading::SglangAdapters,
            Some(WeightSync::Sglang) => WeightLoading::Sglang,
            Some(WeightSync::Vllm) if section.lora.is_some() => WeightLoading::VllmAdapters,
            Some(WeightSync::Vllm) => WeightLoading::Vllm,
            Some(WeightSync::Off) | None => WeightLoading::None,
        },
        adapter_needs: section.lora.as_ref().map(|lora| AdapterNeeds {
            rank: lora.rank,
            target_modules: lora.target_modules.clone(),
            adapters,
        }),
    }))
}

/// `check`'s look at the servers: every remote group's servers answer `/health` and serve the
/// group's model (read from its files, weights left unloaded). Returns one line per group.
pub fn probe_servers(config: &RunConfig, file: &RunFile) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for (name, section) in &config.worker_groups {
        let adapters = super::setup::adapter_names(config, name).len();
        let Some(generator) = remote_generator(name, section, adapters) else {
            continue;
        };
        let path = resolve_model(&section.model, file)?;
        generator.probe(&model_config(&path)?)?;
        let rollout = &section.rollout;
        let servers: Vec<&str> = rollout.urls.iter().map(|u| u.get_ref().as_str()).collect();
        let router = rollout.router.as_ref().map_or(String::new(), |u| {
            format!(" through router {}", u.get_ref())
        });
        let protocol = match rollout.backend.get_ref() {
            RolloutBackend::Openai => " over /v1/completions",
            _ => "",
        };
        // Only SGLang's /get_model_info describes the model; /v1/models names it.
        let model = match generator.weight_loading() {
            WeightLoading::Sglang | WeightLoading::SglangAdapters => "same model".to_owned(),
            WeightLoading::Vllm | WeightLoading::VllmAdapters | WeightLoading::None => format!(
                "serving `{}`",
                rollout.model_name.as_ref().map_or("", |n| n.get_ref())
            ),
        };
        lines.push(format!(
            "worker group `{name}`: rollouts on {}{router}{protocol} (healthy, {model})",
            servers.join(", ")
        ));
    }
    Ok(lines)
}

/// The configuration of the model at `path` (an HF folder or a GGUF file).
fn model_config(path: &Path) -> anyhow::Result<LlamaConfig> {
    if path.is_dir() {
        return Ok(HfFolder::read(path)?.config);
    }
    let gguf = GgufModel::open(path)?;
    Ok(LlamaConfig::from_json(&gguf.config_json()?).map_err(|e| e.in_file(path))?)
}
