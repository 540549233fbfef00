//! LoRA adapters on a [`Llama`]: their settings ([`LoraSettings`]), attaching several of them
//! ("slots", one per agent) to one frozen base model ([`Llama::add_adapters`]), their tensors
//! by PEFT name, and merging one into the base weights.

use std::collections::BTreeMap;

use tch::nn::VarStore;
use tch::{Kind, Tensor};

use super::error::ModelError;
use super::layers::LoraLinear;
use super::llama::Llama;
use crate::engine::SamplerRng;

/// The projections LoRA can adapt, by their Hugging Face / PEFT module names.
pub const TARGET_MODULES: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// What every adapter of a model looks like (PEFT's `LoraConfig` fields of the same names).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSettings {
    /// The rank `r` of `A` `[r, in]` and `B` `[out, r]`.
    pub rank: i64,
    /// `lora_alpha`: updates are scaled by `alpha / r`.
    pub alpha: f64,
    /// `lora_dropout`: dropout probability on a projection's input, in training forwards only.
    pub dropout: f64,
    /// The adapted projections, names from [`TARGET_MODULES`].
    pub target_modules: Vec<String>,
}

impl LoraSettings {
    /// Fails, naming the field, unless the rank is positive, alpha positive and finite, the
    /// dropout in `[0, 1)` and the targets a non-empty list of distinct [`TARGET_MODULES`].
    pub fn check(&self) -> Result<(), String> {
        if self.rank < 1 {
            return Err(format!("rank must be at least 1, found {}", self.rank));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(format!(
                "alpha must be a positive number, found {}",
                self.alpha
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(format!("dropout must be in [0, 1), found {}", self.dropout));
        }
        if self.target_modules.is_empty() {
            return Err(format!(
                "target_modules is empty; name some of {}",
                TARGET_MODULES.join(", ")
            ));
        }
        for (i, name) in self.target_modules.iter().enumerate() {
            if !TARGET_MODULES.contains(&name.as_str()) {
                return Err(format!(
                    "target_modules: `{name}` is not a projection LoRA can adapt; use {}",
                    TARGET_MODULES.join(", ")
                ));
            }
            if self.target_modules[..i].contains(name) {
                return Err(format!("target_modules: `{name}` is listed twice"));
            }
        }
        Ok(())
    }

    /// The scale of the updates, `alpha / r`.
    pub fn scaling(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    fn targets(&self, module: &str) -> bool {
        self.target_modules.iter().any(|t| t == module)
    }
}

/// The adapters attached to a model: their own variables (the only trainable ones), settings
/// and number of slots.
#[derive(Debug)]
pub struct Adapters {
    vs: VarStore,
    settings: LoraSettings,
    slots: usize,
}

impl Adapters {
    /// The adapter variables, named `model.layers.N.self_attn.q_proj.lora_A.SLOT.weight` (for
    /// optimisers and checkpoints).
    pub fn var_store(&self) -> &VarStore {
        &self.vs
    }

    /// The adapter variables, to move them with the model.
    pub(crate) fn var_store_mut(&mut self) -> &mut VarStore {
        &mut self.vs
    }

    /// The settings every adapter shares.
    pub fn settings(&self) -> &LoraSettings {
        &self.settings
    }

    /// The number of adapters.
    pub fn slots(&self) -> usize {
        self.slots
    }
}

/// The variable name of `slot`'s `A` or `B` (`matrix`) of the projection `module`
/// (`model.layers.N.self_attn.q_proj`).
pub fn variable_name(module: &str, matrix: &str, slot: usize) -> String {
    format!("{module}.{matrix}.{slot}.weight")
}

/// Whether the adapter variable `name` belongs to adapter `slot`.
pub fn is_slot_variable(name: &str, slot: usize) -> bool {
    ["lora_A", "lora_B"]
        .iter()
        .any(|matrix| name.ends_with(&format!(".{matrix}.{slot}.weight")))
}

impl Llama {
    /// Freezes the base weights and attaches `slots` LoRA adapters of `settings` to every
    /// targeted projection, initialised as PEFT does: `A` Kaiming-uniform (`a = √5`, i.e.
    /// uniform in ±1/√in) from a stream seeded by `seed`, `B` zeros — so each adapter starts
    /// as the base model.
    pub fn add_adapters(
        &mut self,
        settings: &LoraSettings,
        slots: usize,
        seed: u64,
    ) -> Result<(), ModelError> {
        settings
            .check()
            .map_err(|e| ModelError::Config(format!("LoRA: {e}")))?;
        if self.adapters().is_some() {
            return Err(ModelError::Config(
                "the model already has LoRA adapters".to_owned(),
            ));
        }
        if slots == 0 {
            return Err(ModelError::Config("LoRA: no adapters asked for".to_owned()));
        }
        let (kind, device) = (self.kind(), self.var_store().device());
        let mut vs = VarStore::new(device);
        vs.set_kind(kind);
        let root = vs.root();
        let mut rng = SamplerRng::new(seed);
        let rank = settings.rank;
        for (module, projection) in self.projections_mut() {
            let short = module.rsplit('.').next().unwrap_or_default();
            if !settings.targets(short) {
                continue;
            }
            let (in_dim, out_dim) = projection.dims();
            let bound = 1.0 / (in_dim as f32).sqrt();
            let path = module.split('.').fold(root.clone(), |p, part| &p / part);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for slot in 0..slots {
                let values: Vec<f32> = (0..rank * in_dim)
                    .map(|_| (2.0 * rng.uniform() - 1.0) * bound)
                    .collect();
                let init = Tensor::from_slice(&values).view([rank, in_dim]);
                a.push((&path / "lora_A" / slot).var_copy("weight", &init));
                b.push((&path / "lora_B" / slot).zeros("weight", &[out_dim, rank]));
            }
            projection.attach(LoraLinear::new(a, b, settings.scaling(), settings.dropout));
        }
        self.freeze();
        self.set_adapters(Adapters {
            vs,
            settings: settings.clone(),
            slots,
        });
        Ok(())
    }

    /// `slot`'s tensors under PEFT's names without the `base_model.model.` prefix
    /// (`model.layers.N.self_attn.q_proj.lora_A.weight`), sharing storage with the variables.
    pub fn adapter_tensors(&self, slot: usize) -> Result<BTreeMap<String, Tensor>, ModelError> {
        let adapters = self.checked_adapters(slot)?;
        let variables = adapters.vs.variables();
        let mut tensors = BTreeMap::new();
        for (module, projection) in self.projections() {
            if projection.lora().is_none() {
                continue;
            }
            for matrix in ["lora_A", "lora_B"] {
                let name = variable_name(&module, matrix, slot);
                let tensor = variables
                    .get(&name)
                    .ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
                tensors.insert(format!("{module}.{matrix}.weight"), tensor.shallow_clone());
            }
        }
        Ok(tensors)
    }

    /// Adds adapter `slot`'s update `(alpha / r) · B A` to the base weight of every adapted
    /// projection (computed in f32) and removes all adapters: the model then computes what the
    /// adapter computed, as a plain model that saves and loads without LoRA.
    pub fn merge_adapter(&mut self, slot: usize) -> Result<(), ModelError> {
        self.checked_adapters(slot)?;
        let weights = self.var_store().variables();
        for (module, projection) in self.projections() {
            let Some(lora) = projection.lora() else {
                continue;
            };
            let name = format!("{module}.weight");
            let weight = weights
                .get(&name)
                .ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
            let merged = weight.to_kind(Kind::Float) + lora.delta_weight(slot);
            tch::no_grad(|| weight.shallow_clone().copy_(&merged.to_kind(weight.kind())));
        }
        self.remove_adapters();
        Ok(())
    }

    /// The adapters, failing unless there are some and `slot` is one of them.
    fn checked_adapters(&self, slot: usize) -> Result<&Adapters, ModelError> {
        let adapters = self
            .adapters()
            .ok_or_else(|| ModelError::Input("the model has no LoRA adapters".to_owned()))?;
        if slot >= adapters.slots {
            return Err(ModelError::Input(format!(
                "LoRA adapter {slot} does not exist; the model has {}",
                adapters.slots
            )));
        }
        Ok(adapters)
    }
}
