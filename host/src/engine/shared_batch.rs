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

use super::decoding::Decoding;
use super::generate::{Generation, GenerationRequest};
use super::prefix_cache::PrefixCache;
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
    waiting: VecDeque<(u64, Vec<GenerationRequest>)>,
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
        let (first, requests) = self.take_waiting();
        if first.is_empty() {
            return;
        }
        let mut prefixes = self.prefixes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut decoding = match Decoding::start(model, tokenizer, requests, rng, prefixes.as_mut())
        {
            Ok(decoding) => decoding,
            Err(error) => return self.fail(first.into_iter().map(|(id, _)| id), &error),
        };
        self.lock().running = first;
        let mut joining = true;
        loop {
            joining &= self.answer_finished(&mut decoding, own);
            if decoding.is_done() {
                return;
            }
            if let Err(error) = decoding.step() {
                let running = std::mem::take(&mut self.lock().running);
                return self.fail(running.into_iter().map(|(id, _)| id), &error);
            }
            if !joining {
                continue;
            }
            let (arrived, requests) = self.take_waiting();
            if arrived.is_empty() {
                continue;
            }
            match decoding.admit(&requests) {
                Ok(Some(indices)) => self.lock().running.extend(
                    (arrived.into_iter()).map(|(id, range)| (id, shift(range, indices.start))),
                ),
                // The cache cannot take them now: they start the next decoding, in order.
                Ok(None) => {
                    joining = false;
                    let mut state = self.lock();
                    for (id, range) in arrived.into_iter().rev() {
                        state.waiting.push_front((id, requests[range].to_vec()));
                    }
                }
                Err(error) => self.fail(arrived.into_iter().map(|(id, _)| id), &error),
            }
        }
    }

    /// Every waiting batch, as each one's place in the requests returned.
    fn take_waiting(&self) -> (Vec<(u64, Range<usize>)>, Vec<GenerationRequest>) {
        let waiting: Vec<(u64, Vec<GenerationRequest>)> = self.lock().waiting.drain(..).collect();
        let mut places = Vec::with_capacity(waiting.len());
        let mut requests = Vec::new();
        for (id, batch) in waiting {
            places.push((id, requests.len()..requests.len() + batch.len()));
            requests.extend(batch);
        }
        (places, requests)
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

/// `range` moved to start `by` further.
fn shift(range: Range<usize>, by: usize) -> Range<usize> {
    range.start + by..range.end + by
}
