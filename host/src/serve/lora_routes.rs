//! The runtime LoRA routes `drmas-host serve --max-loras` answers, in vLLM's dialect
//! (`/v1/load_lora_adapter`, `/v1/unload_lora_adapter`: plain text, errors typed) and in
//! SGLang's (`/load_lora_adapter`, `/unload_lora_adapter`: `{"success", "error_message",
//! "loaded_adapters"}`), both over the same adapter slots of the served model.

use std::collections::BTreeMap;
use std::path::PathBuf;

use drmas_http_server::Reply;
use serde::de::DeserializeOwned;

use super::adapter_slots::BAD_REQUEST;
use super::batcher::Batcher;
use super::refusal::Refusal;
use crate::engine::remote::lora_wire::{
    LoadLoraAdapterBody, LoraUpdateAnswer, UnloadLoraAdapterBody,
};

/// The longest LoRA adapter name, in bytes.
const MAX_ADAPTER_NAME_BYTES: usize = 256;

/// Whose LoRA routes a request came by: the answers differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// vLLM's `/v1/…_lora_adapter`.
    Vllm,
    /// SGLang's `/…_lora_adapter`.
    Sglang,
}

/// A load: the PEFT folder `lora_path` served under `lora_name` (not `model_name`, the served
/// model's own) once the running batch is done.
pub fn load(batcher: &Batcher, model_name: &str, body: &[u8], dialect: Dialect) -> Reply {
    let loaded = parse::<LoadLoraAdapterBody>(body, "\"lora_name\": string, \"lora_path\": string")
        .and_then(|body| {
            check_name(&body.lora_name, model_name)?;
            let name = body.lora_name.clone();
            batcher
                .load_adapter(body.lora_name, PathBuf::from(body.lora_path))
                .map(|()| name)
        });
    answer(batcher, loaded, dialect, "added")
}

/// An unload of the adapter `lora_name`.
pub fn unload(batcher: &Batcher, body: &[u8], dialect: Dialect) -> Reply {
    let unloaded = parse::<UnloadLoraAdapterBody>(body, "\"lora_name\": string").and_then(|body| {
        let name = body.lora_name.clone();
        batcher.unload_adapter(body.lora_name).map(|()| name)
    });
    answer(batcher, unloaded, dialect, "removed")
}

fn parse<T: DeserializeOwned>(body: &[u8], expected: &str) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        Refusal::typed(
            400,
            BAD_REQUEST,
            format!("malformed request ({e}); expected {{{expected}}}"),
        )
    })
}

/// The answer to a load or unload of the adapter `outcome` names, in `dialect`: vLLM's plain
/// text or typed error, or SGLang's update answer with every adapter held (400 on failure).
fn answer(
    batcher: &Batcher,
    outcome: Result<String, Refusal>,
    dialect: Dialect,
    done: &str,
) -> Reply {
    match dialect {
        Dialect::Vllm => match outcome {
            Ok(name) => Reply::json(
                200,
                &format!("Success: LoRA adapter '{name}' {done} successfully."),
            ),
            Err(refusal) => refusal.reply(),
        },
        Dialect::Sglang => {
            let loaded: BTreeMap<String, serde_json::Value> = batcher
                .served()
                .adapters
                .into_iter()
                .map(|held| (held.name, held.folder.display().to_string().into()))
                .collect();
            let (status, error_message) = match outcome {
                Ok(_) => (200, None),
                Err(refusal) => (400, Some(refusal.message)),
            };
            let answer = LoraUpdateAnswer {
                success: error_message.is_none(),
                error_message,
                loaded_adapters: Some(loaded),
            };
            Reply::json(status, &answer)
        }
    }
}

/// Refuses an adapter name requests could not tell from the served model's, or that is empty
/// or unbounded.
fn check_name(name: &str, model_name: &str) -> Result<(), Refusal> {
    if name.is_empty() || name.len() > MAX_ADAPTER_NAME_BYTES {
        return Err(Refusal::typed(
            400,
            BAD_REQUEST,
            format!(
                "lora_name: 1 to {MAX_ADAPTER_NAME_BYTES} bytes, found {}",
                name.len()
            ),
        ));
    }
    if name == model_name {
        return Err(Refusal::typed(
            400,
            BAD_REQUEST,
            format!("lora_name `{name}` is the served model's own name; pick another"),
        ));
    }
    Ok(())
}
