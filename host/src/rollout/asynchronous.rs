//! The `async` schedule: no rounds. Every episode steps on its own worker thread as soon as its
//! last call is generated; each worker group generates on its own thread as soon as it has calls
//! and either a full batch, no episode still in plugin code, or calls that waited `batch_wait`.
//! A slow environment step (a retriever far away) then delays only its own episode, and groups
//! on different devices generate at the same time. A group may have several batches running at
//! once ([`Generator::concurrent_batches`](crate::engine::Generator): in process they share one
//! decoding, on servers they are separate requests), so calls that become ready while one runs
//! are handed in without waiting for it. Batches depend on timing, so a run is not
//! bit-reproducible; each group samples from its own stream, seeded from the run's.

use std::collections::VecDeque;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use drmas_sdk::{catch_quietly, Task};

use super::agent_turn::{complete, generate_batch, prepare, BatchRecord, PreparedCall};
use super::episode::EpisodeState;
use super::failure::{episode_of, FailureCount};
use super::{AgentCall, Crew, EpisodeOutcome, Rollout, RolloutLimits};
use crate::engine::Generation;
use crate::rng::SeededRng;

/// What a worker thread reports to the scheduler.
enum Event {
    /// An episode stepped; the error names its task.
    Stepped {
        episode: usize,
        result: anyhow::Result<Box<Stepped>>,
    },
    /// A worker group's batch is generated (the group's sampler comes back with it).
    Generated {
        group: usize,
        rng: SeededRng,
        calls: Vec<PreparedCall>,
        result: anyhow::Result<(Vec<Generation>, BatchRecord)>,
    },
}

/// An episode after a step: the call it waits for next (`None` once it ended), and the call
/// the step completed.
struct Stepped {
    state: EpisodeState,
    next: Option<PreparedCall>,
    completed: Option<AgentCall>,
}

/// Where a step starts: a new episode, or an episode receiving its generated call.
enum StepFrom {
    Start,
    Deliver(Box<(EpisodeState, PreparedCall, Generation)>),
}

/// Runs one episode per task without rounds (see the module docs).
pub(super) fn run(
    crew: &Crew<'_>,
    tasks: &[&Task],
    limits: RolloutLimits,
    batch_wait: Duration,
    rng: &mut SeededRng,
    on_progress: &mut dyn FnMut(usize),
) -> anyhow::Result<Rollout> {
    let origin = Instant::now();
    let groups = crew.generators.len();
    let max_batch = limits.max_batch.max(1);
    // A group's sampler is `None` while its batch runs, when it runs one at a time; a group
    // that runs several seeds each from it.
    let mut samplers: Vec<Option<SeededRng>> = (0..groups)
        .map(|_| Some(SeededRng::new(rng.next_u64())))
        .collect();
    let at_once: Vec<usize> = (crew.generators.iter())
        .map(|generator| generator.concurrent_batches().max(1))
        .collect();
    let mut running: Vec<usize> = vec![0; groups];
    let mut queues: Vec<VecDeque<(PreparedCall, Instant)>> =
        (0..groups).map(|_| VecDeque::new()).collect();
    let mut parked: Vec<Option<EpisodeState>> = tasks.iter().map(|_| None).collect();
    let mut outcomes: Vec<Option<EpisodeOutcome>> = vec![None; tasks.len()];
    let mut rollout = Rollout::default();
    // What ends the rollout: the host's error, a stop signal, or failures over the bound.
    let mut failure: Option<anyhow::Error> = None;
    let mut failures = FailureCount::new(tasks.len(), limits.max_failure_rate);
    let (sender, events) = mpsc::channel::<Event>();

    std::thread::scope(|scope| {
        let spawn_step = |episode: usize, from: StepFrom| {
            let sender = sender.clone();
            let task = tasks[episode];
            scope.spawn(move || {
                let result = caught(|| step(episode, from, crew, task, limits));
                // The scheduler outlives every worker; a failed send cannot happen.
                let _ = sender.send(Event::Stepped { episode, result });
            });
        };
        for episode in 0..tasks.len() {
            spawn_step(episode, StepFrom::Start);
        }
        let mut stepping = tasks.len();
        let mut generating = 0;
        let mut finished = 0;
        loop {
            // A stop signal abandons the rollout: nothing new starts, running steps and batches
            // are awaited (the trainer drops the iteration).
            if failure.is_none() {
                if let Err(interrupted) = crate::interrupt::check() {
                    failure = Some(interrupted.into());
                }
            }
            for group in 0..groups {
                let ready = |queue: &VecDeque<(PreparedCall, Instant)>| {
                    queue.front().is_some_and(|(_, since)| {
                        queue.len() >= max_batch || stepping == 0 || since.elapsed() >= batch_wait
                    })
                };
                while failure.is_none() && running[group] < at_once[group] && ready(&queues[group])
                {
                    let sampler = if at_once[group] == 1 {
                        samplers[group].take()
                    } else {
                        (samplers[group].as_mut())
                            .map(|group_rng| SeededRng::new(group_rng.next_u64()))
                    };
                    let Some(mut sampler) = sampler else {
                        break;
                    };
                    let take = queues[group].len().min(max_batch);
                    let calls: Vec<PreparedCall> =
                        queues[group].drain(..take).map(|(call, _)| call).collect();
                    let sender = sender.clone();
                    generating += 1;
                    running[group] += 1;
                    scope.spawn(move || {
                        let result = caught(|| {
                            let generator = crew.generators[group];
                            generate_batch(&calls, group, generator, &mut sampler, origin)
                        });
                        let _ = sender.send(Event::Generated {
                            group,
                            rng: sampler,
                            calls,
                            result,
                        });
                    });
                }
            }
            if stepping == 0 && generating == 0 {
                break;
            }
            // Wake up when the oldest call of a group with room for a batch has waited long
            // enough.
            let deadline = (0..groups)
                .filter(|&group| running[group] < at_once[group] && failure.is_none())
                .filter_map(|group| queues[group].front().map(|(_, since)| *since + batch_wait))
                .min();
            let event = match deadline {
                Some(deadline) => {
                    match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                        Ok(event) => event,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                None => match events.recv() {
                    Ok(event) => event,
                    Err(_) => break,
                },
            };
            match event {
                Event::Stepped { episode, result } => {
                    stepping -= 1;
                    let stepped = match result {
                        Ok(stepped) => stepped,
                        Err(error) => {
                            match failures.record(error) {
                                Ok(failed) => {
                                    outcomes[episode] = Some(failed);
                                    finished += 1;
                                    on_progress(finished);
                                }
                                Err(error) => {
                                    failure.get_or_insert(error);
                                }
                            }
                            continue;
                        }
                    };
                    if let Some(call) = stepped.completed {
                        rollout.generated_tokens += call.response.len();
                        rollout.calls.push(call);
                    }
                    match stepped.next {
                        Some(call) => {
                            rollout.truncated_prompts += usize::from(call.truncated);
                            let group = crew.team[call.member].group;
                            parked[episode] = Some(stepped.state);
                            queues[group].push_back((call, Instant::now()));
                        }
                        None => {
                            outcomes[episode] = Some(stepped.state.into_outcome());
                            finished += 1;
                            on_progress(finished);
                        }
                    }
                }
                Event::Generated {
                    group,
                    rng,
                    calls,
                    result,
                } => {
                    generating -= 1;
                    running[group] -= 1;
                    // A batch seeded from the group's sampler hands back its own stream.
                    if at_once[group] == 1 {
                        samplers[group] = Some(rng);
                    }
                    let generations = match result {
                        Ok((generations, record)) => {
                            rollout.record_batch(record);
                            generations
                        }
                        Err(error) => {
                            failure.get_or_insert(error);
                            continue;
                        }
                    };
                    if failure.is_some() {
                        continue;
                    }
                    for (call, generation) in calls.into_iter().zip(generations) {
                        let episode = call.episode;
                        let Some(state) = parked[episode].take() else {
                            failure.get_or_insert(anyhow!(
                                "episode {episode} got a generated call it was not waiting for"
                            ));
                            break;
                        };
                        spawn_step(
                            episode,
                            StepFrom::Deliver(Box::new((state, call, generation))),
                        );
                        stepping += 1;
                    }
                }
            }
        }
    });
    if let Some(error) = failure {
        return Err(error);
    }
    // Calls arrive in completion order; each episode's calls are already in its own order.
    rollout.calls.sort_by_key(|call| call.episode);
    rollout.episodes = outcomes
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .context("the rollout ended with episodes still running")?;
    Ok(rollout)
}

/// One step of `episode`: start it or deliver its generated call, advance its routing until it
/// waits for an agent or ends, and render that agent's call.
fn step(
    episode: usize,
    from: StepFrom,
    crew: &Crew<'_>,
    task: &Task,
    limits: RolloutLimits,
) -> anyhow::Result<Box<Stepped>> {
    let run = || {
        let (mut state, completed) = match from {
            StepFrom::Start => (
                EpisodeState::start(crew.orchestra, crew.environment, task)?,
                None,
            ),
            StepFrom::Deliver(delivery) => {
                let (mut state, call, generation) = *delivery;
                let call = complete(&mut state, call, generation, crew.team, crew.codecs)?;
                (state, Some(call))
            }
        };
        state.advance(crew.team)?;
        let next = prepare(
            &state,
            episode,
            crew.team,
            crew.codecs,
            limits.max_prompt_tokens,
        )?;
        anyhow::Ok(Box::new(Stepped {
            state,
            next,
            completed,
        }))
    };
    run().with_context(|| episode_of(task))
}

/// Runs `work`, turning a panic into an error so the scheduler always hears back.
fn caught<T>(work: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    catch_quietly(work).unwrap_or_else(|panic| Err(anyhow!("a rollout worker panicked: {panic}")))
}
