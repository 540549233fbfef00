// Shared by the crate's C++ shims over list operators (update/fused_adamw.cpp,
// update/gradient_lists.cpp): Rust hands them tch's tensor handles (`at::Tensor*`) as an array
// (host/src/tensor_list.rs on the Rust side).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace drmas {

// The `count` tensors whose handles `handles` holds, as a list libtorch's operators take.
inline std::vector<at::Tensor> tensor_list(void* const* handles, std::size_t count) {
  std::vector<at::Tensor> list;
  list.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    list.push_back(*static_cast<const at::Tensor*>(handles[i]));
  }
  return list;
}

}  // namespace drmas
