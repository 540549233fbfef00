//! Gradient norms per worker group and per agent, clipping, and the non-finite check.
//!
//! Agents that share one model accumulate into the same gradient buffers, so an agent's own
//! gradient norm is measured as the norm of what its micro-batches added: snapshot the buffers
//! before them ([`GradientLedger::mark`]) and take the norm of the difference after
//! ([`GradientLedger::norm_since_mark`]). That equals the norm of the agent's samples run alone.

use tch::Tensor;

use super::fused_adamw::copy_each;
use super::gradient_lists::{scale_each, squared_norm_sum};
use crate::model::error::ModelError;

/// The trainable tensors of a worker group and a snapshot of their gradients.
pub struct GradientLedger {
    params: Vec<Tensor>,
    marked: Vec<Tensor>,
}

impl GradientLedger {
    /// Tracks `params` (e.g. `VarStore::trainable_variables()`).
    pub fn new(params: Vec<Tensor>) -> Self {
        Self {
            params,
            marked: Vec::new(),
        }
    }

    /// The tracked tensors.
    pub fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// Remembers the gradients as they are now (zero where none has been accumulated yet), in
    /// one list copy.
    pub fn mark(&mut self) -> Result<(), ModelError> {
        let now: Vec<Tensor> = self.params.iter().map(gradient_or_zeros).collect();
        let marked: Vec<Tensor> = now.iter().map(Tensor::empty_like).collect();
        copy_each(
            &marked.iter().collect::<Vec<_>>(),
            &now.iter().collect::<Vec<_>>(),
        )?;
        self.marked = marked;
        Ok(())
    }

    /// ‖g_now − g_mark‖₂ over all tensors: the norm of what was accumulated since [`Self::mark`].
    pub fn norm_since_mark(&self) -> Result<f64, ModelError> {
        let now: Vec<Tensor> = self.params.iter().map(gradient_or_zeros).collect();
        let squares = squared_norm_sum(&now, Some(&self.marked))?;
        Ok(squares.double_value(&[]).sqrt())
    }

    /// The global L2 norm of the accumulated gradients.
    pub fn norm(&self) -> Result<f64, ModelError> {
        global_norm(&self.params)
    }

    /// The index (in [`Self::params`]) of the first tensor whose gradient holds a NaN or ∞,
    /// which means the step must be skipped; `None` when every gradient is finite. It checks
    /// the tensors one by one (two operators each): a finite [`Self::norm`] already says that
    /// every gradient is finite, so this is for when it is not.
    pub fn first_non_finite(&self) -> Option<usize> {
        let (indices, finite): (Vec<usize>, Vec<Tensor>) = self
            .params
            .iter()
            .enumerate()
            .filter_map(|(index, p)| {
                let grad = p.grad();
                grad.defined().then(|| (index, grad.isfinite().all()))
            })
            .unzip();
        if finite.is_empty() {
            return None;
        }
        // One read back to the host for all of them (on a GPU, one synchronisation).
        let non_finite = Tensor::stack(&finite, 0).logical_not().nonzero();
        (non_finite.size()[0] > 0).then(|| indices[non_finite.int64_value(&[0, 0]) as usize])
    }

    /// Scales the gradients, whose global norm is `norm` ([`Self::norm`]), so that it is at
    /// most `max_norm` (≤ 0 disables).
    pub fn clip(&self, norm: f64, max_norm: f64) -> Result<(), ModelError> {
        if max_norm > 0.0 && norm > max_norm {
            let grads = defined_gradients(&self.params);
            scale_each(&grads, max_norm / (norm + 1e-6))?;
        }
        Ok(())
    }
}

fn gradient_or_zeros(param: &Tensor) -> Tensor {
    let grad = param.grad();
    if grad.defined() {
        grad
    } else {
        param.zeros_like()
    }
}

/// The L2 norm of all gradients of `params` together.
pub fn global_norm(params: &[Tensor]) -> Result<f64, ModelError> {
    let grads = defined_gradients(params);
    Ok(squared_norm_sum(&grads, None)?.double_value(&[]).sqrt())
}

/// The gradients of `params` that have been accumulated (the others count as zero).
fn defined_gradients(params: &[Tensor]) -> Vec<Tensor> {
    params
        .iter()
        .map(Tensor::grad)
        .filter(Tensor::defined)
        .collect()
}

#[cfg(test)]
mod tests {
    use tch::nn::{self, Module};
    use tch::{Device, Kind, Tensor};

    use super::*;

    /// Two agents' losses on one shared linear model.
    fn losses(model: &nn::Linear) -> (Tensor, Tensor) {
        let a = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.1, 0.3, -0.2]).view([2, 3]);
        let b = Tensor::from_slice(&[-1.5f32, 0.2, 0.7]).view([1, 3]);
        (
            model.forward(&a).square().sum(Kind::Float),
            (model.forward(&b) * 3.0).sum(Kind::Float),
        )
    }

    #[test]
    fn per_agent_norms_equal_each_agent_run_alone() {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = nn::linear(vs.root(), 3, 2, Default::default());
        let ledger = || GradientLedger::new(vs.trainable_variables());
        let zero = || {
            for p in vs.trainable_variables() {
                let mut g = p.grad();
                if g.defined() {
                    let _ = g.zero_();
                }
            }
        };

        // Alone.
        zero();
        losses(&model).0.backward();
        let alone_a = ledger().norm().expect("norm");
        zero();
        losses(&model).1.backward();
        let alone_b = ledger().norm().expect("norm");

        // Together, accumulating into the same buffers, A then B.
        zero();
        let mut shared = ledger();
        shared.mark().expect("mark");
        losses(&model).0.backward();
        let a = shared.norm_since_mark().expect("norm");
        shared.mark().expect("mark");
        losses(&model).1.backward();
        let b = shared.norm_since_mark().expect("norm");

        assert!(alone_a > 0.0 && alone_b > 0.0);
        assert!((a - alone_a).abs() < 1e-5, "{a} vs {alone_a}");
        assert!((b - alone_b).abs() < 1e-5, "{b} vs {alone_b}");
        assert!(
            shared.norm().expect("norm") <= a + b + 1e-5,
            "triangle inequality"
        );
    }

    #[test]
    fn clipping_bounds_the_norm_and_non_finite_gradients_are_detected() {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = nn::linear(vs.root(), 3, 2, Default::default());
        let ledger = GradientLedger::new(vs.trainable_variables());
        (losses(&model).0 * 100.0).backward();
        let before = ledger.norm().expect("norm");
        assert!(before > 1.0);
        ledger.clip(before, 1.0).expect("clip");
        let after = ledger.norm().expect("norm");
        assert!((after - 1.0).abs() < 1e-4, "{after}");
        assert_eq!(ledger.first_non_finite(), None);

        // A NaN or ∞ in any gradient makes the norm non-finite: then the tensors are checked.
        for (index, value) in [(0, f64::NAN), (1, f64::INFINITY), (1, f64::NEG_INFINITY)] {
            for param in ledger.params() {
                let _ = param.grad().zero_();
            }
            (losses(&model).0 * 100.0).backward();
            let _ = ledger.params()[index].grad().narrow(0, 1, 1).fill_(value);
            let norm = ledger.norm().expect("norm");
            assert!(!norm.is_finite(), "{value} in tensor {index}: norm {norm}");
            assert_eq!(ledger.first_non_finite(), Some(index), "{value}");
        }
    }
}
