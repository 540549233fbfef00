//! [`Checkpoint`]: a run's state at the end of an iteration — per worker group an HF-layout model
//! folder (or, for a LoRA group, one PEFT-layout folder per adapter) plus its optimizer moments,
//! or for a group no agent trains whose weights are its model file's only a note saying so, and
//! the trainer's own position (iteration, data cursor, sampler RNG) — written into a temporary
//! folder and renamed into place, so a crash never leaves a half-written checkpoint that looks
//! complete.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tch::Tensor;

use super::{TaskOrder, WorkerGroup};
use crate::model::safetensors_io::load_checkpoint;

/// Checkpoints kept in a run folder; older ones are deleted after a new one lands.
const KEEP: usize = 2;
/// The trainer state file inside a checkpoint.
const STATE_FILE: &str = "trainer_state.json";
/// Ends the name of a checkpoint's staging folder, `.iteration_NNNNN.partial`.
const PARTIAL_SUFFIX: &str = ".partial";
/// Ends the name an old checkpoint is renamed to before it is deleted.
const DELETING_SUFFIX: &str = ".deleting";
/// A worker group's optimizer moments inside its folder.
const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// The folder of a LoRA group's adapters (one PEFT folder each) inside its folder.
const ADAPTERS_DIR: &str = "adapters";
/// A group's critic weights (model and value head) inside its folder.
const CRITIC_FILE: &str = "critic.safetensors";
/// A group's critic optimizer moments inside its folder.
const CRITIC_OPTIMIZER_FILE: &str = "critic_optimizer.safetensors";
/// The note that stands for the folder of a group that does not train and still holds its
/// model file's weights: `{"model": PATH}`.
const UNTRAINED_FILE: &str = "untrained.json";
/// The most bytes of an `untrained.json` read: it holds one path.
const MAX_NOTE_BYTES: u64 = 64 << 10;

/// The trainer's position, saved with the weights.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainerState {
    /// The last finished iteration.
    pub iteration: u32,
    /// Where the data order stands.
    pub task_order: TaskOrder,
    /// The sampler RNG's state.
    pub rng: Vec<u64>,
    /// Optimizer steps skipped so far.
    pub skipped_steps: u64,
    /// β of the KL in the reward for the next iteration, when the run has one.
    #[serde(default)]
    pub kl_in_reward_coef: Option<f64>,
}

/// A complete checkpoint folder `RUN/checkpoints/iteration_NNNNN`.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    dir: PathBuf,
    iteration: u32,
}

impl Checkpoint {
    /// Writes `state` and every group's model and optimizer; returns the checkpoint folder.
    pub fn write(
        run_dir: &Path,
        state: &TrainerState,
        groups: &[WorkerGroup],
    ) -> anyhow::Result<PathBuf> {
        let root = run_dir.join("checkpoints");
        let name = format!("iteration_{:05}", state.iteration);
        let final_dir = root.join(&name);
        let staging = root.join(format!(".{name}{PARTIAL_SUFFIX}"));
        if staging.exists() {
            std::fs::remove_dir_all(&staging)?;
        }
        std::fs::create_dir_all(&staging)
            .with_context(|| format!("creating {}", staging.display()))?;
        for group in groups {
            let dir = staging.join(&group.name);
            if !group.trains && group.untouched {
                // Its weights are the model file's: a copy would only cost the disk.
                std::fs::create_dir_all(&dir)?;
                let source = &group.pretrained.source;
                let model = std::fs::canonicalize(source).unwrap_or_else(|_| source.clone());
                let note = serde_json::json!({ "model": model });
                std::fs::write(dir.join(UNTRAINED_FILE), serde_json::to_vec_pretty(&note)?)?;
                continue;
            }
            save_model(group, &dir)
                .with_context(|| format!("saving worker group `{}`", group.name))?;
            let named = group.optimizer.state();
            let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
            Tensor::write_safetensors(&refs, dir.join(OPTIMIZER_FILE))
                .with_context(|| format!("saving the optimizer of `{}`", group.name))?;
            if let Some(critic) = &group.critic {
                for (file, named) in [
                    (CRITIC_FILE, critic.weights()),
                    (CRITIC_OPTIMIZER_FILE, critic.optimizer.state()),
                ] {
                    let refs: Vec<(&str, &Tensor)> =
                        named.iter().map(|(n, t)| (n.as_str(), t)).collect();
                    Tensor::write_safetensors(&refs, dir.join(file))
                        .with_context(|| format!("saving the critic of `{}`", group.name))?;
                }
            }
        }
        std::fs::write(staging.join(STATE_FILE), serde_json::to_vec_pretty(state)?)?;
        sync_dir(&staging);
        if final_dir.exists() {
            std::fs::remove_dir_all(&final_dir)?;
        }
        std::fs::rename(&staging, &final_dir)
            .with_context(|| format!("moving the checkpoint into {}", final_dir.display()))?;
        sync_dir(&root);
        prune(&root)?;
        Ok(final_dir)
    }

    /// The newest complete checkpoint of a run folder, if any.
    pub fn latest(run_dir: &Path) -> anyhow::Result<Option<Self>> {
        Ok(complete(&run_dir.join("checkpoints"))?
            .pop()
            .map(|(iteration, dir)| Self { dir, iteration }))
    }

    /// Removes what a killed run may have left under `RUN/checkpoints`: staging folders of
    /// saves it did not finish (`.iteration_NNNNN.partial`) and old checkpoints it was deleting
    /// (`.iteration_NNNNN.deleting`). Neither is ever read as a checkpoint.
    pub fn discard_unfinished(run_dir: &Path) -> anyhow::Result<()> {
        let root = run_dir.join("checkpoints");
        let Ok(entries) = std::fs::read_dir(&root) else {
            return Ok(());
        };
        for entry in entries {
            let path = entry?.path();
            let unfinished = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with(".iteration_")
                    && (n.ends_with(PARTIAL_SUFFIX) || n.ends_with(DELETING_SUFFIX))
            });
            if unfinished && path.is_dir() {
                std::fs::remove_dir_all(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
        }
        Ok(())
    }

    /// The checkpoint in `dir`, which must be a complete checkpoint folder
    /// (`RUN/checkpoints/iteration_NNNNN`).
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        if let Some(iteration) = iteration_of(dir).filter(|_| dir.join(STATE_FILE).is_file()) {
            return Ok(Self {
                dir: dir.to_owned(),
                iteration,
            });
        }
        // Named a run folder or its checkpoints/ folder: say which checkpoints are there.
        let inside = [dir.join("checkpoints"), dir.to_owned()]
            .iter()
            .map(|root| complete(root))
            .collect::<anyhow::Result<Vec<_>>>()?
            .into_iter()
            .find(|found| !found.is_empty())
            .map(|found| {
                let names: Vec<String> =
                    found.iter().map(|(_, d)| d.display().to_string()).collect();
                format!("; checkpoints there: {}", names.join(", "))
            })
            .unwrap_or_default();
        bail!(
            "{} is not a checkpoint: name a folder RUN/checkpoints/iteration_NNNNN that holds \
             {STATE_FILE} (a run writes one per save){inside}",
            dir.display()
        )
    }

    /// Loads every group's weights (or adapters) only, for an evaluation: no optimizer state.
    pub fn restore_weights(&self, groups: &mut [WorkerGroup]) -> anyhow::Result<()> {
        for group in groups {
            self.restore_group_weights(group)?;
        }
        Ok(())
    }

    /// Loads `group`'s weights (or adapters) from its folder in the checkpoint and returns the
    /// folder, or `None` for a group saved as untrained (its weights are the model file's).
    fn restore_group_weights(&self, group: &mut WorkerGroup) -> anyhow::Result<Option<PathBuf>> {
        let dir = self.dir.join(&group.name);
        if !dir.is_dir() {
            bail!(
                "checkpoint {} has no worker group `{}`; was it written by another run file?",
                self.dir.display(),
                group.name
            );
        }
        if dir.join(UNTRAINED_FILE).is_file() {
            return Ok(None);
        }
        restore_model(group, &dir)
            .with_context(|| format!("restoring worker group `{}`", group.name))?;
        group.untouched = false;
        Ok(Some(dir))
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The iteration it was saved after.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// Loads every group's weights and optimizer state (a group saved as untrained keeps the
    /// model file's it loaded, and a fresh optimizer); returns the trainer state.
    pub fn restore(&self, groups: &mut [WorkerGroup]) -> anyhow::Result<TrainerState> {
        let state_path = self.dir.join(STATE_FILE);
        let state: TrainerState = serde_json::from_slice(
            &std::fs::read(&state_path)
                .with_context(|| format!("reading {}", state_path.display()))?,
        )
        .with_context(|| format!("parsing {}", state_path.display()))?;
        for group in groups {
            let Some(dir) = self.restore_group_weights(group)? else {
                continue;
            };
            let optimizer = dir.join(OPTIMIZER_FILE);
            let saved = Tensor::read_safetensors(&optimizer)
                .with_context(|| format!("reading {}", optimizer.display()))?;
            group
                .optimizer
                .load_state(&saved)
                .with_context(|| format!("restoring {}", optimizer.display()))?;
            if let Some(critic) = &mut group.critic {
                restore_critic(critic, &dir)
                    .with_context(|| format!("restoring the critic of `{}`", group.name))?;
            }
        }
        Ok(state)
    }
}

/// The model file a checkpoint's folder of a group that did not train stands for (its
/// `untrained.json` note), so the folder serves as a `model` as a trained group's does; `None`
/// for any other path.
pub fn untrained_model(dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let note_path = dir.join(UNTRAINED_FILE);
    if !note_path.is_file() {
        return Ok(None);
    }
    #[derive(Deserialize)]
    struct Note {
        model: PathBuf,
    }
    let mut text = Vec::new();
    std::fs::File::open(&note_path)
        .and_then(|file| file.take(MAX_NOTE_BYTES + 1).read_to_end(&mut text))
        .with_context(|| format!("reading {}", note_path.display()))?;
    if text.len() as u64 > MAX_NOTE_BYTES {
        bail!(
            "{} is larger than {MAX_NOTE_BYTES} bytes; the note of a group that did not train \
             only names its model file",
            note_path.display()
        );
    }
    let note: Note = serde_json::from_slice(&text).with_context(|| {
        format!(
            "{} is not a note `{{\"model\": PATH}}` of a group that did not train",
            note_path.display()
        )
    })?;
    Ok(Some(note.model))
}

/// Writes what a group trains into `dir`: the whole model as an HF folder, or (LoRA) only its
/// adapters, each a PEFT folder `adapters/NAME` — the frozen base is the run file's model.
fn save_model(group: &WorkerGroup, dir: &Path) -> anyhow::Result<()> {
    if group.adapter_names.is_empty() {
        return Ok(group.pretrained.save_hf(dir)?);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let base = group.pretrained.source.display().to_string();
    for (slot, name) in group.adapter_names.iter().enumerate() {
        group
            .pretrained
            .model
            .save_adapter(slot, &dir.join(ADAPTERS_DIR).join(name), &base)?;
    }
    Ok(())
}

/// Loads what [`save_model`] wrote in `dir` into the group's model.
fn restore_model(group: &WorkerGroup, dir: &Path) -> anyhow::Result<()> {
    if group.adapter_names.is_empty() {
        return Ok(load_checkpoint(
            group.pretrained.model.var_store(),
            dir,
            |_| false,
        )?);
    }
    for (slot, name) in group.adapter_names.iter().enumerate() {
        let folder = dir.join(ADAPTERS_DIR).join(name);
        if !folder.is_dir() {
            bail!(
                "{} is missing: the checkpoint holds no LoRA adapter `{name}`; was it written by \
                 another run file?",
                folder.display()
            );
        }
        group.pretrained.model.load_adapter(slot, &folder)?;
    }
    Ok(())
}

/// Loads a critic's weights and optimizer moments from a group's folder `dir`.
fn restore_critic(critic: &mut crate::update::Critic, dir: &Path) -> anyhow::Result<()> {
    let weights = dir.join(CRITIC_FILE);
    if !weights.is_file() {
        bail!(
            "{} is missing: the checkpoint holds no critic; was it written by a run with \
             another estimator?",
            weights.display()
        );
    }
    let saved = Tensor::read_safetensors(&weights)
        .with_context(|| format!("reading {}", weights.display()))?;
    critic.load_weights(&saved)?;
    let moments = dir.join(CRITIC_OPTIMIZER_FILE);
    let saved = Tensor::read_safetensors(&moments)
        .with_context(|| format!("reading {}", moments.display()))?;
    critic.optimizer.load_state(&saved)?;
    Ok(())
}

/// Complete checkpoints under `root`, oldest first.
fn complete(root: &Path) -> anyhow::Result<Vec<(u32, PathBuf)>> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if let Some(iteration) = iteration_of(&path) {
            if path.join(STATE_FILE).is_file() {
                found.push((iteration, path));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The iteration a checkpoint folder's name `iteration_NNNNN` gives.
fn iteration_of(dir: &Path) -> Option<u32> {
    dir.file_name()?
        .to_str()?
        .strip_prefix("iteration_")?
        .parse()
        .ok()
}

/// Deletes all but the newest [`KEEP`] checkpoints. Each is first renamed out of the
/// `iteration_NNNNN` namespace, so a kill in the middle of the deletion never leaves a
/// half-deleted folder that still looks like a checkpoint.
fn prune(root: &Path) -> anyhow::Result<()> {
    let found = complete(root)?;
    for (iteration, dir) in found.iter().take(found.len().saturating_sub(KEEP)) {
        let doomed = root.join(format!(".iteration_{iteration:05}{DELETING_SUFFIX}"));
        if doomed.exists() {
            std::fs::remove_dir_all(&doomed)
                .with_context(|| format!("removing {}", doomed.display()))?;
        }
        std::fs::rename(dir, &doomed)
            .and_then(|()| std::fs::remove_dir_all(&doomed))
            .with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

/// Flushes a folder's entries to disk (best effort: not every platform can open folders).
fn sync_dir(dir: &Path) {
    if let Ok(handle) = std::fs::File::open(dir) {
        let _ = handle.sync_all();
    }
}
