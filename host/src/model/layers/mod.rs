//! The layers Llama-family decoders (Llama, Qwen2, Qwen3) share, on libtorch tensors.
//!
//! Every layer takes its weights from a [`tch::nn::Path`], so their variable names are the
//! Hugging Face parameter names and checkpoints load by name.

pub mod adapter_rows;
pub mod attention;
pub mod decoder;
pub mod kv_cache;
pub mod linear;
pub mod mask;
pub mod mlp;
pub mod past;
pub mod projection;
pub mod prompt_prefix;
pub mod rms_norm;
pub mod rotary;
pub mod sequence_kv;

pub use adapter_rows::AdapterRows;
pub use attention::{Attention, AttentionConfig};
pub use decoder::DecoderLayer;
pub use kv_cache::KvCache;
pub use linear::Linear;
pub use mask::{AttentionContext, SharedCacheRows};
pub use mlp::Mlp;
pub use past::Past;
pub use projection::{LoraLinear, Projection};
pub use prompt_prefix::PromptPrefix;
pub use rms_norm::{fused_rms_norm, RmsNorm};
pub use rotary::{Rotary, RotaryAngles};
pub use sequence_kv::SequenceKv;
