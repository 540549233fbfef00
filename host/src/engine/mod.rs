//! The generation engine: batched sampling from a [`Llama`](crate::model::llama::Llama) with a
//! KV cache, per-sequence sampling parameters and stop conditions, and the logprob of every
//! sampled token (what the PPO ratio starts from); [`Generator`] is the seam the rollout
//! generates through.

pub(crate) mod continuous_batching;
pub mod cpu;
pub mod cuda_graph;
pub mod decode_steps;
pub mod decoding;
pub mod generate;
pub mod generator;
pub mod prefix_cache;
pub mod remote;
pub mod sampling;
pub mod shared_batch;
pub mod stop;

pub use decoding::Decoding;
pub use generate::{generate, FinishReason, Generation, GenerationRequest};
pub use generator::{Generator, LocalGenerator};
pub use prefix_cache::PrefixCache;
pub use sampling::{Sampler, SamplingParams};
pub use stop::StopStrings;
