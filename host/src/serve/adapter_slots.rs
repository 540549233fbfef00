//! [`AdapterSlots`]: the LoRA adapters a server loaded through vLLM's or SGLang's runtime LoRA
//! routes, each in a slot of the served model's adapters, so one batch can mix requests for
//! different adapters and the base model.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::refusal::Refusal;
use crate::model::llama::Llama;
use crate::model::lora::{LoraSettings, TARGET_MODULES};
use crate::model::peft::AdapterConfig;

/// The error type vLLM names an adapter it does not hold with (what clients look for).
const NOT_FOUND: &str = "NotFoundError";
/// The error type vLLM names a refused load with.
pub(super) const BAD_REQUEST: &str = "BadRequestError";

/// An adapter a server holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldAdapter {
    /// The name requests ask for it by (`model` of a `/v1/completions` request, `lora_path` of
    /// a `/generate` one).
    pub name: String,
    /// The PEFT folder it was loaded from.
    pub folder: PathBuf,
}

/// Up to `capacity` adapters attached to the served model once the first is loaded: of one
/// rank, scale and set of target modules (a model without held adapters takes any settings),
/// or [`PaddedSlots`] that take adapters of any rank up to theirs.
#[derive(Debug)]
pub struct AdapterSlots {
    capacity: usize,
    /// `--max-lora-rank` (and `--lora-target-modules`); `None` for slots of the first
    /// adapter's settings.
    padded: Option<PaddedSlots>,
    /// One entry per slot once adapters are attached; `None` for a free slot.
    held: Vec<Option<HeldAdapter>>,
}

impl AdapterSlots {
    /// Room for `capacity` adapters at once (0: the server loads none), of one shape, or
    /// `padded`.
    pub fn new(capacity: usize, padded: Option<PaddedSlots>) -> Self {
        Self {
            capacity,
            padded,
            held: Vec::new(),
        }
    }

    /// The adapters held, by slot.
    pub fn held(&self) -> Vec<HeldAdapter> {
        self.held.iter().flatten().cloned().collect()
    }

    /// The slot of the adapter named `name`.
    pub fn slot_of(&self, name: &str) -> Option<usize> {
        self.held
            .iter()
            .position(|h| h.as_ref().is_some_and(|h| h.name == name))
    }

    /// Loads the PEFT folder `folder` into a free slot of `model` under `name`. Without a
    /// largest rank, the first adapter (after all were unloaded) sets the rank, scale and
    /// target modules every other must share; with one, any adapter of a rank up to it loads.
    pub fn load(&mut self, model: &mut Llama, name: &str, folder: &Path) -> Result<(), Refusal> {
        let refuse = |message: String| Refusal::typed(400, BAD_REQUEST, message);
        if self.slot_of(name).is_some() {
            return Err(refuse(format!(
                "The lora adapter '{name}' has already been loaded; unload it first"
            )));
        }
        let config = AdapterConfig::read(folder).map_err(|e| refuse(e.to_string()))?;
        if let Some(padded) = &self.padded {
            padded.check(&config.settings).map_err(refuse)?;
        }
        if self.held.iter().all(Option::is_none) {
            let settings = self.slot_settings(&config.settings);
            self.attach(model, &settings).map_err(refuse)?;
        }
        let Some(slot) = self.held.iter().position(Option::is_none) else {
            let names: Vec<String> = self.held().into_iter().map(|h| h.name).collect();
            return Err(refuse(format!(
                "all {} adapter slots hold adapters ({}); unload one (POST \
                 /v1/unload_lora_adapter or /unload_lora_adapter) or start the server with a \
                 larger --max-loras",
                self.capacity,
                names.join(", ")
            )));
        };
        self.load_into(model, slot, folder).map_err(|e| {
            refuse(if self.padded.is_some() {
                e.to_string()
            } else {
                format!(
                    "{e}; this server holds adapters of one rank, scale and set of target \
                     modules at a time: start it with --max-lora-rank to hold adapters of \
                     several, or serve them from another server"
                )
            })
        })?;
        self.held[slot] = Some(HeldAdapter {
            name: name.to_owned(),
            folder: folder.to_owned(),
        });
        Ok(())
    }

    /// Frees the slot of the adapter named `name`.
    pub fn unload(&mut self, name: &str) -> Result<(), Refusal> {
        let slot = self.slot_of(name).ok_or_else(|| {
            Refusal::typed(
                404,
                NOT_FOUND,
                format!("The lora adapter '{name}' cannot be found"),
            )
        })?;
        self.held[slot] = None;
        Ok(())
    }

    /// Attaches every held adapter to `model` (new weights of the same base model), each
    /// read again from its folder.
    pub fn reattach(&self, model: &mut Llama) -> anyhow::Result<()> {
        let held = self.held();
        let Some(first) = held.first() else {
            return Ok(());
        };
        let settings = self.slot_settings(&AdapterConfig::read(&first.folder)?.settings);
        model.add_adapters(&serving(&settings), self.capacity, 0)?;
        for (slot, adapter) in self.held.iter().enumerate() {
            if let Some(adapter) = adapter {
                self.load_into(model, slot, &adapter.folder).map_err(|e| {
                    anyhow::anyhow!("reloading LoRA adapter `{}`: {e}", adapter.name)
                })?;
            }
        }
        Ok(())
    }

    /// The settings of the slots adapters are loaded into: the padded slots', else `first`'s
    /// (the first adapter loaded).
    fn slot_settings(&self, first: &LoraSettings) -> LoraSettings {
        match &self.padded {
            Some(padded) => padded.settings.clone(),
            None => first.clone(),
        }
    }

    /// Loads the adapter in `folder` into `slot`: padded with a largest rank, else as it is.
    fn load_into(
        &self,
        model: &Llama,
        slot: usize,
        folder: &Path,
    ) -> Result<(), crate::model::error::ModelError> {
        if self.padded.is_some() {
            model.load_adapter_padded(slot, folder)
        } else {
            model.load_adapter(slot, folder)
        }
    }

    /// Gives `model` `capacity` free slots of `settings`, unless it has them already.
    fn attach(&mut self, model: &mut Llama, settings: &LoraSettings) -> Result<(), String> {
        if self.capacity == 0 {
            return Err("this server loads no LoRA adapters: start it with --max-loras N".into());
        }
        let wanted = serving(settings);
        if let Some(attached) = model.adapters() {
            if same_shape(attached.settings(), &wanted) {
                return Ok(());
            }
            model.remove_adapters();
        }
        model
            .add_adapters(&wanted, self.capacity, 0)
            .map_err(|e| e.to_string())?;
        self.held = vec![None; self.capacity];
        Ok(())
    }
}

/// Slots of one rank and set of projections that hold adapters of any rank up to theirs and
/// any scale, targeting some of those projections, each padded into its slot (see
/// [`Llama::load_adapter_padded`]): `--max-lora-rank` and `--lora-target-modules`, as vLLM
/// and SGLang take them.
#[derive(Debug, Clone)]
pub struct PaddedSlots {
    /// Rank `--max-lora-rank` at scale 1 on the projections `--lora-target-modules` names
    /// (every one by default).
    settings: LoraSettings,
}

impl PaddedSlots {
    /// Slots of rank `rank` on `targets` (every projection when `None`); fails on a rank
    /// below 1 or targets that are not distinct projections, naming the flag.
    pub fn new(rank: i64, targets: Option<Vec<String>>) -> anyhow::Result<Self> {
        let target_modules =
            targets.unwrap_or_else(|| TARGET_MODULES.iter().map(|&m| m.to_owned()).collect());
        let settings = LoraSettings {
            rank,
            alpha: rank as f64,
            dropout: 0.0,
            target_modules,
        };
        settings
            .check()
            .map_err(|e| anyhow::anyhow!("--lora-target-modules: {e}"))?;
        Ok(Self { settings })
    }

    /// Refuses an adapter of `theirs` settings these slots cannot hold, saying why.
    fn check(&self, theirs: &LoraSettings) -> Result<(), String> {
        let ours = &self.settings;
        if theirs.rank > ours.rank {
            // vLLM's words, which clients may look for.
            return Err(format!(
                "LoRA rank {} is greater than max_lora_rank {}.",
                theirs.rank, ours.rank
            ));
        }
        match theirs.target_modules.iter().find(|m| !ours.targets(m)) {
            Some(module) => Err(format!(
                "the adapter targets `{module}`, which this server's --lora-target-modules \
                 ({}) leave out",
                ours.target_modules.join(", ")
            )),
            None => Ok(()),
        }
    }
}

/// `settings` as served: no dropout.
fn serving(settings: &LoraSettings) -> LoraSettings {
    LoraSettings {
        dropout: 0.0,
        ..settings.clone()
    }
}

/// Whether adapters of `a` and `b` compute the same way (rank, scale, target modules).
fn same_shape(a: &LoraSettings, b: &LoraSettings) -> bool {
    let targets = |s: &LoraSettings| s.target_modules.iter().cloned().collect::<BTreeSet<_>>();
    a.rank == b.rank && a.scaling() == b.scaling() && targets(a) == targets(b)
}
