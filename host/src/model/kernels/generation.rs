//! [`generation_linear`]: the bridge between a layer's libtorch weight and the kernel — when
//! to use it ([`while_generating`]) and how its tensors become the kernel's slices.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use tch::{Device, Kind, Tensor};

use super::matmul::{matmul, Weights};

/// Whether [`generation_linear`] may use the kernel at all (see [`set_enabled`]).
static ENABLED: AtomicBool = AtomicBool::new(true);

thread_local! {
    /// Whether this thread is inside [`while_generating`].
    static GENERATING: Cell<bool> = const { Cell::new(false) };
}

/// Switches the kernel on or off for the whole process (on by default): off, every product
/// goes to libtorch, which benchmarks compare against.
pub fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// Runs `forward` with the kernel taking the f32 CPU products of the models it calls: the
/// generation engine's prefills and decode steps. Every other forward (training, old and
/// reference log-probabilities) stays on libtorch, so the logprobs training compares are
/// computed by one set of kernels.
pub fn while_generating<T>(forward: impl FnOnce() -> T) -> T {
    /// Restores the previous state, also when `forward` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            GENERATING.with(|g| g.set(self.0));
        }
    }
    let _restore = Restore(GENERATING.with(|g| g.replace(true)));
    forward()
}

/// `x.linear(weight, bias)` computed by the kernel — `x` `[…, K]`, any number of rows — or
/// `None` when libtorch should do it: outside [`while_generating`], no rows or no inputs, `x`
/// or `weight` not f32 on the CPU, or a result autograd would track (grad mode on and `x` or a
/// weight requiring grad). The kernel reads `weight` where libtorch keeps it, so optimizer
/// steps and checkpoint loads are seen by the next call.
pub fn generation_linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Option<Tensor> {
    if !kernels_apply() {
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
        || ((x.requires_grad()
            || weight.requires_grad()
            || bias.is_some_and(Tensor::requires_grad))
            && grad_enabled())
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
    matmul(x_data, rows, weights, bias_data, out_data);
    Some(out)
}

/// Whether the kernels may take this call: switched on and inside [`while_generating`].
pub(super) fn kernels_apply() -> bool {
    ENABLED.load(Ordering::Relaxed) && GENERATING.with(Cell::get)
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
    use crate::model::kernels::relative_difference;
    use crate::update::AdamW;

    #[test]
    fn matches_libtorch_linear_on_odd_shapes() {
        tch::manual_seed(7);
        // Decode steps (one position per row) of few and many rows, and prefills.
        for shape in [[1, 1], [3, 1], [5, 1], [64, 1], [2, 9], [7, 40]] {
            for (outputs, inputs) in [(1, 1), (33, 7), (100, 65), (576, 576), (49, 1536)] {
                for with_bias in [false, true] {
                    let weight = Tensor::randn([outputs, inputs], (Kind::Float, Device::Cpu));
                    let bias =
                        with_bias.then(|| Tensor::randn([outputs], (Kind::Float, Device::Cpu)));
                    let x = Tensor::randn([shape[0], shape[1], inputs], (Kind::Float, Device::Cpu));
                    let got = while_generating(|| generation_linear(&x, &weight, bias.as_ref()))
                        .expect("a generation product");
                    let want = x.linear(&weight, bias.as_ref());
                    assert_eq!(got.size(), want.size());
                    let diff = relative_difference(&got, &want);
                    assert!(
                        diff < 1e-5,
                        "x {shape:?}, {outputs}×{inputs}, bias {with_bias}: {diff}"
                    );
                }
            }
        }
    }

    #[test]
    fn leaves_training_other_forwards_and_other_dtypes_to_libtorch() {
        let vs = VarStore::new(Device::Cpu);
        let weight = vs.root().randn_standard("w", &[8, 4]);
        let generated =
            |x: &Tensor, w: &Tensor| while_generating(|| generation_linear(x, w, None)).is_some();
        let step = Tensor::randn([2, 1, 4], (Kind::Float, Device::Cpu));
        assert!(!generated(&step, &weight), "grad mode");
        assert!(tch::no_grad(|| generated(&step, &weight)));
        assert!(
            tch::no_grad(|| generation_linear(&step, &weight, None)).is_none(),
            "outside generation"
        );
        let frozen = weight.detach();
        let tracked = step.set_requires_grad(true);
        assert!(!generated(&tracked, &frozen), "x tracked");
        assert!(tch::no_grad(|| generated(&tracked, &frozen)));
        let double = Tensor::randn([2, 1, 4], (Kind::Double, Device::Cpu));
        assert!(!tch::no_grad(|| generated(&double, &weight)));
        let no_inputs = Tensor::zeros([3, 0], (Kind::Float, Device::Cpu));
        let empty_rows = Tensor::zeros([2, 1, 0], (Kind::Float, Device::Cpu));
        assert!(
            !tch::no_grad(|| generated(&empty_rows, &no_inputs)),
            "K = 0"
        );
        // The scope ends with its closure, also when the closure panics.
        let _ = std::panic::catch_unwind(|| while_generating(|| panic!("a failing forward")));
        assert!(tch::no_grad(|| generation_linear(&step, &weight, None)).is_none());
    }

    #[test]
    fn follows_every_in_place_change_of_the_weight() {
        tch::manual_seed(11);
        let vs = VarStore::new(Device::Cpu);
        let weight = vs.root().randn_standard("w", &[40, 24]);
        let x = Tensor::randn([4, 1, 24], (Kind::Float, Device::Cpu));
        let check = |what: &str| {
            let got = tch::no_grad(|| while_generating(|| generation_linear(&x, &weight, None)))
                .expect("a generation product");
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
        optimizer.step(0.5);
        check("an optimizer step");
        // `set_data` swaps its storage.
        let mut swapped = weight.shallow_clone();
        tch::no_grad(|| swapped.set_data(&Tensor::randn([40, 24], (Kind::Float, Device::Cpu))));
        check("set_data");
    }
}
