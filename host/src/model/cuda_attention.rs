//! [`CudaAttention`]: how prompts and training sequences attend on a CUDA device.
//!
//! Such a call is `scaled_dot_product_attention` with a padding mask and, for most models,
//! grouped-query heads. On Hopper and Blackwell data-centre GPUs libtorch 2.11 tries cuDNN's
//! kernel first for it, and cuDNN builds an execution plan for every new shape: reported at
//! about 0.4 s for a forward and 0.55 s for a backward on a B200. Reinforcement learning meets a
//! new shape at nearly every prefill and micro-batch (prompt and response lengths vary), so by
//! default drmas forbids cuDNN's attention in the process and copies the keys and values to
//! every query head, as transformers does when it passes a mask: libtorch's memory-efficient
//! kernel then takes the call with no per-shape setup (in libtorch 2.11 it declines grouped
//! heads, which would leave the unfused math path). `DRMAS_CUDA_ATTENTION=libtorch` leaves the
//! heads grouped and the choice of kernel to libtorch. Decode steps attend eagerly either way
//! ([`super::eager_attention`]); CPU models are not concerned.

use std::sync::OnceLock;

use tch::Tensor;

use super::process_setting::ProcessSetting;

/// The environment variable that chooses [`CudaAttention`].
pub const CUDA_ATTENTION_VAR: &str = "DRMAS_CUDA_ATTENTION";

extern "C" {
    fn drmas_set_cudnn_attention(enabled: std::ffi::c_int);
    fn drmas_cudnn_attention_allowed() -> std::ffi::c_int;
}

/// How several tokens per row attend on a CUDA device (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CudaAttention {
    /// Keys and values copied to every query head, cuDNN's attention forbidden: the
    /// memory-efficient kernel, no setup per shape (the default).
    RepeatedHeads,
    /// Grouped heads as they are, the kernel libtorch prefers (cuDNN on Hopper and Blackwell).
    Libtorch,
}

impl ProcessSetting for CudaAttention {
    const VAR: &'static str = CUDA_ATTENTION_VAR;
    const CHOICES: &'static [(&'static str, Self)] = &[
        ("repeated-heads", Self::RepeatedHeads),
        ("libtorch", Self::Libtorch),
    ];

    fn cell() -> &'static OnceLock<Self> {
        static CHOSEN: OnceLock<CudaAttention> = OnceLock::new();
        &CHOSEN
    }

    /// Forbids cuDNN's attention for [`Self::RepeatedHeads`]; read the first time a model is
    /// placed on a CUDA device.
    fn apply(self) {
        // SAFETY: sets a flag of libtorch's global context; no tensor or pointer is involved.
        unsafe { drmas_set_cudnn_attention(i32::from(self == Self::Libtorch)) };
    }
}

/// Whether libtorch may choose cuDNN's kernel for `scaled_dot_product_attention` in this process.
pub fn cudnn_attention_allowed() -> bool {
    // SAFETY: reads a flag of libtorch's global context.
    unsafe { drmas_cudnn_attention_allowed() != 0 }
}

/// `softmax(q kᵀ / √d + mask) v` with `k`, `v` `[B, H_kv, S, D]` copied to the `H` query heads
/// of `q` `[B, H, T, D]` (query head `h` reads key/value head `h / (H / H_kv)`, as grouped-query
/// attention pairs them) and `mask` `[B, 1, T, S]` bool (true = attend).
pub fn attention_with_repeated_heads(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Tensor {
    let heads = q.size()[1];
    let repeat = |x: &Tensor| {
        let size = x.size();
        let (b, kv_heads, s, d) = (size[0], size[1], size[2], size[3]);
        if kv_heads == heads {
            return x.shallow_clone();
        }
        x.unsqueeze(2)
            .expand([b, kv_heads, heads / kv_heads, s, d], false)
            .reshape([b, heads, s, d])
    };
    Tensor::scaled_dot_product_attention(
        q,
        &repeat(k),
        &repeat(v),
        Some(mask),
        0.0,
        false,
        None,
        false,
    )
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;

    #[test]
    fn the_variable_names_one_of_two_choices() {
        assert_eq!(
            CudaAttention::parse(None).expect("unset"),
            CudaAttention::RepeatedHeads
        );
        assert_eq!(
            CudaAttention::parse(Some("libtorch")).expect("libtorch"),
            CudaAttention::Libtorch
        );
        assert_eq!(
            CudaAttention::parse(Some("cudnn"))
                .expect_err("unknown")
                .to_string(),
            "DRMAS_CUDA_ATTENTION=\"cudnn\": expected repeated-heads (the default) or libtorch"
        );
    }

    #[test]
    fn repeated_heads_attend_and_train_as_grouped_heads_do() {
        tch::manual_seed(12);
        let options = (Kind::Float, Device::Cpu);
        let gap = |a: &Tensor, b: &Tensor| (a - b).abs().max().double_value(&[]);
        for (heads, kv_heads) in [(12, 2), (9, 3), (4, 4)] {
            let (b, t, s, d) = (3, 5, 9, 16);
            let leaf = |size: [i64; 4]| Tensor::randn(size, options).set_requires_grad(true);
            let (q, k, v) = (
                leaf([b, heads, t, d]),
                leaf([b, kv_heads, s, d]),
                leaf([b, kv_heads, s, d]),
            );
            let mask = Tensor::rand([b, 1, t, s], options).gt(0.3);
            let _ = mask.narrow(3, 0, 1).fill_(1);
            let upstream = Tensor::randn([b, heads, t, d], options);
            // The outputs, and the gradients of one weighted sum of them.
            let run = |attend: &dyn Fn() -> Tensor| {
                let y = attend();
                let loss = (&y * &upstream).sum(Kind::Float);
                let grads = Tensor::run_backward(&[&loss], &[&q, &k, &v], false, false);
                (y.detach(), grads)
            };
            let grouped = run(&|| {
                Tensor::scaled_dot_product_attention(
                    &q,
                    &k,
                    &v,
                    Some(&mask),
                    0.0,
                    false,
                    None,
                    kv_heads != heads,
                )
            });
            let repeated = run(&|| attention_with_repeated_heads(&q, &k, &v, &mask));
            let output_gap = gap(&grouped.0, &repeated.0);
            assert!(
                output_gap < 1e-5,
                "{heads}/{kv_heads} heads, output: {output_gap}"
            );
            for (what, (a, b)) in ["query", "key", "value"]
                .iter()
                .zip(grouped.1.iter().zip(&repeated.1))
            {
                let grad_gap = gap(a, b);
                assert!(
                    grad_gap < 1e-5,
                    "{heads}/{kv_heads} heads, {what}: {grad_gap}"
                );
                assert!(b.abs().sum(Kind::Float).double_value(&[]) > 0.0, "{what}");
            }
        }
    }

    #[test]
    fn the_cudnn_flag_is_libtorchs_own() {
        // The flag only steers CUDA calls, so toggling it here changes no CPU result.
        let before = cudnn_attention_allowed();
        // SAFETY: as in `apply`.
        unsafe { drmas_set_cudnn_attention(0) };
        assert!(!cudnn_attention_allowed());
        unsafe { drmas_set_cudnn_attention(1) };
        assert!(cudnn_attention_allowed());
        unsafe { drmas_set_cudnn_attention(i32::from(before)) };
    }
}
