//! The `rounds` schedule: every episode advances, then every waiting call is generated, group
//! by group, and again until all episodes end. Batches are as large as they can be and depend
//! on nothing but the seed, so runs are bit-reproducible.

use crate::rng::SeededRng;
use std::time::Instant;

use anyhow::{anyhow, Context};
use drmas_sdk::Task;

use super::agent_turn::{complete, generate_batch, prepare};
use super::episode::EpisodeState;
use super::{Crew, Rollout, RolloutLimits, TeamMember};

/// Runs one episode per task in rounds (see the module docs).
pub(super) fn run(
    crew: &Crew<'_>,
    tasks: &[&Task],
    limits: RolloutLimits,
    rng: &mut SeededRng,
    on_progress: &mut dyn FnMut(usize),
) -> anyhow::Result<Rollout> {
    let Crew {
        orchestra,
        environment,
        team,
        codecs,
        generators,
    } = *crew;
    let origin = Instant::now();
    let mut states = tasks
        .iter()
        .map(|task| EpisodeState::start(orchestra, environment, task))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut rollout = Rollout::default();
    loop {
        // A stop signal abandons the rollout between rounds (the trainer drops the iteration).
        crate::interrupt::check()?;
        advance_all(&mut states, team, tasks)?;
        on_progress(states.iter().filter(|s| s.is_done()).count());
        let mut waiting: Vec<Vec<usize>> = vec![Vec::new(); generators.len()];
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
                let mut calls = Vec::with_capacity(chunk.len());
                for &episode in chunk {
                    let call = prepare(
                        &states[episode],
                        episode,
                        team,
                        codecs,
                        limits.max_prompt_tokens,
                    )?
                    .context("a waiting episode has a pending call")?;
                    calls.push(call);
                }
                let (generations, record) =
                    generate_batch(&calls, group, generators[group], rng, origin)?;
                rollout.record_batch(record);
                for (call, generation) in calls.into_iter().zip(generations) {
                    rollout.truncated_prompts += usize::from(call.truncated);
                    let episode = call.episode;
                    let call = complete(&mut states[episode], call, generation, team, codecs)?;
                    rollout.generated_tokens += call.response.len();
                    rollout.calls.push(call);
                }
            }
        }
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
