//! [`Pool`]: a few persistent helper threads that join the calling thread on one job, so a
//! decode matmul uses every core without spawning threads (a decode step runs ~200 of them).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long an idle helper keeps polling for the next job before it sleeps: about the
/// libtorch work between two matmuls of a decode step, so helpers mostly wake without a
/// syscall, yet leave the core to libtorch's own threads during longer operations.
const SPIN: Duration = Duration::from_micros(100);

/// A job as the helpers see it: a borrowed closure whose lifetime [`Pool::run`] erases. `run`
/// does not return while a helper may still call it, which keeps the borrow alive.
#[derive(Clone, Copy)]
struct Job(*const (dyn Fn() + Sync));

// SAFETY: the pointee is `Sync` (callable from any thread) and outlives every use (see `Job`).
unsafe impl Send for Job {}

/// A helper's state: no job for it, a job posted but not started, or a job running.
const IDLE: u8 = 0;
const POSTED: u8 = 1;
const RUNNING: u8 = 2;

/// What the caller and one helper share.
struct Slot {
    /// [`IDLE`], [`POSTED`] or [`RUNNING`]; only a posted job may start, and the caller takes
    /// back a job no helper has started, so a descheduled helper never holds the caller up.
    state: AtomicU8,
    /// The posted job (set before `state` becomes [`POSTED`]).
    job: Mutex<Option<Job>>,
    /// Whether a job panicked here (a kernel bug), reported by the caller.
    panicked: AtomicBool,
}

/// Persistent helper threads plus the calling thread, running one job at a time.
pub struct Pool {
    helpers: Vec<(Arc<Slot>, Thread)>,
    /// Held while a job runs; a second caller meanwhile works alone.
    busy: Mutex<()>,
}

impl Pool {
    /// The process-wide pool: one helper per core beyond the first, started on first use.
    pub fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            Pool::new(cores.saturating_sub(1))
        })
    }

    /// A pool of `helpers` threads (they live as long as the process).
    fn new(helpers: usize) -> Self {
        let helpers = (0..helpers)
            .map(|i| {
                let slot = Arc::new(Slot {
                    state: AtomicU8::new(IDLE),
                    job: Mutex::new(None),
                    panicked: AtomicBool::new(false),
                });
                let worker_slot = Arc::clone(&slot);
                let handle = std::thread::Builder::new()
                    .name(format!("drmas-decode-{i}"))
                    .spawn(move || helper(&worker_slot))
                    .expect("the OS starts a decode helper thread");
                (slot, handle.thread().clone())
            })
            .collect();
        Self {
            helpers,
            busy: Mutex::new(()),
        }
    }

    /// Runs `work` on the calling thread and offers it to `threads - 1` helpers (as many as
    /// the pool has), returning once `work` has returned everywhere it started. `work` shares
    /// out the job itself (e.g. by claiming chunks from an atomic counter) and must leave
    /// nothing undone when it returns on the calling thread, since a helper that has not
    /// started by then never will. While another caller's job runs, `work` runs on the
    /// calling thread alone.
    ///
    /// # Panics
    /// When `work` panicked on a helper (a kernel bug).
    pub fn run(&self, threads: usize, work: &(dyn Fn() + Sync)) {
        let helpers = &self.helpers[..threads.saturating_sub(1).min(self.helpers.len())];
        if helpers.is_empty() {
            return work();
        }
        let _busy = match self.busy.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return work(),
        };
        // SAFETY (lifetime erasure): before returning, this function takes the job back from
        // every helper that has not started it and waits for those that have, so `work`
        // outlives every call through this pointer.
        let job = Job(unsafe {
            std::mem::transmute::<*const (dyn Fn() + Sync + '_), *const (dyn Fn() + Sync)>(work)
        });
        for (slot, thread) in helpers {
            *slot.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
            slot.state.store(POSTED, Ordering::Release);
            thread.unpark();
        }
        let result = catch_unwind(AssertUnwindSafe(work));
        let mut panicked = false;
        for (slot, _) in helpers {
            let taken_back = slot
                .state
                .compare_exchange(POSTED, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if taken_back {
                *slot.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
            } else {
                let mut spins = 0u32;
                while slot.state.load(Ordering::Acquire) != IDLE {
                    spins += 1;
                    if spins < 1 << 14 {
                        std::hint::spin_loop();
                    } else {
                        // The helper was descheduled mid-job (other processes share the
                        // cores): let it run.
                        std::thread::yield_now();
                    }
                }
            }
            panicked |= slot.panicked.swap(false, Ordering::AcqRel);
        }
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
        assert!(!panicked, "a decode matmul helper thread panicked");
    }
}

/// A helper's life: wait for a posted job (polling for [`SPIN`], then parked), start it unless
/// the caller took it back, run it, go idle.
fn helper(slot: &Slot) {
    loop {
        let idle = Instant::now();
        let mut polls = 0u32;
        while slot.state.load(Ordering::Acquire) != POSTED {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(64) && idle.elapsed() > SPIN {
                // The caller unparks after posting, so this returns at once or on the post.
                std::thread::park();
            } else {
                std::hint::spin_loop();
            }
        }
        if slot
            .state
            .compare_exchange(POSTED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue;
        }
        let job = slot.job.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(Job(work)) = job {
            // SAFETY: the caller waits for `RUNNING` to end before its `work` goes away.
            let work = unsafe { &*work };
            if catch_unwind(AssertUnwindSafe(work)).is_err() {
                slot.panicked.store(true, Ordering::Release);
            }
        }
        slot.state.store(IDLE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn every_participant_runs_the_job_once_and_run_waits_for_them() {
        let pool = Pool::new(3);
        for threads in [1, 2, 4, 9] {
            let calls = AtomicUsize::new(0);
            let started = AtomicUsize::new(0);
            pool.run(threads, &|| {
                calls.fetch_add(1, Ordering::SeqCst);
                // Hold the caller until every offered helper has started.
                started.fetch_add(1, Ordering::SeqCst);
                while started.load(Ordering::SeqCst) < threads.min(4) {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_millis(2));
            });
            assert_eq!(calls.load(Ordering::SeqCst), threads.min(4));
        }
    }

    #[test]
    fn a_helper_panic_reaches_the_caller() {
        let pool = Pool::new(1);
        let caller = std::thread::current().id();
        let helper_started = AtomicBool::new(false);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run(2, &|| {
                if std::thread::current().id() == caller {
                    while !helper_started.load(Ordering::SeqCst) {
                        std::hint::spin_loop();
                    }
                } else {
                    helper_started.store(true, Ordering::SeqCst);
                    panic!("a kernel bug");
                }
            });
        }));
        assert!(result.is_err());
        let calls = AtomicUsize::new(0);
        pool.run(2, &|| {
            calls.fetch_add(1, Ordering::SeqCst);
            while calls.load(Ordering::SeqCst) < 2 {
                std::hint::spin_loop();
            }
        });
        assert_eq!(calls.load(Ordering::SeqCst), 2, "the pool still works");
    }

    #[test]
    fn the_caller_takes_back_a_job_no_helper_started() {
        let pool = Pool::new(1);
        let calls = AtomicUsize::new(0);
        for _ in 0..100 {
            pool.run(2, &|| {
                calls.fetch_add(1, Ordering::SeqCst);
            });
        }
        let calls = calls.load(Ordering::SeqCst);
        assert!((100..=200).contains(&calls), "{calls}");
    }
}
