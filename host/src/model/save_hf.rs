//! [`Pretrained::save_hf`]: a model written as a Hugging Face folder that transformers (and
//! [`Pretrained::load`]) loads.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use tch::{Kind, Tensor};

use super::atomic_dir::{write_dir_atomically, Durability};
use super::error::ModelError;
use super::hf_folder::{
    CONFIG_FILE, GENERATION_CONFIG_FILE, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE,
};
use super::pretrained::Pretrained;
use super::safetensors_io::{write_safetensors, SINGLE_FILE};

/// The embeddings' name in an HF checkpoint.
const EMBEDDINGS: &str = "model.embed_tokens.weight";
/// The LM head's name in an HF checkpoint.
const LM_HEAD: &str = "lm_head.weight";

/// Whether a model with tied embeddings gets an `lm_head.weight` in its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TiedHead {
    /// Left out, as transformers writes a tied model.
    Omitted,
    /// Written as a copy of the embeddings, for loaders that reload each layer from the file
    /// (vLLM's in-place reload keeps the old head otherwise). Loaders of tied models ignore it.
    Written,
}

impl Pretrained {
    /// Writes the model to the folder `dir` in Hugging Face layout: `config.json`,
    /// `model.safetensors` (HF names, the weights' dtype, no `lm_head.weight` when tied),
    /// `tokenizer.json`, `tokenizer_config.json` (chat template, BOS/EOS strings) and
    /// `generation_config.json`.
    ///
    /// The folder is written beside `dir`, flushed to disk and then renamed over it (see
    /// [`write_dir_atomically`]), so an existing `dir` — such as the previous checkpoint — is
    /// replaced whole or left as it was, never half-written.
    pub fn save_hf(&self, dir: &Path) -> Result<(), ModelError> {
        self.save_hf_with(dir, Durability::Flushed, TiedHead::Omitted)
    }

    /// [`Self::save_hf`], flushed to disk or not as `durability` says, a tied model's head
    /// written or not as `head` says.
    pub fn save_hf_with(
        &self,
        dir: &Path,
        durability: Durability,
        head: TiedHead,
    ) -> Result<(), ModelError> {
        let kind = self.model.kind();
        let config = self.model.config();
        let mut config_json = config.to_json();
        config_json["torch_dtype"] = json!(torch_dtype(kind)?);
        let eos_ids = match config.eos_token_ids.as_slice() {
            [] => Value::Null,
            [one] => json!(one),
            many => json!(many),
        };
        let generation = json!({
            "bos_token_id": config.bos_token_id,
            "eos_token_id": eos_ids,
        });
        let special = |token: &str| (!token.is_empty()).then(|| token.to_owned());
        let tokenizer_config = json!({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": special(self.chat_template.bos_token()),
            "eos_token": special(self.chat_template.eos_token()),
            "chat_template": self.chat_template.source(),
            "model_max_length": config.max_position_embeddings,
            "clean_up_tokenization_spaces": false,
        });
        let tokenizer = self
            .tokenizer
            .to_string(true)
            .map_err(|e| ModelError::Input(format!("tokenizer does not serialise: {e}")))?;
        let mut tensors: BTreeMap<String, Tensor> =
            self.model.var_store().variables().into_iter().collect();
        if config.tie_word_embeddings && head == TiedHead::Written {
            if let Some(embeddings) = tensors.get(EMBEDDINGS) {
                let copy = embeddings.shallow_clone();
                tensors.insert(LM_HEAD.to_owned(), copy);
            }
        }

        write_dir_atomically(dir, durability, |tmp| {
            write_json(&tmp.join(CONFIG_FILE), &config_json)?;
            write_safetensors(&tmp.join(SINGLE_FILE), &tensors)?;
            write_text(&tmp.join(TOKENIZER_FILE), &tokenizer)?;
            write_json(&tmp.join(TOKENIZER_CONFIG_FILE), &tokenizer_config)?;
            write_json(&tmp.join(GENERATION_CONFIG_FILE), &generation)
        })
    }
}

/// transformers' name of the dtype `kind`.
fn torch_dtype(kind: Kind) -> Result<&'static str, ModelError> {
    match kind {
        Kind::Float => Ok("float32"),
        Kind::BFloat16 => Ok("bfloat16"),
        Kind::Half => Ok("float16"),
        other => Err(ModelError::Input(format!(
            "weights of dtype {other:?} cannot be saved (f32, bf16 or f16 only)"
        ))),
    }
}

fn write_json(path: &Path, value: &Value) -> Result<(), ModelError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| ModelError::file(path, format!("cannot serialise: {e}")))?;
    write_text(path, &(text + "\n"))
}

fn write_text(path: &Path, text: &str) -> Result<(), ModelError> {
    std::fs::write(path, text).map_err(|e| ModelError::file(path, e))
}
