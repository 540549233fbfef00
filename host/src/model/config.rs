//! [`LlamaConfig`]: the sizes and options of a Llama-family decoder (Llama, Qwen2, Qwen3), read
//! from and written to an HF `config.json`.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::architecture::Architecture;
use super::error::ModelError;

/// A Llama-family decoder's configuration, as in an HF `config.json`.
///
/// Read leniently: unknown fields are ignored and optional ones get the defaults of the
/// architecture's HF config class, so configs from GGUF files, HF checkpoints and fine-tunes
/// all load. The attention options ([`LlamaConfig::attention_bias`], [`LlamaConfig::qk_norm`])
/// are what lets Qwen2/Qwen3 reuse the Llama layers.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Which HF architecture this is (written back as `architectures` and `model_type`).
    pub architecture: Architecture,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP's hidden layer.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (grouped-query attention when fewer than query heads).
    pub num_key_value_heads: usize,
    /// Width of one attention head (default: `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// RoPE frequency scaling, if any.
    pub rope_scaling: Option<RopeScaling>,
    /// Vocabulary size (rows of the embedding matrix).
    pub vocab_size: usize,
    /// Longest sequence the model was trained for (sizes the RoPE tables).
    pub max_position_embeddings: usize,
    /// Whether the LM head reuses the token embedding matrix.
    pub tie_word_embeddings: bool,
    /// Whether the q/k/v projections have biases (Qwen2).
    pub attention_bias: bool,
    /// Whether queries and keys are RMS-normalised per head before RoPE (Qwen3).
    pub qk_norm: bool,
    /// Beginning-of-sequence token, if the model has one.
    pub bos_token_id: Option<i64>,
    /// End-of-sequence tokens: generation stops at any of them.
    pub eos_token_ids: Vec<i64>,
}

/// RoPE frequency scaling for contexts longer than the model's original one.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Llama 3.1's scaling: low frequencies divided by `factor`, high ones kept, a smooth
    /// blend in between.
    Llama3 {
        /// How much longer the new context is.
        factor: f64,
        /// Wavelengths longer than `original / low_freq_factor` are fully scaled.
        low_freq_factor: f64,
        /// Wavelengths shorter than `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was pre-trained with.
        original_max_position_embeddings: usize,
    },
    /// Position interpolation: every frequency divided by `factor`.
    Linear {
        /// How much longer the new context is.
        factor: f64,
    },
}

/// The fields of `config.json` this crate reads, once the architecture's defaults are filled in.
#[derive(Deserialize)]
struct RawConfig {
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
    /// transformers 5 keeps `rope_theta` and the scaling in here.
    rope_parameters: Option<Value>,
    vocab_size: usize,
    max_position_embeddings: usize,
    tie_word_embeddings: bool,
    attention_bias: bool,
    use_sliding_window: bool,
    layer_types: Option<Vec<String>>,
    bos_token_id: Option<i64>,
    eos_token_id: Option<TokenIds>,
}

/// `eos_token_id` is a single id in most configs and a list in Llama 3's.
#[derive(Deserialize)]
#[serde(untagged)]
enum TokenIds {
    One(i64),
    Many(Vec<i64>),
}

/// The defaults of the architecture's HF config class (`LlamaConfig`, `Qwen2Config`,
/// `Qwen3Config` in transformers), for fields a `config.json` leaves out.
fn hf_defaults(arch: Architecture) -> Value {
    let mut defaults = json!({
        "num_key_value_heads": null, "head_dim": null, "rms_norm_eps": 1e-6,
        "rope_theta": null, "rope_scaling": null, "rope_parameters": null,
        "tie_word_embeddings": false, "attention_bias": false, "use_sliding_window": false,
        "layer_types": null,
    });
    let sizes = match arch {
        Architecture::Llama => json!({
            "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
            "num_hidden_layers": 32, "num_attention_heads": 32,
            "max_position_embeddings": 2048, "bos_token_id": 1, "eos_token_id": 2,
        }),
        Architecture::Qwen2 | Architecture::Qwen3 => json!({
            "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
            "max_position_embeddings": 32768, "bos_token_id": null, "eos_token_id": null,
        }),
    };
    if let (Some(all), Value::Object(sizes)) = (defaults.as_object_mut(), sizes) {
        all.extend(sizes);
        if arch == Architecture::Qwen3 {
            all.insert("head_dim".to_owned(), json!(128));
        }
    }
    defaults
}

/// The RoPE base used when a config names none (transformers' `default_theta`).
const DEFAULT_ROPE_THETA: f64 = 10_000.0;

impl LlamaConfig {
    /// Reads a configuration from an HF `config.json` value (as written by transformers 4 or 5).
    ///
    /// The architecture comes from `architectures` (`LlamaForCausalLM`, `Qwen2ForCausalLM`,
    /// `Qwen3ForCausalLM`) or, when that is absent, `model_type`; fields left out get that
    /// architecture's HF defaults. Qwen2 always has q/k/v biases, Qwen3 always q/k norms.
    /// Fails naming the architecture when it is not supported, and naming the field when one
    /// is missing or inconsistent (heads that do not divide the hidden size, an unknown RoPE
    /// scaling, sliding-window attention) or a size is out of bounds ([`super::limits`]).
    pub fn from_json(json: &Value) -> Result<Self, ModelError> {
        let architecture = architecture(json)?;
        let mut filled = hf_defaults(architecture);
        if let (Some(filled), Some(given)) = (filled.as_object_mut(), json.as_object()) {
            filled.extend(given.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let raw: RawConfig =
            serde_json::from_value(filled).map_err(|e| ModelError::Config(e.to_string()))?;
        let sliding = raw
            .layer_types
            .iter()
            .flatten()
            .any(|t| t != "full_attention");
        if raw.use_sliding_window || sliding {
            return Err(ModelError::Config(format!(
                "{} with sliding-window attention (use_sliding_window / layer_types) is not \
                 supported; every layer must use full attention",
                architecture.hf_class()
            )));
        }
        let heads = raw.num_attention_heads;
        let kv_heads = raw.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(ModelError::Config(format!(
                "{heads} attention heads do not split into groups of {kv_heads} key/value heads"
            )));
        }
        let head_dim = match raw.head_dim {
            Some(d) => d,
            None if raw.hidden_size.is_multiple_of(heads) => raw.hidden_size / heads,
            None => {
                return Err(ModelError::Config(format!(
                    "hidden_size {} does not split into {heads} heads",
                    raw.hidden_size
                )))
            }
        };
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(ModelError::Config(format!(
                "head_dim {head_dim} must be even for rotary embeddings"
            )));
        }
        // transformers 5 writes `rope_parameters` (theta inside); 4 writes `rope_theta` and
        // `rope_scaling` side by side.
        let rope = raw
            .rope_parameters
            .as_ref()
            .filter(|p| !p.is_null())
            .or(raw.rope_scaling.as_ref());
        let rope_theta = rope
            .and_then(|p| p.get("rope_theta"))
            .and_then(Value::as_f64)
            .or(raw.rope_theta)
            .unwrap_or(DEFAULT_ROPE_THETA);
        let rope_scaling = rope
            .map(|p| RopeScaling::from_json(p, raw.max_position_embeddings))
            .transpose()?
            .flatten();
        let eos_token_ids = match raw.eos_token_id {
            None => Vec::new(),
            Some(TokenIds::One(id)) => vec![id],
            Some(TokenIds::Many(ids)) => ids,
        };
        let config = Self {
            architecture,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps,
            rope_theta,
            rope_scaling,
            vocab_size: raw.vocab_size,
            max_position_embeddings: raw.max_position_embeddings,
            tie_word_embeddings: raw.tie_word_embeddings,
            attention_bias: raw.attention_bias || architecture == Architecture::Qwen2,
            qk_norm: architecture == Architecture::Qwen3,
            bos_token_id: raw.bos_token_id,
            eos_token_ids,
        };
        super::limits::check_sizes(&config)?;
        Ok(config)
    }

    /// The HF `config.json` of this configuration (transformers 4 field names, which
    /// transformers 5 also reads); [`LlamaConfig::from_json`] reads it back unchanged.
    /// `torch_dtype` is left to the caller, who knows the weights' dtype.
    pub fn to_json(&self) -> Value {
        let arch = self.architecture;
        let mut config = Map::new();
        let mut put = |key: &str, value: Value| {
            config.insert(key.to_owned(), value);
        };
        put("architectures", json!([arch.hf_class()]));
        put("model_type", json!(arch.model_type()));
        put("hidden_size", json!(self.hidden_size));
        put("intermediate_size", json!(self.intermediate_size));
        put("num_hidden_layers", json!(self.num_hidden_layers));
        put("num_attention_heads", json!(self.num_attention_heads));
        put("num_key_value_heads", json!(self.num_key_value_heads));
        put("head_dim", json!(self.head_dim));
        put("hidden_act", json!("silu"));
        put("rms_norm_eps", json!(self.rms_norm_eps));
        put("rope_theta", json!(self.rope_theta));
        put(
            "rope_scaling",
            self.rope_scaling
                .as_ref()
                .map_or(Value::Null, RopeScaling::to_json),
        );
        put("vocab_size", json!(self.vocab_size));
        put(
            "max_position_embeddings",
            json!(self.max_position_embeddings),
        );
        put("tie_word_embeddings", json!(self.tie_word_embeddings));
        match arch {
            Architecture::Llama => {
                put("attention_bias", json!(self.attention_bias));
                put("mlp_bias", json!(false));
            }
            Architecture::Qwen2 => put("use_sliding_window", json!(false)),
            Architecture::Qwen3 => {
                put("attention_bias", json!(self.attention_bias));
                put("use_sliding_window", json!(false));
            }
        }
        put("bos_token_id", json!(self.bos_token_id));
        put(
            "eos_token_id",
            match self.eos_token_ids.as_slice() {
                [] => Value::Null,
                [one] => json!(one),
                many => json!(many),
            },
        );
        put("use_cache", json!(true));
        Value::Object(config)
    }
}

/// The architecture `architectures` names (the first supported class), else `model_type`'s.
fn architecture(json: &Value) -> Result<Architecture, ModelError> {
    let unsupported = |found: String| ModelError::UnsupportedArchitecture {
        model: "this build",
        expected: "LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM",
        found,
    };
    let classes: Vec<&str> = json
        .get("architectures")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !classes.is_empty() {
        return classes
            .iter()
            .find_map(|c| Architecture::from_hf_class(c))
            .ok_or_else(|| unsupported(classes.join(", ")));
    }
    match json.get("model_type").and_then(Value::as_str) {
        Some(model_type) => Architecture::from_model_type(model_type)
            .ok_or_else(|| unsupported(format!("model_type {model_type}"))),
        None => Err(unsupported(
            "none (no architectures or model_type)".to_owned(),
        )),
    }
}

impl RopeScaling {
    /// Reads HF's `rope_scaling` (or transformers 5's `rope_parameters`) object; `None` for no
    /// scaling (`null`, or type `default`). Llama 3 scaling without
    /// `original_max_position_embeddings` gets `max_positions`, as transformers does.
    fn from_json(json: &Value, max_positions: usize) -> Result<Option<Self>, ModelError> {
        if json.is_null() {
            return Ok(None);
        }
        let kind = json
            .get("rope_type")
            .or_else(|| json.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let number = |key: &str| {
            json.get(key).and_then(Value::as_f64).ok_or_else(|| {
                ModelError::Config(format!("rope_scaling of type {kind} needs a number {key}"))
            })
        };
        match kind {
            "default" => Ok(None),
            "linear" => Ok(Some(Self::Linear {
                factor: number("factor")?,
            })),
            "llama3" => Ok(Some(Self::Llama3 {
                factor: number("factor")?,
                low_freq_factor: number("low_freq_factor")?,
                high_freq_factor: number("high_freq_factor")?,
                original_max_position_embeddings: json
                    .get("original_max_position_embeddings")
                    .and_then(Value::as_u64)
                    .map_or(max_positions, |n| n as usize),
            })),
            other => Err(ModelError::Config(format!(
                "rope_scaling type {other} is not supported (supported: default, linear, llama3)"
            ))),
        }
    }

    /// The `rope_scaling` object of `config.json`.
    fn to_json(&self) -> Value {
        match *self {
            Self::Linear { factor } => json!({"rope_type": "linear", "factor": factor}),
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings,
            }),
        }
    }

    /// Scales RoPE inverse frequencies as HF's `_compute_*_parameters` do.
    pub fn apply(&self, inv_freq: &mut [f64]) {
        match *self {
            Self::Linear { factor } => inv_freq.iter_mut().for_each(|f| *f /= factor),
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                let original = original_max_position_embeddings as f64;
                let low_freq_wavelen = original / low_freq_factor;
                let high_freq_wavelen = original / high_freq_factor;
                for f in inv_freq.iter_mut() {
                    let wavelen = 2.0 * std::f64::consts::PI / *f;
                    if wavelen > low_freq_wavelen {
                        *f /= factor;
                    } else if wavelen >= high_freq_wavelen {
                        let smooth = (original / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        *f = (1.0 - smooth) * *f / factor + smooth * *f;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn smollm() -> Value {
        json!({
            "architectures": ["LlamaForCausalLM"], "hidden_size": 576,
            "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
            "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
            "vocab_size": 49152, "tie_word_embeddings": true, "eos_token_id": 2,
            "rope_scaling": null, "unknown_field": [1, 2]
        })
    }

    #[test]
    fn reads_smollm_with_defaults() {
        let config = LlamaConfig::from_json(&smollm()).expect("a Llama config");
        assert_eq!(config.head_dim, 64);
        assert_eq!(config.num_key_value_heads, 3);
        assert_eq!(config.eos_token_ids, [2]);
        assert_eq!(config.max_position_embeddings, 2048);
        assert!(config.tie_word_embeddings && !config.attention_bias && !config.qk_norm);
        assert_eq!(config.rope_scaling, None);
    }

    #[test]
    fn other_architectures_are_named() {
        let mut json = smollm();
        json["architectures"] = json!(["MistralForCausalLM"]);
        let err = LlamaConfig::from_json(&json).expect_err("not supported");
        assert!(err.to_string().contains("MistralForCausalLM"), "{err}");
        let err = LlamaConfig::from_json(&json!({"model_type": "gemma"})).expect_err("gemma");
        assert!(err.to_string().contains("model_type gemma"), "{err}");
    }

    #[test]
    fn qwen2_always_has_biases_and_qwen3_q_k_norms() {
        let mut json = smollm();
        json["architectures"] = json!(["Qwen2ForCausalLM"]);
        let qwen2 = LlamaConfig::from_json(&json).expect("a Qwen2 config");
        assert_eq!(qwen2.architecture, Architecture::Qwen2);
        assert!(qwen2.attention_bias && !qwen2.qk_norm);
        assert_eq!(
            qwen2.max_position_embeddings, 32768,
            "Qwen2Config's default"
        );

        json["architectures"] = json!(["Qwen3ForCausalLM"]);
        let qwen3 = LlamaConfig::from_json(&json).expect("a Qwen3 config");
        assert!(!qwen3.attention_bias && qwen3.qk_norm);
        assert_eq!(qwen3.head_dim, 128, "Qwen3Config's default head_dim");
        json["attention_bias"] = json!(true);
        json["head_dim"] = json!(32);
        let qwen3 = LlamaConfig::from_json(&json).expect("a Qwen3 config");
        assert!(qwen3.attention_bias);
        assert_eq!(qwen3.head_dim, 32);
    }

    #[test]
    fn sliding_windows_are_refused() {
        let mut json = smollm();
        json["architectures"] = json!(["Qwen2ForCausalLM"]);
        json["use_sliding_window"] = json!(false);
        json["sliding_window"] = json!(4096);
        LlamaConfig::from_json(&json).expect("a window that is off is fine");
        json["use_sliding_window"] = json!(true);
        let err = LlamaConfig::from_json(&json).expect_err("sliding window");
        assert!(err.to_string().contains("use_sliding_window"), "{err}");
        json["use_sliding_window"] = json!(false);
        json["layer_types"] = json!(["full_attention", "sliding_attention"]);
        LlamaConfig::from_json(&json).expect_err("a sliding layer");
    }

    #[test]
    fn missing_fields_get_the_architectures_defaults() {
        let llama = LlamaConfig::from_json(&json!({"model_type": "llama"})).expect("defaults");
        assert_eq!(
            (llama.vocab_size, llama.hidden_size, llama.head_dim),
            (32000, 4096, 128)
        );
        assert_eq!(
            (llama.bos_token_id, llama.eos_token_ids),
            (Some(1), vec![2])
        );
        assert_eq!((llama.rope_theta, llama.rms_norm_eps), (10_000.0, 1e-6));
        let qwen2 = LlamaConfig::from_json(&json!({"model_type": "qwen2"})).expect("defaults");
        assert_eq!((qwen2.vocab_size, qwen2.num_key_value_heads), (151936, 32));
        assert_eq!((qwen2.bos_token_id, qwen2.eos_token_ids), (None, vec![]));
    }

    #[test]
    fn reads_transformers_5_rope_parameters() {
        let mut json = smollm();
        json.as_object_mut().map(|o| o.remove("rope_theta"));
        json["rope_parameters"] = json!({"rope_type": "default", "rope_theta": 500000.0});
        let config = LlamaConfig::from_json(&json).expect("a v5 config");
        assert_eq!((config.rope_theta, config.rope_scaling), (500000.0, None));
        json["rope_parameters"] = json!({
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        });
        let config = LlamaConfig::from_json(&json).expect("a v5 config");
        assert_eq!(
            config.rope_scaling,
            Some(RopeScaling::Llama3 {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 2048,
            })
        );
    }

    #[test]
    fn to_json_round_trips() {
        for (arch, scaling) in [
            (
                "LlamaForCausalLM",
                json!({"rope_type": "llama3", "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}),
            ),
            ("Qwen2ForCausalLM", json!({"type": "linear", "factor": 2.0})),
            ("Qwen3ForCausalLM", Value::Null),
        ] {
            let mut json = smollm();
            json["architectures"] = json!([arch]);
            json["rope_scaling"] = scaling;
            json["eos_token_id"] = json!([2, 7]);
            let config = LlamaConfig::from_json(&json).expect("a config");
            let written = config.to_json();
            assert_eq!(written["architectures"], json!([arch]));
            let again = LlamaConfig::from_json(&written).expect("reads back");
            assert_eq!(again, config, "{arch}");
        }
    }

    #[test]
    fn llama3_scaling_keeps_high_divides_low_and_blends_between() {
        let mut json = smollm();
        json["eos_token_id"] = json!([128001, 128009]);
        json["rope_scaling"] = json!({
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192
        });
        let config = LlamaConfig::from_json(&json).expect("a Llama config");
        assert_eq!(config.eos_token_ids, [128001, 128009]);
        let scaling = config.rope_scaling.expect("llama3 scaling");
        // Wavelengths 2π (under 8192/4: kept), 16384 (over 8192/1: divided by 8) and 4096
        // (between: smooth = (8192/4096 − 1)/3 = 1/3 of the way from f/8 back to f).
        let tau = 2.0 * std::f64::consts::PI;
        let mut freqs = [1.0, tau / 16384.0, tau / 4096.0];
        let before = freqs;
        scaling.apply(&mut freqs);
        assert_eq!(freqs[0], before[0]);
        assert!((freqs[1] - before[1] / 8.0).abs() < 1e-15);
        let want = (2.0 / 3.0) * before[2] / 8.0 + before[2] / 3.0;
        assert!((freqs[2] - want).abs() < 1e-15, "{} vs {want}", freqs[2]);
    }

    #[test]
    fn unknown_scaling_is_an_error() {
        let mut json = smollm();
        json["rope_scaling"] = json!({"type": "yarn", "factor": 4.0});
        let err = LlamaConfig::from_json(&json).expect_err("yarn is not supported");
        assert!(err.to_string().contains("yarn"), "{err}");
    }
}
