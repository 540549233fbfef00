//! [`TeamMember`]: one agent of the run with the worker group and sampling settings it uses.

use drmas_sdk::{Actions, Agent};

use crate::engine::SamplingParams;
use crate::plugins::Hosted;

/// An agent filling one orchestra role, and how its calls are generated.
pub struct TeamMember {
    /// The orchestra role it fills.
    pub role: String,
    /// The role's contract: an action outside it makes the call invalid.
    pub actions: Actions,
    /// The agent component.
    pub agent: Hosted<dyn Agent>,
    /// Index of the worker group whose model generates for it.
    pub group: usize,
    /// Its LoRA adapter in the group's model (`None`: the model itself).
    pub adapter: Option<usize>,
    /// Sampling settings of its calls.
    pub sampling: SamplingParams,
    /// The most tokens one call may generate.
    pub max_new_tokens: usize,
    /// Strings that end a call once its continuation gains one (`[[agents]] stop`).
    pub stop: Vec<String>,
}
