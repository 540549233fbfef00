//! [`CudaGraph`]: libtorch work captured once as a CUDA graph and replayed at the cost of one
//! launch, through the C++ shim `cuda_graph.cpp` (libtorch's `at::cuda::CUDAGraph`).
//!
//! Captured work is recorded, not run: its operators must not read values back to the host or
//! change shapes from one replay to the next, and every tensor it reads must keep its storage
//! (a replay reads and writes the same addresses). Tensors made during the capture come from a
//! memory pool of the graph's own and stay valid while the graph lives.

use std::ffi::{c_char, c_int};
use std::ptr::NonNull;

use tch::TchError;

use crate::model::error::ModelError;
use crate::shim_error::ShimError;

/// The shim's graph object.
#[repr(C)]
struct RawGraph {
    _private: [u8; 0],
}

extern "C" {
    fn drmas_cuda_graph_new(
        graph: *mut *mut RawGraph,
        device: c_int,
        error: *mut c_char,
        capacity: usize,
    ) -> c_int;
    fn drmas_cuda_graph_enter_side_stream(
        graph: *mut RawGraph,
        error: *mut c_char,
        capacity: usize,
    ) -> c_int;
    fn drmas_cuda_graph_begin(graph: *mut RawGraph, error: *mut c_char, capacity: usize) -> c_int;
    fn drmas_cuda_graph_end(graph: *mut RawGraph, error: *mut c_char, capacity: usize) -> c_int;
    fn drmas_cuda_graph_leave_side_stream(
        graph: *mut RawGraph,
        error: *mut c_char,
        capacity: usize,
    ) -> c_int;
    fn drmas_cuda_graph_replay(graph: *mut RawGraph, error: *mut c_char, capacity: usize) -> c_int;
    fn drmas_cuda_graph_free(graph: *mut RawGraph);
}

/// A CUDA graph of the calling thread's libtorch work on one device.
#[derive(Debug)]
pub struct CudaGraph {
    raw: NonNull<RawGraph>,
    captured: bool,
}

// SAFETY: the shim's graph object is owned by this value alone and used through `&mut self`;
// libtorch's graph may be replayed and freed from any thread.
unsafe impl Send for CudaGraph {}

impl CudaGraph {
    /// An empty graph for CUDA device `device`. Fails in a build without CUDA graphs.
    pub fn new(device: usize) -> Result<Self, ModelError> {
        let mut raw = std::ptr::null_mut();
        let device = c_int::try_from(device)
            .map_err(|_| graph_error(format!("creating a CUDA graph: no device cuda:{device}")))?;
        // SAFETY: the shim writes a fresh object's pointer into `raw` when it returns 0.
        ShimError::check("creating a CUDA graph", |error, capacity| unsafe {
            drmas_cuda_graph_new(&mut raw, device, error, capacity)
        })?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| graph_error("creating a CUDA graph returned no graph".to_owned()))?;
        Ok(Self {
            raw,
            captured: false,
        })
    }

    /// Runs `work` on a side stream of libtorch's pool (after the device's current stream has
    /// finished what it was given), then returns to that stream once the side stream is done.
    /// Libraries that set themselves up on first use on a stream (cuBLAS's workspace) do so
    /// here, so that a capture on the side stream finds them ready.
    pub fn warm_up<T>(
        &mut self,
        work: impl FnOnce() -> Result<T, ModelError>,
    ) -> Result<T, ModelError> {
        self.enter_side_stream()?;
        let result = work();
        self.leave_side_stream()?;
        result
    }

    /// Records `work` into the graph on a side stream instead of running it, and returns what
    /// `work` returned (tensors whose values the graph's replays write). Nothing is computed
    /// until [`Self::replay`]. A graph is captured once.
    pub fn capture<T>(
        &mut self,
        work: impl FnOnce() -> Result<T, ModelError>,
    ) -> Result<T, ModelError> {
        if self.captured {
            return Err(graph_error("capturing a CUDA graph twice".to_owned()));
        }
        self.enter_side_stream()?;
        let raw = self.raw.as_ptr();
        // SAFETY: `raw` is this graph's live object.
        if let Err(e) = ShimError::check(
            "starting a CUDA graph's capture",
            |error, capacity| unsafe { drmas_cuda_graph_begin(raw, error, capacity) },
        ) {
            self.leave_side_stream()?;
            return Err(e);
        }
        let result = work();
        // SAFETY: as above; the shim also leaves the side stream, whether or not this fails.
        let ended = ShimError::check("ending a CUDA graph's capture", |error, capacity| unsafe {
            drmas_cuda_graph_end(raw, error, capacity)
        });
        self.captured = true;
        let result = result?;
        ended?;
        Ok(result)
    }

    /// Runs the captured work once on its device's current stream.
    pub fn replay(&mut self) -> Result<(), ModelError> {
        if !self.captured {
            return Err(graph_error(
                "replaying a CUDA graph before its capture".to_owned(),
            ));
        }
        let raw = self.raw.as_ptr();
        // SAFETY: `raw` is this graph's live object, captured.
        ShimError::check("replaying a CUDA graph", |error, capacity| unsafe {
            drmas_cuda_graph_replay(raw, error, capacity)
        })
    }

    fn enter_side_stream(&mut self) -> Result<(), ModelError> {
        let raw = self.raw.as_ptr();
        // SAFETY: `raw` is this graph's live object.
        ShimError::check("switching to a side stream", |error, capacity| unsafe {
            drmas_cuda_graph_enter_side_stream(raw, error, capacity)
        })
    }

    fn leave_side_stream(&mut self) -> Result<(), ModelError> {
        let raw = self.raw.as_ptr();
        // SAFETY: `raw` is this graph's live object.
        ShimError::check("leaving a side stream", |error, capacity| unsafe {
            drmas_cuda_graph_leave_side_stream(raw, error, capacity)
        })
    }
}

/// A failure of this module's own, as libtorch's failures are reported.
fn graph_error(message: String) -> ModelError {
    ModelError::Torch(TchError::Torch(message))
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `drmas_cuda_graph_new` and is freed once, here.
        unsafe { drmas_cuda_graph_free(self.raw.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_without_cuda_refuses_graphs_with_a_reason() {
        if tch::Cuda::is_available() {
            println!("skipped: this build has CUDA (check.sh captures graphs on the device)");
            return;
        }
        let error = CudaGraph::new(0).expect_err("no CUDA").to_string();
        assert!(
            error.contains("creating a CUDA graph") && error.contains("without CUDA graphs"),
            "{error}"
        );
    }
}
