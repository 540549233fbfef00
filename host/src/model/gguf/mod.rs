//! GGUF (llama.cpp's single-file model format) as a source of Hugging Face–style models.
//!
//! [`GgufModel::open`] memory-maps a `.gguf` file and offers what a Hugging Face checkpoint
//! folder would: an HF `config.json` ([`config`]), an HF `tokenizer.json` and chat template
//! ([`tokenizer`]), and the weights under their HF names and shapes ([`names`]), dequantised to
//! f32 ([`dequant`]) with llama.cpp's Q/K row permutation undone ([`permute`]).
//!
//! Supported: GGUF versions 2 and 3 (little-endian); architectures `llama`, `qwen2`, `qwen3`;
//! tensor types F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.

pub mod config;
pub mod dequant;
pub mod error;
pub mod ggml_type;
pub mod metadata;
pub mod model;
pub mod names;
pub mod permute;
pub mod reader;
pub mod tokenizer;

/// The architectures, shared with HF `config.json` reading (see [`super::architecture`]).
pub use super::architecture;
pub use error::GgufError;
pub use model::GgufModel;
