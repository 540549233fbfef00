//! `drmas-host experiment`: the estimator comparison. Trains one run per (estimator, seed) from
//! one base run file — only `[algorithm] estimator`, `[run] seed` and `[run] output_dir`
//! change — then summarises every run's `metrics.jsonl` into a markdown report and charts.
//!
//! [`runs`] finds and reads the run folders, [`stats`] holds the statistics (spikes, median,
//! mean ± std), [`summary`] applies them per run and per estimator, [`report`] writes the
//! markdown and [`figures`] the charts.

pub mod figures;
pub mod report;
pub mod runs;
pub mod stats;
pub mod student_t;
pub mod summary;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::cli::{CommonArgs, ExperimentArgs};
use crate::config::{RunConfig, RunFile};
use crate::plugins::{BuildProfile, Registry};
use crate::trainer::{Checkpoint, EvalReport, Trainer};
use report::ReportContext;
use runs::RunRecord;
use summary::EstimatorSummary;

/// The estimators compared by default: the 2 × 2 of grouping and score granularity.
pub const DEFAULT_ESTIMATORS: [&str; 4] = ["grpo", "grpo_step", "drmas_traj", "drmas"];

/// The seeds run by default.
pub const DEFAULT_SEEDS: [u64; 3] = [0, 1, 2];

/// What to run and where to write it.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// The base run file.
    pub base_config: PathBuf,
    /// The estimators to compare, in report order.
    pub estimators: Vec<String>,
    /// The seeds each estimator runs with.
    pub seeds: Vec<u64>,
    /// The experiment folder: runs in `ESTIMATOR/seed-N`, charts at the top.
    pub out_dir: PathBuf,
    /// Where the markdown report goes.
    pub report: PathBuf,
    /// The command line the report quotes.
    pub command_line: String,
    /// Delete a run's `checkpoints/` once it has finished, to bound the disk an experiment takes.
    pub drop_checkpoints: bool,
}

/// What [`Experiment::run`] did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Run folders trained by this call.
    pub trained: Vec<PathBuf>,
    /// Run folders skipped because they had already finished.
    pub skipped: Vec<PathBuf>,
    /// The report written.
    pub report: PathBuf,
    /// The charts written.
    pub figures: Vec<PathBuf>,
    /// The numbers in the report, one entry per estimator.
    pub summaries: Vec<EstimatorSummary>,
}

impl Experiment {
    /// The experiment the command line describes; `--out` defaults to the base file's
    /// `[run] output_dir` + `-experiment`, `--report` to `OUT/report.md`.
    pub fn from_cli(common: &CommonArgs, args: &ExperimentArgs) -> anyhow::Result<Self> {
        let base_config = common
            .config
            .clone()
            .context("--config BASE.toml is required (see docs/config.md)")?;
        let out_dir = match &args.out {
            Some(out) => out.clone(),
            None => {
                let (config, file) = RunConfig::load(&base_config)?;
                let mut out = file
                    .resolve(&config.run.output_dir.to_string_lossy())
                    .into_os_string();
                out.push("-experiment");
                PathBuf::from(out)
            }
        };
        let report = args
            .report
            .clone()
            .unwrap_or_else(|| out_dir.join("report.md"));
        Ok(Self {
            base_config,
            estimators: args.estimators.clone(),
            seeds: args.seeds.clone(),
            out_dir,
            report,
            command_line: command_line(std::env::args()),
            drop_checkpoints: args.drop_checkpoints,
        })
    }

    /// Trains every (estimator, seed) run that has not finished yet, then writes the report and
    /// charts from all of them.
    pub fn run(&self, registry: &Registry) -> anyhow::Result<Outcome> {
        let (base, file) = RunConfig::load(&self.base_config)?;
        self.check(&base, registry)?;
        crate::config::check_trainable(&base, &file)?;
        let out_dir = absolute(&self.out_dir)?;
        let (mut trained, mut skipped) = (Vec::new(), Vec::new());
        for estimator in &self.estimators {
            for &seed in &self.seeds {
                let dir = runs::run_dir(&out_dir, estimator, seed);
                if runs::finished(&dir, base.run.iterations) {
                    println!("experiment: {} already finished; skipped", dir.display());
                    self.after_finished(&dir);
                    skipped.push(dir);
                    continue;
                }
                println!(
                    "experiment: estimator {estimator}, seed {seed} → {}",
                    dir.display()
                );
                let shared = runs::initial_eval(&out_dir, &self.estimators, estimator, seed);
                train_one(&base, &file, registry, (estimator, seed), &dir, shared)
                    .with_context(|| format!("run {estimator}, seed {seed}"))?;
                self.after_finished(&dir);
                trained.push(dir);
            }
        }
        let (report, figures, summaries) = self.write_report(&base, &out_dir)?;
        Ok(Outcome {
            trained,
            skipped,
            report,
            figures,
            summaries,
        })
    }

    /// With `drop_checkpoints`, deletes a finished run's checkpoints; a failure only warns, since
    /// the run itself is complete.
    fn after_finished(&self, dir: &Path) {
        if !self.drop_checkpoints {
            return;
        }
        let checkpoints = dir.join("checkpoints");
        if let Err(error) = remove_if_present(|p| std::fs::remove_dir_all(p), &checkpoints) {
            tracing::warn!("--drop-checkpoints: {error:#}");
        }
    }

    /// Fails early on an empty, repeated or unknown estimator or seed list.
    fn check(&self, base: &RunConfig, registry: &Registry) -> anyhow::Result<()> {
        if self.estimators.is_empty() || self.seeds.is_empty() {
            bail!("--estimators and --seeds need at least one value each");
        }
        for (index, estimator) in self.estimators.iter().enumerate() {
            if self.estimators[..index].contains(estimator) {
                bail!("--estimators names `{estimator}` twice");
            }
            registry
                .estimator(estimator, &base.algorithm.params)
                .with_context(|| format!("--estimators: `{estimator}`"))?;
        }
        for (index, seed) in self.seeds.iter().enumerate() {
            if self.seeds[..index].contains(seed) {
                bail!("--seeds names {seed} twice");
            }
        }
        Ok(())
    }

    /// Reads every run, writes the charts and the report; returns their paths and the numbers.
    fn write_report(
        &self,
        base: &RunConfig,
        out_dir: &Path,
    ) -> anyhow::Result<(PathBuf, Vec<PathBuf>, Vec<EstimatorSummary>)> {
        let records = runs::read_all(out_dir, &self.estimators, &self.seeds)?;
        let summaries: Vec<EstimatorSummary> = self
            .estimators
            .iter()
            .map(|estimator| {
                let own: Vec<&RunRecord> = records
                    .iter()
                    .filter(|r| &r.estimator == estimator)
                    .collect();
                EstimatorSummary::of(estimator, &own)
            })
            .collect();
        let report = absolute(&self.report)?;
        let report_dir = report.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut figures = Vec::new();
        let mut links = Vec::new();
        for (name, caption, chart) in figures::all(&self.estimators, &records) {
            if chart.is_empty() {
                continue;
            }
            let path = out_dir.join(name);
            chart.write_png(&path)?;
            let link = path.strip_prefix(&report_dir).unwrap_or(&path);
            links.push((caption, link.display().to_string()));
            figures.push(path);
        }
        let context = ReportContext {
            command_line: self.command_line.clone(),
            base_config: self.base_config.display().to_string(),
            iterations: base.run.iterations,
            prompts_per_batch: base.rollout.prompts_per_batch,
            group_size: base.rollout.group_size,
            seeds: self.seeds.clone(),
            figures: links,
        };
        std::fs::create_dir_all(&report_dir)
            .with_context(|| format!("creating {}", report_dir.display()))?;
        std::fs::write(&report, report::render(&context, &summaries))
            .with_context(|| format!("writing {}", report.display()))?;
        Ok((report, figures, summaries))
    }
}

/// `drmas-host experiment`: loads the plugins once, runs the experiment, prints where the report
/// and charts are.
pub fn run(common: &CommonArgs, args: &ExperimentArgs) -> anyhow::Result<()> {
    let experiment = Experiment::from_cli(common, args)?;
    let registry = Registry::load_folder(
        &common.plugins,
        BuildProfile::Release,
        common.plugin_links(),
    )?;
    let outcome = experiment.run(&registry)?;
    println!(
        "experiment: {} runs trained, {} already finished",
        outcome.trained.len(),
        outcome.skipped.len()
    );
    println!("report              {}", outcome.report.display());
    for figure in &outcome.figures {
        println!("plot                {}", figure.display());
    }
    Ok(())
}

/// Trains one run of the experiment in `dir`: the base config with `estimator` and `seed`.
/// A run folder left by an interrupted run resumes from its newest checkpoint, or starts over
/// when it has none — taking `initial_eval` (another estimator's evaluation of the same seed)
/// as its evaluation before training, when given.
fn train_one(
    base: &RunConfig,
    file: &RunFile,
    registry: &Registry,
    (estimator, seed): (&str, u64),
    dir: &Path,
    initial_eval: Option<(EvalReport, PathBuf)>,
) -> anyhow::Result<()> {
    let config = variant(base, estimator, seed, dir);
    let plan = crate::preflight::prepare(&config, file, registry)?;
    let mut trainer = Trainer::new(config, file, plan)?;
    if Checkpoint::latest(dir)?.is_some() {
        if let Some(iteration) = trainer.resume()? {
            println!("experiment: resuming after iteration {iteration}");
        }
    } else {
        for stale in ["metrics.jsonl", "samples.jsonl"] {
            remove_if_present(|p| std::fs::remove_file(p), &dir.join(stale))?;
        }
        if let Some((report, source)) = initial_eval {
            trainer.reuse_initial_eval(report, source);
        }
    }
    let summary = trainer.train()?;
    print!("{}", summary.render());
    if let Err(error) = crate::plot::plot_run(dir) {
        tracing::warn!("no plots for {}: {error:#}", dir.display());
    }
    Ok(())
}

/// The base config with only the estimator, the seed and the run folder replaced.
pub fn variant(base: &RunConfig, estimator: &str, seed: u64, dir: &Path) -> RunConfig {
    let mut config = base.clone();
    let span = config.algorithm.estimator.span();
    config.algorithm.estimator = toml::Spanned::new(span, estimator.to_string());
    config.run.seed = seed;
    config.run.output_dir = dir.to_path_buf();
    config
}

/// Removes the file or folder at `path` with `remove`; nothing there is not an error.
fn remove_if_present(remove: fn(&Path) -> std::io::Result<()>, path: &Path) -> anyhow::Result<()> {
    match remove(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(error).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// `path` made absolute against the working directory (run folders are resolved against the
/// base file's folder otherwise).
fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    Ok(std::env::current_dir()
        .context("reading the working directory")?
        .join(path))
}

/// The words of a command line joined by spaces, quoting words that need it.
pub fn command_line(words: impl IntoIterator<Item = String>) -> String {
    words
        .into_iter()
        .map(|word| {
            if !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=,:@+".contains(c))
            {
                word
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_quote_only_what_needs_it() {
        let words = ["drmas-host", "experiment", "--seeds", "0,1", "a b", "it's"];
        assert_eq!(
            command_line(words.map(String::from)),
            r"drmas-host experiment --seeds 0,1 'a b' 'it'\''s'"
        );
    }

    #[test]
    fn the_command_line_defaults_to_the_two_by_two_and_three_seeds() {
        use clap::Parser;
        let parse = |words: &[&str]| match crate::cli::Cli::try_parse_from(words) {
            Ok(crate::cli::Cli {
                command: Some(crate::cli::Command::Experiment(args)),
                common,
            }) => (args, common),
            other => panic!("not an experiment: {other:?}"),
        };
        let (args, common) = parse(&["drmas-host", "experiment", "--config", "configs/demo.toml"]);
        assert_eq!(args.estimators, DEFAULT_ESTIMATORS);
        assert_eq!(args.seeds, DEFAULT_SEEDS);
        assert!(!args.drop_checkpoints, "checkpoints are kept by default");
        let experiment = Experiment::from_cli(
            &common,
            &ExperimentArgs {
                out: Some("x".into()),
                ..args
            },
        )
        .expect("experiment");
        assert_eq!(experiment.report, Path::new("x/report.md"));
        let (args, _) = parse(&[
            "drmas-host",
            "experiment",
            "--estimators",
            "grpo,drmas",
            "--seeds",
            "4",
            "--out",
            "o",
            "--report",
            "r.md",
            "--drop-checkpoints",
        ]);
        assert!(args.drop_checkpoints);
        assert_eq!(args.estimators, ["grpo", "drmas"]);
        assert_eq!(args.seeds, [4]);
        assert_eq!(args.report, Some(PathBuf::from("r.md")));
    }

    #[test]
    fn a_variant_changes_only_estimator_seed_and_folder() {
        let file = RunFile::from_text(
            "base.toml",
            "[run]\noutput_dir = \"runs/base\"\nseed = 7\niterations = 3\n\
             [environment]\nname = \"e\"\ntrain_data = { path = \"x\" }\n\
             [orchestra]\nname = \"o\"\n\
             [[agents]]\nrole = \"r\"\nagent = \"A\"\nworker_group = \"g\"\n\
             [worker_groups.g]\nmodel = \"m\"\n\
             [algorithm]\nestimator = \"grpo\"\n",
            PathBuf::from("."),
        );
        let base = RunConfig::parse(&file).expect("parses");
        let config = variant(&base, "drmas_traj", 2, Path::new("/x/drmas_traj/seed-2"));
        assert_eq!(config.algorithm.estimator.get_ref(), "drmas_traj");
        assert_eq!(
            config.algorithm.estimator.span(),
            base.algorithm.estimator.span()
        );
        assert_eq!(config.run.seed, 2);
        assert_eq!(config.run.output_dir, Path::new("/x/drmas_traj/seed-2"));
        assert_eq!(config.run.iterations, base.run.iterations);
        assert_eq!(config.rollout.group_size, base.rollout.group_size);
    }
}
