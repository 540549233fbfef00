//! [`SamplingParams`] and the batched [`Sampler`]: temperature, top-k and top-p (nucleus)
//! filtering, then inverse-CDF sampling with one uniform per row from the run's [`SeededRng`].

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use crate::model::backend::{self, Backend};
use crate::model::error::ModelError;
use crate::rng::SeededRng;

/// The smallest temperature above 0 (greedy) that sampling and training take: the logits are
/// divided by it, in f32 or bf16, and closer to 0 that overflows (at 1e-40 every update of a
/// run came out non-finite) while it already picks the most likely token.
pub const MIN_TEMPERATURE: f64 = 1e-6;

/// Whether sampling takes `temperature`: 0 (greedy) or finite and at least
/// [`MIN_TEMPERATURE`].
pub fn temperature_is_valid(temperature: f64) -> bool {
    temperature == 0.0 || (temperature.is_finite() && temperature >= MIN_TEMPERATURE)
}

/// How to pick the next token. `temperature == 0.0` means greedy (argmax).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    /// Divides the logits before filtering and sampling; 0 picks the most likely token.
    pub temperature: f64,
    /// Nucleus sampling: keeps the most likely tokens whose probabilities (after top-k) add up
    /// to at least this much, in `(0, 1]`; 1 turns it off.
    pub top_p: f64,
    /// Keeps only the `top_k` most likely tokens; 0 turns it off.
    pub top_k: usize,
}

impl SamplingParams {
    /// Always the most likely token.
    pub const GREEDY: Self = Self {
        temperature: 0.0,
        top_p: 1.0,
        top_k: 0,
    };

    /// Plain sampling at `temperature`, no top-k or top-p.
    pub fn with_temperature(temperature: f64) -> Self {
        Self {
            temperature,
            ..Self::default()
        }
    }

    /// Whether this picks the most likely token (`temperature == 0`).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// What is wrong with these parameters, if anything.
    pub fn check(&self) -> Result<(), String> {
        let t = self.temperature;
        if !temperature_is_valid(t) {
            return Err(format!(
                "temperature must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:e}, found {t}"
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], found {}", self.top_p));
        }
        Ok(())
    }

    /// The temperature logprobs are computed at: the temperature, or 1 when greedy.
    pub fn logprob_temperature(&self) -> f64 {
        if self.is_greedy() {
            1.0
        } else {
            self.temperature
        }
    }

    /// Whether sampling with these parameters drops any token (top-k or top-p is on).
    fn truncates(&self) -> bool {
        !self.is_greedy() && (self.top_k > 0 || self.top_p < 1.0)
    }
}

impl Default for SamplingParams {
    /// Temperature 1, no top-k or top-p: samples from the model's own distribution.
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
        }
    }
}

/// Candidate counts tried for top-p without top-k before sorting the whole vocabulary: the
/// nucleus usually holds few tokens, and `topk` of a few hundred is some 25 times cheaper than a
/// sort of SmolLM2's 49,152 (measured on CPU at batch 16 and 64).
const CANDIDATES: [i64; 2] = [256, 4096];

/// Per-row sampling parameters of a batch as `[B, 1]` tensors, and the sampling itself.
///
/// Every row is drawn with one uniform from the [`SeededRng`] by inverse CDF: the cumulative
/// sum of its (filtered) probabilities is searched for `u × total`. Rows without top-k/top-p
/// need no sort (any token order works); rows with them use the most likely tokens by `topk`
/// (enough for top-k, and checked to hold the whole nucleus for top-p, else more). Greedy rows
/// take the argmax and draw nothing. A batch whose rows all sample without top-k or top-p is
/// offered to the [`Backend`] first ([`Backend::sample`]), which may draw it in one pass per
/// row.
#[derive(Debug)]
pub struct Sampler {
    params: Vec<SamplingParams>,
    /// Each row's temperature, as [`Self::temperature`] holds it, for [`Backend::sample`].
    temperatures: Vec<f32>,
    /// `[B, 1]` f32: the temperature the logits are divided by (1 for greedy rows).
    temperature: Tensor,
    /// `[B, 1]` f32: top-p, 2 where off (more than any cumulative probability).
    top_p: Tensor,
    /// `[B, 1]` int64: top-k, the vocabulary size where off.
    top_k: Tensor,
    /// `[B, 1]` bool: greedy rows.
    greedy: Tensor,
    /// `[B, 1]` bool: rows whose sampling drops tokens (top-k or top-p).
    truncating: Tensor,
    /// `[B, 1]` bool: rows with top-k off.
    top_k_off: Tensor,
    /// `[B, 1]` bool: truncating rows with top-p alone, whose nucleus must fit the candidates.
    top_p_only: Tensor,
    /// The largest top-k of a truncating row (0 if none).
    largest_top_k: i64,
    /// Where in [`CANDIDATES`] (its length: the whole vocabulary) the next top-p draw starts.
    level: usize,
    /// `[1, V]` int64: `0..V`, to compare with `top_k`.
    ranks: Tensor,
    /// The uniforms of the next sample, one per row ([`Self::prepare_draws`]).
    uniforms: Vec<f32>,
    /// `uniforms` as a `[B, 1]` tensor on the device, from [`Self::prepare_draws`] until the
    /// sample that uses them.
    prepared: Option<Tensor>,
    vocab: i64,
    device: Device,
    backend: Arc<dyn Backend>,
}

impl Sampler {
    /// A sampler for rows with `params` over a vocabulary of `vocab` tokens on `device`, all
    /// in libtorch ([`Self::with_backend`] offers plain draws to another backend).
    pub fn new(params: &[SamplingParams], vocab: i64, device: Device) -> Self {
        let mut sampler = Self {
            params: Vec::new(),
            temperatures: Vec::new(),
            temperature: Tensor::new(),
            top_p: Tensor::new(),
            top_k: Tensor::new(),
            greedy: Tensor::new(),
            truncating: Tensor::new(),
            top_k_off: Tensor::new(),
            top_p_only: Tensor::new(),
            largest_top_k: 0,
            level: 0,
            ranks: Tensor::arange(vocab, (Kind::Int64, device)).unsqueeze(0),
            uniforms: Vec::with_capacity(params.len()),
            prepared: None,
            vocab,
            device,
            backend: backend::libtorch(),
        };
        sampler.set_params(params.to_vec());
        sampler
    }

    /// This sampler with batches of plain draws offered to `backend` first (the model's, so
    /// that the CPU kernels draw from a CPU model's logits).
    pub fn with_backend(self, backend: Arc<dyn Backend>) -> Self {
        Self { backend, ..self }
    }

    fn set_params(&mut self, params: Vec<SamplingParams>) {
        let n = params.len() as i64;
        let device = self.device;
        let column = |values: &[f32]| Tensor::from_slice(values).view([n, 1]).to_device(device);
        let flags = |f: &dyn Fn(&SamplingParams) -> bool| {
            let values: Vec<bool> = params.iter().map(f).collect();
            Tensor::from_slice(&values).view([n, 1]).to_device(device)
        };
        let vocab = self.vocab;
        let top_k = |p: &SamplingParams| match p.top_k as i64 {
            k if k > 0 && k < vocab => k,
            _ => vocab,
        };
        let temperature: Vec<f32> = params
            .iter()
            .map(|p| p.logprob_temperature() as f32)
            .collect();
        let top_p: Vec<f32> = params
            .iter()
            .map(|p| if p.top_p < 1.0 { p.top_p as f32 } else { 2.0 })
            .collect();
        let top_ks: Vec<i64> = params.iter().map(top_k).collect();
        self.temperature = column(&temperature);
        self.temperatures = temperature;
        self.top_p = column(&top_p);
        self.top_k = Tensor::from_slice(&top_ks).view([n, 1]).to_device(device);
        self.greedy = flags(&SamplingParams::is_greedy);
        self.truncating = flags(&SamplingParams::truncates);
        self.top_k_off = flags(&|p| top_k(p) == vocab);
        self.top_p_only = flags(&|p| p.truncates() && top_k(p) == vocab);
        self.largest_top_k = params
            .iter()
            .filter(|p| p.truncates())
            .map(top_k)
            .filter(|&k| k < vocab)
            .max()
            .unwrap_or(0);
        self.params = params;
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.params.len()
    }

    /// Keeps only the rows at `rows` (indices into the current rows, in the order given),
    /// with the draws prepared for them.
    pub fn retain(&mut self, rows: &[usize]) {
        let params = rows.iter().map(|&r| self.params[r]).collect();
        self.set_params(params);
        if self.prepared.is_some() {
            self.uniforms = rows.iter().map(|&r| self.uniforms[r]).collect();
            self.upload_draws();
        }
    }

    /// Adds rows sampled with `params` after the current ones, their draws prepared as
    /// [`Self::prepare_draws`] does (`uniform(row)` for those that sample, `row` counting from
    /// the first new one): rows joining a batch between its steps, whose first token is
    /// sampled with the others' next.
    pub fn admit(&mut self, params: &[SamplingParams], uniform: &mut dyn FnMut(usize) -> f32) {
        if self.prepared.is_none() {
            // No row drew: all were greedy.
            self.uniforms = vec![0.5; self.params.len()];
        }
        let mut all = self.params.clone();
        all.extend_from_slice(params);
        self.set_params(all);
        for (row, p) in params.iter().enumerate() {
            self.uniforms
                .push(if p.is_greedy() { 0.5 } else { uniform(row) });
        }
        self.prepared = None;
        if !self.params.iter().all(SamplingParams::is_greedy) {
            self.upload_draws();
        }
    }

    /// Moves [`Self::uniforms`] to the device as the prepared draws.
    fn upload_draws(&mut self) {
        let n = self.uniforms.len() as i64;
        self.prepared = Some(
            Tensor::from_slice(&self.uniforms)
                .view([n, 1])
                .to_device(self.device),
        );
    }

    /// Picks one token for every row of `logits` `[B, V]` (`B` rows and `V` tokens as the
    /// sampler was made for, else an input error) and returns (tokens `[B, 1]` int64, logprobs
    /// `[B, 1]` f32).
    ///
    /// The logprob is `log_softmax(logits / T)` over the whole vocabulary at the chosen token,
    /// with `T` the row's temperature (1 when greedy) and no top-k/top-p truncation: what a
    /// training forward computes for the same token. Rows where `live` is false (finished
    /// sequences still in the batch) draw no random number; their tokens are meaningless.
    pub fn sample(
        &mut self,
        logits: &Tensor,
        live: &[bool],
        rng: &mut SeededRng,
    ) -> Result<(Tensor, Tensor), ModelError> {
        self.sample_with(logits, live, &mut |_| rng.uniform())
    }

    /// [`Self::sample`] with each row's uniform from `uniform(row)` (called once per live,
    /// non-greedy row, in row order), so rows may draw from streams of their own.
    pub fn sample_with(
        &mut self,
        logits: &Tensor,
        live: &[bool],
        uniform: &mut dyn FnMut(usize) -> f32,
    ) -> Result<(Tensor, Tensor), ModelError> {
        self.check_logits(logits)?;
        self.prepare_draws(live, uniform)?;
        self.sample_prepared(logits)
    }

    /// Draws the uniforms of the next [`Self::sample_prepared`], one per row: `uniform(row)`
    /// for live rows that sample, 0.5 for the others (which draw no random number; none at
    /// all when every row is greedy), and moves them to the device. Generation prepares them
    /// before it runs the step whose logits they sample, while the device is idle: the upload
    /// waits for the device's queue, so done between the step and the sampler it would keep
    /// them from running back to back.
    pub fn prepare_draws(
        &mut self,
        live: &[bool],
        uniform: &mut dyn FnMut(usize) -> f32,
    ) -> Result<(), ModelError> {
        if live.len() != self.params.len() {
            return Err(ModelError::Input(format!(
                "sampler of {} rows: given {} live flags",
                self.params.len(),
                live.len()
            )));
        }
        self.prepared = None;
        if self.params.iter().all(SamplingParams::is_greedy) {
            return Ok(());
        }
        self.uniforms.clear();
        for (row, (p, &live)) in self.params.iter().zip(live).enumerate() {
            let sampled = live && !p.is_greedy();
            self.uniforms.push(if sampled { uniform(row) } else { 0.5 });
        }
        self.upload_draws();
        Ok(())
    }

    /// [`Self::sample`] with the uniforms of the last [`Self::prepare_draws`], which it uses
    /// up: an input error when rows sample and no draws are prepared.
    pub fn sample_prepared(&mut self, logits: &Tensor) -> Result<(Tensor, Tensor), ModelError> {
        self.check_logits(logits)?;
        let logits = logits.to_kind(Kind::Float);
        // Every greedy row: no draws were prepared, none are needed.
        let u = self.prepared.take();
        if u.is_none() && !self.params.iter().all(SamplingParams::is_greedy) {
            return Err(ModelError::Input(
                "a sample of sampling rows without prepared draws (Sampler::prepare_draws)"
                    .to_owned(),
            ));
        }
        // Rows that all sample without top-k or top-p: the batch `Backend::sample` may take.
        let all_plain = self.params.iter().all(|p| !p.is_greedy() && !p.truncates());
        if all_plain {
            let drawn = self
                .backend
                .sample(&logits, &self.temperatures, &self.uniforms);
            if let Some(drawn) = drawn {
                return Ok(drawn);
            }
        }
        let all_one = self.params.iter().all(|p| p.logprob_temperature() == 1.0);
        let scaled = if all_one {
            logits
        } else {
            logits / &self.temperature
        };
        let lse = scaled.logsumexp([-1], true);
        let tokens = match u {
            None => scaled.argmax(-1, true),
            Some(u) => {
                let sampled = self.draw(&scaled, &lse, &u);
                if self.params.iter().any(SamplingParams::is_greedy) {
                    scaled.argmax(-1, true).where_self(&self.greedy, &sampled)
                } else {
                    sampled
                }
            }
        };
        let logprobs = scaled.gather(-1, &tokens, false) - lse;
        Ok((tokens, logprobs))
    }

    /// Fails unless `logits` is `[B, V]` for this sampler's `B` rows and `V` tokens.
    fn check_logits(&self, logits: &Tensor) -> Result<(), ModelError> {
        let (rows, vocab) = (self.params.len() as i64, self.vocab);
        if logits.size() != [rows, vocab] {
            return Err(ModelError::Input(format!(
                "sampler of {rows} rows over {vocab} tokens: given logits {:?}",
                logits.size()
            )));
        }
        Ok(())
    }

    /// Inverse-CDF draws `[B, 1]` from `softmax(scaled)`, filtered by top-k and top-p where a
    /// row has them, with uniforms `u` `[B, 1]`.
    fn draw(&mut self, scaled: &Tensor, lse: &Tensor, u: &Tensor) -> Tensor {
        let probs = (scaled - lse).exp();
        let plain = self
            .params
            .iter()
            .any(|p| !p.is_greedy() && !p.truncates())
            // Any order of the tokens works for inverse CDF: no sort.
            .then(|| pick(&probs.cumsum(-1, Kind::Float), u));
        let filtered = self
            .params
            .iter()
            .any(SamplingParams::truncates)
            .then(|| self.draw_filtered(&probs, u));
        match (plain, filtered) {
            (Some(plain), Some(filtered)) => filtered.where_self(&self.truncating, &plain),
            (Some(tokens), None) | (None, Some(tokens)) => tokens,
            (None, None) => probs.argmax(-1, true),
        }
    }

    /// Inverse-CDF draws `[B, 1]` among the tokens top-k and top-p keep.
    ///
    /// Tries the candidate counts of [`CANDIDATES`] from `self.level` on, then the whole
    /// vocabulary, and moves `self.level` to the count that sufficed (one lower when it was the
    /// first tried), so that steps whose nuclei are large do not try small counts every time.
    fn draw_filtered(&mut self, probs: &Tensor, u: &Tensor) -> Tensor {
        let total = probs.sum_dim_intlist(-1, true, Kind::Float);
        let start = self.level;
        for (level, candidates) in CANDIDATES.into_iter().enumerate().skip(start) {
            let k = candidates.max(self.largest_top_k);
            if k >= self.vocab {
                break;
            }
            let (sorted, order) = probs.topk(k, -1, true, true);
            let (kept, short) = self.keep(&sorted, &total);
            if short.any().int64_value(&[]) == 0 {
                self.level = if level == start {
                    level.saturating_sub(1)
                } else {
                    level
                };
                return order.gather(-1, &pick(&kept.cumsum(-1, Kind::Float), u), false);
            }
        }
        self.level = if start == CANDIDATES.len() {
            start - 1
        } else {
            CANDIDATES.len()
        };
        let (sorted, order) = probs.sort(-1, true);
        let (kept, _) = self.keep(&sorted, &total);
        order.gather(-1, &pick(&kept.cumsum(-1, Kind::Float), u), false)
    }

    /// The probabilities `sorted` `[B, K]` (the `K` most likely tokens, in order) with those
    /// top-k and top-p drop zeroed, and which top-p rows' nucleus may reach past the `K`
    /// tokens (`[B, 1]` bool; meaningless when `K` is the whole vocabulary). `total` `[B, 1]`
    /// is the whole vocabulary's mass.
    fn keep(&self, sorted: &Tensor, total: &Tensor) -> (Tensor, Tensor) {
        let k = sorted.size()[1];
        let sorted = sorted * self.ranks.narrow(1, 0, k).lt_tensor(&self.top_k);
        let cumulative = sorted.cumsum(-1, Kind::Float);
        let head = cumulative.narrow(-1, k - 1, 1);
        // Top-p is relative to the mass top-k keeps (the whole vocabulary's when off).
        let limit = &self.top_p * total.where_self(&self.top_k_off, &head);
        // The nucleus fits when the tokens hold more than `limit`: the first one left out
        // would be dropped.
        let short = head.le_tensor(&limit).logical_and(&self.top_p_only);
        // Drop a token when the tokens before it already hold `limit` (the first stays).
        let before = &cumulative - &sorted;
        (&sorted * before.le_tensor(&limit), short)
    }
}

/// The first index where `cdf` `[B, N]` (non-decreasing) exceeds `u × cdf[.., N-1]`, `[B, 1]`:
/// a draw by inverse CDF. `u` is below 1, so the index is in range and its probability is
/// positive.
fn pick(cdf: &Tensor, u: &Tensor) -> Tensor {
    let last = cdf.size()[1] - 1;
    (u * cdf.narrow(-1, last, 1))
        .searchsorted(cdf, false, true, "right", None::<Tensor>)
        .clamp_max(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Closer to 0 than the minimum, the logits divided by the temperature overflow (a run at
    /// 1e-40 skipped every update as non-finite): refused, as a request to `serve` or the engine.
    #[test]
    fn a_temperature_is_zero_or_at_least_the_minimum() {
        for taken in [0.0, MIN_TEMPERATURE, 0.7, 1e6] {
            assert_eq!(
                SamplingParams::with_temperature(taken).check(),
                Ok(()),
                "{taken}"
            );
        }
        for refused in [1e-40, 5e-324, 9e-7, -1.0, f64::NAN, f64::INFINITY] {
            let error = SamplingParams::with_temperature(refused)
                .check()
                .expect_err("refused");
            assert!(
                error.contains("0 (greedy) or a finite number >= 1e-6"),
                "{error}"
            );
        }
    }
}
