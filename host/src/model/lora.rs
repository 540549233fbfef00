//! LoRA adapters: their settings ([`LoraSettings`]), the adapters attached to a model
//! ([`Adapters`]: several "slots", one per agent, on one frozen base) and their variable names.
//! Attaching, exporting and merging them are methods of the model
//! ([`Llama::add_adapters`](super::llama::Llama::add_adapters)).

use tch::nn::VarStore;

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

    pub(crate) fn targets(&self, module: &str) -> bool {
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
    /// Adapters of `settings` in `slots` slots whose variables live in `vs`.
    pub(crate) fn new(vs: VarStore, settings: LoraSettings, slots: usize) -> Self {
        Self {
            vs,
            settings,
            slots,
        }
    }

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
