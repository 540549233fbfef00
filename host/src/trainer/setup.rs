//! Turns the run file and the preflight plan into the trainer's pieces: the team (agents with
//! their sampling settings and worker group), each agent's training settings, and each worker
//! group's effective learning rate — rejecting agents that share a model but disagree on it.

use anyhow::bail;

use crate::config::{AgentSection, OldLogprobs, RunConfig, WorkerGroupSection};
use crate::engine::SamplingParams;
use crate::preflight::Plan;
use crate::rollout::TeamMember;
use crate::update::{AgentTraining, MicroBatch, RolloutCorrection};

/// How rollouts sample: training (`[rollout]`) or evaluation (`[eval]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Training rollouts: `[rollout]` with the agents' overrides.
    Train,
    /// Evaluation: `[eval]` temperature and top-p for every agent.
    Eval,
    /// A greedy baseline (`remax`): every agent picks its most likely token, within its
    /// training response budget.
    Greedy,
}

/// The team of `plan` (in run-file order) with the sampling settings of `phase`; takes the
/// agents out of the plan. [`set_phase`] switches the team to the other phase's settings.
pub fn team(config: &RunConfig, plan: &mut Plan, phase: Phase) -> Vec<TeamMember> {
    let groups: Vec<&String> = config.worker_groups.keys().collect();
    let adapters = adapter_slots(config);
    std::mem::take(&mut plan.agents)
        .into_iter()
        .zip(&config.agents)
        .zip(adapters)
        .map(|(((role, agent), section), adapter)| {
            let (sampling, max_new_tokens) = sampling(config, section, phase);
            TeamMember {
                role: role.name,
                actions: role.actions,
                agent,
                group: groups
                    .iter()
                    .position(|g| *g == section.worker_group.get_ref())
                    .unwrap_or_default(),
                adapter,
                sampling,
                max_new_tokens,
                stop: section.stop.clone(),
            }
        })
        .collect()
}

/// Each agent's LoRA adapter in its worker group's model (run-file order): `None` in a group
/// without `[worker_groups.NAME.lora]`; with `per_agent` the group's agents own adapters 0, 1,
/// … in run-file order; without, they all share adapter 0.
pub fn adapter_slots(config: &RunConfig) -> Vec<Option<usize>> {
    let mut next: std::collections::BTreeMap<&str, usize> = Default::default();
    config
        .agents
        .iter()
        .map(|section| {
            let name = section.worker_group.get_ref().as_str();
            let lora = config.worker_groups.get(name)?.lora.as_ref()?;
            if !lora.per_agent {
                return Some(0);
            }
            let slot = next.entry(name).or_default();
            *slot += 1;
            Some(*slot - 1)
        })
        .collect()
}

/// The names of worker group `group`'s LoRA adapters, by slot (its agents' roles, or `shared`
/// when they share one); empty without LoRA. Checkpoints name adapter folders after them.
pub fn adapter_names(config: &RunConfig, group: &str) -> Vec<String> {
    let Some(lora) = config
        .worker_groups
        .get(group)
        .and_then(|g| g.lora.as_ref())
    else {
        return Vec::new();
    };
    let roles = config
        .agents
        .iter()
        .filter(|a| a.worker_group.get_ref() == group)
        .map(|a| a.role.get_ref().clone());
    if lora.per_agent {
        roles.collect()
    } else {
        vec!["shared".to_owned()]
    }
}

/// The learning rate of each adapter (by slot) of worker group `group` when its agents own
/// one each: the agent's `learning_rate`, or the group's. Empty otherwise.
pub fn adapter_learning_rates(config: &RunConfig, group: &str) -> Vec<f64> {
    let Some(section) = config.worker_groups.get(group) else {
        return Vec::new();
    };
    if !section.lora.as_ref().is_some_and(|l| l.per_agent) {
        return Vec::new();
    }
    config
        .agents
        .iter()
        .filter(|a| a.worker_group.get_ref() == group)
        .map(|a| a.learning_rate.unwrap_or(section.learning_rate))
        .collect()
}

/// Sets every member's sampling settings to those of `phase` (members are in run-file order).
pub fn set_phase(config: &RunConfig, team: &mut [TeamMember], phase: Phase) {
    for (member, section) in team.iter_mut().zip(&config.agents) {
        (member.sampling, member.max_new_tokens) = sampling(config, section, phase);
    }
}

/// An agent's sampling settings and response budget in `phase`.
fn sampling(config: &RunConfig, section: &AgentSection, phase: Phase) -> (SamplingParams, usize) {
    let rollout = &config.rollout;
    let max_new_tokens = section
        .max_new_tokens
        .unwrap_or(rollout.max_response_tokens);
    let params = match phase {
        Phase::Train => SamplingParams {
            temperature: section.temperature.unwrap_or(rollout.temperature),
            top_p: section.top_p.unwrap_or(rollout.top_p),
            top_k: rollout.top_k,
        },
        Phase::Eval => SamplingParams {
            temperature: config.eval.temperature,
            top_p: config.eval.top_p,
            top_k: 0,
        },
        Phase::Greedy => SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
        },
    };
    (params, max_new_tokens)
}

/// Each agent's training settings: `[algorithm.loss]` and the group's micro-batch size with
/// the agent's overrides, and its LoRA adapter.
pub fn agent_training(config: &RunConfig) -> Vec<AgentTraining> {
    config
        .agents
        .iter()
        .zip(adapter_slots(config))
        .map(|(section, adapter)| {
            let mut loss = config.algorithm.loss.clone();
            let group = &config.worker_groups[section.worker_group.get_ref()];
            if let Some(v) = section.clip_low {
                loss.clip_low = v;
            }
            if let Some(v) = section.clip_high {
                loss.clip_high = v;
            }
            if let Some(v) = section.entropy_coef {
                loss.entropy_coef = v;
            }
            if let Some(v) = section.kl_coef {
                loss.kl_coef = v;
            }
            let max_new_tokens = section
                .max_new_tokens
                .unwrap_or(config.rollout.max_response_tokens);
            loss.loss_scale_factor.get_or_insert(max_new_tokens as f64);
            let old_logprobs = OldLogprobs::for_group(config.algorithm.old_logprobs, group);
            AgentTraining {
                loss,
                micro_batch: micro_batch(section, group),
                adapter,
                activation_checkpointing: group.activation_checkpointing,
                correction: RolloutCorrection {
                    recompute: old_logprobs == OldLogprobs::Recompute,
                    tis_cap: config.algorithm.rollout_correction.tis_cap,
                },
            }
        })
        .collect()
}

/// The size of an agent's micro-batches: its own setting (by tokens or by calls), else its
/// worker group's (by tokens when set, else by calls).
fn micro_batch(agent: &AgentSection, group: &WorkerGroupSection) -> MicroBatch {
    match (agent.micro_batch_tokens, agent.micro_batch_size) {
        (Some(tokens), _) => MicroBatch::Tokens(tokens),
        (None, Some(calls)) => MicroBatch::Calls(calls),
        (None, None) => group.micro_batch_tokens.map_or(
            MicroBatch::Calls(group.micro_batch_size),
            MicroBatch::Tokens,
        ),
    }
}

/// The learning rate of each worker group (in name order): the group's, or the one its agents
/// set. A model has one optimizer, so agents sharing it must agree — unless each trains its own
/// LoRA adapter: then the group's rate is the optimizer's and [`adapter_learning_rates`] gives
/// each adapter its own.
pub fn group_learning_rates(config: &RunConfig, origin: &str) -> anyhow::Result<Vec<f64>> {
    let mut rates = Vec::new();
    for (name, group) in &config.worker_groups {
        if group.lora.as_ref().is_some_and(|l| l.per_agent) {
            rates.push(group.learning_rate);
            continue;
        }
        let mut chosen: Option<(f64, &str)> = None;
        for section in config
            .agents
            .iter()
            .filter(|a| a.worker_group.get_ref() == name)
        {
            let Some(rate) = section.learning_rate else {
                continue;
            };
            match chosen {
                Some((other, role)) if other != rate => bail!(
                    "{origin}: agents `{role}` and `{}` share worker group `{name}` (one model, one \
                     optimizer) but set different learning_rate ({other} vs {rate}); set it once in \
                     [worker_groups.{name}]",
                    section.role.get_ref()
                ),
                _ => chosen = Some((rate, section.role.get_ref())),
            }
        }
        rates.push(chosen.map_or(group.learning_rate, |(rate, _)| rate));
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::RunFile;

    /// A run of a solver and a verifier sharing one group, with `group_keys` in the group's
    /// table and `verifier_keys` (each `, key = value`) in the verifier's.
    fn run(group_keys: &str, verifier_keys: &str) -> RunConfig {
        let text = format!(
            r#"
agents = [
  {{ role = "solver", agent = "Solver Agent", worker_group = "shared" }},
  {{ role = "verifier", agent = "Verifier Agent", worker_group = "shared"{verifier_keys} }},
]

[run]
output_dir = "runs/test"
iterations = 1

[environment]
name = "math"
train_data = {{ path = "builtin:arithmetic", split = "train" }}

[orchestra]
name = "math"

[worker_groups.shared]
model = "builtin:smollm2-135m"
{group_keys}
"#
        );
        RunConfig::parse(&RunFile::from_text("run.toml", text, PathBuf::from("."))).expect("valid")
    }

    #[test]
    fn an_agents_own_micro_batch_size_wins_over_its_groups_and_tokens_over_calls() {
        let sizes = |group: &str, verifier: &str| -> Vec<MicroBatch> {
            agent_training(&run(group, verifier))
                .into_iter()
                .map(|agent| agent.micro_batch)
                .collect()
        };
        assert_eq!(sizes("", ""), [MicroBatch::Calls(8), MicroBatch::Calls(8)]);
        assert_eq!(
            sizes("micro_batch_size = 4\nmicro_batch_tokens = 2048", ""),
            [MicroBatch::Tokens(2048), MicroBatch::Tokens(2048)]
        );
        assert_eq!(
            sizes("micro_batch_tokens = 2048", ", micro_batch_size = 2"),
            [MicroBatch::Tokens(2048), MicroBatch::Calls(2)]
        );
        assert_eq!(
            sizes("micro_batch_size = 4", ", micro_batch_tokens = 512"),
            [MicroBatch::Calls(4), MicroBatch::Tokens(512)]
        );
    }
}
