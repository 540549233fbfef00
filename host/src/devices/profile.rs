//! [`Profiler`]: libtorch's own profiler around a piece of work, summarised as the time and
//! count of each host operator and each device kernel ([`Profile`]) — where a GPU step's time
//! goes, which wall-clock timing alone cannot say. `drmas-host devices --profile` attaches one
//! to each generation and update measurement. The C side is `profiler.cpp`, built by the
//! crate's build script.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use anyhow::bail;
use serde::Serialize;
use tch::Device;

use crate::shim_error::ShimError;

type EventCallback = unsafe extern "C" fn(*mut c_void, *const c_char, c_int, u64);

extern "C" {
    fn drmas_profiler_start(with_cuda: c_int, error: *mut c_char, capacity: usize) -> c_int;
    fn drmas_profiler_stop(
        emit: Option<EventCallback>,
        context: *mut c_void,
        error: *mut c_char,
        capacity: usize,
    ) -> c_int;
}

/// The entries of each side that a [`Profile`] keeps, the longest first.
pub const PROFILE_ENTRIES: usize = 30;

/// One operator or kernel name's share of a profiled piece of work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfiledName {
    /// The operator (`aten::addmm`), runtime call (`cudaLaunchKernel`) or kernel name.
    pub name: String,
    /// How many times it ran.
    pub count: u64,
    /// Its total duration, in milliseconds. Host operators nest (`aten::linear` holds its
    /// `aten::addmm`), so host totals overlap; kernels do not.
    pub total_ms: f64,
}

/// What a [`Profiler`] recorded, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// Wall-clock seconds of the profiled work (profiling included, which slows the host).
    pub wall_seconds: f64,
    /// Host events recorded: operators and, on a GPU, runtime calls.
    pub host_events: u64,
    /// Device events recorded: kernels, copies and fills (none on the CPU).
    pub device_events: u64,
    /// The device events' total duration, in milliseconds: the GPU's busy time.
    pub device_total_ms: f64,
    /// The [`PROFILE_ENTRIES`] host names of longest total duration.
    pub host: Vec<ProfiledName>,
    /// The [`PROFILE_ENTRIES`] host names that ran most often: where a step bound by issuing
    /// its kernels spends its launches.
    pub host_most_frequent: Vec<ProfiledName>,
    /// The [`PROFILE_ENTRIES`] device names of longest total duration.
    pub device: Vec<ProfiledName>,
}

/// Recording in progress, started by [`Profiler::start`]; [`Profiler::finish`] ends it. Dropped
/// unfinished (an error in the profiled work), it stops the recording and discards it. One
/// records at a time in a process (libtorch's profiler is a process-wide service): a second
/// `start` waits for the first to end.
#[derive(Debug)]
pub struct Profiler {
    started: Instant,
    finished: bool,
    _recording: MutexGuard<'static, ()>,
}

/// Held by the [`Profiler`] recording.
static RECORDING: Mutex<()> = Mutex::new(());

/// Per-name counts and durations, filled by [`collect_event`].
#[derive(Default)]
struct Tally {
    names: HashMap<(String, bool), (u64, u64)>,
}

/// Called by the C side once per event, with the [`Tally`] as `context`.
unsafe extern "C" fn collect_event(
    context: *mut c_void,
    name: *const c_char,
    on_device: c_int,
    duration_ns: u64,
) {
    // SAFETY: `context` is the `Tally` `finish` passes, alive and borrowed by nothing else for
    // the whole `drmas_profiler_stop` call; `name` is a NUL-terminated string valid during it.
    let (tally, name) = unsafe { (&mut *context.cast::<Tally>(), CStr::from_ptr(name)) };
    let entry = tally
        .names
        .entry((name.to_string_lossy().into_owned(), on_device != 0))
        .or_default();
    entry.0 += 1;
    entry.1 += duration_ns;
}

impl Profiler {
    /// Starts recording host operators on this thread and, when `device` is a GPU, every
    /// kernel, copy and runtime call of the process.
    pub fn start(device: Device) -> anyhow::Result<Self> {
        let recording = RECORDING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut error = ShimError::new();
        let with_cuda = c_int::from(device.is_cuda());
        // SAFETY: `error` is writable for `ShimError::CAPACITY` bytes.
        let status =
            unsafe { drmas_profiler_start(with_cuda, error.as_mut_ptr(), ShimError::CAPACITY) };
        if status != 0 {
            bail!("libtorch's profiler did not start: {}", error.message());
        }
        Ok(Self {
            started: Instant::now(),
            finished: false,
            _recording: recording,
        })
    }

    /// Stops recording and summarises it.
    pub fn finish(mut self) -> anyhow::Result<Profile> {
        let wall_seconds = self.started.elapsed().as_secs_f64();
        self.finished = true;
        let mut tally = Tally::default();
        stop(Some(&mut tally))?;
        Ok(summarise(tally, wall_seconds))
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if !self.finished {
            // An error already ends the work; a second one from stopping adds nothing.
            let _ = stop(None);
        }
    }
}

/// Stops the recording, its events counted into `tally` when given.
fn stop(tally: Option<&mut Tally>) -> anyhow::Result<()> {
    let mut error = ShimError::new();
    let (emit, context): (Option<EventCallback>, *mut c_void) = match tally {
        Some(tally) => (Some(collect_event), (tally as *mut Tally).cast()),
        None => (None, std::ptr::null_mut()),
    };
    // SAFETY: `context` is the caller's `Tally`, exclusively borrowed for this call, when
    // `emit` is given (null otherwise, and nothing is emitted); `error` is writable for
    // `ShimError::CAPACITY` bytes.
    let status =
        unsafe { drmas_profiler_stop(emit, context, error.as_mut_ptr(), ShimError::CAPACITY) };
    if status != 0 {
        bail!("libtorch's profiler did not stop: {}", error.message());
    }
    Ok(())
}

fn summarise(tally: Tally, wall_seconds: f64) -> Profile {
    let mut host = Vec::new();
    let mut device = Vec::new();
    let (mut host_events, mut device_events, mut device_ns) = (0, 0, 0);
    for ((name, on_device), (count, nanoseconds)) in tally.names {
        let entry = ProfiledName {
            name,
            count,
            total_ms: nanoseconds as f64 / 1e6,
        };
        if on_device {
            device_events += count;
            device_ns += nanoseconds;
            device.push(entry);
        } else {
            host_events += count;
            host.push(entry);
        }
    }
    let mut host_most_frequent = host.clone();
    host_most_frequent.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    host_most_frequent.truncate(PROFILE_ENTRIES);
    for side in [&mut host, &mut device] {
        side.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then(a.name.cmp(&b.name)));
        side.truncate(PROFILE_ENTRIES);
    }
    Profile {
        wall_seconds,
        host_events,
        device_events,
        device_total_ms: device_ns as f64 / 1e6,
        host,
        host_most_frequent,
        device,
    }
}

#[cfg(test)]
mod tests {
    use tch::{Kind, Tensor};

    use super::*;

    #[test]
    fn counts_every_operator_a_piece_of_cpu_work_runs() {
        let profiler = Profiler::start(Device::Cpu).expect("the profiler starts");
        let a = Tensor::ones([32, 32], (Kind::Float, Device::Cpu));
        let mut x = a.shallow_clone();
        for _ in 0..5 {
            x = x.mm(&a).relu();
        }
        let profile = profiler.finish().expect("the profiler stops");

        let entry = |name: &str| profile.host.iter().find(|e| e.name == name).cloned();
        let mm = entry("aten::mm").expect("aten::mm was recorded");
        assert_eq!(mm.count, 5, "{profile:?}");
        assert_eq!(entry("aten::relu").map(|e| e.count), Some(5), "{profile:?}");
        let counts = |list: &[ProfiledName]| list.iter().map(|e| e.count).collect::<Vec<_>>();
        let frequent = counts(&profile.host_most_frequent);
        assert!(frequent.windows(2).all(|w| w[0] >= w[1]), "{frequent:?}");
        assert!(
            frequent[0] >= 5,
            "mm and relu ran five times each: {frequent:?}"
        );
        assert!(mm.total_ms > 0.0 && mm.total_ms <= profile.wall_seconds * 1e3);
        assert_eq!(profile.device_events, 0, "no device work on the CPU");
        assert!(profile.host_events >= 10);
        // The result is the one the unprofiled product gives: profiling only observes.
        assert_eq!(x.double_value(&[0, 0]), 32f64.powi(5));
    }

    #[test]
    fn an_unfinished_profiler_stops_recording_when_dropped() {
        drop(Profiler::start(Device::Cpu).expect("the profiler starts"));
        // A second recording can start only once the first has stopped.
        let profiler = Profiler::start(Device::Cpu).expect("a second profiler starts");
        let _ = Tensor::ones([4], (Kind::Float, Device::Cpu)).sum(Kind::Float);
        let profile = profiler.finish().expect("the profiler stops");
        assert!(
            profile.host.iter().any(|e| e.name == "aten::sum"),
            "{profile:?}"
        );
    }
}
