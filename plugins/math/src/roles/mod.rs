//! The math plugin's components: two agents, two orchestras and the environment.

mod environment;
mod orchestra;
mod solver;
mod template;
mod verifier;

pub use environment::{MathEnvironment, MAX_GENERATED};
pub use orchestra::{MathOrchestra, SolverOnlyOrchestra};
pub use solver::SolverAgent;
pub use verifier::{Verdict, VerifierAgent};
