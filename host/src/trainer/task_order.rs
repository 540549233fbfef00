//! [`TaskOrder`]: which training tasks each iteration draws — a seeded shuffle per epoch, so a
//! run's data order is reproducible and its position is two numbers a checkpoint can save.

use crate::rng::SeededRng;
use serde::{Deserialize, Serialize};

/// A cursor over epochs of shuffled task indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskOrder {
    /// Number of tasks.
    pub tasks: usize,
    /// The run's seed.
    pub seed: u64,
    /// Current epoch (each has its own permutation).
    pub epoch: u64,
    /// Position within the epoch.
    pub cursor: usize,
}

impl TaskOrder {
    /// The start of epoch 0 over `tasks` tasks.
    pub fn new(tasks: usize, seed: u64) -> Self {
        Self {
            tasks,
            seed,
            epoch: 0,
            cursor: 0,
        }
    }

    /// The next `count` task indices, wrapping into the next epoch when this one runs out.
    pub fn next_batch(&mut self, count: usize) -> Vec<usize> {
        let mut batch = Vec::with_capacity(count);
        let mut order = self.permutation();
        while batch.len() < count && self.tasks > 0 {
            if self.cursor == self.tasks {
                self.epoch += 1;
                self.cursor = 0;
                order = self.permutation();
            }
            batch.push(order[self.cursor]);
            self.cursor += 1;
        }
        batch
    }

    /// This epoch's order: a Fisher–Yates shuffle from the RNG of (seed, epoch).
    fn permutation(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.tasks).collect();
        let mut rng = SeededRng::new(self.seed ^ self.epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_once_per_epoch_then_a_new_order() {
        let mut order = TaskOrder::new(10, 7);
        let mut first: Vec<usize> = order.next_batch(4);
        first.extend(order.next_batch(6));
        let mut sorted = first.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_ne!(first, (0..10).collect::<Vec<_>>(), "shuffled");
        let second = order.next_batch(10);
        assert_eq!(order.epoch, 1);
        assert_ne!(first, second, "each epoch has its own order");
    }

    #[test]
    fn resuming_from_a_saved_cursor_continues_the_same_sequence() {
        let mut straight = TaskOrder::new(7, 3);
        let mut interrupted = TaskOrder::new(7, 3);
        let _ = straight.next_batch(5);
        let _ = interrupted.next_batch(5);
        let saved = serde_json::to_string(&interrupted).expect("serialises");
        let mut resumed: TaskOrder = serde_json::from_str(&saved).expect("parses");
        assert_eq!(straight.next_batch(9), resumed.next_batch(9));
    }
}
