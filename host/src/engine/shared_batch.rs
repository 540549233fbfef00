//! [`SharedBatch`]: one running [`Decoding`] on an in-process model that batches handed in from
//! several threads join, as requests join a server's running batch. The thread whose batch
//! finds none running drives the decoding: it takes in the batches waiting between decode
//! steps, hands each its outputs as soon as they are done, stops taking new ones once its own
//! are done, and returns when the decoding ends; a batch that arrives after that starts the
//! next decoding on its own thread. The decodings may share a prefix cache.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use tokenizers::Tokenizer;

use super::continuous_batching::{drive, requests_of, JobQueue};
use super::decoding::Decoding;
use super::generate::{Generation, GenerationRequest};
use super::prefix_cache::PrefixCache;
use crate::model::error::ModelError;
use crate::model::llama::Llama;
use crate::rng::SeededRng;

/// What a batch is answered with: its outputs, or why the decoding failed.
type Answer = Result<Vec<Generation>, String>;

/// The batches waiting, running and answered on one model (see the module docs).
#[derive(Debug, Default)]
pub struct SharedBatch {
    state: Mutex<State>,
    /// Signalled when a batch is answered or the decoding ends.
    changed: Condvar,
    /// The keys and values of the sequences finished so far, for prompts that begin with them
    /// (held by the thread that drives a decoding).
    prefixes: Mutex<Option<PrefixCache>>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether a thread drives a decoding now.
    driving: bool,
    next_id: u64,
    /// Batches not yet taken into a decoding, in the order they came.
    waiting: VecDeque<Waiting>,
    /// Batches in the running decoding, as their places in its requests.
    running: Vec<(u64, Range<usize>)>,
    answers: HashMap<u64, Answer>,
}

impl SharedBatch {
    /// Batches whose decodings keep up to `bytes` of their finished sequences' keys and values
    /// for later prompts that begin with them (the model's weights must not change meanwhile).
    pub fn with_prefix_cache(bytes: usize) -> Self {
        Self {
            prefixes: Mutex::new(Some(PrefixCache::new(bytes))),
            ..Self::default()
        }
    }

    /// Continues `requests` on `model` in the decoding running now, or in one this thread
    /// drives (drawing from `rng`) when none runs; the outputs are in the order of `requests`.
    pub fn generate(
        &self,
        model: &Mutex<&mut Llama>,
        tokenizer: &Tokenizer,
        requests: Vec<GenerationRequest>,
        rng: &mut SeededRng,
    ) -> Answer {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.waiting.push_back((id, requests));
        loop {
            if let Some(answer) = state.answers.remove(&id) {
                return answer;
            }
            if state.driving {
                state = (self.changed.wait(state)).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            state.driving = true;
            drop(state);
            let driven = std::panic::catch_unwind(AssertUnwindSafe(|| {
                // A batch that panicked leaves the weights as they were (generation reads them).
                let model = model.lock().unwrap_or_else(PoisonError::into_inner);
                self.drive(&model, tokenizer, id, rng);
            }));
            state = self.lock();
            state.driving = false;
            if let Err(panic) = driven {
                // The batches it held are answered, and this thread goes on panicking.
                for (other, _) in std::mem::take(&mut state.running) {
                    let failed = "generation panicked on another batch's thread".to_owned();
                    state.answers.insert(other, Err(failed));
                }
                state.answers.remove(&id);
                self.changed.notify_all();
                drop(state);
                std::panic::resume_unwind(panic);
            }
            self.changed.notify_all();
        }
    }

    /// Runs one decoding of the waiting batches and those that arrive while it runs, until
    /// the batch `own` is answered (no batch joins after that) and the decoding ends.
    fn drive(&self, model: &Llama, tokenizer: &Tokenizer, own: u64, rng: &mut SeededRng) {
        let first: Vec<Waiting> = self.lock().waiting.drain(..).collect();
        if first.is_empty() {
            return;
        }
        let mut queue = Threads {
            batch: self,
            own,
            admitting: true,
        };
        let requests = requests_of::<Threads>(&first);
        let mut prefixes = self.prefixes.lock().unwrap_or_else(PoisonError::into_inner);
        match Decoding::start(model, tokenizer, requests, rng, prefixes.as_mut()) {
            Ok(decoding) => {
                drive(decoding, first, &mut queue);
            }
            Err(error) => queue.fail(first, &error),
        }
    }

    /// Answers the running batches whose requests have all finished; whether the batch `own`
    /// still runs.
    fn answer_finished(&self, decoding: &mut Decoding, own: u64) -> bool {
        let mut state = self.lock();
        let State {
            running, answers, ..
        } = &mut *state;
        let before = answers.len();
        running.retain(|(id, range)| {
            if !range.clone().all(|i| decoding.is_finished(i)) {
                return true;
            }
            answers.insert(*id, Ok(range.clone().map(|i| decoding.take(i)).collect()));
            false
        });
        if answers.len() > before {
            self.changed.notify_all();
        }
        running.iter().any(|(id, _)| *id == own)
    }

    /// Answers the batches `ids` with `error`.
    fn fail(&self, ids: impl Iterator<Item = u64>, error: &dyn std::fmt::Display) {
        let mut state = self.lock();
        for id in ids {
            state.answers.insert(id, Err(error.to_string()));
        }
        self.changed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A batch handed in, and its id.
type Waiting = (u64, Vec<GenerationRequest>);

/// The batches of a [`SharedBatch`] as the thread driving its decoding sees them: those
/// waiting join it until the driver's own batch `own` is answered.
struct Threads<'s> {
    batch: &'s SharedBatch,
    own: u64,
    admitting: bool,
}

impl JobQueue for Threads<'_> {
    type Job = Waiting;

    fn requests((_, requests): &Waiting) -> &[GenerationRequest] {
        requests
    }

    fn run(&mut self, (id, _): Waiting, places: Range<usize>, _joined: bool) {
        self.batch.lock().running.push((id, places));
    }

    fn answer_finished(&mut self, decoding: &mut Decoding) -> bool {
        self.admitting &= self.batch.answer_finished(decoding, self.own);
        self.admitting
    }

    fn arrivals(&mut self, _live_rows: usize) -> Vec<Waiting> {
        self.batch.lock().waiting.drain(..).collect()
    }

    fn hold(&mut self, jobs: Vec<Waiting>) {
        self.admitting = false;
        let mut state = self.batch.lock();
        for job in jobs.into_iter().rev() {
            state.waiting.push_front(job);
        }
    }

    fn fail(&mut self, jobs: Vec<Waiting>, error: &ModelError) {
        self.batch.fail(jobs.into_iter().map(|(id, _)| id), error);
    }

    fn fail_running(&mut self, error: &ModelError) {
        let running = std::mem::take(&mut self.batch.lock().running);
        self.batch
            .fail(running.into_iter().map(|(id, _)| id), error);
    }
}
