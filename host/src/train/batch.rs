//! [`TrainingBatch`]: agent calls packed into left-padded tensors whose responses all end in the
//! last column, so one slice of the hidden states covers every response.

use tch::{Device, Kind, Tensor};

use crate::rollout::AgentCall;

/// One micro-batch of calls as tensors.
///
/// Each call's prompt and response are concatenated and left-padded to the longest, so every
/// response ends at the last column. Response-position tensors are `[B, R]` with `R` the longest
/// response, right-aligned the same way.
pub struct TrainingBatch {
    /// Token ids `[B, T]` (padding 0).
    pub input_ids: Tensor,
    /// Real tokens `[B, T]` (bool).
    pub attention_mask: Tensor,
    /// The response tokens `[B, R]` (the targets of the last `R` predictions).
    pub targets: Tensor,
    /// 1.0 on response tokens, 0.0 on padding, `[B, R]` f32.
    pub response_mask: Tensor,
    /// Sampling log-probabilities `[B, R]` f32 (0 on padding).
    pub old_logprobs: Tensor,
    /// One advantage per call `[B]` f32.
    pub advantages: Tensor,
    /// Sampling temperature per call `[B, 1, 1]` f32 (1 for greedy calls).
    pub temperatures: Tensor,
    /// Total length `T`.
    pub total_len: i64,
    /// Longest response `R`.
    pub response_len: i64,
    /// Real response tokens in the batch.
    pub response_tokens: usize,
}

impl TrainingBatch {
    /// Packs `calls` with their `advantages` onto `device`.
    ///
    /// # Panics
    /// If a call has an empty prompt or response, or `calls` is empty (the trainer never
    /// builds such batches).
    pub fn new(calls: &[&AgentCall], advantages: &[f64], device: Device) -> Self {
        assert!(!calls.is_empty(), "a training batch needs calls");
        let total = calls
            .iter()
            .map(|c| c.prompt.len() + c.response.len())
            .max()
            .unwrap_or(0);
        let response = calls.iter().map(|c| c.response.len()).max().unwrap_or(0);
        assert!(
            calls
                .iter()
                .all(|c| !c.prompt.is_empty() && !c.response.is_empty()),
            "every call needs a prompt and a response"
        );
        let b = calls.len();
        let mut ids = vec![0i64; b * total];
        let mut mask = vec![false; b * total];
        let mut targets = vec![0i64; b * response];
        let mut response_mask = vec![0f32; b * response];
        let mut old = vec![0f32; b * response];
        for (row, call) in calls.iter().enumerate() {
            let len = call.prompt.len() + call.response.len();
            let start = row * total + total - len;
            for (slot, &token) in call.prompt.iter().chain(&call.response).enumerate() {
                ids[start + slot] = token;
                mask[start + slot] = true;
            }
            let start = row * response + response - call.response.len();
            targets[start..start + call.response.len()].copy_from_slice(&call.response);
            response_mask[start..start + call.response.len()].fill(1.0);
            old[start..start + call.response.len()].copy_from_slice(&call.logprobs);
        }
        let temperatures: Vec<f32> = calls
            .iter()
            .map(|c| {
                if c.temperature > 0.0 {
                    c.temperature as f32
                } else {
                    1.0
                }
            })
            .collect();
        let advantages: Vec<f32> = advantages.iter().map(|&a| a as f32).collect();
        let shape = |n: usize| [b as i64, n as i64];
        Self {
            input_ids: Tensor::from_slice(&ids)
                .view(shape(total))
                .to_device(device),
            attention_mask: Tensor::from_slice(&mask)
                .view(shape(total))
                .to_device(device),
            targets: Tensor::from_slice(&targets)
                .view(shape(response))
                .to_device(device),
            response_mask: Tensor::from_slice(&response_mask)
                .view(shape(response))
                .to_device(device),
            old_logprobs: Tensor::from_slice(&old)
                .view(shape(response))
                .to_device(device),
            advantages: Tensor::from_slice(&advantages).to_device(device),
            temperatures: Tensor::from_slice(&temperatures)
                .view([b as i64, 1, 1])
                .to_device(device),
            total_len: total as i64,
            response_len: response as i64,
            response_tokens: calls.iter().map(|c| c.response.len()).sum(),
        }
    }

    /// The calls' sequences in the batch.
    pub fn len(&self) -> usize {
        self.advantages.size()[0] as usize
    }

    /// Whether the batch has no calls (never true: see [`Self::new`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The hidden states that predict the response tokens: columns `T − R − 1 .. T − 1` of
    /// `hidden` `[B, T, H]`.
    pub fn response_predictors(&self, hidden: &Tensor) -> Tensor {
        hidden.narrow(1, self.total_len - self.response_len - 1, self.response_len)
    }

    /// Log-probabilities `[B, R]` of the targets and, when `with_entropy`, the entropy `[B, R]`
    /// of the predicted distributions, from logits `[B, R, V]` at the calls' temperatures.
    pub fn token_logprobs(&self, logits: &Tensor, with_entropy: bool) -> (Tensor, Option<Tensor>) {
        let log_probs = (logits.to_kind(Kind::Float) / &self.temperatures).log_softmax(-1, None);
        let chosen = log_probs
            .gather(2, &self.targets.unsqueeze(-1), false)
            .squeeze_dim(-1);
        let entropy = with_entropy
            .then(|| -(log_probs.exp() * &log_probs).sum_dim_intlist(-1, false, Kind::Float));
        (chosen, entropy)
    }
}
