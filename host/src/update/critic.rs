//! [`Critic`]: a worker group's value model — a copy of the group's model with a linear value
//! head on its final hidden states — and its update on PPO's clipped value loss.

use tch::nn::VarStore;
use tch::{Kind, Tensor};

use super::mini_batch::split_by_episode;
use super::step::batching_order;
use super::value_loss::{value_loss, ValueLossStats};
use super::{AdamW, BatchTotals, GradientLedger, MicroBatch, TrainingBatch};
use crate::advantage::PerToken;
use crate::config::CriticSection;
use crate::model::error::ModelError;
use crate::model::llama::{move_variables, Llama};
use crate::rollout::AgentCall;

/// The value head's variables, as checkpoints name them.
const HEAD: &str = "value_head";

/// A value model: V(state) for the state before each response token, read off the model's
/// final hidden state at the position that predicts the token.
pub struct Critic {
    model: Llama,
    head: VarStore,
    weight: Tensor,
    bias: Tensor,
    /// Its optimizer, over the model and the head.
    pub optimizer: AdamW,
}

/// What one critic update did, averaged over its optimizer steps.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CriticReport {
    /// The value loss and clip fraction, each step's over its mini-batch, averaged.
    pub stats: ValueLossStats,
    /// The gradient norm before clipping, averaged over the steps taken (NaN when every step
    /// was skipped).
    pub grad_norm: f64,
    /// Optimizer steps skipped because a loss or gradient was not finite.
    pub skipped_steps: usize,
}

impl Critic {
    /// A critic starting from `policy`'s weights (without its LoRA adapters) and a value head
    /// of zeros, so its first values are 0 and its first advantages the plain returns.
    pub fn new(policy: &Llama, weight_decay: f64) -> Result<Self, ModelError> {
        let model = policy.duplicate()?;
        let head = VarStore::new(model.device());
        let root = head.root();
        let hidden = model.config().hidden_size as i64;
        let weight = (&root / HEAD).zeros("weight", &[1, hidden]);
        let bias = (&root / HEAD).zeros("bias", &[1]);
        let mut params: Vec<(String, Tensor)> = model
            .var_store()
            .variables()
            .into_iter()
            .chain(head.variables())
            .collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Self {
            optimizer: AdamW::new(params, weight_decay),
            model,
            head,
            weight,
            bias,
        })
    }

    /// The value of each response token's state of `calls`, computed without gradients in
    /// micro-batches of size `micro_batch`.
    pub fn values(
        &self,
        calls: &[&AgentCall],
        micro_batch: MicroBatch,
    ) -> Result<PerToken, ModelError> {
        let mut rows: Vec<Vec<f64>> = vec![Vec::new(); calls.len()];
        let order = batching_order((0..calls.len()).collect(), calls);
        tch::no_grad(|| {
            for chunk in micro_batch.cut(&order, calls) {
                let micro: Vec<&AgentCall> = chunk.iter().map(|&i| calls[i]).collect();
                let batch = self.batch(&micro);
                // One copy to the host per micro-batch, then each call's row.
                let values = self
                    .predict(&batch, false)?
                    .to_device(tch::Device::Cpu)
                    .to_kind(Kind::Double);
                for (row, &i) in chunk.iter().enumerate() {
                    let length = calls[i].response.len() as i64;
                    rows[i] = Vec::<f64>::try_from(values.get(row as i64).narrow(0, 0, length))?;
                }
            }
            Ok::<_, ModelError>(())
        })?;
        Ok(PerToken::from_rows(rows))
    }

    /// The clipped value loss of `calls` against their `returns`, with `old_values` the values
    /// the returns were computed with (all aligned with `calls`): `epochs` passes, each one
    /// optimizer step per mini-batch of episodes (`mini_batches` of them, as the policy's).
    pub fn update(
        &mut self,
        calls: &[&AgentCall],
        returns: &PerToken,
        old_values: &PerToken,
        settings: &CriticSection,
        mini_batches: usize,
        epochs: usize,
    ) -> Result<CriticReport, ModelError> {
        let mut report = CriticReport::default();
        if calls.is_empty() {
            return Ok(report);
        }
        let parts = split_by_episode(calls, mini_batches);
        let (mut steps, mut taken, mut norm_sum) = (0.0, 0.0, 0.0);
        for _ in 0..epochs.max(1) {
            for part in &parts {
                let step = self.step(calls, part, returns, old_values, settings)?;
                report.stats.loss += step.stats.loss;
                report.stats.clip_fraction += step.stats.clip_fraction;
                steps += 1.0;
                if step.skipped_steps > 0 {
                    report.skipped_steps += 1;
                } else {
                    taken += 1.0;
                    norm_sum += step.grad_norm;
                }
            }
        }
        if steps > 0.0 {
            report.stats.loss /= steps;
            report.stats.clip_fraction /= steps;
        }
        report.grad_norm = if taken > 0.0 {
            norm_sum / taken
        } else {
            f64::NAN
        };
        Ok(report)
    }

    /// One optimizer step on the calls `indices` of `calls` (see [`Self::update`]).
    fn step(
        &mut self,
        calls: &[&AgentCall],
        indices: &[usize],
        returns: &PerToken,
        old_values: &PerToken,
        settings: &CriticSection,
    ) -> Result<CriticReport, ModelError> {
        let mut report = CriticReport::default();
        let totals = BatchTotals::of_calls(calls, indices);
        self.optimizer.zero_grad()?;
        let ledger =
            GradientLedger::new(self.optimizer.params().map(Tensor::shallow_clone).collect());
        let order = batching_order(indices.to_vec(), calls);
        for chunk in MicroBatch::for_critic(settings).cut(&order, calls) {
            let micro: Vec<&AgentCall> = chunk.iter().map(|&i| calls[i]).collect();
            let batch = self.batch(&micro);
            let predictions = self.predict(&batch, true)?;
            let (loss, stats) = value_loss(
                &predictions,
                &batch.per_token(&old_values.select(chunk)),
                &batch.per_token(&returns.select(chunk)),
                &batch.response_mask,
                settings.cliprange_value,
                totals,
            );
            report.stats.loss += stats.loss;
            report.stats.clip_fraction += stats.clip_fraction;
            loss.backward();
        }
        let grad_norm = ledger.norm()?;
        // A finite norm means every gradient is finite; only a non-finite one needs the search.
        let non_finite_gradient = !grad_norm.is_finite() && ledger.first_non_finite().is_some();
        if !report.stats.loss.is_finite() || non_finite_gradient {
            report.skipped_steps = 1;
            report.grad_norm = f64::NAN;
            self.optimizer.zero_grad()?;
            return Ok(report);
        }
        ledger.clip(grad_norm, settings.grad_clip)?;
        report.grad_norm = grad_norm;
        self.optimizer.step(settings.learning_rate)?;
        self.optimizer.zero_grad()?;
        Ok(report)
    }

    /// Every weight, the model's under their HF names and the head's as `value_head.weight` /
    /// `value_head.bias`, for a checkpoint.
    pub fn weights(&self) -> Vec<(String, Tensor)> {
        let mut weights: Vec<(String, Tensor)> = self
            .model
            .var_store()
            .variables()
            .into_iter()
            .chain(self.head.variables())
            .collect();
        weights.sort_by(|a, b| a.0.cmp(&b.0));
        weights
    }

    /// Restores what [`Self::weights`] gave; every weight must be present with its shape.
    pub fn load_weights(&mut self, saved: &[(String, Tensor)]) -> Result<(), ModelError> {
        tch::no_grad(|| {
            for (name, mut weight) in self.weights() {
                let Some((_, value)) = saved.iter().find(|(n, _)| *n == name) else {
                    return Err(ModelError::MissingTensor(format!("critic weight {name}")));
                };
                if value.size() != weight.size() {
                    return Err(ModelError::Shape {
                        tensor: format!("critic weight {name}"),
                        expected: weight.size(),
                        found: value.size().iter().map(|&d| d as usize).collect(),
                    });
                }
                weight.copy_(value);
            }
            Ok(())
        })
    }

    /// Moves the model, the head and the optimizer's moments to `device` (values kept).
    pub fn to_device(&mut self, device: tch::Device) {
        self.model.to_device(device);
        move_variables(&mut self.head, device);
        self.optimizer.to_device(device);
    }

    /// `calls` as a training batch (its advantages unused: zeros).
    fn batch(&self, calls: &[&AgentCall]) -> TrainingBatch {
        let lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
        let zeros = PerToken::broadcast(&vec![0.0; calls.len()], &lengths);
        TrainingBatch::new(calls, &zeros, self.model.device())
    }

    /// The head's values `[B, R]` f32 of a batch's response states.
    fn predict(&self, batch: &TrainingBatch, training: bool) -> Result<Tensor, ModelError> {
        let hidden = batch.response_hidden(&self.model, None, training)?;
        Ok(hidden
            .to_kind(Kind::Float)
            .linear(&self.weight, Some(&self.bias))
            .squeeze_dim(-1))
    }
}
