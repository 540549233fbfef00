//! [`fused_adamw`] and [`copy_each`]: libtorch's multi-tensor AdamW kernel and list copy over
//! many tensors in one call each (the C side is `fused_adamw.cpp`, built by the crate's build
//! script). tch binds no operator that takes a list of tensors; stepping a model tensor by tensor
//! costs about 15 kernels and as many passes over memory per tensor, which on a GPU is a few
//! thousand launches per step and on a CPU over a second per step for a 135M-parameter model.

use std::ffi::{c_char, c_int, c_void};

use tch::Tensor;

use crate::model::error::ModelError;
use crate::shim_error::ShimError;
use crate::tensor_list::handles;

extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn drmas_fused_adamw(
        weights: *const *mut c_void,
        grads: *const *mut c_void,
        exp_avgs: *const *mut c_void,
        exp_avg_sqs: *const *mut c_void,
        count: usize,
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        step: f64,
        converted_bytes: usize,
        error: *mut c_char,
        capacity: usize,
    ) -> c_int;
    fn drmas_copy_each(
        destinations: *const *mut c_void,
        sources: *const *mut c_void,
        count: usize,
        error: *mut c_char,
        capacity: usize,
    ) -> c_int;
}

/// Bytes of f32 gradient copies one [`fused_adamw`] call makes at a time. A bf16 gradient is
/// converted to f32 for the step; converted all at once, the copies of a 7B model's gradients
/// would take 30 GB on top of its f32 masters and moments (beyond one 141 GB GPU), so the
/// tensors are stepped in runs whose copies stay within this.
const CONVERTED_GRADIENT_BYTES: usize = 1 << 30;

/// AdamW's hyper-parameters for one [`fused_adamw`] call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWSettings {
    /// The learning rate of this call's tensors.
    pub lr: f64,
    /// β₁, β₂: the moments' decay rates.
    pub betas: (f64, f64),
    /// Decoupled weight decay (the weights shrink by `lr × weight_decay` per step).
    pub weight_decay: f64,
    /// ε, added to the second moment's square root.
    pub eps: f64,
    /// The optimizer step being taken (1-based), for the bias corrections.
    pub step: u64,
}

/// The tensors of one [`fused_adamw`] call, each list in the same order.
#[derive(Default)]
pub struct AdamWTensors<'a> {
    /// f32 weights, all on one device (a low-precision parameter's f32 master stands in for it).
    pub weights: Vec<&'a Tensor>,
    /// Their gradients in any float dtype: the step converts those that are not f32.
    pub grads: Vec<Tensor>,
    /// First moments (f32).
    pub exp_avgs: Vec<&'a Tensor>,
    /// Second moments (f32).
    pub exp_avg_sqs: Vec<&'a Tensor>,
}

/// One AdamW step over every tensor of `tensors` in place, exactly as
/// `torch.optim.AdamW(fused=True)` steps them.
pub fn fused_adamw(tensors: &AdamWTensors<'_>, settings: AdamWSettings) -> Result<(), ModelError> {
    fused_adamw_in_runs(tensors, settings, CONVERTED_GRADIENT_BYTES)
}

/// [`fused_adamw`] in runs of tensors whose gradients converted to f32 take at most about
/// `converted_bytes` (at least one tensor a run).
fn fused_adamw_in_runs(
    tensors: &AdamWTensors<'_>,
    settings: AdamWSettings,
    converted_bytes: usize,
) -> Result<(), ModelError> {
    let count = tensors.weights.len();
    let lists = [
        handles(tensors.weights.iter().copied()),
        handles(&tensors.grads),
        handles(tensors.exp_avgs.iter().copied()),
        handles(tensors.exp_avg_sqs.iter().copied()),
    ];
    if lists.iter().any(|list| list.len() != count) {
        return Err(ModelError::Input(format!(
            "AdamW: {count} weights but {} gradients, {} first and {} second moments",
            lists[1].len(),
            lists[2].len(),
            lists[3].len()
        )));
    }
    // SAFETY: each list holds `count` handles of tensors alive for the whole call (borrowed by
    // `tensors`); `error` is writable for `capacity` bytes.
    ShimError::check("the fused AdamW step failed", |error, capacity| unsafe {
        drmas_fused_adamw(
            lists[0].as_ptr(),
            lists[1].as_ptr(),
            lists[2].as_ptr(),
            lists[3].as_ptr(),
            count,
            settings.lr,
            settings.betas.0,
            settings.betas.1,
            settings.weight_decay,
            settings.eps,
            settings.step as f64,
            converted_bytes,
            error,
            capacity,
        )
    })
}

/// Copies each of `sources` into the destination at the same index (converting dtypes), in one
/// list operation.
pub fn copy_each(destinations: &[&Tensor], sources: &[&Tensor]) -> Result<(), ModelError> {
    if destinations.len() != sources.len() {
        return Err(ModelError::Input(format!(
            "copying {} tensors into {}",
            sources.len(),
            destinations.len()
        )));
    }
    let (to, from) = (
        handles(destinations.iter().copied()),
        handles(sources.iter().copied()),
    );
    // SAFETY: both lists hold `len` handles of tensors alive for the call; `error` is writable
    // for `capacity` bytes.
    ShimError::check("a list copy failed", |error, capacity| unsafe {
        drmas_copy_each(to.as_ptr(), from.as_ptr(), to.len(), error, capacity)
    })
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;

    fn values(t: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1)).expect("values")
    }

    /// AdamW's update of one weight, in f64 (`torch.optim.AdamW`'s formula).
    fn reference(w: f64, g: f64, m: &mut f64, v: &mut f64, s: AdamWSettings) -> f64 {
        let (b1, b2) = s.betas;
        let w = w * (1.0 - s.lr * s.weight_decay);
        *m = b1 * *m + (1.0 - b1) * g;
        *v = b2 * *v + (1.0 - b2) * g * g;
        let t = s.step as i32;
        let denominator = (*v).sqrt() / (1.0 - b2.powi(t)).sqrt() + s.eps;
        w - s.lr / (1.0 - b1.powi(t)) * *m / denominator
    }

    #[test]
    fn steps_tensors_of_several_shapes_and_dtypes_of_gradient_as_adamw_does() {
        let weights = [
            Tensor::from_slice(&[0.5f32, -1.5, 2.0, 0.25, 1.0, -0.75]).view([2, 3]),
            Tensor::from_slice(&[3.0f32]),
            Tensor::from_slice(&[-0.1f32, 0.2, 0.3, -0.4]),
        ];
        let grads = [
            Tensor::from_slice(&[0.1f32, -0.2, 0.3, 0.0, 1.0, -5.0]).view([2, 3]),
            Tensor::from_slice(&[0.5f32]),
            // A bf16 gradient is converted to f32 for the step.
            Tensor::from_slice(&[1.0f32, -1.0, 0.25, 2.0]).to_kind(Kind::BFloat16),
        ];
        let zeros = || weights.iter().map(Tensor::zeros_like).collect::<Vec<_>>();
        let (exp_avgs, exp_avg_sqs) = (zeros(), zeros());
        let mut expected: Vec<Vec<f64>> = weights.iter().map(values).collect();
        let mut moments: Vec<Vec<(f64, f64)>> =
            expected.iter().map(|w| vec![(0.0, 0.0); w.len()]).collect();
        for step in 1..=3 {
            let settings = AdamWSettings {
                lr: 0.05 * step as f64,
                betas: (0.9, 0.999),
                weight_decay: 0.1,
                eps: 1e-8,
                step,
            };
            let tensors = AdamWTensors {
                weights: weights.iter().collect(),
                grads: grads.iter().map(Tensor::shallow_clone).collect(),
                exp_avgs: exp_avgs.iter().collect(),
                exp_avg_sqs: exp_avg_sqs.iter().collect(),
            };
            fused_adamw(&tensors, settings).expect("fused step");
            for ((w, g), state) in expected.iter_mut().zip(&grads).zip(&mut moments) {
                for ((w, g), (m, v)) in w.iter_mut().zip(values(g)).zip(state.iter_mut()) {
                    *w = reference(*w, g, m, v, settings);
                }
            }
        }
        for (tensor, expected) in weights.iter().zip(&expected) {
            for (got, want) in values(tensor).iter().zip(expected) {
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                    "{got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn runs_of_converted_gradients_step_every_tensor_as_one_run_does() {
        tch::manual_seed(7);
        let shapes: [&[i64]; 5] = [&[4, 6], &[3], &[5, 2], &[1], &[7]];
        let weights: Vec<Tensor> = shapes
            .iter()
            .map(|&shape| Tensor::randn(shape, (Kind::Float, Device::Cpu)))
            .collect();
        // bf16 gradients (converted, counted against the runs' budget) and one f32 one.
        let grads: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(i, &shape)| {
                let grad = Tensor::randn(shape, (Kind::Float, Device::Cpu));
                if i == 1 {
                    grad
                } else {
                    grad.to_kind(Kind::BFloat16)
                }
            })
            .collect();
        let stepped = |converted_bytes: usize| -> Vec<Vec<f64>> {
            let copies = |list: &[Tensor]| list.iter().map(Tensor::copy).collect::<Vec<_>>();
            let weights = copies(&weights);
            let exp_avgs: Vec<Tensor> = weights.iter().map(Tensor::zeros_like).collect();
            let exp_avg_sqs: Vec<Tensor> = weights.iter().map(Tensor::zeros_like).collect();
            for step in 1..=2 {
                let tensors = AdamWTensors {
                    weights: weights.iter().collect(),
                    grads: grads.iter().map(Tensor::shallow_clone).collect(),
                    exp_avgs: exp_avgs.iter().collect(),
                    exp_avg_sqs: exp_avg_sqs.iter().collect(),
                };
                let settings = AdamWSettings {
                    lr: 0.01,
                    betas: (0.9, 0.999),
                    weight_decay: 0.1,
                    eps: 1e-8,
                    step,
                };
                fused_adamw_in_runs(&tensors, settings, converted_bytes).expect("fused step");
            }
            weights
                .iter()
                .chain(&exp_avgs)
                .chain(&exp_avg_sqs)
                .map(values)
                .collect()
        };
        let whole = stepped(usize::MAX);
        // A tensor a run, and runs of a few tensors (40 bytes: 10 f32 values converted).
        for converted_bytes in [1, 40] {
            assert_eq!(
                stepped(converted_bytes),
                whole,
                "runs of {converted_bytes} bytes"
            );
        }
        assert_ne!(whole[0], values(&weights[0]), "the weights moved");
    }

    #[test]
    fn copies_each_source_into_its_destination_in_the_destination_dtype() {
        let destinations = [
            Tensor::zeros([3], (Kind::BFloat16, Device::Cpu)),
            Tensor::zeros([2, 2], (Kind::Float, Device::Cpu)),
        ];
        let sources = [
            Tensor::from_slice(&[1.0f32, 1.0 + 2f32.powi(-12), -3.5]),
            Tensor::from_slice(&[0.1f32, 0.2, 0.3, 0.4]).view([2, 2]),
        ];
        copy_each(
            &destinations.iter().collect::<Vec<_>>(),
            &sources.iter().collect::<Vec<_>>(),
        )
        .expect("copied");
        // 1 + 2⁻¹² rounds to 1 in bf16 (8 bits of mantissa).
        assert_eq!(values(&destinations[0]), [1.0, 1.0, -3.5]);
        assert_eq!(values(&destinations[1]), values(&sources[1]));
        let error = copy_each(&destinations.iter().collect::<Vec<_>>(), &[&sources[0]])
            .expect_err("unequal lists");
        assert!(
            error.to_string().contains("copying 1 tensors into 2"),
            "{error}"
        );
    }
}
