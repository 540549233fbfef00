//! The search task of drmas: question answering with a retrieval tool, after Search-R1.
//!
//! - [`roles`]: the plugin's components — `Search Verifier Agent`, `Search Agent`, `Answer Agent`,
//!   the `search` orchestra and the `search` environment;
//! - [`metrics`]: Search-R1's answer normalisation, exact match, sub-exact match and token F1;
//! - [`tags`]: `<search>` / `<answer>` extraction from model output;
//! - [`dataset`]: QA tasks from JSONL;
//! - [`corpus`]: the passage corpus (JSONL, `{"id", "contents"}`);
//! - [`retriever`]: the [`retriever::Retriever`] trait with a BM25 (tantivy) backend and a client
//!   of Search-R1's retrieval server API;
//! - [`server`]: that API served over HTTP (the `drmas-retriever` binary);
//! - [`format`](mod@format): retrieved passages formatted as Search-R1's `<information>` block.

pub mod corpus;
pub mod dataset;
pub mod format;
pub mod metrics;
pub mod retriever;
pub mod roles;
pub mod server;
pub mod tags;

pub use roles::{
    AnswerAgent, SearchAgent, SearchEnvironment, SearchOrchestra, SearchVerifierAgent,
};

drmas_sdk::export_plugin! {
    name: "search",
    agents: [SearchVerifierAgent, SearchAgent, AnswerAgent],
    orchestras: [SearchOrchestra],
    environments: [SearchEnvironment],
}
