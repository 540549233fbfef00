//! Role contracts: what an orchestra expects back from the agent in each of its roles, and what
//! an agent says it can write. The host checks every call's action against its role's contract;
//! an action outside it is an invalid call (penalised and counted like a malformed output).

use std::fmt;

/// The actions a role accepts, or an agent can produce.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Actions {
    /// Any text (a solution, a search query). For an agent: it does not declare its actions.
    #[default]
    Text,
    /// Exactly one of these words (a verdict, a routing decision), compared as written.
    OneOf(Vec<String>),
}

impl Actions {
    /// One of `actions`, e.g. `Actions::one_of(["approve", "reject"])`.
    pub fn one_of<S: Into<String>>(actions: impl IntoIterator<Item = S>) -> Self {
        Actions::OneOf(actions.into_iter().map(Into::into).collect())
    }

    /// Whether `action` meets this contract.
    ///
    /// ```
    /// use drmas_sdk::Actions;
    ///
    /// let verdicts = Actions::one_of(["approve", "reject"]);
    /// assert!(verdicts.allows("reject"));
    /// assert!(!verdicts.allows("approved"));
    /// assert!(Actions::Text.allows("any text at all"));
    /// ```
    pub fn allows(&self, action: &str) -> bool {
        match self {
            Actions::Text => true,
            Actions::OneOf(actions) => actions.iter().any(|a| a == action),
        }
    }

    /// The actions of `produced` (what an agent declares) that this contract refuses; empty when
    /// every one is accepted, or when either side is free text (nothing to compare before a run).
    pub fn refused<'a>(&self, produced: &'a Actions) -> Vec<&'a str> {
        match produced {
            Actions::Text => Vec::new(),
            Actions::OneOf(actions) => actions
                .iter()
                .filter(|a| !self.allows(a))
                .map(String::as_str)
                .collect(),
        }
    }
}

impl fmt::Display for Actions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actions::Text => f.write_str("text"),
            Actions::OneOf(actions) => f.write_str(&actions.join(" | ")),
        }
    }
}

/// One role of an orchestra and its contract: the run file fills it with an agent, whose every
/// action the host checks against `actions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// The role's name, as run files write it (`[[agents]] role = "verifier"`).
    pub name: String,
    /// What the orchestra accepts as this role's action.
    pub actions: Actions,
}

impl Role {
    /// A role whose action is any text (a solver's solution).
    pub fn text(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            actions: Actions::Text,
        }
    }

    /// A role whose action is one of `actions` (a verifier's `approve` | `reject`).
    pub fn one_of<S: Into<String>>(
        name: impl Into<String>,
        actions: impl IntoIterator<Item = S>,
    ) -> Self {
        Self {
            name: name.into(),
            actions: Actions::one_of(actions),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Actions;

    #[test]
    fn refused_lists_the_declared_actions_outside_the_contract() {
        let contract = Actions::one_of(["yes", "no"]);
        let declared = Actions::one_of(["approve", "no"]);
        assert_eq!(contract.refused(&declared), ["approve"]);
        assert!(contract.refused(&Actions::Text).is_empty());
        assert!(Actions::Text.refused(&declared).is_empty());
        assert_eq!(contract.to_string(), "yes | no");
    }
}
