//! Student's t distribution, for the experiment's 95 % intervals and paired tests over a few
//! seeds: the two-sided tail probability through the regularised incomplete beta function, and
//! quantiles by bisection on it.

/// P(|T| ≥ |t|) for T with `df` degrees of freedom: I_x(df/2, 1/2) with x = df / (df + t²).
pub fn two_sided_p(t: f64, df: f64) -> f64 {
    if t.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return 0.0;
    }
    regularized_beta(df / (df + t * t), df / 2.0, 0.5)
}

/// The t with P(|T| ≥ t) = `alpha` (two-sided), e.g. 12.706 for `alpha` = 0.05 and one degree
/// of freedom.
pub fn two_sided_quantile(alpha: f64, df: f64) -> f64 {
    // The tail falls monotonically in t; 1e6 is far beyond any quantile at df ≥ 1, α ≥ 1e-9.
    let (mut low, mut high) = (0.0f64, 1e6f64);
    for _ in 0..200 {
        let middle = 0.5 * (low + high);
        if two_sided_p(middle, df) > alpha {
            low = middle;
        } else {
            high = middle;
        }
    }
    0.5 * (low + high)
}

/// I_x(a, b), the regularised incomplete beta function, by its continued fraction (modified
/// Lentz), using the symmetry I_x(a, b) = 1 − I_{1−x}(b, a) where the fraction converges slowly.
fn regularized_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(x, a, b) / a
    } else {
        1.0 - front * beta_fraction(1.0 - x, b, a) / b
    }
}

/// The continued fraction of the incomplete beta function.
fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut c = 1.0;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = f64::from(m);
        let even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        for coefficient in [
            even,
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)),
        ] {
            d = 1.0 + coefficient * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + coefficient / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            h *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos approximation, g = 7, nine coefficients; ~1e-15 relative).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1 − x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + G + 0.5;
    let series = COEFFICIENTS[1..]
        .iter()
        .enumerate()
        .fold(COEFFICIENTS[0], |sum, (i, c)| {
            sum + c / (x + i as f64 + 1.0)
        });
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + series.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_match_the_printed_t_table() {
        // Two-sided 5 % critical values (any statistics table).
        for (df, expected) in [
            (1.0, 12.706),
            (2.0, 4.303),
            (4.0, 2.776),
            (9.0, 2.262),
            (29.0, 2.045),
        ] {
            let q = two_sided_quantile(0.05, df);
            assert!((q - expected).abs() < 5e-4, "df {df}: {q} vs {expected}");
        }
        // Many degrees of freedom: the normal's 1.960.
        assert!((two_sided_quantile(0.05, 1e6) - 1.960).abs() < 1e-3);
    }

    #[test]
    fn tail_probabilities_at_known_points() {
        // df = 1 is the Cauchy distribution: P(|T| ≥ 1) = 1/2 exactly.
        assert!((two_sided_p(1.0, 1.0) - 0.5).abs() < 1e-12);
        // df = 2 has a closed form: P(|T| ≥ t) = 1 − t / sqrt(2 + t²).
        for t in [0.3f64, 1.0, 2.5, 10.0] {
            let exact = 1.0 - t / (2.0 + t * t).sqrt();
            assert!((two_sided_p(t, 2.0) - exact).abs() < 1e-12, "t {t}");
        }
        assert_eq!(two_sided_p(0.0, 4.0), 1.0);
        assert_eq!(two_sided_p(f64::INFINITY, 4.0), 0.0);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-13);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-13);
    }
}
