//! The statistics the experiment reports: median, mean with its 95 % interval over seeds,
//! paired comparisons between estimators, and gradient-norm spikes.

use super::student_t;

/// An iteration is a spike when its gradient norm exceeds this many times the running median.
pub const SPIKE_FACTOR: f64 = 3.0;

/// A spike needs at least this many previous gradient norms of the same agent.
pub const SPIKE_MIN_HISTORY: usize = 3;

/// The median of `values` (the mean of the two middle ones for an even count); `None` when
/// there are no finite values. Non-finite values are ignored.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    })
}

/// The indices of the spikes in one agent's gradient norms, in iteration order: values greater
/// than [`SPIKE_FACTOR`] × the median of all previous values, once there are at least
/// [`SPIKE_MIN_HISTORY`] previous values. Non-finite values are neither spikes nor history, and
/// neither are zeros: an agent whose advantages were all 0 (or that made no call) had no gradient
/// that iteration, which says nothing about its scale (with zeros in the history, a median of 0
/// would make every later non-zero norm a spike).
pub fn spikes(norms: &[f64]) -> Vec<usize> {
    let mut history: Vec<f64> = Vec::new();
    let mut found = Vec::new();
    for (index, &norm) in norms.iter().enumerate() {
        if !norm.is_finite() || norm == 0.0 {
            continue;
        }
        if history.len() >= SPIKE_MIN_HISTORY {
            if let Some(running) = median(&history) {
                if norm > SPIKE_FACTOR * running {
                    found.push(index);
                }
            }
        }
        history.push(norm);
    }
    found
}

/// Mean and sample standard deviation (n − 1 in the denominator; 0 for a single value) of a
/// metric over seeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeanStd {
    /// The mean.
    pub mean: f64,
    /// The sample standard deviation.
    pub std: f64,
    /// How many values (seeds) it summarises.
    pub n: usize,
}

impl MeanStd {
    /// The statistics of the finite `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if finite.is_empty() {
            return None;
        }
        let n = finite.len();
        let mean = finite.iter().sum::<f64>() / n as f64;
        let std = if n > 1 {
            let squares = finite.iter().map(|v| (v - mean).powi(2)).sum::<f64>();
            (squares / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Self { mean, std, n })
    }

    /// Half the width of the 95 % confidence interval of the mean (Student's t with n − 1
    /// degrees of freedom); `None` for a single value.
    pub fn ci95(&self) -> Option<f64> {
        (self.n > 1).then(|| {
            let n = self.n as f64;
            student_t::two_sided_quantile(0.05, n - 1.0) * self.std / n.sqrt()
        })
    }

    /// `mean ± h` with h the 95 % interval's half-width, `digits` decimals; the mean alone for
    /// a single value.
    pub fn render(&self, digits: usize) -> String {
        match self.ci95() {
            Some(half) => format!("{:.digits$} ± {:.digits$}", self.mean, half),
            None => format!("{:.digits$}", self.mean),
        }
    }
}

/// A paired comparison of two estimators over the seeds both ran: the differences a − b per
/// seed, their mean with its 95 % interval, and the paired t-test's two-sided p-value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairedTest {
    /// Mean difference a − b.
    pub mean: f64,
    /// Half the width of its 95 % interval.
    pub ci95: f64,
    /// The t statistic (mean / (sd / √n)); `None` when every pair differs by the same nonzero
    /// amount, since there is then no spread to weigh the difference against.
    pub t: Option<f64>,
    /// Pairs (seeds) compared.
    pub n: usize,
}

impl PairedTest {
    /// The test over `pairs` (a, b) of finite values; `None` with fewer than two pairs.
    pub fn of(pairs: &[(f64, f64)]) -> Option<Self> {
        let differences: Vec<f64> = pairs
            .iter()
            .filter(|(a, b)| a.is_finite() && b.is_finite())
            .map(|(a, b)| a - b)
            .collect();
        let stats = MeanStd::of(&differences).filter(|s| s.n > 1)?;
        let n = stats.n as f64;
        let t = if stats.std > 0.0 {
            Some(stats.mean / (stats.std / n.sqrt()))
        } else if stats.mean == 0.0 {
            Some(0.0)
        } else {
            None
        };
        Some(Self {
            mean: stats.mean,
            ci95: stats.ci95().unwrap_or(0.0),
            t,
            n: stats.n,
        })
    }

    /// The two-sided p-value of `t` (Student's t, n − 1 degrees of freedom); `None` with `t`.
    pub fn p(&self) -> Option<f64> {
        let freedom = self.n as f64 - 1.0;
        self.t.map(|t| student_t::two_sided_p(t, freedom))
    }
}

/// The mean of the finite `values`, `None` when there are none.
pub fn mean(values: &[f64]) -> Option<f64> {
    MeanStd::of(values).map(|stats| stats.mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty_inputs() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 7.0]), Some(7.0));
    }

    #[test]
    fn spikes_need_three_previous_values_and_three_times_their_median() {
        // Iterations 0-2 have too little history, however large they are.
        assert!(spikes(&[1.0, 100.0, 1000.0]).is_empty());
        // History [1, 2, 1]: median 1, so 3.0 is not a spike (not greater) but 3.5 is.
        assert_eq!(spikes(&[1.0, 2.0, 1.0, 3.0]), Vec::<usize>::new());
        assert_eq!(spikes(&[1.0, 2.0, 1.0, 3.5]), vec![3]);
        // The spike joins the history: [1, 2, 1, 10] has median 1.5, so 4.6 > 4.5 spikes too,
        // then [1, 2, 1, 10, 4.6] has median 2, and 6.0 is not above 6.
        assert_eq!(spikes(&[1.0, 2.0, 1.0, 10.0, 4.6, 6.0]), vec![3, 4]);
        // Non-finite values are skipped, not counted as history.
        assert_eq!(spikes(&[1.0, f64::NAN, 1.0, 1.0, 5.0]), vec![4]);
        assert_eq!(spikes(&[1.0, f64::NAN, 1.0, 5.0]), Vec::<usize>::new());
        // So are zeros (no gradient): [0, 0, 0] is no history, and 2.0 after [0, 1, 0, 1, 1]
        // compares with the median 1 of the non-zero norms, not with 0.
        assert!(spikes(&[0.0, 0.0, 0.0, 2.0]).is_empty());
        assert!(spikes(&[0.0, 1.0, 0.0, 1.0, 1.0, 2.0]).is_empty());
        assert_eq!(spikes(&[0.0, 1.0, 0.0, 1.0, 1.0, 3.5]), vec![5]);
    }

    #[test]
    fn mean_and_sample_std() {
        let stats = MeanStd::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).expect("values");
        assert_eq!(stats.mean, 5.0);
        // Sum of squares 32 over n − 1 = 7.
        assert!((stats.std - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(stats.n, 8);
        assert_eq!(
            MeanStd::of(&[0.5]),
            Some(MeanStd {
                mean: 0.5,
                std: 0.0,
                n: 1
            })
        );
        assert_eq!(MeanStd::of(&[f64::NAN]), None);
        // Two values: std √2, half-width 12.706 · √2 / √2.
        assert_eq!(
            MeanStd::of(&[1.0, 3.0]).map(|s| s.render(2)),
            Some("2.00 ± 12.71".into())
        );
        assert_eq!(
            MeanStd::of(&[0.5]).map(|s| s.render(2)),
            Some("0.50".into())
        );
        assert_eq!(mean(&[1.0, 2.0]), Some(1.5));
    }

    #[test]
    fn paired_test_by_hand() {
        // Differences {1, 2, 3, 4, 5}: mean 3, sd √2.5, t = 3 / (√2.5 / √5) = 3√2 ≈ 4.243 with
        // 4 degrees of freedom (p ≈ 0.0132); half-width 2.776 · √0.5 ≈ 1.963.
        let pairs: Vec<(f64, f64)> = (1..=5).map(|d| (f64::from(d) + 10.0, 10.0)).collect();
        let test = PairedTest::of(&pairs).expect("five pairs");
        assert_eq!(test.n, 5);
        assert!((test.mean - 3.0).abs() < 1e-12);
        let (t, p) = (test.t.expect("spread"), test.p().expect("spread"));
        assert!((t - 3.0 * 2f64.sqrt()).abs() < 1e-9);
        assert!((p - 0.0132).abs() < 5e-4, "{p}");
        assert!((test.ci95 - 2.776 * 0.5f64.sqrt()).abs() < 1e-3);
        // Identical runs: no difference, p = 1. The same nonzero difference in every pair (two
        // evals one sample apart in both seeds): no spread, so no t and no p, not p = 0.
        assert_eq!(
            PairedTest::of(&[(1.0, 1.0), (2.0, 2.0)]).map(|t| t.p()),
            Some(Some(1.0))
        );
        let constant = PairedTest::of(&[(2.0, 1.0), (3.0, 2.0)]).expect("two pairs");
        assert_eq!((constant.mean, constant.t, constant.p()), (1.0, None, None));
        assert_eq!(PairedTest::of(&[(2.0, 1.0)]), None);
    }
}
