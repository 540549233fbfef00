//! The JSON of the runtime LoRA routes drmas speaks as a client and serves (`drmas-host
//! serve --max-loras`): vLLM's (served when it starts with `--enable-lora` and
//! `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`; field names after its `entrypoints/serve/lora`
//! protocol) and SGLang's (`--enable-lora`; after its `LoadLoRAAdapterReqInput` and
//! `LoRAUpdateOutput`). Both load a PEFT adapter folder under a name requests then ask for:
//! vLLM's as their `model`, SGLang's as their `lora_path`. SGLang reports its LoRA limits
//! among its server arguments in `GET /get_server_info` ([`LoraLimits`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::wire::OneOrEach;

/// vLLM's `POST /v1/load_lora_adapter`; answered with plain text on success.
pub const LOAD_LORA_ADAPTER_PATH: &str = "/v1/load_lora_adapter";
/// vLLM's `POST /v1/unload_lora_adapter`; answered with plain text on success.
pub const UNLOAD_LORA_ADAPTER_PATH: &str = "/v1/unload_lora_adapter";
/// The error type vLLM answers an unload of an adapter it does not hold with (a 404 that,
/// unlike a missing route's, says the route is served).
pub const ADAPTER_NOT_FOUND: &str = "NotFoundError";
/// SGLang's `POST /load_lora_adapter`, answered with a [`LoraUpdateAnswer`].
pub const SGLANG_LOAD_LORA_ADAPTER_PATH: &str = "/load_lora_adapter";
/// SGLang's `POST /unload_lora_adapter`, answered with a [`LoraUpdateAnswer`].
pub const SGLANG_UNLOAD_LORA_ADAPTER_PATH: &str = "/unload_lora_adapter";

/// The body of a load, on either engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadLoraAdapterBody {
    /// The name requests ask for the adapter by; it must be new to the server.
    pub lora_name: String,
    /// The PEFT folder (`adapter_config.json`, `adapter_model.safetensors`), a path the server
    /// can read.
    pub lora_path: String,
}

/// The body of an unload, on either engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnloadLoraAdapterBody {
    /// The adapter's name.
    pub lora_name: String,
}

/// SGLang's answer to a load or an unload (status 200 on success, 400 otherwise).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoraUpdateAnswer {
    /// Whether the adapter was loaded or unloaded.
    pub success: bool,
    /// Why not.
    #[serde(default)]
    pub error_message: Option<String>,
    /// Every adapter the server holds afterwards, by name.
    #[serde(default)]
    pub loaded_adapters: Option<BTreeMap<String, serde_json::Value>>,
}

/// SGLang's `GET /get_server_info`: its server arguments, among much else.
pub const SERVER_INFO_PATH: &str = "/get_server_info";

/// The LoRA limits in an answer to `GET /get_server_info` (SGLang's server arguments of those
/// names; `drmas-host serve` answers them too), every other field ignored. A limit left out or
/// `null` sets none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoraLimits {
    /// Whether the server loads adapters at all.
    #[serde(default)]
    pub enable_lora: bool,
    /// The largest rank an adapter may have.
    #[serde(default)]
    pub max_lora_rank: Option<i64>,
    /// The projections adapters may target: HF names, `all`, or SGLang's merged `qkv_proj`
    /// and `gate_up_proj`.
    #[serde(default)]
    pub lora_target_modules: Option<OneOrEach<String>>,
    /// The most adapters held at once.
    #[serde(default)]
    pub max_loaded_loras: Option<usize>,
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

    #[test]
    fn sglangs_answer_reads_with_or_without_its_adapters() {
        let answer: LoraUpdateAnswer = serde_json::from_str(
            r#"{"success": true, "error_message": null,
                "loaded_adapters": {"a": "/w/a", "b": {"lora_id": "1", "lora_name": "b"}}}"#,
        )
        .expect("parses");
        assert!(answer.success);
        let names: Vec<&String> = answer
            .loaded_adapters
            .iter()
            .flatten()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["a", "b"]);
        let refused: LoraUpdateAnswer =
            serde_json::from_str(r#"{"success": false, "error_message": "not found"}"#)
                .expect("parses");
        assert_eq!(refused.error_message.as_deref(), Some("not found"));
    }
}
