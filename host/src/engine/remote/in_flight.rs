//! [`InFlight`]: the bound on the requests a worker group has in flight at once over all its
//! servers (`max_in_flight`), shared by the batches the rollout runs on the group together.

use std::sync::{Condvar, Mutex, PoisonError};

/// A counting semaphore of `limit` permits, one per request in flight.
#[derive(Debug)]
pub struct InFlight {
    limit: usize,
    taken: Mutex<usize>,
    freed: Condvar,
}

/// One request's place among those in flight, given back when dropped.
#[derive(Debug)]
pub struct Permit<'a> {
    pool: &'a InFlight,
}

impl InFlight {
    /// A bound of `limit` requests at once (at least 1).
    pub fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            taken: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// The most requests in flight at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A place for one more request, once fewer than the limit are in flight.
    pub fn acquire(&self) -> Permit<'_> {
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        while *taken >= self.limit {
            taken = self
                .freed
                .wait(taken)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *taken += 1;
        Permit { pool: self }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut taken = (self.pool.taken.lock()).unwrap_or_else(PoisonError::into_inner);
        *taken -= 1;
        self.pool.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn no_more_than_the_limit_hold_a_permit_at_once() {
        let pool = InFlight::new(3);
        let (holding, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..12 {
                scope.spawn(|| {
                    let _permit = pool.acquire();
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    holding.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 3);
        assert_eq!(
            *pool.taken.lock().expect("unpoisoned"),
            0,
            "every permit came back"
        );
    }
}
