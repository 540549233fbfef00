//! Times every advantage estimator, the penalty and the diagnostics on a batch of 1,000,000
//! agent calls: 1,000 prompt groups × 50 trajectories × 4 agents × 5 calls each.
//!
//! Run with `cargo bench -p drmas-host --bench advantages`. Prints the best and the median of a
//! few repetitions, for the batch in rollout order (a trajectory's calls together) and shuffled.

use std::hint::black_box;
use std::time::{Duration, Instant};

use drmas_host::advantage::{build, names, Diagnostics, Penalty, Sample};

const GROUPS: u32 = 1_000;
const TRAJECTORIES: u32 = 50;
const AGENTS: u16 = 4;
const CALLS: u32 = 5;
const REPEATS: usize = 7;

/// xorshift64*: a fixed, dependency-free stream of pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn batch(rng: &mut Rng) -> Vec<Sample> {
    let mut samples = Vec::with_capacity((GROUPS * TRAJECTORIES * CALLS) as usize * 4);
    for uid in 0..GROUPS {
        for t in 0..TRAJECTORIES {
            let trajectory = uid * TRAJECTORIES + t;
            let reward = if rng.unit() < 0.4 { 1.0 } else { 0.0 };
            for _ in 0..CALLS {
                for agent in 0..AGENTS {
                    samples.push(Sample {
                        uid,
                        trajectory,
                        agent,
                        worker_group: agent % 2,
                        reward,
                        step: 0,
                        step_reward: reward,
                        call_reward: None,
                        state: 0,
                        valid: rng.unit() > 0.05,
                        padding: false,
                    });
                }
            }
        }
    }
    samples
}

fn shuffled(mut samples: Vec<Sample>, rng: &mut Rng) -> Vec<Sample> {
    for i in (1..samples.len()).rev() {
        samples.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    samples
}

/// Best and median wall time of `REPEATS` runs of `f`.
fn time(mut f: impl FnMut()) -> (Duration, Duration) {
    let mut times: Vec<Duration> = (0..REPEATS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    (times[0], times[REPEATS / 2])
}

fn report(what: &str, (best, median): (Duration, Duration)) {
    println!(
        "{what:<24} best {:>7.2} ms   median {:>7.2} ms",
        best.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3
    );
}

fn main() {
    let mut rng = Rng(0x5EED_F0D0_C701_25AB);
    let ordered = batch(&mut rng);
    let layouts = [
        ("rollout order", ordered.clone()),
        ("shuffled", shuffled(ordered, &mut rng)),
    ];
    let penalty = Penalty::uniform(0.1, usize::from(AGENTS));
    for (layout, samples) in &layouts {
        println!("{} samples, {layout}:", samples.len());
        let rewards = penalty.apply(samples);
        report(
            "penalty",
            time(|| drop(black_box(penalty.apply(black_box(samples))))),
        );
        report(
            "diagnostics",
            time(|| {
                drop(black_box(Diagnostics::compute(
                    black_box(samples),
                    &rewards,
                )))
            }),
        );
        for name in names() {
            let Ok(estimator) = build(name, &toml::Table::new()) else {
                panic!("built-in estimator {name} must build with default params");
            };
            if estimator.uses_critic() {
                continue;
            }
            report(
                name,
                time(|| {
                    drop(black_box(
                        estimator.advantages(black_box(samples), &rewards).ok(),
                    ))
                }),
            );
        }
    }
}
