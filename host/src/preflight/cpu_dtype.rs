//! Whether a worker group's dtype on the CPU is far slower than the other choice: libtorch has
//! fast reduced-precision products only on CPUs with instructions for them (AMX, AVX-512
//! BF16/FP16) and falls back to a generic loop elsewhere, some twenty times slower than f32 on an
//! AVX2-only CPU. `check` and `train` time one product in both dtypes and warn, so a run file
//! written for a GPU does not train on a laptop at a twentieth of its speed unnoticed; on a CPU
//! with bf16 instructions they note when an f32 group's products would run several times faster
//! in bf16 (with AMX, libtorch's bf16 products take a third to a fifth of its f32 ones' time).

use std::time::Instant;

use tch::{Device, Kind, Tensor};

use crate::config::Dtype;

/// How many times as long as f32 reduced-precision products may take before the warning.
const WARN_ABOVE: f64 = 3.0;

/// The fraction of f32's time below which bf16 products make an f32 group's note.
const BF16_FASTER_BELOW: f64 = 0.5;

/// Rows, inputs and outputs of the timed linear layer: about 0.4 GFLOP for its three products,
/// a few milliseconds in f32.
const LAYER: (i64, i64, i64) = (256, 512, 512);

/// The seconds of a linear layer's three training products in `kind` over those in f32 on this
/// CPU, each the best of three after a warm-up. The backward's products count: without fast
/// kernels, libtorch's `g · W` in bf16 is some 60 times slower than in f32 on an AVX2-only CPU,
/// the forward's `x · Wᵀ` 4 times.
pub fn slowdown(kind: Kind) -> f64 {
    seconds(kind) / seconds(Kind::Float)
}

fn seconds(kind: Kind) -> f64 {
    let (rows, inputs, outputs) = LAYER;
    let x = Tensor::randn([rows, inputs], (kind, Device::Cpu));
    let weight = Tensor::randn([outputs, inputs], (kind, Device::Cpu));
    let grad = Tensor::randn([rows, outputs], (kind, Device::Cpu));
    let products = || {
        let started = Instant::now();
        let _ = x.matmul(&weight.tr());
        let _ = grad.matmul(&weight);
        let _ = grad.tr().matmul(&x);
        started.elapsed().as_secs_f64()
    };
    tch::no_grad(|| {
        products();
        (0..3).map(|_| products()).fold(f64::INFINITY, f64::min)
    })
}

/// The warning for worker group `group`, in `dtype` on the CPU whose training products take
/// `slowdown` times as long as f32's, if that is past [`WARN_ABOVE`].
pub fn warning(group: &str, dtype: Dtype, slowdown: f64) -> Option<String> {
    let name = match dtype {
        Dtype::F32 => return None,
        Dtype::Bf16 => "bf16",
        Dtype::F16 => "f16",
    };
    (slowdown > WARN_ABOVE).then(|| {
        format!(
            "worker group `{group}` has dtype = \"{name}\" on the CPU, where a layer's {name} \
             training products take {slowdown:.0}× as long as in f32 (timed just now: libtorch has no fast \
             {name} kernels for this CPU); dtype = \"f32\" trains faster here, and more precisely"
        )
    })
}

/// Whether the CPU has AVX-512 BF16 (every CPU with AMX has it too), the only CPUs where
/// libtorch's bf16 products can beat its f32 ones; elsewhere timing them is not worth the half
/// second their generic loop takes.
pub fn has_bf16_products() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The note for worker group `group`, in f32 on a CPU whose bf16 training products take
/// `bf16_time` of the time of f32's, if that is below [`BF16_FASTER_BELOW`].
pub fn bf16_faster(group: &str, bf16_time: f64) -> Option<String> {
    (bf16_time < BF16_FASTER_BELOW).then(|| {
        format!(
            "worker group `{group}` computes in f32 on the CPU, where a layer's bf16 training \
             products take {bf16_time:.2}× the time of f32's (timed just now: this CPU has bf16 \
             instructions); dtype = \"bf16\" generates and trains faster here, at bf16's \
             precision (AdamW keeps f32 master weights, and the PPO ratio's old \
             log-probabilities are recomputed by the training forward)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_a_real_product_in_each_dtype() {
        for kind in [Kind::BFloat16, Kind::Half] {
            let ratio = slowdown(kind);
            assert!(ratio.is_finite() && ratio > 0.0, "{kind:?}: {ratio}");
        }
    }

    #[test]
    fn warns_only_for_reduced_precision_past_the_threshold() {
        let warned = warning("policy", Dtype::Bf16, 23.4).expect("23× is past 3×");
        assert!(
            warned.contains("`policy`")
                && warned.contains("dtype = \"bf16\"")
                && warned.contains("23×")
                && warned.contains("dtype = \"f32\""),
            "{warned}"
        );
        assert!(warning("policy", Dtype::F16, 4.0).is_some_and(|w| w.contains("f16")));
        assert_eq!(warning("policy", Dtype::Bf16, 1.2), None);
        assert_eq!(warning("policy", Dtype::F32, 50.0), None);
    }

    #[test]
    fn tells_an_f32_group_only_when_bf16_is_at_least_twice_as_fast() {
        let told = bf16_faster("policy", 0.27).expect("0.27 is below 0.5");
        assert!(
            told.contains("`policy`")
                && told.contains("0.27×")
                && told.contains("dtype = \"bf16\""),
            "{told}"
        );
        assert_eq!(bf16_faster("policy", 0.6), None);
        assert_eq!(bf16_faster("policy", 20.0), None);
    }
}
