//! The `rounds` schedule: every episode advances, then every waiting call is generated, group
//! by group, and again until all episodes end. Batches are as large as they can be and depend
//! on nothing but the seed, so runs are bit-reproducible.

use crate::rng::SeededRng;
use std::time::Instant;

use anyhow::{anyhow, Context};
use drmas_sdk::Task;

use super::agent_turn::{complete, generate_batch, prepare};
use super::episode::EpisodeState;
use super::failure::{episode_of, FailureCount};
use super::{Crew, EpisodeOutcome, Rollout, RolloutLimits, TeamMember};

/// An episode of the rollout: running (or ended), or failed with its outcome.
enum Slot {
    Running(Box<EpisodeState>),
    Failed(EpisodeOutcome),
}

impl Slot {
    fn running(&mut self) -> Option<&mut EpisodeState> {
        match self {
            Slot::Running(state) => Some(state),
            Slot::Failed(_) => None,
        }
    }

    /// Whether the episode ended or failed.
    fn is_over(&self) -> bool {
        match self {
            Slot::Running(state) => state.is_done(),
            Slot::Failed(_) => true,
        }
    }
}

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
    let mut failures = FailureCount::new(tasks.len(), limits.max_failure_rate);
    let mut slots = Vec::with_capacity(tasks.len());
    for task in tasks {
        let started =
            EpisodeState::start(orchestra, environment, task).with_context(|| episode_of(task));
        slots.push(match started {
            Ok(state) => Slot::Running(Box::new(state)),
            Err(error) => Slot::Failed(failures.record(error)?),
        });
    }
    let mut rollout = Rollout::default();
    loop {
        // A stop signal abandons the rollout between rounds (the trainer drops the iteration).
        crate::interrupt::check()?;
        let advanced = advance_all(&mut slots, team, tasks)?;
        for (slot, result) in slots.iter_mut().zip(advanced) {
            if let Err(error) = result {
                *slot = Slot::Failed(failures.record(error)?);
            }
        }
        on_progress(slots.iter().filter(|s| s.is_over()).count());
        let mut waiting: Vec<Vec<usize>> = vec![Vec::new(); generators.len()];
        for (index, slot) in slots.iter_mut().enumerate() {
            if let Some((member, _)) = slot.running().and_then(|state| state.pending()) {
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
                    let Slot::Running(state) = &slots[episode] else {
                        continue;
                    };
                    let prepared = prepare(state, episode, team, codecs, limits.max_prompt_tokens)
                        .with_context(|| episode_of(tasks[episode]));
                    match prepared {
                        Ok(call) => {
                            calls.push(call.context("a waiting episode has a pending call")?);
                        }
                        Err(error) => {
                            slots[episode] = Slot::Failed(failures.record(error)?);
                        }
                    }
                }
                if calls.is_empty() {
                    continue;
                }
                let (generations, record) =
                    generate_batch(&calls, group, generators[group], rng, origin)?;
                rollout.record_batch(record);
                for (call, generation) in calls.into_iter().zip(generations) {
                    rollout.truncated_prompts += usize::from(call.truncated);
                    let episode = call.episode;
                    let Some(state) = slots[episode].running() else {
                        continue;
                    };
                    match complete(state, call, generation, team, codecs)
                        .with_context(|| episode_of(tasks[episode]))
                    {
                        Ok(call) => {
                            rollout.generated_tokens += call.response.len();
                            rollout.calls.push(call);
                        }
                        Err(error) => {
                            slots[episode] = Slot::Failed(failures.record(error)?);
                        }
                    }
                }
            }
        }
    }
    rollout.episodes = slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Running(state) => state.into_outcome(),
            Slot::Failed(outcome) => outcome,
        })
        .collect();
    Ok(rollout)
}

/// Advances every running episode, split over the available cores; returns each episode's
/// result (`Ok` for one that failed earlier).
fn advance_all(
    slots: &mut [Slot],
    team: &[TeamMember],
    tasks: &[&Task],
) -> anyhow::Result<Vec<anyhow::Result<()>>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let episodes = slots.len();
    let chunk = episodes.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = slots
            .chunks_mut(chunk)
            .zip(tasks.chunks(chunk))
            .map(|(slots, tasks)| {
                scope.spawn(move || {
                    slots
                        .iter_mut()
                        .zip(tasks)
                        .map(|(slot, task)| match slot.running() {
                            Some(state) => state.advance(team).with_context(|| episode_of(task)),
                            None => Ok(()),
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut results = Vec::with_capacity(episodes);
        for worker in workers {
            results.extend(
                worker
                    .join()
                    .map_err(|_| anyhow!("an episode worker thread panicked"))?,
            );
        }
        Ok(results)
    })
}
