//! What to change when a run runs out of memory. libtorch's message names the allocation that
//! failed (`CUDA out of memory. Tried to allocate 2.00 GiB …`); the advice added on top names
//! the run file's settings that decide how much is held at once, with their values.

use crate::config::{Device, Dtype, RunConfig};
use crate::update::{AgentTraining, MicroBatch};

/// Parts of libtorch's messages for an allocation that failed for lack of memory: CUDA's
/// caching allocator, cuBLAS's and cuDNN's workspaces, and the CPU's allocator.
const MARKERS: [&str; 3] = ["out of memory", "ALLOC_FAILED", "can't allocate memory"];

/// Whether a cause in `error`'s chain is an allocation that failed for lack of memory.
fn is_out_of_memory(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let message = cause.to_string();
        MARKERS.iter().any(|marker| message.contains(marker))
    })
}

/// `error` with advice on top when it is out of memory in the update of worker group `name`,
/// whose agents train with `agents` (the team's settings, by agent index).
pub fn in_update(
    error: anyhow::Error,
    name: &str,
    config: &RunConfig,
    agents: &[AgentTraining],
) -> anyhow::Error {
    in_group_pass(error, name, config, agents, GroupPass::Update)
}

/// `error` with advice on top when it is out of memory in the forward of worker group `name`'s
/// reference and policy over its calls for the KL in the reward.
pub fn in_reference_kl(
    error: anyhow::Error,
    name: &str,
    config: &RunConfig,
    agents: &[AgentTraining],
) -> anyhow::Error {
    in_group_pass(error, name, config, agents, GroupPass::ReferenceKl)
}

/// The passes of a worker group's model over its calls that advice is given for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupPass {
    /// The update: forward and backward, activations kept.
    Update,
    /// The KL in the reward's forwards, without gradient: nothing kept for a backward, so
    /// activation checkpointing and LoRA change nothing there.
    ReferenceKl,
}

fn in_group_pass(
    error: anyhow::Error,
    name: &str,
    config: &RunConfig,
    agents: &[AgentTraining],
    during: GroupPass,
) -> anyhow::Error {
    if !is_out_of_memory(&error) {
        return error;
    }
    let Some(group) = config.worker_groups.get(name) else {
        return error;
    };
    let trains = during == GroupPass::Update;
    let mut changes = vec![micro_batch_change(name, config, agents)];
    if trains && !group.activation_checkpointing {
        changes.push(
            "activation_checkpointing = true (each layer's activations recomputed in the \
             backward instead of kept)"
                .to_owned(),
        );
    }
    changes.extend(offload_change(name, config));
    if trains && group.lora.is_none() {
        changes.push(format!(
            "LoRA adapters instead of every weight ([worker_groups.{name}.lora])"
        ));
    }
    if group.dtype == Dtype::F32 && group.device != Device::Cpu {
        changes.push("dtype = \"bf16\" (half the bytes of every weight and activation)".to_owned());
    }
    let phase = match during {
        GroupPass::Update => "in its update",
        GroupPass::ReferenceKl => "running its reference for [algorithm.kl_in_reward]",
    };
    error.context(format!(
        "worker group `{name}` ran out of memory {phase}; each of these in \
         [worker_groups.{name}] holds less at once: {}",
        changes.join("; ")
    ))
}

/// `error` with advice on top when it is out of memory in the critic of worker group `name`
/// (its values of the calls, or its update).
pub fn in_critic(error: anyhow::Error, name: &str, config: &RunConfig) -> anyhow::Error {
    if !is_out_of_memory(&error) {
        return error;
    }
    let passes = pass(MicroBatch::for_critic(&config.algorithm.critic_settings()));
    let mut changes = vec![format!(
        "lower [algorithm.critic] micro_batch_size or micro_batch_tokens (passes now: {passes})"
    )];
    changes.extend(offload_change(name, config));
    error.context(format!(
        "the critic of worker group `{name}` ran out of memory; each of these holds less at \
         once: {}",
        changes.join("; ")
    ))
}

/// `error` with advice on top when a rollout or evaluation ran out of memory generating.
pub fn in_rollout(error: anyhow::Error, config: &RunConfig) -> anyhow::Error {
    if !is_out_of_memory(&error) {
        return error;
    }
    let rollout = &config.rollout;
    let mut advice = format!(
        "the rollout ran out of memory while generating: a turn generates [rollout] \
         prompts_per_batch × group_size = {} × {} sequences, each with a KV cache of up to \
         max_prompt_tokens + max_response_tokens = {} + {} positions (or its agent's \
         max_new_tokens); lower one of these",
        rollout.prompts_per_batch,
        rollout.group_size,
        rollout.max_prompt_tokens,
        rollout.max_response_tokens
    );
    let remote: Vec<String> = config
        .worker_groups
        .iter()
        .filter(|(_, group)| group.rollout.is_remote())
        .map(|(name, _)| format!("`{name}`"))
        .collect();
    if !remote.is_empty() {
        advice.push_str(&format!(
            "; for {} (on inference servers), the servers' own batch limit \
             (`drmas-host serve --max-batch`, SGLang's `--max-running-requests`) or \
             [worker_groups.NAME.rollout] max_batch_per_request",
            remote.join(", ")
        ));
    }
    let sharing = config
        .worker_groups
        .keys()
        .any(|name| offload_change(name, config).is_some());
    if sharing {
        advice.push_str(
            ", or set offload = true on the worker groups that share a GPU, so their gradients \
             and AdamW state stay off it while they generate",
        );
    }
    error.context(advice)
}

/// Smaller passes for group `name`'s agents, naming each agent's pass size now.
fn micro_batch_change(name: &str, config: &RunConfig, agents: &[AgentTraining]) -> String {
    let passes: Vec<String> = config
        .agents
        .iter()
        .zip(agents)
        .filter(|(agent, _)| agent.worker_group.get_ref() == name)
        .map(|(agent, training)| format!("{} {}", agent.role.get_ref(), pass(training.micro_batch)))
        .collect();
    format!(
        "lower micro_batch_size or micro_batch_tokens, here or in its agents' [[agents]] entries \
         (passes now: {})",
        passes.join(", ")
    )
}

/// One forward/backward pass's size, as the advice names it.
fn pass(micro_batch: MicroBatch) -> String {
    match micro_batch {
        MicroBatch::Calls(calls) => format!("{calls} calls"),
        MicroBatch::Tokens(tokens) => format!("{tokens} tokens"),
    }
}

/// `offload = true` for group `name`, when it is off and another group shares its GPU.
fn offload_change(name: &str, config: &RunConfig) -> Option<String> {
    let group = config.worker_groups.get(name)?;
    let shared = config
        .worker_groups
        .iter()
        .any(|(other, section)| other != name && section.device == group.device);
    (group.device != Device::Cpu && shared && !group.offload).then(|| {
        format!(
            "offload = true in [worker_groups.{name}] and the other groups on {} (an idle \
             group's weights and AdamW state leave the GPU)",
            group.device
        )
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tch::{Kind, Tensor};

    use super::*;
    use crate::config::RunFile;
    use crate::trainer::setup::agent_training;

    /// Two groups on one GPU: `policy` with none of the memory settings, `judge` with all.
    const RUN: &str = r#"
run = { output_dir = "runs/test", iterations = 2 }
environment = { name = "parity", train_data = { path = "alpha, beta" } }
orchestra = { name = "pair" }
agents = [
  { role = "first", agent = "Shout Agent", worker_group = "policy", micro_batch_tokens = 4096 },
  { role = "second", agent = "Shout Agent", worker_group = "judge" },
]

[worker_groups.policy]
model = "builtin:smollm2-135m"
device = "cuda:0"

[worker_groups.judge]
model = "builtin:smollm2-135m"
device = "cuda:0"
dtype = "bf16"
offload = true
activation_checkpointing = true
lora = { rank = 8 }
"#;

    fn config() -> RunConfig {
        RunConfig::parse(&RunFile::from_text("run.toml", RUN, PathBuf::from(".")))
            .expect("a valid run file")
    }

    /// libtorch's own error for an allocation no machine can make (2⁵² bytes).
    fn allocation_failure() -> anyhow::Error {
        let error = Tensor::f_zeros([1 << 50], (Kind::Float, tch::Device::Cpu))
            .expect_err("4 PiB cannot be allocated");
        anyhow::Error::from(error).context("updating worker group `policy`")
    }

    #[test]
    fn a_failed_allocation_is_out_of_memory_and_other_errors_are_not() {
        assert!(is_out_of_memory(&allocation_failure()));
        let shapes = Tensor::f_zeros([2, 3], (Kind::Float, tch::Device::Cpu))
            .and_then(|a| a.f_matmul(&Tensor::zeros([2, 3], (Kind::Float, tch::Device::Cpu))))
            .expect_err("mismatched shapes");
        assert!(!is_out_of_memory(&anyhow::Error::from(shapes)));
    }

    #[test]
    fn an_update_out_of_memory_names_what_holds_less_with_the_values_set() {
        let config = config();
        let agents = agent_training(&config);
        let advised = format!(
            "{:#}",
            in_update(allocation_failure(), "policy", &config, &agents)
        );
        for part in [
            "worker group `policy` ran out of memory in its update; each of these in \
             [worker_groups.policy] holds less at once: lower micro_batch_size",
            "(passes now: first 4096 tokens)",
            "activation_checkpointing = true",
            "offload = true in [worker_groups.policy] and the other groups on cuda:0",
            "[worker_groups.policy.lora]",
            "dtype = \"bf16\"",
            // libtorch's message stays, under the advice.
            "updating worker group `policy`: ",
            "can't allocate memory",
        ] {
            assert!(advised.contains(part), "{part:?} not in: {advised}");
        }
        // The judge already has what the policy is advised.
        let judge = format!(
            "{:#}",
            in_update(allocation_failure(), "judge", &config, &agents)
        );
        assert!(judge.contains("(passes now: second 8 calls)"), "{judge}");
        for absent in ["activation_checkpointing", "offload", ".lora]", "dtype"] {
            assert!(!judge.contains(absent), "{absent:?} in: {judge}");
        }
    }

    #[test]
    fn a_reference_kl_out_of_memory_names_passes_offload_and_precision_only() {
        let config = config();
        let agents = agent_training(&config);
        let advised = format!(
            "{:#}",
            in_reference_kl(allocation_failure(), "policy", &config, &agents)
        );
        for part in [
            "worker group `policy` ran out of memory running its reference for \
             [algorithm.kl_in_reward]; each of these in [worker_groups.policy] holds less at \
             once: lower micro_batch_size",
            "(passes now: first 4096 tokens)",
            "offload = true in [worker_groups.policy]",
            "dtype = \"bf16\"",
            "can't allocate memory",
        ] {
            assert!(advised.contains(part), "{part:?} not in: {advised}");
        }
        // Nothing is kept for a backward, and the reference is never an adapter.
        for absent in ["activation_checkpointing", ".lora]"] {
            assert!(!advised.contains(absent), "{absent:?} in: {advised}");
        }
    }

    #[test]
    fn a_critic_out_of_memory_names_its_passes() {
        let text = format!("{RUN}\n[algorithm.critic]\nmicro_batch_tokens = 2048\n");
        let config = RunConfig::parse(&RunFile::from_text("run.toml", text, PathBuf::from(".")))
            .expect("a valid run file");
        let advised = format!("{:#}", in_critic(allocation_failure(), "policy", &config));
        for part in [
            "the critic of worker group `policy` ran out of memory",
            "lower [algorithm.critic] micro_batch_size or micro_batch_tokens (passes now: \
             2048 tokens)",
            "offload = true in [worker_groups.policy] and the other groups on cuda:0",
        ] {
            assert!(advised.contains(part), "{part:?} not in: {advised}");
        }
    }

    #[test]
    fn a_rollout_out_of_memory_names_the_batch_and_lengths() {
        let advised = format!("{:#}", in_rollout(allocation_failure(), &config()));
        assert!(
            !advised.contains("servers"),
            "no group is remote: {advised}"
        );
        let remote = format!("{RUN}\n[worker_groups.policy.rollout]\nbackend = \"sglang\"\nurls = [\"http://127.0.0.1:1\"]\n");
        let remote = RunConfig::parse(&RunFile::from_text("run.toml", remote, PathBuf::from(".")))
            .expect("a valid run file");
        let advised_remote = format!("{:#}", in_rollout(allocation_failure(), &remote));
        assert!(
            advised_remote
                .contains("for `policy` (on inference servers), the servers' own batch limit"),
            "{advised_remote}"
        );
        for part in [
            "prompts_per_batch × group_size = 8 × 4 sequences",
            "max_prompt_tokens + max_response_tokens = 1024 + 256 positions",
            "set offload = true on the worker groups that share a GPU",
        ] {
            assert!(advised.contains(part), "{part:?} not in: {advised}");
        }
    }

    #[test]
    fn other_errors_pass_through_unchanged() {
        let config = config();
        let agents = agent_training(&config);
        let error = || anyhow::anyhow!("the environment refused the task");
        for passed in [
            in_update(error(), "policy", &config, &agents),
            in_rollout(error(), &config),
        ] {
            assert_eq!(format!("{passed:#}"), "the environment refused the task");
        }
    }
}
