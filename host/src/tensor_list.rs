//! [`handles`]: tensors as the array of tch handles (`at::Tensor*`) the crate's C++ shims over
//! list operators take (`tensor_list.h`'s `drmas::tensor_list` on the C++ side).

use std::ffi::c_void;

use tch::Tensor;

/// The handles of `tensors`, in order; valid while the tensors are.
pub(crate) fn handles<'t>(tensors: impl IntoIterator<Item = &'t Tensor>) -> Vec<*mut c_void> {
    tensors
        .into_iter()
        .map(|t| t.as_ptr().cast_mut().cast::<c_void>())
        .collect()
}
