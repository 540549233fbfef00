//! One LoRA adapter as a Hugging Face PEFT folder: `adapter_config.json` (`peft_type` LORA, `r`,
//! `lora_alpha`, `lora_dropout`, `target_modules`, `base_model_name_or_path`) and
//! `adapter_model.safetensors` with PEFT's tensor names
//! (`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`), so PEFT loads what
//! drmas trains and drmas loads what PEFT trained.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use memmap2::Mmap;
use safetensors::SafeTensors;
use serde_json::{json, Value};
use tch::Tensor;

use super::atomic_dir::{write_dir_atomically, Durability};
use super::error::ModelError;
use super::llama::Llama;
use super::lora::LoraSettings;
use super::safetensors_io::{tensor_from_view, write_safetensors};

/// The adapter's settings file.
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// The adapter's tensors.
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// What PEFT puts before a causal LM's own parameter names.
const PEFT_PREFIX: &str = "base_model.model.";
/// The largest `adapter_config.json` read (PEFT writes about a kilobyte).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A PEFT adapter folder's settings and the base model it was made for.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterConfig {
    /// Rank, alpha, dropout and target modules.
    pub settings: LoraSettings,
    /// `base_model_name_or_path` (informative: the folder does not hold the base weights).
    pub base_model: String,
}

impl AdapterConfig {
    /// Refuses an adapter (the one in `dir`) whose rank, scale (`alpha / r`) or target
    /// modules are not those of `ours`, the settings of the adapters it is to be loaded into.
    pub fn check_fits(&self, ours: &LoraSettings, dir: &Path) -> Result<(), ModelError> {
        let theirs = &self.settings;
        let set = |s: &LoraSettings| {
            s.target_modules
                .iter()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>()
        };
        if theirs.rank == ours.rank
            && theirs.scaling() == ours.scaling()
            && set(theirs) == set(ours)
        {
            return Ok(());
        }
        Err(ModelError::file(
            dir.join(ADAPTER_CONFIG_FILE),
            format!(
                "r = {}, lora_alpha = {}, target_modules = {:?} do not match the model's \
                 adapters (r = {}, alpha = {}, {:?})",
                theirs.rank,
                theirs.alpha,
                theirs.target_modules,
                ours.rank,
                ours.alpha,
                ours.target_modules
            ),
        ))
    }

    /// Reads `DIR/adapter_config.json`, refusing LoRA variants drmas does not compute
    /// (rsLoRA, DoRA, QALoRA, biases, per-module ranks, `fan_in_fan_out`, layer subsets, extra saved
    /// modules), each with a message naming the field.
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        let path = dir.join(ADAPTER_CONFIG_FILE);
        let file = File::open(&path).map_err(|e| ModelError::file(&path, e))?;
        let mut text = String::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| ModelError::file(&path, e))?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ModelError::file(
                &path,
                format!(
                    "larger than {MAX_CONFIG_BYTES} bytes; a PEFT adapter config is about a \
                     kilobyte"
                ),
            ));
        }
        let json: Value = serde_json::from_str(&text).map_err(|e| ModelError::file(&path, e))?;
        let fail = |what: String| Err(ModelError::file(&path, what));
        match json.get("peft_type").and_then(Value::as_str) {
            Some("LORA") => {}
            other => return fail(format!("peft_type is {other:?}, not \"LORA\"")),
        }
        let unsupported = [
            ("use_rslora", json!(false)),
            ("use_dora", json!(false)),
            ("use_qalora", json!(false)),
            ("lora_bias", json!(false)),
            ("bias", json!("none")),
            ("fan_in_fan_out", json!(false)),
            ("rank_pattern", json!({})),
            ("alpha_pattern", json!({})),
            ("layers_to_transform", Value::Null),
            ("modules_to_save", Value::Null),
        ];
        for (field, default) in unsupported {
            if let Some(value) = json.get(field) {
                if *value != default && !(default == json!({}) && value.is_null()) {
                    return fail(format!(
                        "{field} = {value} is not supported (only {default}, plain LoRA)"
                    ));
                }
            }
        }
        let number = |field: &str| json.get(field).and_then(Value::as_f64);
        let Some(rank) = json.get("r").and_then(Value::as_i64) else {
            return fail("r: missing or not an integer".to_owned());
        };
        let Some(alpha) = number("lora_alpha") else {
            return fail("lora_alpha: missing or not a number".to_owned());
        };
        let target_modules = match json.get("target_modules") {
            Some(Value::Array(items)) => {
                let names: Option<Vec<String>> = items
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect();
                let Some(mut names) = names else {
                    return fail("target_modules: not a list of names".to_owned());
                };
                // PEFT writes its set of module names in no fixed order.
                names.sort_by_key(|n| {
                    super::lora::TARGET_MODULES
                        .iter()
                        .position(|t| t == n)
                        .unwrap_or(usize::MAX)
                });
                names
            }
            other => {
                return fail(format!(
                    "target_modules: expected a list of module names, found {}",
                    other.map_or("nothing".to_owned(), Value::to_string)
                ))
            }
        };
        let settings = LoraSettings {
            rank,
            alpha,
            dropout: number("lora_dropout").unwrap_or(0.0),
            target_modules,
        };
        settings.check().map_err(|e| ModelError::file(&path, e))?;
        Ok(Self {
            settings,
            base_model: json
                .get("base_model_name_or_path")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
    }

    fn to_json(&self) -> Value {
        let s = &self.settings;
        json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": self.base_model,
            "r": s.rank,
            "lora_alpha": s.alpha,
            "lora_dropout": s.dropout,
            "target_modules": s.target_modules,
            "bias": "none",
            "fan_in_fan_out": false,
            "use_rslora": false,
            "use_dora": false,
            "inference_mode": true,
            "init_lora_weights": true,
        })
    }
}

impl Llama {
    /// Writes adapter `slot` to the folder `dir` in PEFT's layout (replacing the folder
    /// atomically), its tensors in the model's dtype; `base_model` is recorded as
    /// `base_model_name_or_path`.
    pub fn save_adapter(
        &self,
        slot: usize,
        dir: &Path,
        base_model: &str,
    ) -> Result<(), ModelError> {
        let tensors: BTreeMap<String, Tensor> = self
            .adapter_tensors(slot)?
            .into_iter()
            .map(|(name, t)| (format!("{PEFT_PREFIX}{name}"), t))
            .collect();
        let settings = self.checked_adapters(slot)?.settings().clone();
        let config = AdapterConfig {
            settings,
            base_model: base_model.to_owned(),
        };
        let text = serde_json::to_string_pretty(&config.to_json())
            .map_err(|e| ModelError::Input(format!("adapter config: {e}")))?;
        write_dir_atomically(dir, Durability::Flushed, |tmp| {
            let path = tmp.join(ADAPTER_CONFIG_FILE);
            std::fs::write(&path, text + "\n").map_err(|e| ModelError::file(&path, e))?;
            write_safetensors(&tmp.join(ADAPTER_WEIGHTS_FILE), &tensors)
        })
    }

    /// Loads the PEFT adapter in `dir` into adapter `slot` (converting dtypes). Its rank and
    /// target modules must be the model's adapters' and its alpha gives the same scale; every
    /// tensor of the slot must be in the file and nothing else. Errors name the file and the
    /// tensor.
    pub fn load_adapter(&self, slot: usize, dir: &Path) -> Result<(), ModelError> {
        let ours = self.checked_adapters(slot)?.settings().clone();
        AdapterConfig::read(dir)?.check_fits(&ours, dir)?;
        let expected = self.adapter_tensors(slot)?;
        read_into(dir, expected, |name, variable, values| {
            if variable.size() != values.size() {
                return Err(ModelError::Shape {
                    tensor: name.to_owned(),
                    expected: variable.size(),
                    found: values.size().iter().map(|&d| d as usize).collect(),
                });
            }
            tch::no_grad(|| variable.shallow_clone().f_copy_(values))?;
            Ok(())
        })
    }

    /// Loads the PEFT adapter in `dir` into adapter `slot` of adapters of a rank at least its
    /// own that target at least its modules, as vLLM and SGLang hold adapters of any rank up
    /// to `--max-lora-rank`: its `A` fills the slot's first `r` rows and its `B` the first `r`
    /// columns, scaled by its `alpha / r` over the slots' scale; the rest of the slot and the
    /// projections it does not adapt are zero. The slot then computes what the adapter does,
    /// to within the rounding of that product. Errors name the file and the tensor.
    pub fn load_adapter_padded(&self, slot: usize, dir: &Path) -> Result<(), ModelError> {
        let ours = self.checked_adapters(slot)?.settings().clone();
        let theirs = AdapterConfig::read(dir)?.settings;
        let config = dir.join(ADAPTER_CONFIG_FILE);
        if theirs.rank > ours.rank {
            return Err(ModelError::file(
                config,
                format!(
                    "r = {} is larger than the rank of the model's adapters ({})",
                    theirs.rank, ours.rank
                ),
            ));
        }
        if let Some(module) = theirs.target_modules.iter().find(|m| !ours.targets(m)) {
            return Err(ModelError::file(
                config,
                format!(
                    "target_modules names `{module}`, which the model's adapters do not adapt \
                     ({:?})",
                    ours.target_modules
                ),
            ));
        }
        let ratio = theirs.scaling() / ours.scaling();
        let rank = theirs.rank;
        let slot_tensors = self.adapter_tensors(slot)?;
        let mut expected = BTreeMap::new();
        for (name, variable) in &slot_tensors {
            let _ = tch::no_grad(|| variable.shallow_clone().f_zero_())?;
            let module = name.split('.').rev().nth(2).unwrap_or_default();
            if theirs.targets(module) {
                expected.insert(name.clone(), variable.shallow_clone());
            }
        }
        read_into(dir, expected, |name, variable, values| {
            let size = variable.size();
            let is_b = name.ends_with(".lora_B.weight");
            let (within, wanted) = if is_b {
                (variable.narrow(1, 0, rank), vec![size[0], rank])
            } else {
                (variable.narrow(0, 0, rank), vec![rank, size[1]])
            };
            if values.size() != wanted {
                return Err(ModelError::Shape {
                    tensor: name.to_owned(),
                    expected: wanted,
                    found: values.size().iter().map(|&d| d as usize).collect(),
                });
            }
            let values = if is_b && ratio != 1.0 {
                values.to_kind(tch::Kind::Float) * ratio
            } else {
                values.shallow_clone()
            };
            tch::no_grad(|| within.shallow_clone().f_copy_(&values))?;
            Ok(())
        })
    }
}

/// Calls `fill(name, variable, values)` for every tensor of the adapter file in `dir` with
/// the variable of `expected` (by name without PEFT's prefix) it belongs to; fails on a
/// tensor `expected` lacks and on one of `expected` the file lacks. Errors name the file.
fn read_into(
    dir: &Path,
    mut expected: BTreeMap<String, Tensor>,
    mut fill: impl FnMut(&str, &Tensor, &Tensor) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    let weights = dir.join(ADAPTER_WEIGHTS_FILE);
    read_tensors(&weights, |name, values| {
        let short = name.strip_prefix(PEFT_PREFIX).unwrap_or(name);
        let Some(variable) = expected.remove(short) else {
            return Err(ModelError::UnexpectedTensor(name.to_owned()));
        };
        fill(name, &variable, values)
    })
    .map_err(|e| match e {
        e @ ModelError::File { .. } => e,
        e => e.in_file(&weights),
    })?;
    match expected.into_keys().next() {
        Some(name) => {
            Err(ModelError::MissingTensor(format!("{PEFT_PREFIX}{name}")).in_file(weights))
        }
        None => Ok(()),
    }
}

/// Calls `each` with every tensor of the safetensors file `path` (F32, F16 or BF16).
fn read_tensors(
    path: &Path,
    mut each: impl FnMut(&str, &Tensor) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    let file = File::open(path).map_err(|e| ModelError::file(path, e))?;
    // SAFETY: read-only map dropped before returning; adapter files are written whole and
    // renamed into place (see `atomic_dir`), never rewritten while mapped.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::file(path, e))?;
    let tensors = SafeTensors::deserialize(&map)
        .map_err(|e| ModelError::file(path, format!("not a valid safetensors file: {e}")))?;
    for (name, view) in tensors.tensors() {
        each(&name, &tensor_from_view(&name, &view)?)?;
    }
    Ok(())
}
