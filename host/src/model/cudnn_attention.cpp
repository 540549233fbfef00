// Whether libtorch's scaled_dot_product_attention may choose cuDNN's kernel
// (host/src/model/cuda_attention.rs): a process-wide flag of libtorch's context, which tch does
// not bind. Setting and reading a flag cannot throw, so no exception handling is needed here.

#include <ATen/Context.h>

extern "C" {

// Allows (non-zero) or forbids (0) cuDNN's attention for every later call in the process.
void drmas_set_cudnn_attention(int enabled) {
  at::globalContext().setSDPUseCuDNN(enabled != 0);
}

// 1 when cuDNN's attention is allowed, 0 when forbidden.
int drmas_cudnn_attention_allowed() {
  return at::globalContext().userEnabledCuDNNSDP() ? 1 : 0;
}

}  // extern "C"
