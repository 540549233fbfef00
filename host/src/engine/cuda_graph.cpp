// CUDA graphs of libtorch work (host/src/engine/cuda_graph.rs): at::cuda::CUDAGraph, which tch
// does not bind, captured on a side stream of libtorch's pool and replayed on the current one.
// libtorch's graph object also tells its caching allocator to serve the captured work from a
// pool of the graph's own, so the memory a replay writes is never handed to anyone else.
//
// Built with CUDA only when build.rs finds a CUDA libtorch and the CUDA runtime's headers
// (DRMAS_WITH_CUDA); otherwise every call fails with a message saying so.

#include <cstddef>
#include <exception>
#include <optional>

#include "../shim_error.h"

#ifdef DRMAS_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

struct DrmasCudaGraph {
  at::cuda::CUDAGraph graph;
  // The graph's side stream, taken from libtorch's pool on first use and kept: the warm-up and
  // the capture must run on the same stream (cuBLAS keeps a workspace per stream, which the
  // warm-up allocates so that the capture does not).
  std::optional<c10::cuda::CUDAStream> side;
  // The stream that was current before the side stream, while the graph's work is issued on the
  // side stream. Streams are switched through c10's functions rather than a guard object, whose
  // inline code would need the CUDA runtime at link time.
  std::optional<c10::cuda::CUDAStream> before_side;
};

namespace {

// Makes `graph`'s previous stream current again, once the side stream has finished its work.
// Streams, not the device, are waited for: another thread may be capturing a graph meanwhile.
void leave_side_stream(DrmasCudaGraph* graph) {
  if (graph->before_side) {
    graph->side->synchronize();
    c10::cuda::setCurrentCUDAStream(*graph->before_side);
    graph->before_side.reset();
  }
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

// A new, empty graph in `*graph` (free it with drmas_cuda_graph_free).
int drmas_cuda_graph_new(DrmasCudaGraph** graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] { *graph = new DrmasCudaGraph(); });
}

// Waits for the work issued on `device`'s current stream, then makes the graph's side stream the
// current one of this thread: what follows (warm-up, then capture) is issued there.
int drmas_cuda_graph_enter_side_stream(DrmasCudaGraph* graph, int device, char* error,
                                       std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    auto index = static_cast<c10::DeviceIndex>(device);
    auto current = c10::cuda::getCurrentCUDAStream(index);
    current.synchronize();
    graph->before_side = current;
    if (!graph->side) {
      graph->side = c10::cuda::getStreamFromPool(false, index);
    }
    c10::cuda::setCurrentCUDAStream(*graph->side);
#endif
  });
}

// Starts capturing the current (side) stream's work into the graph. Only this thread's CUDA
// calls are checked against the capture, so other threads' work may go on meanwhile.
int drmas_cuda_graph_begin(DrmasCudaGraph* graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    graph->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#endif
  });
}

// Ends the capture, makes the graph ready to replay, and returns to the stream that was current
// before the side stream, once the side stream's work is done.
int drmas_cuda_graph_end(DrmasCudaGraph* graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    graph->graph.capture_end();
    leave_side_stream(graph);
#endif
  });
}

// Leaves the side stream without capturing (after a failed capture, say).
int drmas_cuda_graph_leave_side_stream(DrmasCudaGraph* graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
    leave_side_stream(graph);
#endif
  });
}

// Launches the captured work once on the current stream.
int drmas_cuda_graph_replay(DrmasCudaGraph* graph, char* error, std::size_t capacity) {
  return guarded(error, capacity, [&] {
#ifdef DRMAS_WITH_CUDA
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
