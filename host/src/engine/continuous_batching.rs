//! [`drive`]: a [`Decoding`] run to its end while jobs join it between decode steps, each
//! answered as soon as its requests finish — the one loop behind `drmas-host serve`'s engine
//! and the in-process batches several threads share ([`super::shared_batch`]).

use std::ops::Range;

use super::decoding::Decoding;
use super::generate::GenerationRequest;
use crate::model::error::ModelError;

/// Where a continuously batched decoding takes its jobs from and hands their answers to.
pub(crate) trait JobQueue {
    /// Requests answered together.
    type Job;

    /// The requests of `job`.
    fn requests(job: &Self::Job) -> &[GenerationRequest];

    /// `job` runs as the decoding's requests `places`; `joined`: it joined a running decoding.
    fn run(&mut self, job: Self::Job, places: Range<usize>, joined: bool);

    /// Answers the running jobs whose requests have all finished; whether jobs may still join.
    fn answer_finished(&mut self, decoding: &mut Decoding) -> bool;

    /// The jobs that arrived meanwhile and may join a decoding of `live_rows` sequences.
    fn arrivals(&mut self, live_rows: usize) -> Vec<Self::Job>;

    /// The decoding cannot take `jobs` now: they wait, in order, for the next one.
    fn hold(&mut self, jobs: Vec<Self::Job>);

    /// Answers `jobs` with `error`.
    fn fail(&mut self, jobs: Vec<Self::Job>, error: &ModelError);

    /// Answers every running job with `error`.
    fn fail_running(&mut self, error: &ModelError);
}

/// Every request of `jobs`, in order.
pub(crate) fn requests_of<Q: JobQueue>(jobs: &[Q::Job]) -> Vec<GenerationRequest> {
    (jobs.iter())
        .flat_map(|job| Q::requests(job).iter().cloned())
        .collect()
}

/// Runs `decoding`, started on the requests of `first` in order, to its end: after each decode
/// step the jobs of `queue` that arrived join it in one admission while it takes them, and
/// each job is answered once its requests finish. Returns whether it ran to its end: a failed
/// step answers every running job with its error instead.
pub(crate) fn drive<Q: JobQueue>(
    mut decoding: Decoding,
    first: Vec<Q::Job>,
    queue: &mut Q,
) -> bool {
    run_all(queue, first, 0, false);
    loop {
        let admitting = queue.answer_finished(&mut decoding);
        if decoding.is_done() {
            return true;
        }
        if let Err(error) = decoding.step() {
            queue.fail_running(&error);
            return false;
        }
        if !admitting {
            continue;
        }
        let arrived = queue.arrivals(decoding.live_rows());
        if arrived.is_empty() {
            continue;
        }
        match decoding.admit(&requests_of::<Q>(&arrived)) {
            Ok(Some(places)) => run_all(queue, arrived, places.start, true),
            Ok(None) => queue.hold(arrived),
            Err(error) => queue.fail(arrived, &error),
        }
    }
}

/// Runs `jobs` as the decoding's requests from `first` on, in order.
fn run_all<Q: JobQueue>(queue: &mut Q, jobs: Vec<Q::Job>, first: usize, joined: bool) {
    let mut next = first;
    for job in jobs {
        let places = next..next + Q::requests(&job).len();
        next = places.end;
        queue.run(job, places, joined);
    }
}
