//! The checks that run before any training work: everything the run file names is resolved and
//! built — plugins, environment and its datasets, orchestra and the agents in its roles, the
//! estimator (built-in or a plugin's), each worker group's model files — so a mistake fails in
//! seconds, naming the file, field or plugin, instead of after a long rollout.

use std::fmt::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use drmas_sdk::{Agent, DatasetSpec, Environment, Orchestra, Params, PluginError, Role, Task};

use crate::advantage::Estimator;
use crate::config::{
    ConfigError, DatasetSection, Device, Dtype, KlController, RunConfig, RunFile, Step,
};
use crate::model::config::LlamaConfig;
use crate::model::config_fit::check_config_fits;
use crate::model::gguf::GgufModel;
use crate::plugins::{Hosted, Registry};

mod cpu_dtype;
mod output_dir;
mod params;

pub use output_dir::{check_output_dir, Intent};

/// The model every run file may name as `builtin:smollm2-135m`: SmolLM2-135M-Instruct, installed
/// from PyPI by scripts/install-model.sh.
pub const BUILTIN_SMOLLM2: &str = "builtin:smollm2-135m";

/// Everything a run needs, built and checked.
pub struct Plan {
    /// The environment component.
    pub environment: Hosted<dyn Environment>,
    /// The orchestra component.
    pub orchestra: Hosted<dyn Orchestra>,
    /// Agents with the role (and its contract) each fills, in run-file order.
    pub agents: Vec<(Role, Hosted<dyn Agent>)>,
    /// Training tasks.
    pub train_tasks: Vec<Task>,
    /// Evaluation tasks (empty without `eval_data`).
    pub eval_tasks: Vec<Task>,
    /// The advantage estimator.
    pub estimator: Box<dyn Estimator>,
    /// Each worker group's model file and a one-line description of it.
    pub models: Vec<(String, PathBuf, String)>,
    /// What may go wrong but need not: an agent whose declared actions its role's contract
    /// refuses. `check` and `train` print them.
    pub warnings: Vec<String>,
    /// What would run faster with another setting: an f32 group on a CPU whose bf16 products
    /// are several times faster. `check` and `train` print them.
    pub notes: Vec<String>,
}

/// Builds the plan of `config` from the components in `registry`.
pub fn prepare(config: &RunConfig, file: &RunFile, registry: &Registry) -> anyhow::Result<Plan> {
    let text = |table: &toml::Table| toml::to_string(table).unwrap_or_default();
    let params = |text: &str| Params::new(text).with_base_dir(&file.dir);

    let snippet = text(&config.environment.params);
    let environment = registry
        .environment(config.environment.name.get_ref(), params(&snippet))
        .map_err(|e| params::locate(e, &snippet, file, &["environment".into(), "params".into()]))?;
    let snippet = text(&config.orchestra.params);
    let orchestra = registry
        .orchestra(config.orchestra.name.get_ref(), params(&snippet))
        .map_err(|e| params::locate(e, &snippet, file, &["orchestra".into(), "params".into()]))?;
    let roles = orchestra
        .call("roles", |orchestra| orchestra.roles())?
        .map_err(PluginError::from)?;

    let mut agents = Vec::new();
    let (mut warnings, mut notes) = (Vec::new(), Vec::new());
    for (index, section) in config.agents.iter().enumerate() {
        let name = section.role.get_ref();
        let Some(role) = roles.iter().find(|role| &role.name == name) else {
            let names: Vec<&str> = roles.iter().map(|role| role.name.as_str()).collect();
            return Err(file
                .invalid(
                    section.role.span().start,
                    format!(
                        "orchestra `{}` has no role `{name}`; its roles: [{}]",
                        config.orchestra.name.get_ref(),
                        names.join(", ")
                    ),
                )
                .into());
        };
        let snippet = text(&section.params);
        let agent = registry
            .agent(section.agent.get_ref(), params(&snippet))
            .map_err(|e| {
                params::locate(
                    e,
                    &snippet,
                    file,
                    &["agents".into(), index.into(), "params".into()],
                )
            })?;
        let declared = agent.actions();
        let refused = role.actions.refused(&declared);
        if !refused.is_empty() {
            warnings.push(format!(
                "{}: agent `{}` in role `{name}` declares the actions {declared}, but orchestra `{}` \
                 accepts {} there: its calls that answer {} will count as invalid",
                file.origin,
                section.agent.get_ref(),
                config.orchestra.name.get_ref(),
                role.actions,
                refused.join(" or ")
            ));
        }
        agents.push((role.clone(), agent));
    }
    for role in roles.iter().map(|role| &role.name) {
        if !agents.iter().any(|(filled, _)| &filled.name == role) {
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
            .call("load_tasks", move |environment| {
                environment.load_tasks(&spec)
            })?
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

    let estimator = registry
        .estimator(
            config.algorithm.estimator.get_ref(),
            &config.algorithm.params,
        )
        .map_err(|e| file.invalid(config.algorithm.estimator.span().start, e.to_string()))?;
    if config.algorithm.critic.is_some() && !estimator.uses_critic() {
        return Err(file
            .invalid_at(
                &["algorithm".into(), "critic".into()],
                format!(
                    "[algorithm.critic] configures a critic, but estimator `{}` has none (`ppo` \
                     has): remove the table or set `estimator = \"ppo\"`",
                    estimator.name()
                ),
            )
            .into());
    }
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
    check_kl_references(config, file)?;
    let loss = &config.algorithm.loss;
    let steps = config.optimizer_steps();
    if u64::from(loss.warmup_steps) > steps {
        warnings.push(format!(
            "{}: [algorithm.loss] warmup_steps = {} is longer than the run's {steps} optimizer \
             steps ([run] iterations × mini_batches × ppo_epochs): the learning rate never \
             reaches the groups' learning_rate",
            file.origin, loss.warmup_steps
        ));
    }
    let mut models = Vec::new();
    for (name, group) in &config.worker_groups {
        if let Some(lora) = &group.lora {
            if let Err(e) = lora_settings(lora).check() {
                bail!("{}: [worker_groups.{name}.lora] {e}", file.origin);
            }
            if let Some(folder) = &lora.init_from {
                check_initial_adapters(config, file, name, lora, folder)?;
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
        check_device(name, group.device, file)?;
        if group.device == Device::Cpu && group.dtype != Dtype::F32 {
            let slowdown = cpu_dtype::slowdown(crate::trainer::tch_kind(group.dtype));
            if let Some(warning) = cpu_dtype::warning(name, group.dtype, slowdown) {
                warnings.push(format!("{}: {warning}", file.origin));
            }
        } else if group.device == Device::Cpu && cpu_dtype::has_bf16_products() {
            let bf16_time = cpu_dtype::slowdown(tch::Kind::BFloat16);
            if let Some(note) = cpu_dtype::bf16_faster(name, bf16_time) {
                notes.push(format!("{}: {note}", file.origin));
            }
        }
        let path = resolve_model(&group.model, file)?;
        let (summary, model_config) = describe_model(&path)
            .with_context(|| format!("worker group `{name}` in {}", file.origin))?;
        check_context(config, file, name, &path, &model_config)?;
        if let Some(reference) = &group.reference_model {
            let read = config.algorithm.kl_in_reward.enabled()
                || config.agents.iter().any(|agent| {
                    agent.worker_group.get_ref() == name
                        && agent.kl_coef.unwrap_or(config.algorithm.loss.kl_coef) > 0.0
                });
            if !read {
                warnings.push(format!(
                    "{}: worker group `{name}` loads reference_model `{reference}`, but no agent \
                     on it has kl_coef > 0 and [algorithm.kl_in_reward] is off, so nothing reads \
                     it: it only takes memory; set [algorithm.loss] kl_coef or remove \
                     reference_model",
                    file.origin
                ));
            }
            let reference = resolve_model(reference, file)?;
            describe_model(&reference).with_context(|| {
                format!(
                    "the reference_model of worker group `{name}` in {}",
                    file.origin
                )
            })?;
        }
        models.push((name.clone(), path, summary));
    }

    // Loading datasets may take long; from here on each call into plugin code has its limit.
    let limit = match config.rollout.plugin_call_timeout_s {
        0 => None,
        seconds => Some(std::time::Duration::from_secs(seconds)),
    };
    let (mut environment, mut orchestra, mut agents) = (environment, orchestra, agents);
    environment.set_limit(limit);
    orchestra.set_limit(limit);
    for (_, agent) in &mut agents {
        agent.set_limit(limit);
    }
    Ok(Plan {
        environment,
        orchestra,
        agents,
        train_tasks,
        eval_tasks,
        estimator,
        models,
        warnings,
        notes,
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

/// Refuses `[worker_groups.NAME.lora] init_from` unless its folder holds a PEFT adapter that
/// fits the group's LoRA settings for each of the group's adapters.
fn check_initial_adapters(
    config: &RunConfig,
    file: &RunFile,
    name: &str,
    lora: &crate::config::LoraSection,
    folder: &str,
) -> anyhow::Result<()> {
    let field: [Step<'_>; 4] = [
        "worker_groups".into(),
        name.into(),
        "lora".into(),
        "init_from".into(),
    ];
    let root = file.resolve(folder);
    let names = crate::trainer::adapter_names(config, name);
    for adapter in &names {
        let dir = root.join(adapter);
        if !dir.is_dir() {
            return Err(file
                .invalid_at(
                    &field,
                    format!(
                        "{} has no folder `{adapter}`: init_from names a folder holding a PEFT \
                         adapter for each of the group's adapters ({}), as a LoRA run's \
                         checkpoint holds them in GROUP/adapters",
                        root.display(),
                        names.join(", ")
                    ),
                )
                .into());
        }
        crate::model::peft::AdapterConfig::read(&dir)
            .and_then(|adapter| adapter.check_fits(&lora_settings(lora), &dir))
            .map_err(|e| file.invalid_at(&field, e.to_string()))?;
    }
    Ok(())
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
    // A checkpoint's folder of a group that did not train names the model it still holds.
    match crate::trainer::untrained_model(&path)? {
        Some(held) if !held.exists() => bail!(
            "{}: model {} is the checkpoint of a worker group that did not train, whose weights \
             are {}, which does not exist any more; name the model file itself",
            file.origin,
            path.display(),
            held.display()
        ),
        Some(held) => Ok(held),
        None => Ok(path),
    }
}

/// Refuses a KL term to a reference that does not exist: an agent whose `kl_coef` (its own or
/// `[algorithm.loss]`'s) is above 0, or the KL in the reward, on a worker group with neither a
/// `reference_model` nor LoRA adapters (whose base is the reference) would otherwise train
/// without it, silently.
fn check_kl_references(config: &RunConfig, file: &RunFile) -> anyhow::Result<()> {
    let in_reward = &config.algorithm.kl_in_reward;
    // A worker group some agent trains, with nothing to take a reference's log-probabilities
    // from (a group no agent trains is its own reference).
    let unreferenced = config.worker_groups.iter().find(|(name, group)| {
        group.reference_model.is_none() && group.lora.is_none() && config.group_trains(name)
    });
    if let (true, Some((group_name, _))) = (in_reward.enabled(), unreferenced) {
        return Err(file
            .invalid_at(
                &["algorithm".into(), "kl_in_reward".into(), "coef".into()],
                format!(
                    "[algorithm.kl_in_reward] coef = {} needs a reference model for every worker \
                     group, and `{group_name}` has none: set [worker_groups.{group_name}] \
                     reference_model (usually the group's own starting model), train LoRA \
                     adapters there (their base is the reference), or set coef = 0",
                    in_reward.coef
                ),
            )
            .into());
    }
    for (index, agent) in config.agents.iter().enumerate() {
        // A frozen agent has no loss, so no KL term.
        if !agent.trains() {
            continue;
        }
        let coef = agent.kl_coef.unwrap_or(config.algorithm.loss.kl_coef);
        let group_name = agent.worker_group.get_ref();
        let Some(group) = config.worker_groups.get(group_name) else {
            continue;
        };
        if coef == 0.0 || group.reference_model.is_some() || group.lora.is_some() {
            continue;
        }
        let path: Vec<Step<'_>> = if agent.kl_coef.is_some() {
            vec![
                Step::Key("agents"),
                Step::Index(index),
                Step::Key("kl_coef"),
            ]
        } else {
            vec!["algorithm".into(), "loss".into(), "kl_coef".into()]
        };
        return Err(file
            .invalid_at(
                &path,
                format!(
                    "kl_coef = {coef} for agent `{role}` needs a reference model, and worker group \
                     `{group_name}` has none: set [worker_groups.{group_name}] reference_model \
                     (usually the group's own starting model), train LoRA adapters there (their \
                     base is the reference), or set kl_coef = 0",
                    role = agent.role.get_ref()
                ),
            )
            .into());
    }
    Ok(())
}

/// Refuses a CUDA device this process cannot use (libtorch would panic creating the model),
/// at the `device` line, saying why (a CPU-only build, no device visible, an index past them).
fn check_device(group: &str, device: Device, file: &RunFile) -> Result<(), ConfigError> {
    crate::devices::check_available(device).map_err(|reason| {
        file.invalid_at(
            &[
                Step::Key("worker_groups"),
                Step::Key(group),
                Step::Key("device"),
            ],
            format!("[worker_groups.{group}] {reason}"),
        )
    })
}

/// Refuses agents of worker group `group` whose response length leaves no room for a prompt in
/// its model's context (every generation would fail), and warns about those whose longest prompt
/// (`max_prompt_tokens`) plus response does not fit (a prompt that long would fail mid-run).
fn check_context(
    config: &RunConfig,
    file: &RunFile,
    group: &str,
    model: &std::path::Path,
    model_config: &LlamaConfig,
) -> Result<(), ConfigError> {
    let context = model_config.max_position_embeddings;
    let prompt = config.rollout.max_prompt_tokens;
    for (index, agent) in config.agents.iter().enumerate() {
        if agent.worker_group.get_ref() != group {
            continue;
        }
        let response = agent
            .max_new_tokens
            .unwrap_or(config.rollout.max_response_tokens);
        let total = prompt.saturating_add(response);
        if total <= context {
            continue;
        }
        let at: &[Step<'_>] = if agent.max_new_tokens.is_some() {
            &[
                Step::Key("agents"),
                Step::Index(index),
                Step::Key("max_new_tokens"),
            ]
        } else {
            &[Step::Key("rollout"), Step::Key("max_response_tokens")]
        };
        let role = agent.role.get_ref();
        if response >= context {
            return Err(file.invalid_at(
                at,
                format!(
                    "role `{role}`: {response} new tokens leave no room for a prompt in the \
                     {context} positions of {} (max_position_embeddings); lower the response \
                     length",
                    model.display()
                ),
            ));
        }
        tracing::warn!(
            "{}",
            file.invalid_at(
                at,
                format!(
                    "role `{role}`: [rollout] max_prompt_tokens = {prompt} plus {response} new \
                     tokens is {total} tokens, more than the {context} positions of {}; a prompt \
                     longer than {} tokens will fail its generation",
                    model.display(),
                    context - response
                ),
            )
        );
    }
    Ok(())
}

/// Opens a model (a GGUF file, or an HF folder's configuration, tokenizer and weight file
/// headers), checks that its configuration fits its weights and that every tensor type loads,
/// and says what it is, without reading a weight.
fn describe_model(path: &std::path::Path) -> anyhow::Result<(String, LlamaConfig)> {
    if path.is_dir() {
        let folder = crate::model::hf_folder::HfFolder::read(path)?;
        let (shapes, names_file) = crate::model::safetensors_io::checkpoint_shapes(path)?;
        check_config_fits(&folder.config, &shapes, &names_file)?;
        let files: std::collections::BTreeSet<&std::path::Path> =
            shapes.values().map(|d| d.file.as_path()).collect();
        let c = &folder.config;
        let summary = format!(
            "{} ({:?}, HF folder, {} weight file(s)), {} layers, hidden {}, vocab {}",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            c.architecture,
            files.len(),
            c.num_hidden_layers,
            c.hidden_size,
            folder.tokenizer.get_vocab_size(true)
        );
        return Ok((summary, folder.config));
    }
    if path.extension().is_none_or(|e| e != "gguf") {
        bail!(
            "{}: neither a .gguf file nor a Hugging Face model folder",
            path.display()
        );
    }
    let model = GgufModel::open(path)?;
    model.check_tensor_types()?;
    let config = LlamaConfig::from_json(&model.config_json()?).map_err(|e| e.in_file(path))?;
    check_config_fits(&config, &model.hf_shapes(), path)?;
    let tokenizer = model.tokenizer()?;
    let summary = format!(
        "{} ({:?}), {} layers, hidden {}, vocab {}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        model.architecture(),
        config.num_hidden_layers,
        config.hidden_size,
        tokenizer.get_vocab_size(true)
    );
    Ok((summary, config))
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
                "  role {:<10} {} on worker group `{}`, actions: {}{}",
                role.name,
                agent.origin(),
                section.worker_group.get_ref(),
                role.actions,
                if section.trains() {
                    ""
                } else {
                    " (not trained: train = false)"
                }
            );
        }
        for (name, path, summary) in &self.models {
            let _ = writeln!(
                out,
                "worker group `{name}`: {summary} from {}",
                path.display()
            );
            if let Some(lora) = config.worker_groups.get(name).and_then(|g| g.lora.as_ref()) {
                let _ = writeln!(
                    out,
                    "  LoRA adapters {} (rank {}, alpha {}), {}",
                    crate::trainer::adapter_names(config, name).join(", "),
                    lora.rank,
                    lora.alpha,
                    lora.init_from
                        .as_ref()
                        .map_or("fresh".to_owned(), |from| format!("from {from}"))
                );
            }
            let Some(group) = config.worker_groups.get(name).filter(|g| g.offload) else {
                continue;
            };
            let back = if group.rollout.is_remote() {
                "and return before its next update (its rollouts run on its servers)"
            } else {
                "; the weights return before each rollout, the rest before its update"
            };
            let _ = match group.device {
                Device::Cpu => writeln!(
                    out,
                    "  offload = true changes nothing here: the group is on the CPU, in host \
                     memory already"
                ),
                Device::Cuda(_) => writeln!(
                    out,
                    "  offload: after each update its weights and optimizer state go to pinned \
                     host memory {back}"
                ),
            };
        }
        let _ = match self.estimator.origin() {
            Some(origin) => writeln!(out, "estimator    {origin}"),
            None => writeln!(out, "estimator    {} (built-in)", self.estimator.name()),
        };
        let kl = &config.algorithm.kl_in_reward;
        if kl.enabled() {
            let steering = match kl.controller {
                KlController::Fixed => "fixed".to_owned(),
                KlController::Adaptive => format!(
                    "adaptive, towards a KL of {} over a horizon of {} calls",
                    kl.target, kl.horizon
                ),
            };
            let _ = writeln!(
                out,
                "kl penalty   in the reward: β = {} ({steering}) × {} against each worker \
                 group's reference",
                kl.coef,
                kl.kl_type.name()
            );
        }
        if config.rollout.one_step_off_policy {
            let _ = writeln!(
                out,
                "rollouts     one step off-policy: each iteration's rollout runs on the servers \
                 beside the previous update, sampled one update behind"
            );
        }
        for warning in &self.warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        if !config.run.saves() {
            let _ = writeln!(
                out,
                "note: [run] save_every = -1: the run writes no checkpoint, so neither its \
                 weights nor a way to resume it are kept"
            );
        }
        out
    }
}
