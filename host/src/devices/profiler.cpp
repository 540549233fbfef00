// libtorch's Kineto profiler for `drmas-host devices --profile` (host/src/devices/profile.rs):
// tch exposes no profiler, and a GPU step's time can only be split into its kernels from inside
// the process that launches them. Two C functions: start records host operators (and CUDA
// kernels, copies and runtime calls when asked); stop hands every recorded event to a callback.
// No C++ exception crosses into Rust: each becomes an error message and a non-zero return.

#include <torch/csrc/autograd/profiler_kineto.h>

#include "../shim_error.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <set>

namespace {

std::set<torch::profiler::impl::ActivityType> activities(int with_cuda) {
  std::set<torch::profiler::impl::ActivityType> kinds{torch::profiler::impl::ActivityType::CPU};
  if (with_cuda != 0) {
    kinds.insert(torch::profiler::impl::ActivityType::CUDA);
  }
  return kinds;
}

}  // namespace

extern "C" {

// One recorded event: its name, whether it ran on a device (a kernel, copy or fill) rather than
// the host (an operator or a runtime call), and its duration.
typedef void (*drmas_profiler_event)(void* context, const char* name, int on_device,
                                     std::uint64_t duration_ns);

// Starts recording on the calling thread. Returns 0, or 1 with `error` filled.
int drmas_profiler_start(int with_cuda, char* error, std::size_t capacity) {
  try {
    torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    const auto kinds = activities(with_cuda);
    torch::autograd::profiler::prepareProfiler(config, kinds);
    torch::autograd::profiler::enableProfiler(config, kinds);
    return 0;
  } catch (const std::exception& e) {
    drmas::write_error(error, capacity, e.what());
    return 1;
  }
}

// Stops recording and calls `emit` once per event. Returns 0, or 1 with `error` filled.
int drmas_profiler_stop(drmas_profiler_event emit, void* context, char* error,
                        std::size_t capacity) {
  try {
    const auto result = torch::autograd::profiler::disableProfiler();
    if (result && emit != nullptr) {
      for (const auto& event : result->events()) {
        const bool on_device = event.deviceType() != c10::DeviceType::CPU;
        emit(context, event.name().c_str(), on_device ? 1 : 0, event.durationNs());
      }
    }
    return 0;
  } catch (const std::exception& e) {
    drmas::write_error(error, capacity, e.what());
    return 1;
  }
}

}  // extern "C"
