// libtorch's multi-tensor AdamW kernel and list copy for host/src/update/fused_adamw.rs: tch
// binds no operator that takes a list of tensors, and stepping a model's few hundred tensors one
// operator at a time costs about 15 kernels and as many passes over memory per tensor. Tensors
// arrive as tch's handles (`at::Tensor*`); no C++ exception crosses into Rust: each becomes an
// error message and a non-zero return.

#include <ATen/core/Tensor.h>
#include <ATen/ops/_foreach_copy.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/full.h>

#include "../shim_error.h"
#include "../tensor_list.h"

#include <cstddef>
#include <exception>
#include <vector>

extern "C" {

// One AdamW step (`torch.optim.AdamW(fused=True)`'s kernel, no amsgrad) of `count` f32 weights
// on one device with their gradients and moments, at optimizer step `step` (1-based, for the bias
// corrections). A gradient of another dtype is converted to its weight's for the step; the
// tensors are stepped in runs whose converted gradients take at most about `converted_bytes`
// (a run holds at least one tensor), so the copies never hold every gradient at once. Each
// element's update is the same whatever the runs. Returns 0, or 1 with `error` set.
int drmas_fused_adamw(void* const* weights, void* const* grads, void* const* exp_avgs,
                      void* const* exp_avg_sqs, std::size_t count, double lr, double beta1,
                      double beta2, double weight_decay, double eps, double step,
                      std::size_t converted_bytes, char* error, std::size_t capacity) {
  try {
    if (count == 0) {
      return 0;
    }
    const auto params = drmas::tensor_list(weights, count);
    const auto gradients = drmas::tensor_list(grads, count);
    const auto firsts = drmas::tensor_list(exp_avgs, count);
    const auto seconds = drmas::tensor_list(exp_avg_sqs, count);
    const auto step_tensor =
        at::full({}, step, at::TensorOptions().dtype(at::kFloat).device(params[0].device()));
    std::size_t start = 0;
    while (start < count) {
      std::vector<at::Tensor> run_gradients;
      std::size_t end = start;
      std::size_t converted = 0;
      while (end < count && (end == start || converted < converted_bytes)) {
        auto gradient = gradients[end];
        if (gradient.scalar_type() != params[end].scalar_type()) {
          gradient = gradient.to(params[end].scalar_type());
          converted += gradient.nbytes();
        }
        run_gradients.push_back(std::move(gradient));
        ++end;
      }
      const auto run = [start, end](const std::vector<at::Tensor>& list) {
        return std::vector<at::Tensor>(list.begin() + start, list.begin() + end);
      };
      const auto steps = std::vector<at::Tensor>(end - start, step_tensor);
      at::_fused_adamw_(run(params), run_gradients, run(firsts), run(seconds), {}, steps, lr,
                        beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
      start = end;
    }
    return 0;
  } catch (const std::exception& e) {
    drmas::write_error(error, capacity, e.what());
    return 1;
  }
}

// Copies each of `count` sources into its destination (converting the dtype), in one list
// operation. Returns 0, or 1 with `error` set.
int drmas_copy_each(void* const* destinations, void* const* sources, std::size_t count,
                    char* error, std::size_t capacity) {
  try {
    if (count == 0) {
      return 0;
    }
    at::_foreach_copy_(drmas::tensor_list(destinations, count),
                       drmas::tensor_list(sources, count));
    return 0;
  } catch (const std::exception& e) {
    drmas::write_error(error, capacity, e.what());
    return 1;
  }
}

}  // extern "C"
