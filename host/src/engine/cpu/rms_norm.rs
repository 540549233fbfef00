//! [`rms_norm`]: RMSNorm of f32 rows in one pass over each row, in place of libtorch's six
//! operations (square, mean, add, rsqrt and two products), each a dispatch whose fixed cost
//! outweighs its arithmetic at a decode step's few rows.

use tch::{Device, Kind, Tensor};

use super::backend::{grad_enabled, on_cpu_f32};
use super::sum_in_lanes;

/// `x / sqrt(mean(x²) + eps) · weight` over the last dimension of `x` (`weight` `[D]`), as
/// [`crate::model::layers::RmsNorm`] computes it in f32, or `None` when libtorch should do it:
/// grad mode on, or `x` or `weight` not f32 on the CPU, or `weight` not `[D]`.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Option<Tensor> {
    if grad_enabled() {
        return None;
    }
    let size = x.size();
    let &d = size.last()?;
    if !on_cpu_f32(x) || !on_cpu_f32(weight) || weight.size() != [d] || d == 0 {
        return None;
    }
    let (x, weight) = (x.contiguous(), weight.contiguous());
    let (len, d) = (x.numel(), usize::try_from(d).ok()?);
    let out = Tensor::empty(size.as_slice(), (Kind::Float, Device::Cpu));
    // SAFETY: `x`, `weight` and `out` are contiguous f32 CPU tensors of `len`, `d` and `len`
    // elements (checked above or just allocated); `out` is fresh, so nothing else reads or
    // writes it while the slice lives, and the others are only read.
    let (x_data, weight_data, out_data) = unsafe {
        (
            std::slice::from_raw_parts(x.data_ptr().cast::<f32>().cast_const(), len),
            std::slice::from_raw_parts(weight.data_ptr().cast::<f32>().cast_const(), d),
            std::slice::from_raw_parts_mut(out.data_ptr().cast::<f32>(), len),
        )
    };
    // libtorch adds a double to an f32 tensor in f32.
    normalise_rows(x_data, weight_data, eps as f32, out_data);
    Some(out)
}

/// Normalises each row of `x` (rows of `weight.len()` floats) into `out`: the mean of squares
/// by [`sum_in_lanes`], then `(x · scale) · weight` with `scale = 1 / √(mean + eps)`, rounded
/// in libtorch's order.
fn normalise_rows(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    for (row, out) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let mean = sum_in_lanes(row, |x| x * x) / d as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for ((y, &x), &w) in out.iter_mut().zip(row).zip(weight) {
            *y = (x * scale) * w;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu::relative_difference;

    /// libtorch's RMSNorm, as the model computes it without a backend.
    fn libtorch_rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
        let variance = x.square().mean_dim(-1, true, Kind::Float);
        (x * (variance + eps).rsqrt()) * weight
    }

    #[test]
    fn matches_libtorch_on_decode_and_prefill_shapes() {
        tch::manual_seed(3);
        for shape in [[1, 1, 576], [16, 1, 576], [3, 7, 64], [2, 5, 17], [1, 1, 1]] {
            let x = Tensor::randn(shape, (Kind::Float, Device::Cpu)) * 3.0;
            let weight = Tensor::randn([shape[2]], (Kind::Float, Device::Cpu));
            let got = tch::no_grad(|| rms_norm(&x, &weight, 1e-5)).expect("taken");
            let want = libtorch_rms_norm(&x, &weight, 1e-5);
            assert_eq!(got.size(), want.size());
            let diff = relative_difference(&got, &want);
            assert!(diff < 1e-6, "{shape:?}: {diff}");
        }
    }

    #[test]
    fn a_row_of_zeros_gives_zeros_and_non_contiguous_input_is_read_correctly() {
        let weight = Tensor::ones([8], (Kind::Float, Device::Cpu));
        let zeros = Tensor::zeros([2, 8], (Kind::Float, Device::Cpu));
        let got = tch::no_grad(|| rms_norm(&zeros, &weight, 1e-6)).expect("taken");
        assert!(got.equal(&zeros));
        // Columns of a transposed matrix: strided rows.
        let x = Tensor::randn([8, 3], (Kind::Float, Device::Cpu)).transpose(0, 1);
        let got = tch::no_grad(|| rms_norm(&x, &weight, 1e-6)).expect("taken");
        let diff = relative_difference(&got, &libtorch_rms_norm(&x, &weight, 1e-6));
        assert!(diff < 1e-6, "{diff}");
    }

    #[test]
    fn leaves_grad_mode_and_other_dtypes_to_libtorch() {
        let x = Tensor::randn([2, 8], (Kind::Float, Device::Cpu));
        let weight = Tensor::ones([8], (Kind::Float, Device::Cpu));
        assert!(rms_norm(&x, &weight, 1e-6).is_none(), "grad mode");
        let half = x.to_kind(Kind::BFloat16);
        assert!(tch::no_grad(|| rms_norm(&half, &weight, 1e-6)).is_none());
        let wrong = Tensor::ones([4], (Kind::Float, Device::Cpu));
        assert!(tch::no_grad(|| rms_norm(&x, &wrong, 1e-6)).is_none());
    }
}
