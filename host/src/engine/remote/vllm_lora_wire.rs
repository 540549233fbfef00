//! The JSON of vLLM's runtime LoRA routes (served when it starts with `--enable-lora` and
//! `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`): `/v1/load_lora_adapter` adds a PEFT adapter
//! folder as a model of its own, which a request names in `model`; `/v1/unload_lora_adapter`
//! removes one. Field names follow vLLM's `entrypoints/serve/lora` protocol.

use serde::{Deserialize, Serialize};

/// `POST /v1/load_lora_adapter`; answered with plain text on success.
pub const LOAD_LORA_ADAPTER_PATH: &str = "/v1/load_lora_adapter";
/// `POST /v1/unload_lora_adapter`; answered with plain text on success.
pub const UNLOAD_LORA_ADAPTER_PATH: &str = "/v1/unload_lora_adapter";
/// The error type vLLM answers an unload of an adapter it does not hold with (a 404 that,
/// unlike a missing route's, says the route is served).
pub const ADAPTER_NOT_FOUND: &str = "NotFoundError";

/// The body of `POST /v1/load_lora_adapter`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadLoraAdapterBody {
    /// The name requests ask for the adapter by; it must be new to the server.
    pub lora_name: String,
    /// The PEFT folder (`adapter_config.json`, `adapter_model.safetensors`), a path the server
    /// can read.
    pub lora_path: String,
}

/// The body of `POST /v1/unload_lora_adapter`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnloadLoraAdapterBody {
    /// The adapter's name.
    pub lora_name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bodies_are_those_vllm_0_32_took() {
        let load = LoadLoraAdapterBody {
            lora_name: "shared/solver@iteration-3".to_owned(),
            lora_path: "/w/shared/iteration-3/solver".to_owned(),
        };
        assert_eq!(
            serde_json::to_string(&load).expect("serialises"),
            r#"{"lora_name":"shared/solver@iteration-3","lora_path":"/w/shared/iteration-3/solver"}"#
        );
        let unload = UnloadLoraAdapterBody {
            lora_name: "a".to_owned(),
        };
        assert_eq!(
            serde_json::to_string(&unload).expect("serialises"),
            r#"{"lora_name":"a"}"#
        );
    }
}
