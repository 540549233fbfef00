//! Model weights, configurations and tokenizers from the files models ship in.

pub mod architecture;
pub mod atomic_dir;
pub mod backend;
pub mod chat_codec;
pub mod chat_template;
pub mod config;
pub mod config_fit;
pub mod cuda_attention;
pub mod eager_attention;
pub mod error;
pub mod gguf;
pub mod hf_folder;
pub mod layers;
pub mod limits;
pub mod llama;
pub mod lora;
pub mod peft;
pub mod pretrained;
pub mod process_setting;
pub mod safetensors_io;
pub mod save_hf;
pub mod tokenizer_json;
pub mod transfer;
pub mod weights;

use std::path::PathBuf;

/// Where `scripts/install-model.sh` puts the embedded default model (SmolLM2-135M-Instruct,
/// Q4_1 GGUF): `$DRMAS_MODEL` when set, else `$DRMAS_CACHE/models/…` (`DRMAS_CACHE` defaults to
/// `~/.cache/drmas`). The file may not exist yet.
pub fn default_model_path() -> PathBuf {
    if let Some(path) = std::env::var_os("DRMAS_MODEL") {
        return PathBuf::from(path);
    }
    let cache = std::env::var_os("DRMAS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/drmas")
        });
    cache.join("models").join("SmolLM2-135M-Instruct.Q4_1.gguf")
}
