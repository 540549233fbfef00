//! [`TrainingBatch`]: agent calls as tensors, each distinct prompt once and the responses that
//! continue it after, so a prompt shared by a group's samples is trained through once; or each
//! call's whole sequence, in one pass, when that costs less ([`prompts_run_once`]).

use std::collections::HashMap;

use tch::{Device, Kind, Tensor};

use crate::advantage::PerToken;
use crate::model::error::ModelError;
use crate::model::layers::AdapterRows;
use crate::model::llama::{Checkpoints, Llama};
use crate::rollout::AgentCall;

/// One micro-batch of calls as tensors.
///
/// The calls' distinct prompts are left-padded to the longest, so every prompt ends in column
/// `P − 1`; responses are right-padded, so each starts where its prompt ends. Response-position
/// tensors are `[B, R]` with `R` the longest response.
///
/// When calls share prompts, the prompts can run through the model once and the responses after
/// them, in a second pass ([`Llama::forward_continuations`]). That second pass costs a whole
/// pass of operators (on a GPU, of kernel launches), so when the shared prompts save too few
/// tokens to pay for it ([`prompts_run_once`]) — always when no two calls share one — each call
/// is one row of `prompt_ids` holding its whole sequence, its prompt followed by its response
/// inputs, and one pass computes everything.
pub struct TrainingBatch {
    /// The distinct prompts `[G, P]` (padding 0); in one pass, each call's whole sequence,
    /// `[B, P + R − 1]`: its prompt left-padded to `P`, then its response but the last token,
    /// right-padded.
    pub prompt_ids: Tensor,
    /// Real tokens of `prompt_ids` (bool).
    pub prompt_mask: Tensor,
    /// The prompt each call continues, `[B]` int64 (rows of `prompt_ids`; in one pass, each
    /// call's own row).
    pub prompt_of_call: Tensor,
    /// Each call's response but its last token, `[B, R − 1]` right-padded, with its real tokens
    /// (bool): the inputs whose outputs predict the second response token on. `None` when
    /// `R` = 1 or in one pass (`prompt_ids` then holds every input).
    pub response_inputs: Option<(Tensor, Tensor)>,
    /// `P`: the column after every prompt's last token.
    pub prompt_width: i64,
    /// The response tokens `[B, R]`.
    pub targets: Tensor,
    /// 1.0 on response tokens, 0.0 on padding, `[B, R]` f32.
    pub response_mask: Tensor,
    /// Sampling log-probabilities `[B, R]` f32 (0 on padding).
    pub old_logprobs: Tensor,
    /// Advantages per response token `[B, R]` f32 (0 on padding).
    pub advantages: Tensor,
    /// Sampling temperature per call `[B, 1, 1]` f32 (1 for greedy calls); the logits are
    /// divided by it, as they were for sampling.
    pub temperatures: Tensor,
    /// Longest response `R`.
    pub response_len: i64,
    /// Each call's response tokens.
    pub response_lengths: Vec<usize>,
    /// Real response tokens in the batch.
    pub response_tokens: usize,
    /// Tokens the forward pass runs, padding included: `G × P + B × (R − 1)`, or
    /// `B × (P + R − 1)` in one pass.
    pub forward_tokens: usize,
}

/// Whether `calls` calls with `distinct` distinct prompts (left-padded to `prompt_width`) and
/// responses of at most `inputs` + 1 tokens train each prompt once, before the responses that
/// continue it (two passes), rather than each call's whole sequence in one pass, on `device`.
///
/// The prompts pass saves `(calls − distinct) × prompt_width` tokens and costs a pass of
/// operators. On the CPU, which computes the tokens one operator after another, any token saved
/// is time saved. On an accelerator every operator is a kernel launch whatever its size, and a
/// training pass of a small batch takes about as long to launch as to compute (the 1.5B model's
/// 16 × 512-token step on an H100), so the prompts pass is taken only when it removes at least
/// half the tokens of the one pass.
pub fn prompts_run_once(
    calls: usize,
    distinct: usize,
    prompt_width: usize,
    inputs: usize,
    device: Device,
) -> bool {
    let saved = calls.saturating_sub(distinct) * prompt_width;
    match device {
        Device::Cpu => saved > 0,
        _ => saved > 0 && 2 * saved >= calls * (prompt_width + inputs),
    }
}

/// Per-token values of each row (one row per call) as a `[rows, width]` f32 tensor on `device`,
/// zero past each row's end.
pub fn padded_rows(rows: &[&[f32]], width: i64, device: Device) -> Tensor {
    let width_usize = width as usize;
    let mut values = vec![0f32; rows.len() * width_usize];
    for (row, data) in rows.iter().enumerate() {
        values[row * width_usize..row * width_usize + data.len()].copy_from_slice(data);
    }
    Tensor::from_slice(&values)
        .view([rows.len() as i64, width])
        .to_device(device)
}

/// `rows` in `width` columns each, row `i` (its two parts one after the other) after
/// `padding[i]` columns of padding: ids (0 for padding) and which entries are real, flat, row
/// after row.
fn pad_rows(rows: &[[&[i64]; 2]], padding: &[usize], width: usize) -> (Vec<i64>, Vec<bool>) {
    let mut ids = vec![0i64; rows.len() * width];
    let mut real = vec![false; rows.len() * width];
    for ((row, parts), padding) in rows.iter().enumerate().zip(padding) {
        let mut start = row * width + padding;
        for part in parts {
            ids[start..start + part.len()].copy_from_slice(part);
            real[start..start + part.len()].fill(true);
            start += part.len();
        }
    }
    (ids, real)
}

impl TrainingBatch {
    /// Packs `calls` with their `advantages` (row `i`: one per response token of `calls[i]`)
    /// onto `device`. Calls whose prompts are equal token for token share one row of
    /// `prompt_ids` when [`prompts_run_once`] says so; otherwise each call's whole sequence is
    /// its row.
    ///
    /// # Panics
    /// If a call has an empty prompt or response, `calls` is empty (the trainer never builds
    /// such batches), or an advantage row is not as long as its call's response.
    pub fn new(calls: &[&AgentCall], advantages: &PerToken, device: Device) -> Self {
        Self::laid_out(calls, advantages, device, false)
    }

    /// [`Self::new`] with each call's whole sequence as its row, one pass, whatever prompts the
    /// calls share.
    ///
    /// # Panics
    /// As [`Self::new`].
    pub fn in_one_pass(calls: &[&AgentCall], advantages: &PerToken, device: Device) -> Self {
        Self::laid_out(calls, advantages, device, true)
    }

    fn laid_out(
        calls: &[&AgentCall],
        advantages: &PerToken,
        device: Device,
        one_pass: bool,
    ) -> Self {
        assert!(!calls.is_empty(), "a training batch needs calls");
        assert!(
            calls
                .iter()
                .all(|c| !c.prompt.is_empty() && !c.response.is_empty()),
            "every call needs a prompt and a response"
        );
        let mut prompt_rows: HashMap<&[i64], i64> = HashMap::new();
        let mut prompts: Vec<&[i64]> = Vec::new();
        let prompt_of_call: Vec<i64> = calls
            .iter()
            .map(|call| {
                *prompt_rows.entry(&call.prompt).or_insert_with(|| {
                    prompts.push(&call.prompt);
                    prompts.len() as i64 - 1
                })
            })
            .collect();
        let prompt_len = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        let b = calls.len();
        let response_lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
        let response = response_lengths.iter().copied().max().unwrap_or(0);
        let inputs = response - 1;
        let once = !one_pass && prompts_run_once(b, prompts.len(), prompt_len, inputs, device);
        // Each call's response but the last token: the inputs that predict the rest.
        let response_inputs: Vec<&[i64]> = calls
            .iter()
            .map(|c| &c.response[..c.response.len() - 1])
            .collect();
        // The first pass's rows, each prompt ending in column `P − 1`: the distinct prompts, or
        // each call's prompt followed by its response inputs.
        let (rows, width, prompt_of_call): (Vec<[&[i64]; 2]>, usize, Vec<i64>) = if once {
            let rows = prompts.iter().map(|&p| [p, &[]]).collect();
            (rows, prompt_len, prompt_of_call)
        } else {
            let rows = calls.iter().zip(&response_inputs);
            (
                rows.map(|(c, &r)| [&c.prompt[..], r]).collect(),
                prompt_len + inputs,
                (0..b as i64).collect(),
            )
        };
        let padding: Vec<usize> = rows.iter().map(|[p, _]| prompt_len - p.len()).collect();
        let (prompt_ids, prompt_mask) = pad_rows(&rows, &padding, width);
        let mut targets = vec![0i64; b * response];
        let mut response_mask = vec![0f32; b * response];
        for (row, call) in calls.iter().enumerate() {
            let (start, len) = (row * response, call.response.len());
            targets[start..start + len].copy_from_slice(&call.response);
            response_mask[start..start + len].fill(1.0);
        }
        let sampled: Vec<&[f32]> = calls.iter().map(|c| &c.logprobs[..]).collect();
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
        let tensor = |values: Tensor, rows: usize, columns: usize| {
            values.view([rows as i64, columns as i64]).to_device(device)
        };
        Self {
            prompt_ids: tensor(Tensor::from_slice(&prompt_ids), rows.len(), width),
            prompt_mask: tensor(Tensor::from_slice(&prompt_mask), rows.len(), width),
            prompt_of_call: Tensor::from_slice(&prompt_of_call).to_device(device),
            response_inputs: (once && inputs > 0).then(|| {
                let rows: Vec<[&[i64]; 2]> = response_inputs.iter().map(|&r| [r, &[]]).collect();
                let (ids, real) = pad_rows(&rows, &vec![0; b], inputs);
                (
                    tensor(Tensor::from_slice(&ids), b, inputs),
                    tensor(Tensor::from_slice(&real), b, inputs),
                )
            }),
            prompt_width: prompt_len as i64,
            targets: tensor(Tensor::from_slice(&targets), b, response),
            response_mask: tensor(Tensor::from_slice(&response_mask), b, response),
            old_logprobs: padded_rows(&sampled, response as i64, device),
            advantages: per_token_tensor(advantages, &response_lengths, response).to_device(device),
            temperatures: Tensor::from_slice(&temperatures)
                .view([b as i64, 1, 1])
                .to_device(device),
            response_len: response as i64,
            response_lengths,
            response_tokens: calls.iter().map(|c| c.response.len()).sum(),
            forward_tokens: rows.len() * width + if once { b * inputs } else { 0 },
        }
    }

    /// The calls in the batch.
    pub fn len(&self) -> usize {
        self.targets.size()[0] as usize
    }

    /// Whether the batch has no calls (never true: see [`Self::new`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The distinct prompts in the batch.
    pub fn prompts(&self) -> usize {
        self.prompt_ids.size()[0] as usize
    }

    /// The logits `[B, R, vocab]` that predict the response tokens, at each call's
    /// temperature: [`Self::response_hidden`] through the LM head.
    ///
    /// The temperature divides the hidden states before the LM head (`(h / T) · Wᵀ = (h · Wᵀ) /
    /// T`): a tensor `vocab / hidden` (85 for SmolLM2) times smaller than the logits, which
    /// spares a logits-sized tensor and its gradient per micro-batch.
    pub fn response_logits(
        &self,
        model: &Llama,
        adapter: Option<usize>,
        training: bool,
    ) -> Result<Tensor, ModelError> {
        let hidden = self.response_hidden(model, adapter, training)?;
        Ok(self.logits_of(model, &hidden))
    }

    /// The final hidden states `[B, R, hidden]` of the positions that predict the response
    /// tokens: each call's last prompt position, then its response positions but the last —
    /// the states a critic values. The prompts run through `model` once
    /// ([`Llama::forward_prompts`]) and the responses after them
    /// ([`Llama::forward_continuations`]) — or, when no prompt is shared, the whole sequences in
    /// one pass ([`Llama::forward_hidden_with`]) — every row through LoRA adapter `adapter`
    /// (`None`: the base model), with dropout when `training` (a prompt's dropout mask is then
    /// drawn once and shared by its responses, as its forward pass is).
    pub fn response_hidden(
        &self,
        model: &Llama,
        adapter: Option<usize>,
        training: bool,
    ) -> Result<Tensor, ModelError> {
        let rows = |n: usize| self.adapter_rows(adapter, n, training);
        let Some((ids, mask)) = &self.response_inputs else {
            let hidden = model.forward_hidden_with(
                &self.prompt_ids,
                Some(&self.prompt_mask),
                None,
                &rows(self.prompts()),
            )?;
            return Ok(self.hidden_of(&hidden, None));
        };
        let (prompt_hidden, prefix) = model.forward_prompts(
            &self.prompt_ids,
            Some(&self.prompt_mask),
            &rows(self.prompts()),
        )?;
        let responses = model.forward_continuations(
            &prefix,
            &self.prompt_of_call,
            ids,
            Some(mask),
            &rows(self.len()),
        )?;
        Ok(self.hidden_of(&prompt_hidden, Some(responses)))
    }

    /// [`Self::response_hidden`] in training, through [`Llama::forward_checkpointed`]: the
    /// same hidden states, with only each layer's input kept. The returned [`Checkpoints`]'
    /// backward must run after the hidden states' own.
    pub fn response_hidden_checkpointed<'a>(
        &'a self,
        model: &'a Llama,
        adapter: Option<usize>,
    ) -> Result<(Tensor, Checkpoints<'a>), ModelError> {
        let responses = self.response_inputs.as_ref().map(|(ids, mask)| {
            (
                ids,
                Some(mask),
                &self.prompt_of_call,
                self.adapter_rows(adapter, self.len(), true),
            )
        });
        let (prompt_hidden, responses, checkpoints) = model.forward_checkpointed(
            &self.prompt_ids,
            Some(&self.prompt_mask),
            self.adapter_rows(adapter, self.prompts(), true),
            responses,
        )?;
        Ok((self.hidden_of(&prompt_hidden, responses), checkpoints))
    }

    /// `rows` (one value per response token of each call) laid out as the response tokens are,
    /// `[B, R]` f32 with 0 on padding.
    ///
    /// # Panics
    /// If `rows` does not have one row per call, each as long as the call's response.
    pub fn per_token(&self, rows: &PerToken) -> Tensor {
        per_token_tensor(rows, &self.response_lengths, self.response_len as usize)
            .to_device(self.targets.device())
    }

    /// Every one of `n` rows through `adapter`, with dropout when `training`.
    fn adapter_rows(&self, adapter: Option<usize>, n: usize, training: bool) -> AdapterRows {
        AdapterRows::new(&vec![adapter; n], self.prompt_ids.device(), training)
    }

    /// The hidden states predicting the response tokens from the prompts' final hidden states
    /// and the responses' (see [`Self::response_hidden`]); without responses, from columns
    /// `P − 1 ..` of the prompts' (each call's whole sequence, or the prompts alone when
    /// `R` = 1).
    fn hidden_of(&self, prompt_hidden: &Tensor, responses: Option<Tensor>) -> Tensor {
        let predicting = |columns: i64| {
            let columns = prompt_hidden.narrow(1, self.prompt_width - 1, columns);
            // A row per call already when no prompt is shared (calls in order).
            if self.prompts() == self.len() {
                columns
            } else {
                columns.index_select(0, &self.prompt_of_call)
            }
        };
        match responses {
            None => predicting(self.response_len),
            Some(responses) => Tensor::cat(&[predicting(1), responses], 1),
        }
    }

    /// The logits of `hidden` at each call's temperature (see [`Self::response_logits`]).
    fn logits_of(&self, model: &Llama, hidden: &Tensor) -> Tensor {
        model.logits(&self.at_temperatures(hidden))
    }

    /// `hidden` `[B, R, hidden]` divided by each call's sampling temperature: what the LM head
    /// turns into the logits the sampler drew from.
    pub(crate) fn at_temperatures(&self, hidden: &Tensor) -> Tensor {
        hidden / self.temperatures.to_kind(hidden.kind())
    }

    /// Log-probabilities `[B, R]` of the targets and, when `with_entropy`, the entropy `[B, R]`
    /// of the predicted distributions, from [`Self::response_logits`] (in f32 whatever the
    /// model's dtype).
    pub fn token_logprobs(&self, logits: &Tensor, with_entropy: bool) -> (Tensor, Option<Tensor>) {
        target_logprobs(logits, &self.targets, with_entropy)
    }
}

/// The log-probabilities of `targets` under `logits` (`[..., vocab]`, one more dimension than
/// `targets`) and, when `with_entropy`, the entropies of the distributions, in f32.
pub(super) fn target_logprobs(
    logits: &Tensor,
    targets: &Tensor,
    with_entropy: bool,
) -> (Tensor, Option<Tensor>) {
    let log_probs = logits.log_softmax(-1, Kind::Float);
    let chosen = log_probs
        .gather(-1, &targets.unsqueeze(-1), false)
        .squeeze_dim(-1);
    let entropy = with_entropy
        .then(|| -(log_probs.exp() * &log_probs).sum_dim_intlist(-1, false, Kind::Float));
    (chosen, entropy)
}

/// `rows` right-padded with 0 to `width` columns, `[rows, width]` f32 on the CPU.
///
/// # Panics
/// If `rows` does not have one row per entry of `lengths`, each of that length.
fn per_token_tensor(rows: &PerToken, lengths: &[usize], width: usize) -> Tensor {
    assert_eq!(
        rows.lengths(),
        lengths,
        "one value per response token of each call"
    );
    let mut flat = vec![0f32; lengths.len() * width];
    for (i, row) in rows.rows().enumerate() {
        for (slot, &value) in flat[i * width..].iter_mut().zip(row) {
            *slot = value as f32;
        }
    }
    Tensor::from_slice(&flat).view([lengths.len() as i64, width as i64])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_run_once_on_the_cpu_whenever_shared_and_on_a_gpu_when_they_halve_the_tokens() {
        let gpu = Device::Cuda(0);
        for device in [Device::Cpu, gpu] {
            assert!(!prompts_run_once(8, 8, 100, 200, device), "nothing shared");
        }
        // 8 calls on 2 prompts of 32 tokens with 480-token responses: 192 of 4,088 tokens saved.
        assert!(prompts_run_once(8, 2, 32, 479, Device::Cpu));
        assert!(!prompts_run_once(8, 2, 32, 479, gpu));
        // 8 samples of one 1,000-token prompt with 200-token responses: 7,000 of 9,592 saved.
        assert!(prompts_run_once(8, 1, 1000, 199, gpu));
        // Exactly half: 4 calls of one 10-token prompt, 5 inputs each (30 of 60 saved).
        assert!(prompts_run_once(4, 1, 10, 5, gpu));
        assert!(!prompts_run_once(4, 1, 10, 6, gpu));
    }
}
