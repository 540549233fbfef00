//! [`sample_categorical`]: one inverse-CDF draw per row from `softmax(logits / T)` in three
//! passes over the row, in place of libtorch's division, log-sum-exp, exponential, cumulative
//! sum and search — five operations over the whole `[B, V]` batch, each a full pass through
//! memory for the few rows of a decode step.

use std::sync::OnceLock;

use tch::Tensor;

use super::backend::on_cpu_f32;
use super::exp::{exp_avx2, exp_avx512, LOWEST};
use super::isa::Isa;
use super::pool;
use super::sum_in_lanes;

/// Tokens whose weights are summed into one partial sum: the draw's search goes through the
/// `V / BLOCK` partial sums, then through the exponentials of one block, recomputed.
const BLOCK: usize = 256;

/// One draw per row of `logits` `[B, V]` from `softmax(logits / temperature[row])`, by inverse
/// CDF with `uniform[row]` in `[0, 1)`: the first token whose cumulative probability exceeds
/// `uniform × total`. Returns the tokens `[B, 1]` int64 and their log-probabilities
/// `log_softmax(logits / T)` `[B, 1]` f32, as [`crate::engine::Sampler`] draws them with
/// libtorch; `None` when libtorch should: not f32 on the CPU, not `[B, V]` with `B` temperatures
/// and uniforms, or the portable version (libm's scalar `expf` is slower than libtorch's).
///
/// A row holding a NaN or whose largest logit is infinite draws the last token with a NaN
/// log-probability, as libtorch's search does.
///
/// # Panics
/// When the CPU does not support `isa`.
pub fn sample_categorical(
    logits: &Tensor,
    temperature: &[f32],
    uniform: &[f32],
    isa: Isa,
) -> Option<(Tensor, Tensor)> {
    isa.assert_supported();
    let &[rows, vocab] = logits.size().as_slice() else {
        return None;
    };
    let (rows, vocab) = (usize::try_from(rows).ok()?, usize::try_from(vocab).ok()?);
    if isa == Isa::Portable
        || !on_cpu_f32(logits)
        || rows == 0
        || vocab == 0
        || temperature.len() != rows
        || uniform.len() != rows
    {
        return None;
    }
    let logits = logits.contiguous();
    // SAFETY: `logits` is a contiguous f32 CPU tensor of `rows × vocab` elements (checked
    // above), only read while the slice lives.
    let data = unsafe {
        std::slice::from_raw_parts(logits.data_ptr().cast::<f32>().cast_const(), rows * vocab)
    };
    let draws: Vec<OnceLock<(i64, f32)>> = (0..rows).map(|_| OnceLock::new()).collect();
    let parts = pool::parts().min(rows);
    pool::run_parts(parts, &|part| {
        let mut sums = Vec::with_capacity(vocab.div_ceil(BLOCK));
        for row in pool::share(part, parts, rows) {
            let logits = &data[row * vocab..(row + 1) * vocab];
            let draw = draw_row(logits, temperature[row], uniform[row], &mut sums, isa);
            // Each row belongs to one part, so it is set once.
            let _ = draws[row].set(draw);
        }
    });
    let (tokens, logprobs): (Vec<i64>, Vec<f32>) = draws
        .into_iter()
        .map(|draw| draw.into_inner().unwrap_or((0, f32::NAN)))
        .unzip();
    let column = [rows as i64, 1];
    Some((
        Tensor::from_slice(&tokens).view(column),
        Tensor::from_slice(&logprobs).view(column),
    ))
}

/// One row's draw: (token, log-probability). `sums` is scratch for the blocks' partial sums.
///
/// The weights are `e^(x/T − m)` with `m` the largest `x/T` (those below [`LOWEST`] taken as
/// 0); each block's weights are summed in f32, the blocks' sums in f64, and the search walks the
/// same sums in the same order, so it always ends inside the total it was drawn against.
fn draw_row(
    logits: &[f32],
    temperature: f32,
    uniform: f32,
    sums: &mut Vec<f64>,
    isa: Isa,
) -> (i64, f32) {
    let last = logits.len() - 1;
    let Some(largest) = largest(logits) else {
        return (last as i64, f32::NAN);
    };
    let shift = largest / temperature;
    let mut weights = [0f32; BLOCK];
    sums.clear();
    let mut total = 0f64;
    for block in logits.chunks(BLOCK) {
        let weights = &mut weights[..block.len()];
        scaled_exps(block, temperature, shift, weights, isa);
        let sum = f64::from(sum_in_lanes(weights, |w| w));
        sums.push(sum);
        total += sum;
    }
    let target = f64::from(uniform) * total;
    let mut below = 0f64;
    let mut token = last;
    for (b, &sum) in sums.iter().enumerate() {
        if below + sum > target {
            let block = &logits[b * BLOCK..((b + 1) * BLOCK).min(logits.len())];
            let weights = &mut weights[..block.len()];
            scaled_exps(block, temperature, shift, weights, isa);
            // Rounding may leave the tokens' running sum short of the block's: then the
            // block's last token with any weight.
            token = b * BLOCK
                + weights
                    .iter()
                    .scan(below, |running, &w| {
                        *running += f64::from(w);
                        Some(*running)
                    })
                    .position(|running| running > target)
                    .unwrap_or_else(|| weights.iter().rposition(|&w| w > 0.0).unwrap_or(0));
            break;
        }
        below += sum;
    }
    let logprob = f64::from(logits[token] / temperature - shift) - total.ln();
    (token as i64, logprob as f32)
}

/// The largest of `logits`, or `None` when one is NaN or the largest is infinite.
fn largest(logits: &[f32]) -> Option<f32> {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut nan = false;
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            nan |= x.is_nan();
            *lane = if x > *lane { x } else { *lane };
        }
    }
    for &x in tail {
        nan |= x.is_nan();
        lanes[0] = if x > lanes[0] { x } else { lanes[0] };
    }
    let largest = lanes.into_iter().fold(f32::NEG_INFINITY, f32::max);
    (!nan && largest.is_finite()).then_some(largest)
}

/// `out[i] = e^(x[i] / temperature − shift)`, 0 where the exponent is below [`LOWEST`] (or
/// NaN), by the `isa` version.
fn scaled_exps(x: &[f32], temperature: f32, shift: f32, out: &mut [f32], isa: Isa) {
    let whole = match isa {
        // SAFETY: the CPU supports the version (asserted by `sample_categorical`).
        Isa::Avx512 => unsafe { scaled_exps_avx512(x, temperature, shift, out) },
        // SAFETY: as above.
        Isa::Avx2 => unsafe { scaled_exps_avx2(x, temperature, shift, out) },
        Isa::Portable => 0,
    };
    for (y, &x) in out[whole..].iter_mut().zip(&x[whole..]) {
        let exponent = x / temperature - shift;
        *y = if exponent >= LOWEST {
            exponent.exp()
        } else {
            0.0
        };
    }
}

/// Runs `vector` on each whole run of `LANES` floats of `x` and `out`; returns how many floats
/// that covered. Inlined into each version, so `vector` runs with its features.
#[inline(always)]
fn in_vectors<const LANES: usize>(
    x: &[f32],
    out: &mut [f32],
    vector: impl Fn(&[f32], &mut [f32]),
) -> usize {
    for (y, x) in out.chunks_exact_mut(LANES).zip(x.chunks_exact(LANES)) {
        vector(x, y);
    }
    x.len() / LANES * LANES
}

/// [`scaled_exps`] 16 at a time with [`exp_avx512`]; returns how many it computed.
#[target_feature(enable = "avx512f")]
fn scaled_exps_avx512(x: &[f32], temperature: f32, shift: f32, out: &mut [f32]) -> usize {
    use std::arch::x86_64::{
        _mm512_cmp_ps_mask, _mm512_div_ps, _mm512_loadu_ps, _mm512_maskz_mov_ps, _mm512_set1_ps,
        _mm512_storeu_ps, _mm512_sub_ps, _CMP_GE_OQ,
    };
    in_vectors::<16>(x, out, |x, y| {
        // SAFETY: each run holds 16 floats; the CPU supports AVX-512F (this function's
        // feature, which the closure inherits).
        unsafe {
            let scaled = _mm512_div_ps(_mm512_loadu_ps(x.as_ptr()), _mm512_set1_ps(temperature));
            let exponent = _mm512_sub_ps(scaled, _mm512_set1_ps(shift));
            let kept = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(exponent, _mm512_set1_ps(LOWEST));
            let weights = _mm512_maskz_mov_ps(kept, exp_avx512(exponent));
            _mm512_storeu_ps(y.as_mut_ptr(), weights);
        }
    })
}

/// [`scaled_exps`] 8 at a time with [`exp_avx2`]; returns how many it computed.
#[target_feature(enable = "avx2,fma")]
fn scaled_exps_avx2(x: &[f32], temperature: f32, shift: f32, out: &mut [f32]) -> usize {
    use std::arch::x86_64::{
        _mm256_and_ps, _mm256_cmp_ps, _mm256_div_ps, _mm256_loadu_ps, _mm256_set1_ps,
        _mm256_storeu_ps, _mm256_sub_ps, _CMP_GE_OQ,
    };
    in_vectors::<8>(x, out, |x, y| {
        // SAFETY: each run holds 8 floats; the CPU supports AVX2 and FMA (as above).
        unsafe {
            let scaled = _mm256_div_ps(_mm256_loadu_ps(x.as_ptr()), _mm256_set1_ps(temperature));
            let exponent = _mm256_sub_ps(scaled, _mm256_set1_ps(shift));
            let kept = _mm256_cmp_ps::<_CMP_GE_OQ>(exponent, _mm256_set1_ps(LOWEST));
            let weights = _mm256_and_ps(kept, exp_avx2(exponent));
            _mm256_storeu_ps(y.as_mut_ptr(), weights);
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tch::{Device, Kind};

    use super::*;
    use crate::engine::cpu::CpuKernels;
    use crate::engine::cpu::Routes;
    use crate::engine::{Sampler, SamplingParams};
    use crate::rng::SeededRng;

    /// The vector versions this CPU runs.
    fn vector_isas() -> Vec<Isa> {
        Isa::supported()
            .into_iter()
            .filter(|&isa| isa != Isa::Portable)
            .collect()
    }

    /// (tokens, logprobs) drawn by `sampler` from `logits` with `uniforms`.
    fn draws(sampler: &mut Sampler, logits: &Tensor, uniforms: &[f32]) -> (Vec<i64>, Vec<f32>) {
        let live = vec![true; uniforms.len()];
        let (tokens, logprobs) = sampler
            .sample_with(logits, &live, &mut |row| uniforms[row])
            .expect("draws");
        (
            Vec::try_from(&tokens.view([-1])).expect("i64s"),
            Vec::try_from(&logprobs.view([-1])).expect("f32s"),
        )
    }

    #[test]
    fn draws_the_tokens_and_logprobs_of_libtorchs_sampler() {
        tch::manual_seed(5);
        let temperatures = [1.0f32, 0.7, 1.3, 0.25, 2.0, 0.8];
        let params: Vec<SamplingParams> = temperatures
            .iter()
            .map(|&t| SamplingParams::with_temperature(f64::from(t)))
            .collect();
        let mut rng = SeededRng::new(3);
        // SmolLM2's vocabulary, one with a partial vector and block, and a tiny one.
        for vocab in [49_152i64, 1_007, 5] {
            let logits = Tensor::randn([6, vocab], (Kind::Float, Device::Cpu)) * 4.0;
            let largest_logit = logits.abs().max().double_value(&[]) as f32;
            for isa in vector_isas() {
                let kernels = Arc::new(CpuKernels::new(isa, Routes::ALL).expect("supported"));
                let mut ours = Sampler::new(&params, vocab, Device::Cpu).with_backend(kernels);
                let mut theirs = Sampler::new(&params, vocab, Device::Cpu);
                // Random uniforms, and 0. Uniforms next to 1 pick among the last ~1e-7 of the
                // mass, which rounding decides: below, only that they draw a possible token.
                let mut trials: Vec<Vec<f32>> = (0..20)
                    .map(|_| (0..6).map(|_| rng.uniform()).collect())
                    .collect();
                trials.push(vec![0.0; 6]);
                let (_, logprobs) = draws(&mut ours, &logits, &[1.0 - f32::EPSILON / 2.0; 6]);
                assert!(logprobs.iter().all(|l| l.is_finite()), "{isa} {logprobs:?}");
                for uniforms in trials {
                    let (tokens, logprobs) = draws(&mut ours, &logits, &uniforms);
                    let (want_tokens, want_logprobs) = draws(&mut theirs, &logits, &uniforms);
                    assert_eq!(tokens, want_tokens, "{isa} V {vocab} u {uniforms:?}");
                    // libtorch rounds `x / T − lse` in f32: a few ulp of the largest `x / T`.
                    let rows = logprobs.iter().zip(&want_logprobs).zip(&temperatures);
                    for ((got, want), t) in rows {
                        let tolerance = 1e-6 * (1.0 + largest_logit / t);
                        assert!(
                            (got - want).abs() < tolerance,
                            "{isa} V {vocab} T {t}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn never_draws_a_masked_token_and_flags_broken_rows() {
        let mut row = vec![f32::NEG_INFINITY; 300];
        row[17] = 1.0;
        row[290] = 0.5;
        let nan = [0.0, f32::NAN, 1.0];
        for isa in vector_isas() {
            for u in [0.0, 0.3, 0.6, 0.999] {
                let logits = Tensor::from_slice(&row).view([1, 300]);
                let (token, logprob) =
                    sample_categorical(&logits, &[1.0], &[u], isa).expect("taken");
                let token = token.int64_value(&[0, 0]);
                let want = if u < 1.0 / (1.0 + (-0.5f32).exp()) {
                    17
                } else {
                    290
                };
                assert_eq!(token, want, "{isa} u {u}");
                assert!(logprob.double_value(&[0, 0]) < 0.0);
            }
            for broken in [&nan[..], &[0.0, f32::INFINITY, 1.0]] {
                let logits = Tensor::from_slice(broken).view([1, 3]);
                let (token, logprob) =
                    sample_categorical(&logits, &[1.0], &[0.5], isa).expect("taken");
                assert_eq!(token.int64_value(&[0, 0]), 2, "{isa} {broken:?}");
                assert!(logprob.double_value(&[0, 0]).is_nan(), "{isa} {broken:?}");
            }
        }
    }

    #[test]
    fn leaves_other_shapes_kinds_and_the_portable_version_to_libtorch() {
        let logits = Tensor::randn([2, 10], (Kind::Float, Device::Cpu));
        let isa = Isa::best();
        let taken = |l: &Tensor, t: &[f32], isa| sample_categorical(l, t, &[0.5; 2], isa).is_some();
        assert_eq!(taken(&logits, &[1.0; 2], isa), isa != Isa::Portable);
        assert!(!taken(&logits, &[1.0; 2], Isa::Portable));
        assert!(!taken(&logits, &[1.0; 3], isa));
        assert!(!taken(&logits.view([2, 1, 10]), &[1.0; 2], isa));
        assert!(!taken(&logits.to_kind(Kind::Double), &[1.0; 2], isa));
    }
}
