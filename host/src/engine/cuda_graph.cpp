// CUDA graphs of libtorch work (host/src/engine/cuda_graph.rs): at::cuda::CUDAGraph, which tch
// does not bind, captured on a side stream of libtorch's pool and replayed on the current one.
// libtorch's graph object also tells its caching allocator to serve the captured work from a
// pool of the graph's own, so the memory a replay writes is never handed to anyone else.
//
// Built with CUDA only when build.rs finds a CUDA libtorch and the CUDA runtime's headers
// (DRMAS_WITH_CUDA); otherwise every call fails with a message saying so. Devices and streams
// are switched through c10's functions rather than guard objects, whose inline code would need
// the CUDA runtime at link time.

#include <cstddef>
#include <exception>
#include <optional>

#include "../shim_error.h"

#ifdef DRMAS_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

struct DrmasCudaGraph {
  explicit DrmasCudaGraph(c10::DeviceIndex device) : device(device) {}

  // The device the graph's work runs on; libtorch's graph captures and replays on the thread's
  // current device, which is made this one meanwhile.
  c10::DeviceIndex device;
  at::cuda::CUDAGraph graph;
  // The graph's side stream, taken from libtorch's pool on first use and kept: the warm-up and
  // the capture must run on the same stream (cuBLAS keeps a workspace per stream, which the
  // warm-up allocates so that the capture does not).
  std::optional<c10::cuda::CUDAStream> side;
  // While the side stream is current: the stream that was current before it, and the thread's
  // current device before.
  std::optional<c10::cuda::CUDAStream> before_side;
  c10::DeviceIndex device_before = 0;
};

namespace {

// The graph's device is the thread's current one while this lives.
class OnDevice {
 public:
  explicit OnDevice(c10::DeviceIndex device) : before_(c10::cuda::ExchangeDevice(device)) {}
  ~OnDevice() { c10::cuda::SetDevice(before_); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  c10::DeviceIndex before_;
};

// Waits for the graph's device's current stream, then makes the graph's side stream (and its
// device) current.
void enter_side_stream(DrmasCudaGraph* graph) {
  graph->device_before = c10::cuda::ExchangeDevice(graph->device);
  auto current = c10::cuda::getCurrentCUDAStream(graph->device);
  current.synchronize();
  if (!graph->side) {
    graph->side = c10::cuda::getStreamFromPool(false, graph->device);
  }
  graph->before_side = current;
  c10::cuda::setCurrentCUDAStream(*graph->side);
}

// Makes the stream and device that were current before the side stream current again, once the
// side stream has finished its work. Streams, not the device, are waited for: another thread
// may be capturing a graph meanwhile.
void leave_side_stream(DrmasCudaGraph* graph) {
  if (!graph->before_side) {
    return;
  }
  graph->side->synchronize();
  c10::cuda::setCurrentCUDAStream(*graph->before_side);
  graph->before_side.reset();
  c10::cuda::SetDevice(graph->device_before);
}

}  // namespace
#else
struct DrmasCudaGraph {};
#endif

namespace {

// Runs `body`, turning an exception (or a build without CUDA) into a message and 1.
template <typename Body>
int guarded(char* error, std::size_t capacity, Body body) {
#ifdef DRMAS_WITH_CUDA
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    drmas::write_error(error, capacity, e.what());
  } catch (...) {
    drmas::write_error(error, capacity, "unknown C++ exception");
  }
#else
  (void)body;
  drmas::write_error(error, capacity,
                     "this drmas-host was built without CUDA graphs (a CPU libtorch, or no CUDA "
                     "runtime headers: see docs/install.md)");
#endif
  return 1;
}

}  // namespace

extern "C" {

// A new, empty graph of CUDA device `device` in `*graph` (free it with drmas_cuda_graph_free).
int drmas_cuda_graph_new(DrmasCudaGraph** graph, int device, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    *graph = new DrmasCudaGraph(static_cast<c10::DeviceIndex>(device));
#endif
  });
}

// Waits for the work issued on the graph device's current stream, then makes the graph's side
// stream the current one of this thread: what follows (warm-up, then capture) is issued there.
int drmas_cuda_graph_enter_side_stream(DrmasCudaGraph* graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    enter_side_stream(graph);
#endif
  });
}

// Leaves the side stream once its work is done (after a warm-up).
int drmas_cuda_graph_leave_side_stream(DrmasCudaGraph* graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    leave_side_stream(graph);
#endif
  });
}

// Starts capturing the side stream's work into the graph (after entering the side stream).
// Only this thread's CUDA calls are checked against the capture, so other threads' work may go
// on meanwhile.
int drmas_cuda_graph_begin(DrmasCudaGraph* graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    graph->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#endif
  });
}

// Ends the capture, makes the graph ready to replay, and leaves the side stream, whether or not
// the capture succeeded.
int drmas_cuda_graph_end(DrmasCudaGraph* graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    try {
      graph->graph.capture_end();
    } catch (...) {
      leave_side_stream(graph);
      throw;
    }
    leave_side_stream(graph);
#endif
  });
}

// Launches the captured work once on its device's current stream.
int drmas_cuda_graph_replay(DrmasCudaGraph* graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    OnDevice on(graph->device);
    graph->graph.replay();
#endif
  });
}

// Frees the graph (and, once no tensor uses it, its memory pool).
void drmas_cuda_graph_free(DrmasCudaGraph* graph) {
  try {
    delete graph;
  } catch (...) {
  }
}

}  // extern "C"
