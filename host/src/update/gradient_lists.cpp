// Gradient norms, scaling and dropping over lists of tensors for host/src/update/gradient_lists.rs: tch
// binds no operator that takes a list of tensors, and a norm taken tensor by tensor is about
// eight operators per tensor (a few thousand per step of a 28-layer model, each a kernel launch on
// a GPU). Tensors arrive as tch's handles (`at::Tensor*`); no C++ exception crosses into Rust:
// each becomes an error message and a non-zero return.

#include <ATen/core/Tensor.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_foreach_sub.h>
#include <ATen/ops/stack.h>

#include "../shim_error.h"
#include "../tensor_list.h"

#include <cstddef>
#include <exception>
#include <vector>

extern "C" {

// Σ_i ‖a_i − b_i‖² over `count` tensors `a` on one device (‖a_i‖² when `b` is null), each norm
// accumulated in f32 (f64 for f64 tensors) and the squares summed in f64, written into `out`, a
// 0-dim f64 tensor on that device. Returns 0, or 1 with `error` set.
int drmas_squared_norm_sum(void* const* a, void* const* b, std::size_t count, void* out,
                           char* error, std::size_t capacity) {
  try {
    auto& total = *static_cast<at::Tensor*>(out);
    if (count == 0) {
      total.zero_();
      return 0;
    }
    auto list = drmas::tensor_list(a, count);
    if (b != nullptr) {
      list = at::_foreach_sub(list, drmas::tensor_list(b, count));
    }
    const auto accumulate = list[0].scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const auto norms = at::_foreach_norm(list, 2, accumulate);
    total.copy_(at::stack(norms).to(at::kDouble).square().sum());
    return 0;
  } catch (const std::exception& e) {
    drmas::write_error(error, capacity, e.what());
    return 1;
  }
}

// Multiplies each of `count` tensors by `scale` in place, in one list operation. Returns 0, or 1
// with `error` set.
int drmas_scale_each(void* const* list, std::size_t count, double scale, char* error,
                     std::size_t capacity) {
  try {
    if (count > 0) {
      at::_foreach_mul_(drmas::tensor_list(list, count), scale);
    }
    return 0;
  } catch (const std::exception& e) {
    drmas::write_error(error, capacity, e.what());
    return 1;
  }
}

// Drops the gradient of each of `count` tensors (PyTorch's `zero_grad(set_to_none=True)`): its
// memory is freed, and the next backward writes a new one. Returns 0, or 1 with `error` set.
int drmas_drop_gradients(void* const* list, std::size_t count, char* error,
                         std::size_t capacity) {
  try {
    for (auto& tensor : drmas::tensor_list(list, count)) {
      tensor.mutable_grad().reset();
    }
    return 0;
  } catch (const std::exception& e) {
    drmas::write_error(error, capacity, e.what());
    return 1;
  }
}

}  // extern "C"
