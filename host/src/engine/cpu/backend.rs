//! [`CpuKernels`]: the [`Backend`] of f32 models on the CPU — which products go to the
//! kernels (by autograd, dtype, device and shape), which version of them runs, and how a
//! libtorch tensor becomes a kernel's slice.

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use super::decode_attention::decode_attention;
use super::dot;
use super::isa::Isa;
use super::matmul::{matmul, Weights, DECODE_ROWS};
use super::rms_norm::rms_norm;
use super::rotary::rotate;
use super::swiglu::silu_mul;
use crate::engine::decode_steps::CudaDecode;
use crate::model::backend::{self, Backend};
use crate::model::cuda_attention::CudaAttention;
use crate::model::error::ModelError;
use crate::model::layers::SharedCacheRows;
use crate::model::process_setting::ProcessSetting;

/// The environment variable that forces the CPU kernels' version: `avx512`, `avx2`,
/// `portable`, or `libtorch` for none; unset or `auto`, [`CpuKernels::fastest`].
pub const KERNELS_VAR: &str = "DRMAS_CPU_KERNELS";

/// The backend for a model on `device`: on the CPU, [`CpuKernels::fastest`] by default, or
/// the kernels of the version [`KERNELS_VAR`] names on the products where they beat libtorch
/// ([`Routes::for_this_cpu`]); libtorch elsewhere, on a CUDA device after
/// [`CudaAttention::for_process`] and [`CudaDecode::for_process`]. Fails when a variable names
/// no choice, or a version this CPU does not run.
pub fn backend_for(device: Device) -> Result<Arc<dyn Backend>, ModelError> {
    if device != Device::Cpu {
        if device.is_cuda() {
            CudaAttention::for_process()?;
            CudaDecode::for_process()?;
        }
        return Ok(backend::libtorch());
    }
    let choice = std::env::var(KERNELS_VAR).unwrap_or_default();
    let isa = match choice.as_str() {
        "" | "auto" => return Ok(Arc::new(CpuKernels::fastest())),
        "libtorch" => return Ok(backend::libtorch()),
        name => Isa::from_name(name).ok_or_else(|| {
            ModelError::Config(format!(
                "{KERNELS_VAR}={name:?}: expected auto, avx512, avx2, portable or libtorch"
            ))
        })?,
    };
    let kernels = CpuKernels::tuned(isa).ok_or_else(|| {
        ModelError::Config(format!("{KERNELS_VAR}={isa}: this CPU does not run {isa}"))
    })?;
    Ok(Arc::new(kernels))
}

/// Which products the kernels take, by shape; libtorch computes the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routes {
    /// Products of at most [`dot::MAX_ROWS`] rows (decode steps of small batches, bound by
    /// reading the weights).
    pub few_rows: bool,
    /// Products of up to [`DECODE_ROWS`] rows (decode steps of a batch).
    pub decode: bool,
    /// Wider products (prefills, whole-sequence forwards).
    pub prefill: bool,
    /// Decode steps' attention.
    pub attention: bool,
}

impl Routes {
    /// Every product on the kernels.
    pub const ALL: Routes = Routes {
        few_rows: true,
        decode: true,
        prefill: true,
        attention: true,
    };

    /// Where the `isa` kernels beat libtorch on this CPU, a static rule (so a model computes
    /// the same numbers on every run of a machine): libtorch's matmuls are MKL's, which take
    /// their AVX-512 path on Intel CPUs only and their AVX2 path on every other x86 CPU.
    ///
    /// - AVX-512: every product, but prefills and products of a few rows on Intel CPUs, where
    ///   MKL's AVX-512 GEMM is faster than the prefill kernel and its GEMV than the dot
    ///   products. Decode products of a batch are bound by reading the weights, and the kernels
    ///   read them in one pass for all rows on every CPU.
    /// - AVX2: every product but prefills, which stay on libtorch: MKL's AVX2 GEMM is as fast
    ///   as the kernel at that width.
    /// - Portable (CPUs without AVX2, other architectures): only decode attention, whose
    ///   libtorch version is mostly call overhead; libtorch's vectorised BLAS keeps the
    ///   products.
    pub fn for_this_cpu(isa: Isa) -> Routes {
        match isa {
            Isa::Avx512 => Routes {
                few_rows: !intel_cpu(),
                prefill: !intel_cpu(),
                ..Routes::ALL
            },
            Isa::Avx2 => Routes {
                prefill: false,
                ..Routes::ALL
            },
            Isa::Portable => Routes {
                few_rows: false,
                decode: false,
                prefill: false,
                attention: true,
            },
        }
    }

    /// Whether the kernels take a product of `rows` rows.
    fn takes(&self, rows: usize) -> bool {
        match Product::of(rows) {
            Product::FewRows => self.few_rows,
            Product::Decode => self.decode,
            Product::Prefill => self.prefill,
        }
    }
}

/// The kinds of dense product, by row count, that [`Routes`] and the decode version tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Product {
    /// At most [`dot::MAX_ROWS`] rows.
    FewRows,
    /// Up to [`DECODE_ROWS`] rows.
    Decode,
    /// More.
    Prefill,
}

impl Product {
    fn of(rows: usize) -> Self {
        if rows <= dot::MAX_ROWS {
            Product::FewRows
        } else if rows <= DECODE_ROWS {
            Product::Decode
        } else {
            Product::Prefill
        }
    }
}

/// Whether the CPU is an Intel one (whose MKL path is AVX-512 where the CPU has it).
fn intel_cpu() -> bool {
    cpu_identity().is_some_and(|(vendor, _)| &vendor == b"GenuineIntel")
}

/// The CPU's vendor string and family (base plus extended, as CPUID leaf 1 defines it);
/// `None` off x86-64.
fn cpu_identity() -> Option<([u8; 12], u32)> {
    #[cfg(target_arch = "x86_64")]
    {
        let leaf = std::arch::x86_64::__cpuid(0);
        let mut vendor = [0; 12];
        for (chunk, register) in vendor.chunks_mut(4).zip([leaf.ebx, leaf.edx, leaf.ecx]) {
            chunk.copy_from_slice(&register.to_le_bytes());
        }
        let signature = std::arch::x86_64::__cpuid(1).eax;
        let base = (signature >> 8) & 0xf;
        let family = if base == 0xf {
            base + ((signature >> 20) & 0xff)
        } else {
            base
        };
        Some((vendor, family))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// The version that runs decode products (more than [`dot::MAX_ROWS`] rows, up to
/// [`DECODE_ROWS`]) alongside `isa`'s other kernels on a CPU of `vendor` and `family`: AVX2's
/// on AMD's family 19h with AVX-512 (Zen 4), where its decode tile (6 weight rows streamed
/// per pass) was faster per decode step than the AVX-512 tile, then 24 rows wide, in every
/// quiet run at batch 16 and 64 (batch 64: ~128 against ~146 ms) while the AVX-512 version
/// stays faster for few rows and prefills; `isa` elsewhere. Both decode tiles sum in the same
/// order, so the choice changes speed only.
fn decode_isa_for(isa: Isa, vendor: &[u8; 12], family: u32) -> Isa {
    if isa == Isa::Avx512 && vendor == b"AuthenticAMD" && family == 0x19 {
        Isa::Avx2
    } else {
        isa
    }
}

/// The CPU kernels as a [`Backend`]: they take the f32 CPU products of forwards without
/// autograd (generation's prefills and decode steps, a frozen reference's forward) that their
/// [`Routes`] give them and the RMSNorm, RoPE and SwiGLU of those forwards, and leave every
/// forward with grad mode on to libtorch; they also draw the sampler's tokens from f32 CPU
/// logits. One [`Isa`] runs every kernel but the decode products', which may run another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuKernels {
    isa: Isa,
    decode_isa: Isa,
    routes: Routes,
}

impl CpuKernels {
    /// The `isa` kernels on the products `routes` gives them; `None` when the CPU does not
    /// run `isa`.
    pub fn new(isa: Isa, routes: Routes) -> Option<Self> {
        isa.is_supported().then_some(Self {
            isa,
            decode_isa: isa,
            routes,
        })
    }

    /// The fastest kernels this CPU runs: the widest version on the products where it beats
    /// libtorch ([`Self::tuned`]), its decode products on the version that is fastest for
    /// them here (see `decode_isa_for`).
    pub fn fastest() -> Self {
        let isa = Isa::best();
        let kernels = Self {
            isa,
            decode_isa: isa,
            routes: Routes::for_this_cpu(isa),
        };
        let decode_isa =
            cpu_identity().map_or(isa, |(vendor, family)| decode_isa_for(isa, &vendor, family));
        kernels.with_decode_isa(decode_isa).unwrap_or(kernels)
    }

    /// These kernels with their decode products on `isa`; `None` when the CPU does not run it.
    pub fn with_decode_isa(self, isa: Isa) -> Option<Self> {
        isa.is_supported().then_some(Self {
            decode_isa: isa,
            ..self
        })
    }

    /// The `isa` kernels on the products where they beat libtorch here
    /// ([`Routes::for_this_cpu`]); `None` when the CPU does not run `isa`.
    pub fn tuned(isa: Isa) -> Option<Self> {
        Self::new(isa, Routes::for_this_cpu(isa))
    }

    /// The version of the kernels.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The version of the decode products' kernel.
    pub fn decode_isa(&self) -> Isa {
        self.decode_isa
    }

    /// The products the kernels take.
    pub fn routes(&self) -> Routes {
        self.routes
    }
}

impl Backend for CpuKernels {
    fn name(&self) -> String {
        let r = self.routes;
        let on = |taken: bool, what: &str| {
            if taken {
                what.to_owned()
            } else {
                format!("({what})")
            }
        };
        let decode = if self.decode_isa == self.isa {
            "decode".to_owned()
        } else {
            format!("decode:{}", self.decode_isa)
        };
        format!(
            "cpu-{} [{} {} {} {}]",
            self.isa,
            on(r.few_rows, "few-rows"),
            on(r.decode, &decode),
            on(r.prefill, "prefill"),
            on(r.attention, "attention")
        )
    }

    fn linear(&self, x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Option<Tensor> {
        let rows = usize::try_from(x.size().split_last()?.1.iter().product::<i64>()).ok()?;
        if !self.routes.takes(rows) {
            return None;
        }
        let isa = match Product::of(rows) {
            Product::Decode => self.decode_isa,
            Product::FewRows | Product::Prefill => self.isa,
        };
        linear(x, weight, bias, isa)
    }

    fn decode_attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &Tensor,
        shared: Option<&SharedCacheRows>,
    ) -> Option<Tensor> {
        if !self.routes.attention {
            return None;
        }
        decode_attention(q, k, v, mask, shared, self.isa)
    }

    fn rms_norm(&self, x: &Tensor, weight: &Tensor, eps: f64) -> Option<Tensor> {
        rms_norm(x, weight, eps)
    }

    fn rotate(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Option<Tensor> {
        rotate(x, cos, sin)
    }

    fn silu_mul(&self, gate: &Tensor, up: &Tensor) -> Option<Tensor> {
        silu_mul(gate, up, self.isa)
    }

    fn sample(
        &self,
        logits: &Tensor,
        temperature: &[f32],
        uniform: &[f32],
    ) -> Option<(Tensor, Tensor)> {
        #[cfg(target_arch = "x86_64")]
        return super::categorical::sample_categorical(logits, temperature, uniform, self.isa);
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (logits, temperature, uniform);
            None
        }
    }
}

/// `x.linear(weight, bias)` computed by the `isa` kernels — `x` `[…, K]`, any number of rows
/// — or `None` when libtorch should do it: grad mode on, no rows or no inputs, or `x` or
/// `weight` not f32 on the CPU. The kernels read `weight` where libtorch keeps it, so
/// optimizer steps and checkpoint loads are seen by the next call.
///
/// # Panics
/// When the CPU does not support `isa`.
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>, isa: Isa) -> Option<Tensor> {
    if grad_enabled() {
        return None;
    }
    let shape = x.size();
    let (&inputs, wshape) = (shape.last()?, weight.size());
    let &[outputs, weight_inputs] = wshape.as_slice() else {
        return None;
    };
    let rows: i64 = shape[..shape.len() - 1].iter().product();
    if !on_cpu_f32(x)
        || !on_cpu_f32(weight)
        || bias.is_some_and(|b| !on_cpu_f32(b) || b.size() != [outputs])
        || weight_inputs != inputs
        || rows == 0
        || inputs == 0
    {
        return None;
    }
    let (x, weight, bias) = (
        x.contiguous(),
        weight.contiguous(),
        bias.map(Tensor::contiguous),
    );
    let mut out_shape = shape;
    *out_shape.last_mut()? = outputs;
    let out = Tensor::empty(&out_shape, (Kind::Float, Device::Cpu));
    let (rows, inputs, outputs) = (rows as usize, inputs as usize, outputs as usize);
    // SAFETY: `x`, `weight`, `bias` and `out` are contiguous f32 CPU tensors of
    // `rows × inputs`, `outputs × inputs`, `outputs` and `rows × outputs` elements (checked
    // above or just allocated), so their data pointers address that many floats; `out` is
    // fresh, so nothing else reads or writes it while the slice lives, and the others are only
    // read.
    let (x_data, weight_data, bias_data, out_data) = unsafe {
        (
            std::slice::from_raw_parts(x.data_ptr().cast::<f32>().cast_const(), rows * inputs),
            std::slice::from_raw_parts(
                weight.data_ptr().cast::<f32>().cast_const(),
                outputs * inputs,
            ),
            bias.as_ref().map(|b| {
                std::slice::from_raw_parts(b.data_ptr().cast::<f32>().cast_const(), outputs)
            }),
            std::slice::from_raw_parts_mut(out.data_ptr().cast::<f32>(), rows * outputs),
        )
    };
    let weights = Weights {
        data: weight_data,
        outputs,
        inputs,
    };
    matmul(x_data, rows, weights, bias_data, out_data, isa);
    Some(out)
}

/// Whether `t` is an f32 tensor on the CPU: what the kernels compute with.
pub(super) fn on_cpu_f32(t: &Tensor) -> bool {
    t.device() == Device::Cpu && t.kind() == Kind::Float
}

/// Whether libtorch's grad mode is on (it is thread-local; `tch::no_grad` turns it off).
pub(super) fn grad_enabled() -> bool {
    // SAFETY: `at_grad_set_enabled` sets the calling thread's grad mode and returns the
    // previous one; setting it back at once leaves the mode as it was.
    unsafe {
        let previous = torch_sys::at_grad_set_enabled(1);
        torch_sys::at_grad_set_enabled(previous);
        previous != 0
    }
}

#[cfg(test)]
mod tests {
    use tch::nn::VarStore;

    use super::*;
    use crate::engine::cpu::relative_difference;
    use crate::update::AdamW;

    #[test]
    fn matches_libtorch_linear_on_odd_shapes_in_every_supported_isa() {
        tch::manual_seed(7);
        for isa in Isa::supported() {
            // Decode steps (one position per row) of few and many rows, and prefills.
            for shape in [[1, 1], [3, 1], [5, 1], [64, 1], [2, 9], [7, 40]] {
                for (outputs, inputs) in [(1, 1), (33, 7), (100, 65), (576, 576), (49, 1536)] {
                    for with_bias in [false, true] {
                        let weight = Tensor::randn([outputs, inputs], (Kind::Float, Device::Cpu));
                        let bias =
                            with_bias.then(|| Tensor::randn([outputs], (Kind::Float, Device::Cpu)));
                        let x =
                            Tensor::randn([shape[0], shape[1], inputs], (Kind::Float, Device::Cpu));
                        let got = tch::no_grad(|| linear(&x, &weight, bias.as_ref(), isa))
                            .expect("a kernel product");
                        let want = x.linear(&weight, bias.as_ref());
                        assert_eq!(got.size(), want.size());
                        let diff = relative_difference(&got, &want);
                        assert!(
                            diff < 1e-5,
                            "{isa}: x {shape:?}, {outputs}×{inputs}, bias {with_bias}: {diff}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn leaves_forwards_with_grad_and_other_dtypes_to_libtorch() {
        let vs = VarStore::new(Device::Cpu);
        let weight = vs.root().randn_standard("w", &[8, 4]);
        let isa = Isa::best();
        let taken = |x: &Tensor, w: &Tensor| tch::no_grad(|| linear(x, w, None, isa)).is_some();
        let step = Tensor::randn([2, 1, 4], (Kind::Float, Device::Cpu));
        assert!(linear(&step, &weight, None, isa).is_none(), "grad mode");
        assert!(taken(&step, &weight));
        let frozen = weight.detach();
        assert!(
            linear(&step, &frozen, None, isa).is_none(),
            "grad mode, nothing tracked (LoRA's frozen base)"
        );
        let tracked = step.set_requires_grad(true);
        assert!(taken(&tracked, &frozen));
        let double = Tensor::randn([2, 1, 4], (Kind::Double, Device::Cpu));
        assert!(!taken(&double, &weight));
        let no_inputs = Tensor::zeros([3, 0], (Kind::Float, Device::Cpu));
        let empty_rows = Tensor::zeros([2, 1, 0], (Kind::Float, Device::Cpu));
        assert!(!taken(&empty_rows, &no_inputs), "K = 0");
    }

    #[test]
    fn follows_every_in_place_change_of_the_weight() {
        tch::manual_seed(11);
        let vs = VarStore::new(Device::Cpu);
        let weight = vs.root().randn_standard("w", &[40, 24]);
        let x = Tensor::randn([4, 1, 24], (Kind::Float, Device::Cpu));
        let check = |what: &str| {
            let got =
                tch::no_grad(|| linear(&x, &weight, None, Isa::best())).expect("a kernel product");
            let want = tch::no_grad(|| x.linear::<Tensor>(&weight, None));
            let diff = relative_difference(&got, &want);
            assert!(diff < 1e-5, "after {what}: {diff}");
        };
        check("the first product");
        // A checkpoint load copies into the variable in place.
        let loaded = Tensor::randn([40, 24], (Kind::Float, Device::Cpu));
        tch::no_grad(|| weight.shallow_clone().copy_(&loaded));
        check("a load");
        // An optimizer step updates it in place.
        let mut optimizer = AdamW::new(vec![("w".into(), weight.shallow_clone())], 0.1);
        x.linear::<Tensor>(&weight, None)
            .square()
            .sum(Kind::Float)
            .backward();
        optimizer.step(0.5).expect("step");
        check("an optimizer step");
        // `set_data` swaps its storage.
        let mut swapped = weight.shallow_clone();
        tch::no_grad(|| swapped.set_data(&Tensor::randn([40, 24], (Kind::Float, Device::Cpu))));
        check("set_data");
    }

    #[test]
    fn routes_send_each_shape_where_they_say() {
        let only_decode = Routes {
            decode: true,
            ..Routes::for_this_cpu(Isa::Portable)
        };
        let kernels = CpuKernels::new(Isa::best(), only_decode).expect("the best ISA runs");
        let weight = Tensor::randn([8, 4], (Kind::Float, Device::Cpu));
        let taken = |rows: i64| {
            let x = Tensor::randn([rows, 1, 4], (Kind::Float, Device::Cpu));
            tch::no_grad(|| kernels.linear(&x, &weight, None)).is_some()
        };
        assert!(!taken(1), "few rows");
        assert!(taken(dot::MAX_ROWS as i64 + 1), "a decode batch");
        assert!(taken(DECODE_ROWS as i64), "the widest decode batch");
        assert!(!taken(DECODE_ROWS as i64 + 1), "a prefill");
        assert_eq!(
            CpuKernels::new(Isa::Portable, Routes::ALL).map(|k| k.isa()),
            Some(Isa::Portable)
        );
    }

    #[test]
    fn the_decode_version_runs_the_decode_products_and_nothing_else() {
        tch::manual_seed(5);
        let (main, decode) = (Isa::best(), Isa::Portable);
        let kernels = CpuKernels::new(main, Routes::ALL)
            .and_then(|k| k.with_decode_isa(decode))
            .expect("both versions run");
        assert_eq!(kernels.decode_isa(), decode);
        let weight = Tensor::randn([100, 65], (Kind::Float, Device::Cpu));
        for (rows, isa) in [
            (1, main),
            (dot::MAX_ROWS as i64 + 1, decode),
            (DECODE_ROWS as i64, decode),
            (DECODE_ROWS as i64 + 1, main),
        ] {
            let x = Tensor::randn([rows, 1, 65], (Kind::Float, Device::Cpu));
            let got = tch::no_grad(|| kernels.linear(&x, &weight, None)).expect("taken");
            let want = tch::no_grad(|| linear(&x, &weight, None, isa)).expect("taken");
            assert!(got.equal(&want), "{rows} rows should run the {isa} kernels");
        }
    }

    #[test]
    fn avx2_and_avx512_decode_products_are_bit_identical() {
        if !(Isa::Avx512.is_supported() && Isa::Avx2.is_supported()) {
            eprintln!("skipped: this CPU does not run both AVX-512 and AVX2");
            return;
        }
        tch::manual_seed(3);
        for rows in [dot::MAX_ROWS + 1, 16, 17, DECODE_ROWS] {
            for (outputs, inputs) in [(100, 65), (576, 576), (49, 1536)] {
                let weight = Tensor::randn([outputs, inputs], (Kind::Float, Device::Cpu));
                let bias = Tensor::randn([outputs], (Kind::Float, Device::Cpu));
                let x = Tensor::randn([rows as i64, 1, inputs], (Kind::Float, Device::Cpu));
                let on = |isa| tch::no_grad(|| linear(&x, &weight, Some(&bias), isa));
                let (wide, narrow) = (on(Isa::Avx512), on(Isa::Avx2));
                assert!(
                    wide.zip(narrow).is_some_and(|(a, b)| a.equal(&b)),
                    "{rows} rows × {outputs}×{inputs}"
                );
            }
        }
    }

    #[test]
    fn zen_4_decodes_on_avx2_and_every_other_cpu_on_its_widest_version() {
        let (amd, intel) = (b"AuthenticAMD", b"GenuineIntel");
        assert_eq!(decode_isa_for(Isa::Avx512, amd, 0x19), Isa::Avx2, "Zen 4");
        assert_eq!(decode_isa_for(Isa::Avx512, amd, 0x1a), Isa::Avx512, "Zen 5");
        assert_eq!(decode_isa_for(Isa::Avx512, intel, 6), Isa::Avx512);
        assert_eq!(decode_isa_for(Isa::Avx2, amd, 0x19), Isa::Avx2);
        assert_eq!(decode_isa_for(Isa::Avx2, amd, 0x17), Isa::Avx2, "Zen 2");
        let fastest = CpuKernels::fastest();
        assert_eq!(fastest.isa(), Isa::best());
        assert_eq!(fastest.routes(), Routes::for_this_cpu(Isa::best()));
    }
}
