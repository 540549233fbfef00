//! [`WorkerGroup`]: one model serving and training the agents mapped to it, with its own
//! optimizer and learning rate, and optionally a frozen reference model for the KL term.

use std::path::Path;

use anyhow::Context;

use super::offload::Offload;
use crate::config;
use crate::engine::cpu::backend_for;
use crate::model::lora::LoraSettings;
use crate::model::pretrained::Pretrained;
use crate::update::{AdamW, Critic};

/// A worker group at run time.
pub struct WorkerGroup {
    /// Its name in the run file.
    pub name: String,
    /// The model, its tokenizer and chat template.
    pub pretrained: Pretrained,
    /// The frozen reference model, when the group has one (never with LoRA: the model with
    /// its adapters off is the reference then).
    pub reference: Option<Pretrained>,
    /// The names of the model's LoRA adapters by slot (empty: the group trains every weight).
    pub adapter_names: Vec<String>,
    /// Each adapter's peak learning rate when its agent sets its own (by slot; empty when
    /// every trained tensor takes `learning_rate`).
    pub adapter_learning_rates: Vec<f64>,
    /// The optimizer over every weight of the model, or over the adapters only with LoRA.
    pub optimizer: AdamW,
    /// The peak learning rate (before warmup).
    pub learning_rate: f64,
    /// The value model of its calls, when the estimator has a critic.
    pub critic: Option<Critic>,
    /// Where its parts are between phases, with `offload = true` (see `trainer::offload`).
    pub offload: Option<Offload>,
    /// Whether some agent trains it (`train = false` on all of them: it never steps).
    pub trains: bool,
    /// Whether its weights are still those it loaded from its model file (none stepped or
    /// restored since): a checkpoint of a group that does not train then records only that.
    pub untouched: bool,
}

impl WorkerGroup {
    /// Loads the group's model from `model` (and its reference from `reference`), attaches
    /// one LoRA adapter per name of `adapters` when `lora` is set (initialised from `seed`),
    /// and builds its optimizer.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        name: &str,
        section: &config::WorkerGroupSection,
        model: &Path,
        reference: Option<&Path>,
        lora: Option<(&LoraSettings, Vec<String>)>,
        seed: u64,
        learning_rate: f64,
        weight_decay: f64,
    ) -> anyhow::Result<Self> {
        let device = tch_device(section.device);
        let kind = tch_kind(section.dtype);
        let mut pretrained = Pretrained::load(model, device, kind)
            .with_context(|| format!("worker group `{name}`: loading {}", model.display()))?;
        let backend = backend_for(device)
            .with_context(|| format!("worker group `{name}`: choosing the CPU kernels"))?;
        pretrained.model.set_backend(backend.clone());
        let adapter_names = match lora {
            Some((settings, names)) => {
                pretrained
                    .model
                    .add_adapters(settings, names.len().max(1), seed)
                    .with_context(|| format!("worker group `{name}`: LoRA"))?;
                names
            }
            None => Vec::new(),
        };
        let trained = match pretrained.model.adapters() {
            Some(adapters) => adapters.var_store(),
            None => pretrained.model.var_store(),
        };
        let reference = reference
            .map(|path| {
                let mut reference = Pretrained::load(path, device, kind).with_context(|| {
                    format!(
                        "worker group `{name}`: loading reference {}",
                        path.display()
                    )
                })?;
                reference.model.freeze();
                reference.model.set_backend(backend.clone());
                anyhow::Ok(reference)
            })
            .transpose()?;
        let mut params: Vec<(String, tch::Tensor)> = trained.variables().into_iter().collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Self {
            name: name.to_owned(),
            adapter_names,
            adapter_learning_rates: Vec::new(),
            optimizer: AdamW::new(params, weight_decay),
            pretrained,
            reference,
            learning_rate,
            critic: None,
            offload: section.offload.then(|| Offload::new(device)),
            trains: true,
            untouched: true,
        })
    }
}

impl WorkerGroup {
    /// Moves the group to `device`: its model's weights and gradients, its reference model,
    /// its critic and its optimizers' moments (see
    /// [`crate::model::llama::Llama::to_device`]). Offloading a group to the CPU frees its
    /// accelerator memory for another group; moving it back restores it bit for bit.
    pub fn to_device(&mut self, device: tch::Device) {
        self.pretrained.model.to_device(device);
        if let Some(reference) = &mut self.reference {
            reference.model.to_device(device);
        }
        if let Some(critic) = &mut self.critic {
            critic.to_device(device);
        }
        self.optimizer.to_device(device);
    }

    /// Gives the group a critic starting from its model (see [`Critic::new`]).
    pub fn add_critic(&mut self, weight_decay: f64) -> anyhow::Result<()> {
        let critic = Critic::new(&self.pretrained.model, weight_decay)
            .with_context(|| format!("worker group `{}`: building its critic", self.name))?;
        self.critic = Some(critic);
        Ok(())
    }

    /// Loads each of the group's adapters from the PEFT folder `folder/NAME` (a checkpoint's
    /// `adapters/`) in place of its fresh initialisation; the group's weights are then no longer
    /// its model file's alone.
    pub fn start_adapters_from(&mut self, folder: &Path) -> anyhow::Result<()> {
        for (slot, name) in self.adapter_names.iter().enumerate() {
            let dir = folder.join(name);
            self.pretrained
                .model
                .load_adapter(slot, &dir)
                .with_context(|| format!("loading adapter `{name}` from {}", dir.display()))?;
        }
        self.untouched = false;
        Ok(())
    }

    /// Gives adapter `slot` the peak learning rate `rates[slot]` (the optimizer scales those
    /// adapters' steps by the ratio to the group's rate, schedule included).
    pub fn set_adapter_learning_rates(&mut self, rates: Vec<f64>) {
        for (slot, &rate) in rates.iter().enumerate() {
            self.optimizer.scale_rates(
                |name| crate::model::lora::is_slot_variable(name, slot),
                rate / self.learning_rate,
            );
        }
        self.adapter_learning_rates = rates;
    }
}

/// The libtorch device of a run-file device.
pub fn tch_device(device: config::Device) -> tch::Device {
    match device {
        config::Device::Cpu => tch::Device::Cpu,
        config::Device::Cuda(n) => tch::Device::Cuda(n),
    }
}

/// The libtorch dtype of a run-file dtype.
pub fn tch_kind(dtype: config::Dtype) -> tch::Kind {
    match dtype {
        config::Dtype::F32 => tch::Kind::Float,
        config::Dtype::Bf16 => tch::Kind::BFloat16,
        config::Dtype::F16 => tch::Kind::Half,
    }
}
