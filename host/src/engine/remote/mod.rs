//! Generation on inference servers that speak SGLang's native HTTP protocol ([`wire`]): SGLang
//! itself, sglang-router in front of a fleet, or `drmas-host serve`; or OpenAI's
//! `/v1/completions` as vLLM serves it ([`openai_wire`], `completions.rs`). [`RemoteGenerator`]
//! is a worker group's [`Generator`](crate::engine::Generator) on them; it also pushes new
//! weights (`weights.rs`: SGLang's route, or vLLM's development routes in [`vllm_wire`]) or a
//! LoRA group's adapters (`adapters.rs`, vLLM's or SGLang's LoRA routes in [`lora_wire`]) and
//! checks the servers before any work (`probe.rs`; a LoRA group's rank and projections against
//! a server's limits in `adapter_limits.rs`).

mod adapter_limits;
mod adapters;
mod completions;
mod connection;
mod generator;
mod in_flight;
pub mod lora_wire;
pub mod openai_wire;
mod probe;
mod settings;
pub mod vllm_wire;
mod weights;
pub mod wire;

pub use adapter_limits::AdapterNeeds;
pub use adapters::{served_adapter_name, ServedAdapter};
pub use generator::RemoteGenerator;
pub use settings::{Protocol, RemoteSettings, WeightLoading};
