//! The drmas host: loads agent, orchestra and environment plugins, maps agents to model worker
//! groups, runs batched multi-agent rollouts, computes advantages and trains.
//!
//! The binary `drmas-host` is a thin shell over this library (see `main.rs`); end-to-end tests
//! drive the same entry points.

pub mod advantage;
pub mod allocator;
pub mod cli;
pub mod config;
pub mod crash_report;
pub mod devices;
pub mod engine;
pub mod experiment;
pub mod interrupt;
pub mod model;
pub mod plot;
pub mod plugins;
pub mod preflight;
pub mod rng;
pub mod rollout;
pub mod serve;
mod shim_error;
pub mod suggest;
mod tensor_list;
pub mod trainer;
pub mod update;

use anyhow::Context;

/// Runs one command line to completion.
pub fn run(cli: cli::Cli) -> anyhow::Result<()> {
    let command = cli
        .command
        .unwrap_or(cli::Command::Train(cli::TrainArgs::default()));
    match command {
        cli::Command::Convert {
            model,
            out,
            dtype,
            merge_adapter,
        } => convert(&model, &out, dtype, merge_adapter.as_deref()),
        cli::Command::Devices(args) => devices_command(&args),
        cli::Command::Experiment(args) => experiment::run(&cli.common, &args),
        cli::Command::Serve(args) => serve::serve(args.options()),
        cli::Command::Plot { run_dir } => {
            for path in plot::plot_run(&run_dir)? {
                println!("{}", path.display());
            }
            Ok(())
        }
        cli::Command::Plugins => {
            let registry = plugins::Registry::load_folder(
                &cli.common.plugins,
                plugins::BuildProfile::Release,
                cli.common.plugin_links(),
            )?;
            print!("{}", list_components(&registry));
            Ok(())
        }
        cli::Command::Check(args) => {
            let (config, file, plan) = prepare(&cli.common, train_intent(&args))?;
            let servers = trainer::probe_servers(&config, &file)?;
            println!("{}: ready\n{}", file.origin, plan.summary(&config));
            for line in servers {
                println!("{line}");
            }
            Ok(())
        }
        cli::Command::Train(args) => {
            let (config, file, plan) = prepare(&cli.common, train_intent(&args))?;
            println!("{}: ready\n{}", file.origin, plan.summary(&config));
            let saves = config.run.saves();
            let mut trainer = trainer::Trainer::new(config, &file, plan)?;
            if args.resume {
                match trainer.resume()? {
                    Some(iteration) => println!("resuming after iteration {iteration}"),
                    None => println!("no checkpoint to resume from; starting at iteration 1"),
                }
            } else if trainer::run_folder::clear_unfinished(trainer.out_dir())? {
                println!(
                    "the run folder {} holds no finished iteration; starting the run over there",
                    trainer.out_dir().display()
                );
            }
            interrupt::install(saves).context("installing the SIGINT/SIGTERM handler")?;
            let summary = trainer.train()?;
            print!("{}", summary.render());
            match plot::plot_run(&summary.out_dir) {
                Ok(charts) => {
                    for chart in charts {
                        println!("plot                    {}", chart.display());
                    }
                }
                Err(error) => tracing::warn!("no plots: {error:#}"),
            }
            Ok(())
        }
        cli::Command::Eval(args) => {
            let (config, file, plan) = prepare(&cli.common, preflight::Intent::Eval)?;
            let checkpoint = args
                .checkpoint
                .as_deref()
                .map(trainer::Checkpoint::open)
                .transpose()?;
            let mut trainer = trainer::Trainer::new(config, &file, plan)?;
            if let Some(checkpoint) = &checkpoint {
                trainer.load_checkpoint_weights(checkpoint)?;
                println!(
                    "evaluating {} (the weights after iteration {})",
                    checkpoint.dir().display(),
                    checkpoint.iteration()
                );
            }
            let report = trainer.evaluate_standalone()?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
    }
}

/// `devices`: prints what [`devices::DeviceReport`] detects and, for each model asked for, its
/// [`devices::Comparison`], [`devices::UpdateStep`] or [`devices::GenerationSpeed`], as one JSON
/// object; fails when a comparison is outside its tolerance.
pub fn devices_command(args: &cli::DevicesArgs) -> anyhow::Result<()> {
    let report = devices::DeviceReport::detect();
    let mut comparisons = Vec::new();
    if !(args.compare.is_empty()
        && args.compare_update.is_empty()
        && args.update.is_empty()
        && args.generate.is_empty())
    {
        devices::check_available(args.device).map_err(|e| anyhow::anyhow!("--device {e}"))?;
    }
    let device = trainer::tch_device(args.device);
    let kind = args.dtype.kind();
    for model in &args.compare {
        let tolerance = devices::Tolerance::for_kind(kind);
        comparisons.push(devices::compare(
            model,
            device,
            kind,
            usize::from(args.new_tokens),
            tolerance,
        )?);
    }
    let shape = devices::UpdateShape {
        calls: usize::from(args.calls),
        agents: usize::from(args.agents),
        response_tokens: usize::from(args.response_tokens),
        activation_checkpointing: args.activation_checkpointing,
    };
    let against_cpu = args.compare_update.iter().map(|m| (m, true));
    let alone = args.update.iter().map(|m| (m, false));
    let updates = against_cpu
        .chain(alone)
        .map(|(model, with_cpu)| {
            devices::update_step(model, device, kind, shape, with_cpu, args.profile)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let generation_shape = devices::GenerationShape {
        batch: usize::from(args.batch),
        prompt_tokens: usize::from(args.prompt_tokens),
        new_tokens: usize::from(args.new_tokens),
    };
    let generations = args
        .generate
        .iter()
        .map(|model| devices::generation_speed(model, device, kind, generation_shape, args.profile))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let out = serde_json::json!({
        "devices": report,
        "comparisons": comparisons,
        "updates": updates,
        "generations": generations,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    let failed: Vec<&str> = comparisons
        .iter()
        .filter(|c| !c.pass)
        .map(|c| c.model.as_str())
        .chain(updates.iter().filter(|u| !u.pass).map(|u| u.model.as_str()))
        .collect();
    if !failed.is_empty() {
        anyhow::bail!(
            "{} on {} in {:?} outside the tolerance against the CPU (see the JSON above)",
            failed.join(", "),
            args.device,
            args.dtype
        );
    }
    Ok(())
}

/// `convert`: loads `model` (GGUF file or HF folder) on the CPU in `dtype`, merges the PEFT
/// LoRA adapter in `merge_adapter` into it when given (in f32, then cast to `dtype`), and
/// writes it to `out` as an HF folder.
pub fn convert(
    model: &std::path::Path,
    out: &std::path::Path,
    dtype: cli::Dtype,
    merge_adapter: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    let load_kind = if merge_adapter.is_some() {
        tch::Kind::Float
    } else {
        dtype.kind()
    };
    let mut pretrained = model::pretrained::Pretrained::load(model, tch::Device::Cpu, load_kind)
        .with_context(|| format!("loading {}", model.display()))?;
    if let Some(dir) = merge_adapter {
        let adapter = model::peft::AdapterConfig::read(dir)?;
        let network = &mut pretrained.model;
        network.add_adapters(&adapter.settings, 1, 0)?;
        network
            .load_adapter(0, dir)
            .with_context(|| format!("loading the adapter {}", dir.display()))?;
        network.merge_adapter(0)?;
        network.set_kind(dtype.kind());
        println!("merged the LoRA adapter {}", dir.display());
    }
    pretrained
        .save_hf(out)
        .with_context(|| format!("writing {}", out.display()))?;
    let config = pretrained.model.config();
    println!(
        "{} -> {}: {} ({} layers, hidden {}, vocab {}), {:?} weights, in {:.1?}",
        model.display(),
        out.display(),
        config.architecture.hf_class(),
        config.num_hidden_layers,
        config.hidden_size,
        config.vocab_size,
        dtype,
        start.elapsed()
    );
    Ok(())
}

/// What `train` (or `check`) with `args` does with the run folder.
fn train_intent(args: &cli::TrainArgs) -> preflight::Intent {
    if args.resume {
        preflight::Intent::Resume
    } else {
        preflight::Intent::Train
    }
}

/// Reads the run file, loads the plugins and runs every pre-flight check, the run folder's for
/// `intent` included.
fn prepare(
    common: &cli::CommonArgs,
    intent: preflight::Intent,
) -> anyhow::Result<(config::RunConfig, config::RunFile, preflight::Plan)> {
    let path = common
        .config
        .as_ref()
        .context("--config FILE is required (see docs/config.md)")?;
    let (config, file) = config::RunConfig::load(path)?;
    preflight::check_output_dir(&config, &file, intent)?;
    if intent != preflight::Intent::Eval {
        config::check_trainable(&config, &file)?;
    }
    let registry = plugins::Registry::load_folder(
        &common.plugins,
        plugins::BuildProfile::Release,
        common.plugin_links(),
    )?;
    let plan = preflight::prepare(&config, &file, &registry)?;
    Ok((config, file, plan))
}

/// The roles of the orchestra `name` built with its default params, one line each with the
/// actions the role accepts; one line saying why when it cannot be built without params.
fn role_contracts(registry: &plugins::Registry, name: &str) -> Vec<String> {
    let roles = registry
        .orchestra(name, "")
        .map_err(|e| e.to_string())
        .and_then(|orchestra| orchestra.roles().map_err(|e| e.to_string()));
    match roles {
        Ok(roles) => roles
            .iter()
            .map(|role| format!("role {}: {}", role.name, role.actions))
            .collect(),
        Err(error) => vec![format!("roles: not listed, it needs params ({error})")],
    }
}

/// The `plugins` listing: one line per component, grouped by kind; the estimators list the
/// built-in ones first (a run file's name is looked up among them first), then the plugins'.
pub fn list_components(registry: &plugins::Registry) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for plugin in registry.plugins() {
        let _ = writeln!(
            out,
            "plugin {} {} (drmas-sdk {}) {}",
            plugin.name(),
            plugin.version(),
            plugin.sdk_version(),
            plugin.path().display()
        );
    }
    let row = |out: &mut String, kind: &str, name: &str, source: &str, description: &str| {
        let _ = writeln!(out, "  {kind:<12} {name:<28} {source:<10} {description}");
    };
    let (estimators, others): (Vec<_>, Vec<_>) = registry
        .components()
        .partition(|(component, _)| component.kind == drmas_sdk::ComponentKind::Estimator);
    for (component, plugin) in others {
        row(
            &mut out,
            component.kind.as_str(),
            &component.name,
            plugin.name(),
            &component.description,
        );
        if component.kind == drmas_sdk::ComponentKind::Orchestra {
            for line in role_contracts(registry, &component.name) {
                let _ = writeln!(out, "{:<55}{line}", "");
            }
        }
    }
    for (name, description) in advantage::described() {
        row(&mut out, "estimator", name, "built-in", description);
    }
    for (component, plugin) in estimators {
        row(
            &mut out,
            "estimator",
            &component.name,
            plugin.name(),
            &component.description,
        );
    }
    out
}
