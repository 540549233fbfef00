//! [`squared_norm_sum`], [`scale_each`] and [`drop_gradients`]: gradient norms and clipping over
//! a model's tensors in one libtorch list operation each, and dropping its gradients in one call
//! (the C side is `gradient_lists.cpp`). Taken tensor by tensor, a norm is about eight operators
//! per tensor: for a worker group's gradient norm, each agent's and the clipping, a few thousand
//! per step of a 28-layer model, each a kernel launch on a GPU.

use std::ffi::{c_char, c_int, c_void};

use tch::{Kind, Tensor};

use crate::model::error::ModelError;
use crate::shim_error::ShimError;
use crate::tensor_list::handles;

extern "C" {
    fn drmas_squared_norm_sum(
        a: *const *mut c_void,
        b: *const *mut c_void,
        count: usize,
        out: *mut c_void,
        error: *mut c_char,
        capacity: usize,
    ) -> c_int;
    fn drmas_scale_each(
        list: *const *mut c_void,
        count: usize,
        scale: f64,
        error: *mut c_char,
        capacity: usize,
    ) -> c_int;
    fn drmas_drop_gradients(
        list: *const *mut c_void,
        count: usize,
        error: *mut c_char,
        capacity: usize,
    ) -> c_int;
}

/// `Σ_i ‖a_i − b_i‖²` (`Σ_i ‖a_i‖²` without `b`) over tensors on one device, as a 0-dim f64
/// tensor there: each norm accumulated in f32 (f64 for f64 tensors), the squares summed in f64.
/// Reading it is the one synchronisation.
pub fn squared_norm_sum(a: &[Tensor], b: Option<&[Tensor]>) -> Result<Tensor, ModelError> {
    let device = a.first().map_or(tch::Device::Cpu, |t| t.device());
    let out = Tensor::zeros([], (Kind::Double, device));
    let a_list = handles(a);
    let b_list = b.map(handles);
    if let Some(b_list) = &b_list {
        if b_list.len() != a_list.len() {
            return Err(ModelError::Input(format!(
                "a norm of differences between {} and {} tensors",
                a_list.len(),
                b_list.len()
            )));
        }
    }
    // SAFETY: `a_list` (and `b_list`) hold `a_list.len()` handles of tensors alive for the call,
    // `out` is a live tensor, and `error` is writable for `capacity` bytes.
    ShimError::check("a gradient norm failed", |error, capacity| unsafe {
        drmas_squared_norm_sum(
            a_list.as_ptr(),
            b_list.as_ref().map_or(std::ptr::null(), |b| b.as_ptr()),
            a_list.len(),
            out.as_ptr().cast_mut().cast(),
            error,
            capacity,
        )
    })?;
    Ok(out)
}

/// Multiplies every tensor of `list` by `scale` in place, in one list operation.
pub fn scale_each(list: &[Tensor], scale: f64) -> Result<(), ModelError> {
    let list = handles(list);
    // SAFETY: `list` holds handles of tensors alive for the call; `error` is writable for
    // `capacity` bytes.
    ShimError::check("scaling the gradients failed", |error, capacity| unsafe {
        drmas_scale_each(list.as_ptr(), list.len(), scale, error, capacity)
    })
}

/// Drops the gradient of every tensor of `params` (PyTorch's `zero_grad(set_to_none=True)`): the
/// memory is free until the next backward writes a new one, and a tensor that no loss reaches
/// by then has none.
pub fn drop_gradients(params: &[Tensor]) -> Result<(), ModelError> {
    let list = handles(params);
    // SAFETY: `list` holds handles of tensors alive for the call; `error` is writable for
    // `capacity` bytes.
    ShimError::check("dropping the gradients failed", |error, capacity| unsafe {
        drmas_drop_gradients(list.as_ptr(), list.len(), error, capacity)
    })
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;

    #[test]
    fn sums_squared_norms_of_tensors_and_of_differences_in_f64() {
        let a = [
            Tensor::from_slice(&[3.0f32, 4.0]),
            Tensor::from_slice(&[1.0f32, 2.0, 2.0, 0.0]).view([2, 2]),
            Tensor::from_slice(&[0.5f32, -0.5]).to_kind(Kind::BFloat16),
        ];
        let b = [
            Tensor::from_slice(&[3.0f32, 0.0]),
            Tensor::zeros([2, 2], (Kind::Float, Device::Cpu)),
            Tensor::from_slice(&[0.5f32, 0.5]).to_kind(Kind::BFloat16),
        ];
        let plain = squared_norm_sum(&a, None).expect("norms");
        assert_eq!(plain.kind(), Kind::Double);
        // Each norm is an f32 (√0.5 rounds), its square and the sum f64.
        assert!(
            (plain.double_value(&[]) - (25.0 + 9.0 + 0.5)).abs() < 1e-6,
            "{plain}"
        );
        let differences = squared_norm_sum(&a, Some(&b)).expect("norms");
        assert!((differences.double_value(&[]) - (16.0 + 9.0 + 1.0)).abs() < 1e-6);
        assert_eq!(
            squared_norm_sum(&[], None).expect("none").double_value(&[]),
            0.0
        );
        let mismatch = squared_norm_sum(&a, Some(&b[..2])).expect_err("lengths differ");
        assert!(
            mismatch.to_string().contains("3 and 2 tensors"),
            "{mismatch}"
        );
    }

    #[test]
    fn scales_every_tensor_in_place() {
        let list = [
            Tensor::from_slice(&[1.0f32, -2.0]),
            Tensor::from_slice(&[4.0f32]).to_kind(Kind::BFloat16),
        ];
        scale_each(&list, 0.5).expect("scaled");
        assert_eq!(Vec::<f32>::try_from(&list[0]).expect("f32"), [0.5, -1.0]);
        assert_eq!(list[1].to_kind(Kind::Float).double_value(&[0]), 2.0);
    }

    #[test]
    fn dropped_gradients_are_gone_and_the_next_backward_writes_new_ones() {
        let params = [
            Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true),
            Tensor::from_slice(&[4.0f32]).set_requires_grad(true),
        ];
        let loss = || (&params[0] * 3.0).sum(Kind::Float) + params[1].square().sum(Kind::Float);
        loss().backward();
        assert!(params.iter().all(|p| p.grad().defined()));
        drop_gradients(&params).expect("dropped");
        assert!(params.iter().all(|p| !p.grad().defined()));
        loss().backward();
        assert_eq!(
            Vec::<f32>::try_from(&params[0].grad()).expect("f32"),
            [3.0, 3.0]
        );
        assert_eq!(
            params[1].grad().double_value(&[0]),
            8.0,
            "not added to the old one"
        );
        drop_gradients(&[]).expect("nothing to drop");
    }
}
