//! One agent call's way through a rollout: the episode's pending call is rendered into a
//! generation request ([`prepare`]), generated in a batch with other calls of the same worker
//! group ([`generate_batch`]), then decoded, parsed and handed back to its episode
//! ([`complete`]), becoming one [`AgentCall`].

use std::time::Instant;

use anyhow::Context;
use drmas_sdk::{AgentOutput, PluginError};

use super::episode::EpisodeState;
use super::{AgentCall, TeamMember};
use crate::engine::{Generation, GenerationRequest, Generator};
use crate::model::chat_codec::ChatCodec;
use crate::model::chat_template::TemplateMessage;
use crate::rng::SeededRng;

/// An episode's pending call, rendered with its worker group's chat template.
pub(super) struct PreparedCall {
    /// The episode it belongs to.
    pub episode: usize,
    /// The calling team member.
    pub member: usize,
    /// What to generate.
    pub request: GenerationRequest,
    /// Whether the prompt lost its beginning to `max_prompt_tokens`.
    pub truncated: bool,
    /// The agent's response prefix (a final assistant message the model continues), which
    /// the agent parses together with the generated text; empty when there is none.
    pub response_prefix: String,
}

/// One generation batch of a rollout, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchRecord {
    /// The worker group that generated it.
    pub group: usize,
    /// Calls in the batch.
    pub rows: usize,
    /// When it started, in seconds since the rollout began.
    pub started: f64,
    /// How long it took.
    pub seconds: f64,
}

/// Renders the call `state` waits for (if any) into a request with its worker group's codec
/// (of `codecs`), keeping only the last `max_prompt_tokens` tokens of an over-long prompt.
pub(super) fn prepare(
    state: &EpisodeState,
    episode: usize,
    team: &[TeamMember],
    codecs: &[ChatCodec<'_>],
    max_prompt_tokens: usize,
) -> anyhow::Result<Option<PreparedCall>> {
    let Some((member_index, context)) = state.pending() else {
        return Ok(None);
    };
    let member = &team[*member_index];
    let context = context.clone();
    let messages = member
        .agent
        .call("messages", move |agent| agent.messages(&context))?
        .map_err(PluginError::from)?;
    let template_messages: Vec<TemplateMessage<'_>> = messages
        .iter()
        .map(|m| TemplateMessage {
            role: &m.role,
            content: &m.content,
        })
        .collect();
    let (prompt, truncated) = codecs[member.group]
        .encode_chat_tail(&template_messages, max_prompt_tokens)
        .with_context(|| format!("prompt of role `{}`", member.role))?;
    let response_prefix = messages
        .last()
        .filter(|m| m.role == "assistant")
        .map(|m| m.content.clone())
        .unwrap_or_default();
    Ok(Some(PreparedCall {
        episode,
        member: *member_index,
        request: GenerationRequest {
            prompt,
            params: member.sampling,
            max_new_tokens: member.max_new_tokens,
            stop: member.stop.clone(),
            adapter: member.adapter,
            stop_tokens: Vec::new(),
            ignore_eos: false,
            seed: None,
        },
        truncated,
        response_prefix,
    }))
}

/// Generates `calls` (all for worker group `group`, whose generator is `generator`) in one
/// batch; `origin` is when the rollout began.
pub(super) fn generate_batch(
    calls: &[PreparedCall],
    group: usize,
    generator: &dyn Generator,
    rng: &mut SeededRng,
    origin: Instant,
) -> anyhow::Result<(Vec<Generation>, BatchRecord)> {
    let requests: Vec<GenerationRequest> = calls.iter().map(|c| c.request.clone()).collect();
    let started = Instant::now();
    let generations = generator.generate(&requests, rng)?;
    anyhow::ensure!(
        generations.len() == requests.len(),
        "worker group {group}'s generator answered {} of {} requests",
        generations.len(),
        requests.len()
    );
    let record = BatchRecord {
        group,
        rows: calls.len(),
        started: started.duration_since(origin).as_secs_f64(),
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok((generations, record))
}

/// Decodes and parses `generation`, hands the output back to the episode `state` and returns
/// the finished call.
pub(super) fn complete(
    state: &mut EpisodeState,
    call: PreparedCall,
    generation: Generation,
    team: &[TeamMember],
    codecs: &[ChatCodec<'_>],
) -> anyhow::Result<AgentCall> {
    let member = &team[call.member];
    let raw = call.response_prefix + &codecs[member.group].decode(&generation.tokens)?;
    let text = raw.clone();
    let parsed = member
        .agent
        .call("parse", move |agent| agent.parse(&text))?
        .map_err(PluginError::from)?;
    let breaks_contract = !member.actions.allows(&parsed.action);
    let output = AgentOutput {
        raw: raw.clone(),
        action: parsed.action,
        valid: parsed.valid && !breaks_contract,
    };
    let step = state.step();
    let index = state.calls();
    state.deliver(team, &output)?;
    Ok(AgentCall {
        episode: call.episode,
        index,
        agent: call.member,
        step,
        prompt: call.request.prompt,
        cached_prompt_tokens: generation.cached_tokens,
        response: generation.tokens,
        text: raw,
        logprobs: generation.logprobs,
        temperature: member.sampling.temperature,
        valid: output.valid,
        breaks_contract,
        finish: generation.finish,
    })
}
