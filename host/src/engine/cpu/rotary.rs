//! [`rotate`]: rotary position embeddings applied to f32 heads in one pass, in place of
//! libtorch's six operations (two slices, a concatenation, two products and a sum).

use tch::{Device, Kind, Tensor};

use super::backend::{grad_enabled, on_cpu_f32};

/// `x · cos + swap_halves(x) · sin` for `x` `[B, H, T, D]` and `cos`, `sin` `[B, 1, T, D]`
/// (see [`crate::model::layers::RotaryAngles`]), bit for bit as libtorch computes it, or `None`
/// when libtorch should do it: grad mode on, not f32 on the CPU, or other shapes.
pub fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Option<Tensor> {
    if grad_enabled() {
        return None;
    }
    let size = x.size();
    let &[b, h, t, d] = size.as_slice() else {
        return None;
    };
    if [x, cos, sin].iter().any(|t| !on_cpu_f32(t))
        || cos.size() != [b, 1, t, d]
        || sin.size() != [b, 1, t, d]
        || d % 2 != 0
    {
        return None;
    }
    let (x, cos, sin) = (x.contiguous(), cos.contiguous(), sin.contiguous());
    let (len, angles) = (x.numel(), cos.numel());
    let out = Tensor::empty(size.as_slice(), (Kind::Float, Device::Cpu));
    // SAFETY: `x`, `cos`, `sin` and `out` are contiguous f32 CPU tensors of `len`, `angles`,
    // `angles` and `len` elements (checked above or just allocated); `out` is fresh, so
    // nothing else reads or writes it while the slice lives, and the others are only read.
    let (x_data, cos_data, sin_data, out_data) = unsafe {
        (
            std::slice::from_raw_parts(x.data_ptr().cast::<f32>().cast_const(), len),
            std::slice::from_raw_parts(cos.data_ptr().cast::<f32>().cast_const(), angles),
            std::slice::from_raw_parts(sin.data_ptr().cast::<f32>().cast_const(), angles),
            std::slice::from_raw_parts_mut(out.data_ptr().cast::<f32>(), len),
        )
    };
    let (heads, dim) = (usize::try_from(h).ok()?, usize::try_from(d).ok()?);
    let positions = usize::try_from(t).ok()? * dim;
    if heads == 0 || positions == 0 {
        return Some(out);
    }
    // Each row's heads all turn by that row's angles.
    let rows = x_data
        .chunks_exact(heads * positions)
        .zip(out_data.chunks_exact_mut(heads * positions))
        .zip(
            cos_data
                .chunks_exact(positions)
                .zip(sin_data.chunks_exact(positions)),
        );
    for ((x_row, out_row), (cos_row, sin_row)) in rows {
        for (x_head, out_head) in x_row
            .chunks_exact(positions)
            .zip(out_row.chunks_exact_mut(positions))
        {
            rotate_positions(x_head, cos_row, sin_row, out_head, dim);
        }
    }
    Some(out)
}

/// Rotates each `dim`-float head vector of `x` (one per position) by its position's `cos` and
/// `sin` into `out`: `(x₁ c₁ + x₂ s₁, x₂ c₂ + x₁ s₂)` for the halves, two products and a sum
/// rounded separately, as libtorch does.
fn rotate_positions(x: &[f32], cos: &[f32], sin: &[f32], out: &mut [f32], dim: usize) {
    let half = dim / 2;
    let vectors = x
        .chunks_exact(dim)
        .zip(out.chunks_exact_mut(dim))
        .zip(cos.chunks_exact(dim).zip(sin.chunks_exact(dim)));
    for ((x, out), (cos, sin)) in vectors {
        let ((x1, x2), (out1, out2)) = (x.split_at(half), out.split_at_mut(half));
        let ((cos1, cos2), (sin1, sin2)) = (cos.split_at(half), sin.split_at(half));
        for i in 0..half {
            out1[i] = x1[i] * cos1[i] + x2[i] * sin1[i];
            out2[i] = x2[i] * cos2[i] + x1[i] * sin2[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libtorch's rotation, as `RotaryAngles::apply` computes it without a backend.
    fn libtorch_rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
        let half = x.size()[3] / 2;
        let swapped = Tensor::cat(&[x.narrow(-1, half, half), x.narrow(-1, 0, half)], -1);
        x * cos + swapped * sin
    }

    #[test]
    fn equals_libtorch_bit_for_bit_on_decode_and_prefill_shapes() {
        tch::manual_seed(5);
        let f32 = (Kind::Float, Device::Cpu);
        for [b, h, t, d] in [[16, 9, 1, 64], [3, 2, 7, 8], [1, 1, 1, 2], [2, 4, 5, 128]] {
            let (cos, sin) = (
                Tensor::randn([b, 1, t, d], f32),
                Tensor::randn([b, 1, t, d], f32),
            );
            // As the attention block makes it: heads moved in front of positions, a strided view.
            let x = Tensor::randn([b, t, h, d], f32).transpose(1, 2);
            let got = tch::no_grad(|| rotate(&x, &cos, &sin)).expect("taken");
            assert!(
                got.equal(&libtorch_rotate(&x, &cos, &sin)),
                "[{b}, {h}, {t}, {d}]"
            );
        }
    }

    #[test]
    fn leaves_grad_mode_and_other_shapes_to_libtorch() {
        let f32 = (Kind::Float, Device::Cpu);
        let (x, cos) = (
            Tensor::randn([2, 3, 1, 8], f32),
            Tensor::randn([2, 1, 1, 8], f32),
        );
        assert!(rotate(&x, &cos, &cos).is_none(), "grad mode");
        let odd = Tensor::randn([2, 3, 1, 7], f32);
        let odd_angles = Tensor::randn([2, 1, 1, 7], f32);
        assert!(tch::no_grad(|| rotate(&odd, &odd_angles, &odd_angles)).is_none());
        let other_rows = Tensor::randn([1, 1, 1, 8], f32);
        assert!(tch::no_grad(|| rotate(&x, &other_rows, &other_rows)).is_none());
    }
}
