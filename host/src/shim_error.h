// Shared by the crate's C++ shims (devices/profiler.cpp, update/fused_adamw.cpp,
// update/gradient_lists.cpp): no C++ exception may cross into Rust, so each is caught and its
// message copied into the caller's buffer (host/src/shim_error.rs on the Rust side).
#pragma once

#include <cstddef>
#include <cstring>

namespace drmas {

// Copies `message` into `error` (`capacity` bytes), cut short and always NUL-terminated.
inline void write_error(char* error, std::size_t capacity, const char* message) {
  if (error == nullptr || capacity == 0) {
    return;
  }
  std::strncpy(error, message, capacity - 1);
  error[capacity - 1] = '\0';
}

}  // namespace drmas
