//! The sizes a model configuration may declare. A `config.json` (or GGUF metadata) is trusted for
//! nothing: `hidden_size = 1e12` would make libtorch abort inside an allocation, `3e8` allocate
//! gigabytes before any weight is read. These bounds are wider than any model this host runs.

use super::config::LlamaConfig;
use super::error::ModelError;

/// Width of the residual stream, at most.
pub const MAX_HIDDEN_SIZE: usize = 1 << 16;
/// Width of the MLP's hidden layer, at most.
pub const MAX_INTERMEDIATE_SIZE: usize = 1 << 20;
/// Decoder layers, at most.
pub const MAX_LAYERS: usize = 1024;
/// Attention heads (query or key/value), at most.
pub const MAX_HEADS: usize = 1024;
/// Width of one attention head, at most.
pub const MAX_HEAD_DIM: usize = 1024;
/// Vocabulary size, at most.
pub const MAX_VOCAB_SIZE: usize = 1 << 22;
/// Context length (`max_position_embeddings`, which sizes the RoPE tables), at most.
pub const MAX_POSITIONS: usize = 1 << 20;

/// Fails naming the first size of `config` outside its bound, or a norm epsilon or RoPE base
/// that is not a finite positive number.
pub fn check_sizes(config: &LlamaConfig) -> Result<(), ModelError> {
    let sizes = [
        ("hidden_size", config.hidden_size, MAX_HIDDEN_SIZE),
        (
            "intermediate_size",
            config.intermediate_size,
            MAX_INTERMEDIATE_SIZE,
        ),
        ("num_hidden_layers", config.num_hidden_layers, MAX_LAYERS),
        ("num_attention_heads", config.num_attention_heads, MAX_HEADS),
        ("num_key_value_heads", config.num_key_value_heads, MAX_HEADS),
        ("head_dim", config.head_dim, MAX_HEAD_DIM),
        ("vocab_size", config.vocab_size, MAX_VOCAB_SIZE),
        (
            "max_position_embeddings",
            config.max_position_embeddings,
            MAX_POSITIONS,
        ),
    ];
    for (field, value, max) in sizes {
        if !(1..=max).contains(&value) {
            return Err(ModelError::Config(format!(
                "{field} = {value} is outside 1..={max}, the sizes this host loads; the \
                 configuration is corrupt or describes a model this host does not run"
            )));
        }
    }
    for (field, value) in [
        ("rms_norm_eps", config.rms_norm_eps),
        ("rope_theta", config.rope_theta),
    ] {
        if !(value.is_finite() && value > 0.0) {
            return Err(ModelError::Config(format!(
                "{field} = {value} must be a finite number > 0"
            )));
        }
    }
    Ok(())
}
