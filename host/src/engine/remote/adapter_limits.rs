//! [`AdapterNeeds`]: what a LoRA group's adapters ask of each server, checked against the
//! limits a server reports in `GET /get_server_info` ([`LoraLimits`]) before any work, so a
//! rank or a projection a server cannot hold is refused by `check` and not at the first sync.

use super::lora_wire::LoraLimits;
use super::wire::OneOrEach;

/// SGLang's merged projections: a name in `--lora-target-modules` that stands for its parts.
const MERGED_MODULES: [(&str, &[&str]); 2] = [
    ("qkv_proj", &["q_proj", "k_proj", "v_proj"]),
    ("gate_up_proj", &["gate_proj", "up_proj"]),
];

/// A LoRA group's adapters, as its servers must hold them.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterNeeds {
    /// `[worker_groups.NAME.lora] rank`.
    pub rank: i64,
    /// `[worker_groups.NAME.lora] target_modules`.
    pub target_modules: Vec<String>,
    /// The group's adapters (one per agent, or one shared); a sync holds twice as many for a
    /// moment, the new version loaded beside the old.
    pub adapters: usize,
}

impl AdapterNeeds {
    /// Why a server with `limits` cannot hold the adapters of worker group `group`, in the
    /// words of the server flag that raises each limit; `None` when they fit or the server
    /// sets no limit.
    pub fn misfit(&self, limits: &LoraLimits, group: &str) -> Option<String> {
        let section = format!("[worker_groups.{group}.lora]");
        if let Some(max_rank) = limits.max_lora_rank.filter(|&max| self.rank > max) {
            return Some(format!(
                "holds LoRA adapters of rank at most {max_rank} (its max_lora_rank) and {section} \
                 rank is {}: start it with --max-lora-rank {} or more, or lower the rank",
                self.rank, self.rank
            ));
        }
        if let Some(modules) = &limits.lora_target_modules {
            let left_out: Vec<&str> = self
                .target_modules
                .iter()
                .map(String::as_str)
                .filter(|module| !covers(modules, module))
                .collect();
            if !left_out.is_empty() {
                let served = match modules {
                    OneOrEach::One(name) => name.clone(),
                    OneOrEach::Each(names) => names.join(", "),
                };
                return Some(format!(
                    "adapts only {served} (its lora_target_modules) and {section} target_modules \
                     has {}: start it with --lora-target-modules naming them too, or leave them \
                     out of target_modules",
                    left_out.join(", ")
                ));
            }
        }
        let needed = 2 * self.adapters;
        if let Some(held) = limits.max_loaded_loras.filter(|&held| needed > held) {
            return Some(format!(
                "holds at most {held} LoRA adapters at once (its max_loaded_loras) and worker \
                 group `{group}`'s {} adapters need {needed} while a sync loads their new version \
                 beside the old: start it with --max-loaded-loras {needed} or more (drmas-host \
                 serve: --max-loras), more still if other groups share it",
                self.adapters
            ));
        }
        None
    }
}

/// Whether a server whose adapters may target `modules` adapts projection `module`.
fn covers(modules: &OneOrEach<String>, module: &str) -> bool {
    let names = match modules {
        OneOrEach::One(name) => std::slice::from_ref(name),
        OneOrEach::Each(names) => names.as_slice(),
    };
    names.iter().any(|name| {
        name == "all"
            || name == module
            || MERGED_MODULES
                .iter()
                .any(|(merged, parts)| name == merged && parts.contains(&module))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(rank: i64, targets: &[&str], adapters: usize) -> AdapterNeeds {
        AdapterNeeds {
            rank,
            target_modules: targets.iter().map(|t| t.to_string()).collect(),
            adapters,
        }
    }

    fn limits(answer: &str) -> LoraLimits {
        serde_json::from_str(answer).expect("parses")
    }

    #[test]
    fn adapters_within_every_limit_fit_and_unreported_limits_bind_nothing() {
        let two = needs(8, &["q_proj", "v_proj"], 2);
        let within = limits(
            r#"{"enable_lora": true, "max_lora_rank": 8, "lora_target_modules": ["q_proj",
                "v_proj", "o_proj"], "max_loaded_loras": 4, "max_loras_per_batch": 8}"#,
        );
        assert_eq!(two.misfit(&within, "shared"), None);
        let silent = limits(
            r#"{"max_lora_rank": null, "lora_target_modules": null, "max_loaded_loras": null}"#,
        );
        assert_eq!(needs(512, &["down_proj"], 100).misfit(&silent, "g"), None);
        assert_eq!(
            needs(512, &["down_proj"], 100).misfit(&limits("{}"), "g"),
            None
        );
    }

    #[test]
    fn a_rank_above_the_servers_largest_is_refused_naming_the_flag() {
        let said = needs(16, &["q_proj"], 1)
            .misfit(&limits(r#"{"max_lora_rank": 8}"#), "policy")
            .expect("16 > 8");
        assert_eq!(
            said,
            "holds LoRA adapters of rank at most 8 (its max_lora_rank) and \
             [worker_groups.policy.lora] rank is 16: start it with --max-lora-rank 16 or more, \
             or lower the rank"
        );
    }

    #[test]
    fn projections_outside_the_servers_targets_are_named_and_merged_names_cover_their_parts() {
        let all_seven = crate::model::lora::TARGET_MODULES;
        let said = needs(4, &all_seven, 1)
            .misfit(
                &limits(r#"{"lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}"#),
                "g",
            )
            .expect("the MLP is left out");
        assert!(
            said.contains("adapts only q_proj, k_proj, v_proj, o_proj")
                && said.contains("target_modules has gate_proj, up_proj, down_proj"),
            "{said}"
        );
        let merged = limits(r#"{"lora_target_modules": ["qkv_proj", "o_proj", "gate_up_proj"]}"#);
        let said = needs(4, &all_seven, 1)
            .misfit(&merged, "g")
            .expect("down_proj is left out");
        assert!(said.contains("target_modules has down_proj:"), "{said}");
        assert_eq!(needs(4, &all_seven[..6], 1).misfit(&merged, "g"), None);
        assert_eq!(
            needs(4, &all_seven, 1).misfit(&limits(r#"{"lora_target_modules": "all"}"#), "g"),
            None
        );
        assert_eq!(
            needs(4, &all_seven, 1).misfit(&limits(r#"{"lora_target_modules": ["all"]}"#), "g"),
            None
        );
    }

    #[test]
    fn a_sync_needs_room_for_two_versions_of_every_adapter() {
        let three = needs(4, &["q_proj"], 3);
        assert_eq!(
            three.misfit(&limits(r#"{"max_loaded_loras": 6}"#), "g"),
            None
        );
        let said = three
            .misfit(&limits(r#"{"max_loaded_loras": 5}"#), "g")
            .expect("6 > 5");
        assert!(
            said.starts_with("holds at most 5 LoRA adapters at once")
                && said.contains("--max-loaded-loras 6"),
            "{said}"
        );
    }
}
