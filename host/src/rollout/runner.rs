//! [`run`]: rolls out a batch of episodes round by round, batching generation per worker group.

use std::time::Instant;

use anyhow::{anyhow, Context};
use drmas_sdk::{Agent, AgentOutput, Environment, Orchestra, Task};

use super::episode::EpisodeState;
use super::{AgentCall, EpisodeOutcome, TeamMember};
use crate::engine::{self, GenerationRequest, SamplerRng};
use crate::model::chat_template::TemplateMessage;
use crate::model::pretrained::Pretrained;

/// Bounds on one rollout.
#[derive(Debug, Clone, Copy)]
pub struct RolloutLimits {
    /// Prompts longer than this keep only their last `max_prompt_tokens` tokens.
    pub max_prompt_tokens: usize,
    /// The most sequences one generation batch holds (bounds KV-cache memory).
    pub max_batch: usize,
}

/// Everything a rollout produced.
#[derive(Debug, Default)]
pub struct Rollout {
    /// Every agent call, in the order they were generated.
    pub calls: Vec<AgentCall>,
    /// Each episode's outcome, in the order of the tasks given.
    pub episodes: Vec<EpisodeOutcome>,
    /// Prompts that were cut to `max_prompt_tokens`.
    pub truncated_prompts: usize,
    /// Tokens generated over all calls.
    pub generated_tokens: usize,
    /// Seconds spent generating (the rest is plugins: prompts, parsing, environment steps).
    pub generation_seconds: f64,
}

/// The parts of a run a rollout drives.
pub struct Crew<'a> {
    /// Routes each episode's agent calls.
    pub orchestra: &'a dyn Orchestra,
    /// Scores and steps episodes.
    pub environment: &'a dyn Environment,
    /// The agents, in run order.
    pub team: &'a [TeamMember],
    /// Each worker group's model, indexed by [`TeamMember::group`].
    pub models: &'a [&'a Pretrained],
}

/// Runs one episode per entry of `tasks` to completion.
///
/// Each round every unfinished episode's routing advances (environment steps run on worker
/// threads, so a slow environment does not serialise the batch) until it waits for an agent;
/// the waiting calls are grouped by worker group, rendered with that group's chat template and
/// generated together. `on_round(finished_episodes)` is called after every round.
pub fn run(
    crew: &Crew<'_>,
    tasks: &[&Task],
    limits: RolloutLimits,
    rng: &mut SamplerRng,
    on_round: &mut dyn FnMut(usize),
) -> anyhow::Result<Rollout> {
    let Crew {
        orchestra,
        environment,
        team,
        models,
    } = *crew;
    let mut states = tasks
        .iter()
        .map(|task| EpisodeState::start(orchestra, environment, task))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut rollout = Rollout::default();
    loop {
        advance_all(&mut states, team, tasks)?;
        let mut waiting: Vec<Vec<usize>> = vec![Vec::new(); models.len()];
        for (index, state) in states.iter().enumerate() {
            if let Some((member, _)) = state.pending() {
                waiting[team[*member].group].push(index);
            }
        }
        if waiting.iter().all(Vec::is_empty) {
            break;
        }
        for (group, episodes) in waiting.iter().enumerate() {
            for chunk in episodes.chunks(limits.max_batch.max(1)) {
                generate_calls(
                    &mut states,
                    chunk,
                    team,
                    models[group],
                    limits,
                    rng,
                    &mut rollout,
                )?;
            }
        }
        on_round(states.iter().filter(|s| s.is_done()).count());
    }
    rollout.episodes = states.into_iter().map(EpisodeState::into_outcome).collect();
    Ok(rollout)
}

/// Advances every episode, split over the available cores.
fn advance_all(
    states: &mut [EpisodeState],
    team: &[TeamMember],
    tasks: &[&Task],
) -> anyhow::Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = states.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = states
            .chunks_mut(chunk)
            .zip(tasks.chunks(chunk))
            .map(|(states, tasks)| {
                scope.spawn(move || {
                    for (state, task) in states.iter_mut().zip(tasks) {
                        state
                            .advance(team)
                            .with_context(|| format!("episode of task `{}`", task.id))?;
                    }
                    anyhow::Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|worker| {
            worker
                .join()
                .map_err(|_| anyhow!("an episode worker thread panicked"))?
        })
    })
}

/// Generates the pending calls of `episodes` (all on `model`'s worker group) in one batch and
/// delivers each output to its episode.
fn generate_calls(
    states: &mut [EpisodeState],
    episodes: &[usize],
    team: &[TeamMember],
    model: &Pretrained,
    limits: RolloutLimits,
    rng: &mut SamplerRng,
    rollout: &mut Rollout,
) -> anyhow::Result<()> {
    let mut requests = Vec::with_capacity(episodes.len());
    let mut members = Vec::with_capacity(episodes.len());
    for &episode in episodes {
        let Some((member_index, context)) = states[episode].pending() else {
            continue;
        };
        let member = &team[*member_index];
        let messages = member.agent.messages(context).map_err(|e| anyhow!("{e}"))?;
        let template_messages: Vec<TemplateMessage<'_>> = messages
            .iter()
            .map(|m| TemplateMessage {
                role: &m.role,
                content: &m.content,
            })
            .collect();
        let mut prompt = model
            .encode_chat(&template_messages)
            .with_context(|| format!("prompt of role `{}`", member.role))?;
        if prompt.len() > limits.max_prompt_tokens {
            prompt.drain(..prompt.len() - limits.max_prompt_tokens);
            rollout.truncated_prompts += 1;
        }
        requests.push(GenerationRequest {
            prompt,
            params: member.sampling,
            max_new_tokens: member.max_new_tokens,
            stop: Vec::new(),
            adapter: member.adapter,
        });
        members.push((episode, *member_index));
    }
    let started = Instant::now();
    let generations = engine::generate(&model.model, &model.tokenizer, &requests, rng)
        .with_context(|| format!("generating with {}", model.source.display()))?;
    rollout.generation_seconds += started.elapsed().as_secs_f64();
    for ((request, generation), (episode, member_index)) in
        requests.into_iter().zip(generations).zip(members)
    {
        let member = &team[member_index];
        let raw = model.decode(&generation.tokens)?;
        let parsed = member.agent.parse(&raw).map_err(|e| anyhow!("{e}"))?;
        let output = AgentOutput {
            raw: raw.clone(),
            action: parsed.action,
            valid: parsed.valid,
        };
        states[episode].deliver(team, &output)?;
        rollout.generated_tokens += generation.tokens.len();
        rollout.calls.push(AgentCall {
            episode,
            agent: member_index,
            prompt: request.prompt,
            response: generation.tokens,
            text: raw,
            logprobs: generation.logprobs,
            temperature: member.sampling.temperature,
            valid: parsed.valid,
            finish: generation.finish,
        });
    }
    Ok(())
}
