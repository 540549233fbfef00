//! The devices this process can compute on: whether libtorch was built with CUDA, which CUDA
//! devices it sees and their names ([`DeviceReport`]), whether a run file's device exists
//! ([`check_available`]), and a model's numbers on a device against the CPU in f32
//! ([`compare`]), one update step there, alone or against the CPU ([`update_step`]), and timed
//! generation there ([`generation_speed`]), either of the last two profiled ([`Profiler`]) —
//! what `drmas-host devices` prints and what the GPU check scripts read.

mod compare;
mod cuda_driver;
mod generation_speed;
mod profile;
mod update_step;

use serde::Serialize;

use crate::config::Device;
use crate::engine::decode_steps::CudaDecode;
use crate::model::cuda_attention::{cudnn_attention_allowed, CudaAttention};
use crate::model::process_setting::ProcessSetting;

pub use compare::{compare, Comparison, Tolerance};
pub use generation_speed::{generation_speed, GenerationShape, GenerationSpeed, PROFILED_TOKENS};
pub use profile::{Profile, ProfiledName, Profiler, PROFILE_ENTRIES};
pub use update_step::{update_step, StepFigures, UpdateShape, UpdateStep};

/// What libtorch offers in this process.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// The version of the libtorch this binary was built against (its folder's
    /// `build-version`; unknown for a libtorch without one, such as `LIBTORCH_USE_PYTORCH`'s).
    pub libtorch: Option<&'static str>,
    /// Whether this build links libtorch's CUDA backend (`libtorch_cuda.so` is loaded).
    pub libtorch_has_cuda: bool,
    /// Whether a CUDA device can be used: CUDA built in, a driver and at least one device.
    pub cuda_available: bool,
    /// Whether cuDNN is available.
    pub cudnn_available: bool,
    /// How prompts and training sequences attend on this process's CUDA devices (`None`
    /// without one, or when `DRMAS_CUDA_ATTENTION` names no choice).
    pub cuda_attention: Option<CudaAttention>,
    /// Whether libtorch may choose cuDNN's attention kernel.
    pub cudnn_attention_allowed: bool,
    /// How decode steps run on this process's CUDA devices (`None` without one, or when
    /// `DRMAS_CUDA_DECODE` names no choice).
    pub cuda_decode: Option<CudaDecode>,
    /// Every CUDA device, by index.
    pub cuda_devices: Vec<CudaDevice>,
}

/// One CUDA device.
#[derive(Debug, Clone, Serialize)]
pub struct CudaDevice {
    /// Its index: `cuda:INDEX` in a run file.
    pub index: usize,
    /// Its name as the driver gives it (`NVIDIA H200`), when the driver answers.
    pub name: Option<String>,
}

impl DeviceReport {
    /// Asks libtorch (and, for names, the CUDA driver it loaded).
    pub fn detect() -> Self {
        let cuda_available = tch::Cuda::is_available();
        let count = if cuda_available {
            usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
        } else {
            0
        };
        Self {
            libtorch: option_env!("DRMAS_LIBTORCH_VERSION"),
            libtorch_has_cuda: cuda_driver::libtorch_cuda_loaded(),
            cuda_available,
            cudnn_available: cuda_available && tch::Cuda::cudnn_is_available(),
            cuda_attention: cuda_available
                .then(|| CudaAttention::for_process().ok())
                .flatten(),
            cudnn_attention_allowed: cudnn_attention_allowed(),
            cuda_decode: cuda_available
                .then(|| CudaDecode::for_process().ok())
                .flatten(),
            cuda_devices: (0..count)
                .map(|index| CudaDevice {
                    index,
                    name: cuda_driver::device_name(index),
                })
                .collect(),
        }
    }
}

/// Whether `device` can be computed on here: `Err` says why not and what to do.
pub fn check_available(device: Device) -> Result<(), String> {
    let Device::Cuda(index) = device else {
        return Ok(());
    };
    if !cuda_driver::libtorch_cuda_loaded() {
        return Err(format!(
            "device = \"{device}\": this drmas-host is linked against a CPU-only libtorch; run the \
             GPU build (scripts/gpu/bundle.sh, or LIBTORCH pointing at a CUDA libtorch: see \
             docs/install.md) or set device = \"cpu\""
        ));
    }
    if !tch::Cuda::is_available() {
        return Err(format!(
            "device = \"{device}\": this drmas-host has CUDA but sees no CUDA device (no NVIDIA \
             driver, or CUDA_VISIBLE_DEVICES hides them); check `nvidia-smi`, or set device = \"cpu\""
        ));
    }
    let count = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
    if index >= count {
        return Err(format!(
            "device = \"{device}\": only {count} CUDA device(s) here (cuda:0 to cuda:{}); pick one \
             of those",
            count.saturating_sub(1)
        ));
    }
    Ok(())
}

/// Waits for the work queued on `device` (nothing to wait for on the CPU), so that a clock read
/// next has seen it done.
fn synchronize(device: tch::Device) {
    if let tch::Device::Cuda(index) = device {
        tch::Cuda::synchronize(index as i64);
    }
}
