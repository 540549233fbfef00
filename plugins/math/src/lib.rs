//! The math plugin: Dr.MAS's Solver ↔ Verifier refinement loop on math tasks.
//!
//! - agents `Solver Agent` and `Verifier Agent`, orchestras `math` (the loop) and `solver-only`
//!   (single-agent baseline), environment `math` (reward 1 for a right final answer);
//! - an answer checker in the style of the MATH graders, which is the reward;
//! - readers for GSM8K, MATH-500 and verl parquet datasets, and a seeded generator of
//!   arithmetic and word problems that serves as the embedded default dataset.

pub mod answer;
pub mod dataset;
pub mod generator;
pub mod roles;

pub use roles::{
    MathEnvironment, MathOrchestra, SolverAgent, SolverOnlyOrchestra, VerifierAgent, MAX_GENERATED,
};

drmas_sdk::export_plugin! {
    name: "math",
    agents: [SolverAgent, VerifierAgent],
    orchestras: [MathOrchestra, SolverOnlyOrchestra],
    environments: [MathEnvironment],
}
