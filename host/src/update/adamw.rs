//! [`AdamW`]: decoupled-weight-decay Adam over a worker group's parameters, with its moments
//! held as named tensors so checkpoints can save and restore them exactly.
//!
//! A parameter in a low-precision dtype (bf16, f16) gets an f32 master copy: the step updates
//! the master and copies it, rounded, into the parameter. Without it every update smaller than
//! half the spacing of bf16 values around a weight (2⁻⁸ of its magnitude) would be rounded away,
//! which at reinforcement-learning learning rates is nearly all of them.

use tch::{Kind, Tensor};

use super::fused_adamw::{copy_each, fused_adamw, AdamWSettings, AdamWTensors};
use super::gradient_lists::drop_gradients;
use crate::model::error::ModelError;
use crate::model::transfer::transfer;

/// AdamW (Loshchilov & Hutter) exactly as `torch.optim.AdamW(fused=True)` computes it (no
/// amsgrad).
pub struct AdamW {
    params: Vec<(String, Tensor)>,
    /// Each parameter's learning rate as a multiple of the step's.
    rate_scales: Vec<f64>,
    first_moments: Vec<Tensor>,
    second_moments: Vec<Tensor>,
    /// The f32 master copy of each parameter that is not f32 itself.
    masters: Vec<Option<Tensor>>,
    steps: u64,
    weight_decay: f64,
    betas: (f64, f64),
    epsilon: f64,
}

/// β₁ and β₂ of PyTorch's defaults.
const DEFAULT_BETAS: (f64, f64) = (0.9, 0.999);
/// ε of PyTorch's default.
const DEFAULT_EPSILON: f64 = 1e-8;

impl AdamW {
    /// An optimizer over `params` (name, trainable tensor) with zero moments, and an f32 master
    /// copy of each parameter that is not f32; β₁, β₂ and ε are PyTorch's defaults.
    pub fn new(params: Vec<(String, Tensor)>, weight_decay: f64) -> Self {
        let zeros = |params: &[(String, Tensor)]| -> Vec<Tensor> {
            params
                .iter()
                .map(|(_, p)| p.zeros_like().to_kind(Kind::Float))
                .collect()
        };
        Self {
            rate_scales: vec![1.0; params.len()],
            first_moments: zeros(&params),
            second_moments: zeros(&params),
            masters: params.iter().map(|(_, p)| master_of(p)).collect(),
            params,
            steps: 0,
            weight_decay,
            betas: DEFAULT_BETAS,
            epsilon: DEFAULT_EPSILON,
        }
    }

    /// Sets the moments' decay rates β₁, β₂ and the denominator's ε.
    pub fn set_betas_and_epsilon(&mut self, betas: (f64, f64), epsilon: f64) {
        self.betas = betas;
        self.epsilon = epsilon;
    }

    /// Optimizer steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The optimized tensors.
    pub fn params(&self) -> impl Iterator<Item = &Tensor> {
        self.params.iter().map(|(_, p)| p)
    }

    /// The name of the `index`-th parameter (in [`Self::params`] order).
    pub fn param_name(&self, index: usize) -> Option<&str> {
        self.params.get(index).map(|(name, _)| name.as_str())
    }

    /// Moves the moments and master weights to `device` (the parameters move with their model,
    /// see [`crate::model::llama::Llama::to_device`]); values, dtypes and the step count are kept.
    /// Leaving a GPU, they go to pinned host memory ([`crate::model::transfer`]).
    pub fn to_device(&mut self, device: tch::Device) {
        for tensor in self
            .first_moments
            .iter_mut()
            .chain(&mut self.second_moments)
            .chain(self.masters.iter_mut().flatten())
        {
            *tensor = transfer(tensor, device);
        }
    }

    /// The device of the optimizer's own state (its moments); `None` without parameters.
    pub fn state_device(&self) -> Option<tch::Device> {
        self.first_moments.first().map(Tensor::device)
    }

    /// Bytes of the optimizer's own state: moments and master weights.
    pub fn state_bytes(&self) -> usize {
        self.first_moments
            .iter()
            .chain(&self.second_moments)
            .chain(self.masters.iter().flatten())
            .map(|t| t.numel() * t.kind().elt_size_in_bytes())
            .sum()
    }

    /// Scales the learning rate of the parameters whose names `select` accepts by `scale`
    /// (weight decay included, as a parameter group of its own would): per-agent learning rates
    /// of per-agent LoRA adapters sharing one optimizer.
    pub fn scale_rates(&mut self, select: impl Fn(&str) -> bool, scale: f64) {
        for ((name, _), rate) in self.params.iter().zip(&mut self.rate_scales) {
            if select(name) {
                *rate = scale;
            }
        }
    }

    /// Drops every accumulated gradient, as PyTorch's `zero_grad()` does (`set_to_none`): their
    /// memory is free between updates (for rollouts, or another group's update), and a
    /// parameter no loss reaches before the next step, such as an adapter no row of it used,
    /// has no gradient then and the step leaves it alone.
    pub fn zero_grad(&mut self) -> Result<(), ModelError> {
        let params: Vec<Tensor> = self.params.iter().map(|(_, p)| p.shallow_clone()).collect();
        drop_gradients(&params)
    }

    /// One update at learning rate `lr` from the accumulated gradients (parameters without a
    /// gradient are left alone: moments and weight decay too).
    /// A parameter with a master copy is updated there, in f32, and takes the master's value
    /// rounded to its own dtype. The step is libtorch's fused AdamW
    /// kernel over every tensor at once (one call per learning-rate scale), then one list copy
    /// of the masters into their parameters.
    pub fn step(&mut self, lr: f64) -> Result<(), ModelError> {
        self.steps += 1;
        let step = self.steps;
        tch::no_grad(|| {
            // The fused kernel takes one learning rate: one batch of tensors per rate scale.
            let mut batches: Vec<(f64, AdamWTensors<'_>)> = Vec::new();
            let (mut rounded, mut masters) = (Vec::new(), Vec::new());
            for ((((param, m), v), master), &scale) in self
                .params
                .iter()
                .map(|(_, p)| p)
                .zip(&self.first_moments)
                .zip(&self.second_moments)
                .zip(&self.masters)
                .zip(&self.rate_scales)
            {
                let grad = param.grad();
                if !grad.defined() {
                    continue;
                }
                let index = match batches.iter().position(|(s, _)| *s == scale) {
                    Some(index) => index,
                    None => {
                        batches.push((scale, AdamWTensors::default()));
                        batches.len() - 1
                    }
                };
                let batch = &mut batches[index].1;
                batch.weights.push(master.as_ref().unwrap_or(param));
                batch.grads.push(grad);
                batch.exp_avgs.push(m);
                batch.exp_avg_sqs.push(v);
                if let Some(master) = master {
                    rounded.push(param);
                    masters.push(master);
                }
            }
            for (scale, tensors) in &batches {
                let settings = AdamWSettings {
                    lr: lr * scale,
                    betas: self.betas,
                    weight_decay: self.weight_decay,
                    eps: self.epsilon,
                    step,
                };
                fused_adamw(tensors, settings)?;
            }
            copy_each(&rounded, &masters)
        })
    }

    /// The state as named tensors: `step`, each parameter's `exp_avg.NAME` / `exp_avg_sq.NAME`
    /// and, for a parameter with one, its f32 master `master.NAME`, for a checkpoint.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        let mut state = vec![("step".to_owned(), Tensor::from_slice(&[self.steps as i64]))];
        for (((name, _), m), v) in self
            .params
            .iter()
            .zip(&self.first_moments)
            .zip(&self.second_moments)
        {
            state.push((format!("exp_avg.{name}"), m.shallow_clone()));
            state.push((format!("exp_avg_sq.{name}"), v.shallow_clone()));
        }
        for ((name, _), master) in self.params.iter().zip(&self.masters) {
            if let Some(master) = master {
                state.push((format!("{MASTER_PREFIX}{name}"), master.shallow_clone()));
            }
        }
        state
    }

    /// Restores a [`Self::state`]; every moment must be present with the parameter's shape. A
    /// master weight missing from `state` (a checkpoint of an f32 run resumed in bf16) is taken
    /// from the parameter, which must have been restored first.
    pub fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<(), ModelError> {
        let find = |name: &str| -> Result<&Tensor, ModelError> {
            state
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t)
                .ok_or_else(|| ModelError::MissingTensor(format!("optimizer state {name}")))
        };
        let steps = find("step")?.int64_value(&[0]);
        for (((name, param), m), v) in self
            .params
            .iter()
            .zip(&mut self.first_moments)
            .zip(&mut self.second_moments)
        {
            for (key, moment) in [
                (format!("exp_avg.{name}"), m),
                (format!("exp_avg_sq.{name}"), v),
            ] {
                let saved = find(&key)?;
                if saved.size() != param.size() {
                    return Err(ModelError::Shape {
                        tensor: key,
                        expected: param.size(),
                        found: saved.size().iter().map(|&d| d as usize).collect(),
                    });
                }
                tch::no_grad(|| moment.copy_(saved));
            }
        }
        for ((name, param), master) in self.params.iter().zip(&mut self.masters) {
            let Some(master) = master else { continue };
            let key = format!("{MASTER_PREFIX}{name}");
            let saved = state.iter().find(|(n, _)| *n == key).map(|(_, t)| t);
            match saved {
                Some(saved) if saved.size() != param.size() => {
                    return Err(ModelError::Shape {
                        tensor: key,
                        expected: param.size(),
                        found: saved.size().iter().map(|&d| d as usize).collect(),
                    })
                }
                Some(saved) => tch::no_grad(|| master.copy_(saved)),
                None => tch::no_grad(|| master.copy_(param)),
            }
        }
        self.steps = steps.max(0) as u64;
        Ok(())
    }
}

/// Begins the name of a master weight in [`AdamW::state`].
const MASTER_PREFIX: &str = "master.";

/// An f32 copy of `param` when it is held in another dtype.
fn master_of(param: &Tensor) -> Option<Tensor> {
    (param.kind() != Kind::Float).then(|| param.detach().to_kind(Kind::Float))
}

#[cfg(test)]
mod tests {
    use tch::nn::{self, OptimizerConfig};
    use tch::Device;

    use super::*;
    use crate::config::LrDecay;
    use crate::update::LrSchedule;

    fn values(t: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1)).expect("values")
    }

    #[test]
    fn matches_libtorch_adamw_over_several_steps() {
        let init = [0.5f32, -1.5, 2.0, 0.25];
        let target = Tensor::from_slice(&[1.0f32, 0.0, -1.0, 3.0]);
        let ours_vs = nn::VarStore::new(Device::Cpu);
        let ours = ours_vs.root().var_copy("w", &Tensor::from_slice(&init));
        let mut optimizer = AdamW::new(vec![("w".into(), ours.shallow_clone())], 0.01);
        let theirs_vs = nn::VarStore::new(Device::Cpu);
        let theirs = theirs_vs.root().var_copy("w", &Tensor::from_slice(&init));
        let mut reference = nn::AdamW::default()
            .build(&theirs_vs, 0.1)
            .expect("libtorch AdamW");
        for step in 1..=5 {
            let lr = LrSchedule {
                peak: 0.1,
                warmup_steps: 2,
                decay: LrDecay::Constant,
                total_steps: 5,
                min_lr_ratio: 0.0,
            }
            .at(step);
            optimizer.zero_grad().expect("cleared");
            (&ours - &target).square().sum(Kind::Float).backward();
            optimizer.step(lr).expect("step");
            reference.set_lr(lr);
            reference.zero_grad();
            (&theirs - &target).square().sum(Kind::Float).backward();
            reference.step();
        }
        for (a, b) in values(&ours).iter().zip(values(&theirs)) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        assert_eq!(optimizer.steps(), 5);
    }

    #[test]
    fn other_betas_and_epsilon_match_libtorch_adamw_with_them() {
        let init = [0.5f32, -1.5, 2.0, 0.25];
        let target = Tensor::from_slice(&[1.0f32, 0.0, -1.0, 3.0]);
        let ours_vs = nn::VarStore::new(Device::Cpu);
        let ours = ours_vs.root().var_copy("w", &Tensor::from_slice(&init));
        let mut optimizer = AdamW::new(vec![("w".into(), ours.shallow_clone())], 0.01);
        optimizer.set_betas_and_epsilon((0.5, 0.95), 1e-3);
        let theirs_vs = nn::VarStore::new(Device::Cpu);
        let theirs = theirs_vs.root().var_copy("w", &Tensor::from_slice(&init));
        let mut reference = nn::AdamW {
            beta1: 0.5,
            beta2: 0.95,
            wd: 0.01,
            eps: 1e-3,
            amsgrad: false,
        }
        .build(&theirs_vs, 0.1)
        .expect("libtorch AdamW");
        let defaults_vs = nn::VarStore::new(Device::Cpu);
        let defaults = defaults_vs.root().var_copy("w", &Tensor::from_slice(&init));
        let mut with_defaults = AdamW::new(vec![("w".into(), defaults.shallow_clone())], 0.01);
        for _ in 0..4 {
            optimizer.zero_grad().expect("cleared");
            (&ours - &target).square().sum(Kind::Float).backward();
            optimizer.step(0.1).expect("step");
            reference.zero_grad();
            (&theirs - &target).square().sum(Kind::Float).backward();
            reference.step();
            with_defaults.zero_grad().expect("cleared");
            (&defaults - &target).square().sum(Kind::Float).backward();
            with_defaults.step(0.1).expect("step");
        }
        for (a, b) in values(&ours).iter().zip(values(&theirs)) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        let apart = values(&ours)
            .iter()
            .zip(values(&defaults))
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(apart > 1e-3, "the defaults step elsewhere: {apart}");
    }

    #[test]
    fn a_scaled_parameter_steps_as_with_the_scaled_rate() {
        let vs = nn::VarStore::new(Device::Cpu);
        let a = vs
            .root()
            .var_copy("a", &Tensor::from_slice(&[1.0f32, -2.0]));
        let b = vs
            .root()
            .var_copy("b", &Tensor::from_slice(&[1.0f32, -2.0]));
        let mut both = AdamW::new(
            vec![
                ("a".into(), a.shallow_clone()),
                ("b".into(), b.shallow_clone()),
            ],
            0.1,
        );
        both.scale_rates(|name| name == "b", 0.25);
        let alone_vs = nn::VarStore::new(Device::Cpu);
        let c = alone_vs
            .root()
            .var_copy("c", &Tensor::from_slice(&[1.0f32, -2.0]));
        let mut alone = AdamW::new(vec![("c".into(), c.shallow_clone())], 0.1);
        for _ in 0..3 {
            both.zero_grad().expect("cleared");
            alone.zero_grad().expect("cleared");
            (a.square().sum(Kind::Float) + b.square().sum(Kind::Float)).backward();
            c.square().sum(Kind::Float).backward();
            both.step(0.1).expect("step");
            alone.step(0.025).expect("step");
        }
        assert_eq!(
            values(&b),
            values(&c),
            "b moved as with a quarter of the rate"
        );
        assert_ne!(values(&a), values(&b));
    }

    #[test]
    fn state_round_trips() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().var_copy("w", &Tensor::from_slice(&[1.0f32, 2.0]));
        let mut optimizer = AdamW::new(vec![("w".into(), w.shallow_clone())], 0.0);
        w.square().sum(Kind::Float).backward();
        optimizer.step(0.01).expect("step");
        let state = optimizer.state();
        let mut restored = AdamW::new(vec![("w".into(), w.shallow_clone())], 0.0);
        restored.load_state(&state).expect("loads");
        assert_eq!(restored.steps(), 1);
        assert_eq!(values(&restored.state()[1].1), values(&state[1].1));
        let err = restored
            .load_state(&state[..1])
            .expect_err("moments missing");
        assert!(err.to_string().contains("exp_avg.w"), "{err}");
    }

    #[test]
    fn a_bf16_parameter_follows_its_f32_master_through_updates_smaller_than_its_spacing() {
        let mut vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().var_copy("w", &Tensor::from_slice(&[1.0f32]));
        vs.bfloat16();
        let mut optimizer = AdamW::new(vec![("w".into(), w.shallow_clone())], 0.0);
        // A constant gradient makes each Adam step lr = 1e-3, a quarter of bf16's spacing
        // below 1.0 (2⁻⁸): rounded in bf16, every single step would vanish.
        for _ in 0..10 {
            optimizer.zero_grad().expect("cleared");
            w.sum(Kind::Float).backward();
            optimizer.step(1e-3).expect("step");
        }
        let state = optimizer.state();
        let (name, master) = state.last().expect("the master is in the state");
        assert_eq!(name, "master.w");
        assert_eq!(master.kind(), Kind::Float);
        assert!(
            (values(master)[0] - 0.99).abs() < 1e-5,
            "{:?}",
            values(master)
        );
        assert_eq!(w.kind(), Kind::BFloat16, "the parameter keeps its dtype");
        assert_eq!(values(&w)[0], values(&master.to_kind(Kind::BFloat16))[0]);
        assert!(
            values(&w)[0] < 0.995,
            "the parameter moved: {:?}",
            values(&w)
        );

        let mut restored = AdamW::new(vec![("w".into(), w.shallow_clone())], 0.0);
        restored.load_state(&state).expect("loads");
        assert_eq!(
            values(&restored.state()[3].1),
            values(master),
            "master restored"
        );
        restored
            .load_state(&state[..3])
            .expect("loads without a master");
        assert_eq!(
            values(&restored.state()[3].1),
            values(&w),
            "a missing master starts from the parameter"
        );
        assert_eq!(
            restored.state_bytes(),
            3 * 4,
            "two moments and a master of one f32"
        );
    }
}
