//! # drmas-sdk
//!
//! The one crate a drmas plugin depends on. A plugin offers any number of four kinds of
//! components, which the host (`drmas-host`) builds by name from a run file:
//!
//! - an [`Environment`]: loads tasks and runs gym-like episodes (`reset`, then `step` until done),
//!   scoring the team's actions with a reward;
//! - an [`Orchestra`]: the multi-agent workflow of one environment step, a state machine
//!   ([`Routing`]) that the host drives so it can batch the calls of many episodes;
//! - an [`Agent`]: a role that turns the team's context into chat messages and parses the model's
//!   raw output into an action and a validity flag;
//! - an [`Estimator`]: turns a training batch's rewards into one advantage per agent call, next
//!   to the host's built-in estimators (`grpo`, `drmas`, ...).
//!
//! Only plain data crosses the boundary (strings, chat messages, numbers; configs as TOML text):
//! models, tokenizers and tensors stay in the host, so plugins never link libtorch.
//!
//! Authors write plain Rust: implement the traits, add [`Component`] for each exported type, and
//! list them in [`export_plugin!`]. The macro builds the stable-ABI root module; every call into the
//! plugin catches panics and turns them into errors that name the plugin and the component.
//! Logs written with the [`log`] crate's macros reach the host's log output.
//!
//! ```
//! use drmas_sdk::{Agent, AgentContext, ChatMessage, Component, Params, Parsed, Result};
//!
//! /// Answers with one word.
//! pub struct Echo;
//!
//! impl Component for Echo {
//!     const NAME: &'static str = "Echo Agent";
//!     const DESCRIPTION: &'static str = "repeats the observation";
//!     fn from_config(_params: &Params) -> Result<Self> {
//!         Ok(Echo)
//!     }
//! }
//!
//! impl Agent for Echo {
//!     fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>> {
//!         Ok(vec![ChatMessage::user(format!("Repeat: {}", context.observation))])
//!     }
//!     fn parse(&self, raw: &str) -> Result<Parsed> {
//!         Ok(Parsed { action: raw.trim().to_owned(), valid: !raw.trim().is_empty() })
//!     }
//! }
//!
//! drmas_sdk::export_plugin! {
//!     name: "echo",
//!     agents: [Echo],
//! }
//! # fn main() {}
//! ```
//!
//! ABI compatibility: this crate's version is the plugin ABI version; see docs/plugins.md.

mod caught_panic;
mod config;
mod contract;
mod data;
mod error;
mod roles;

#[doc(hidden)]
pub mod export;
pub mod ffi;

pub use caught_panic::{catch_quietly, CaughtPanic};
pub use config::Params;
pub use contract::{Actions, Role};
pub use data::{
    AgentContext, AgentOutput, CallReward, ChatMessage, ComponentInfo, ComponentKind, DatasetSpec,
    Metric, Next, Parsed, Reset, Sample, Step, Task, Turn,
};
pub use error::{Error, PluginError, Result};
pub use roles::{Agent, Component, Environment, Episode, Estimator, Orchestra, Routing};

/// Re-exported so plugins log with `drmas_sdk::log::info!(...)` without another dependency line;
/// records are forwarded to the host.
pub use log;

/// The SDK (and so plugin ABI) version this crate was built as.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");
