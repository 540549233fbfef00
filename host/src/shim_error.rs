//! [`ShimError`]: the buffer a C++ shim of the crate (`devices/profiler.cpp`,
//! `update/fused_adamw.cpp`, `update/gradient_lists.cpp`) writes a caught exception's message
//! into, through `shim_error.h`'s `drmas::write_error`.

use std::ffi::{c_char, c_int};

use tch::TchError;

use crate::model::error::ModelError;

/// A message buffer handed to a shim call as `(error, capacity)`.
pub(crate) struct ShimError {
    buffer: [u8; Self::CAPACITY],
}

impl ShimError {
    /// Bytes the shim may write, its terminating NUL included.
    pub(crate) const CAPACITY: usize = 512;

    /// An empty buffer.
    pub(crate) fn new() -> Self {
        Self {
            buffer: [0; Self::CAPACITY],
        }
    }

    /// The pointer to pass as the shim's `error` argument, writable for [`Self::CAPACITY`]
    /// bytes.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut c_char {
        self.buffer.as_mut_ptr().cast()
    }

    /// Runs `call`, a shim call given `(error, capacity)` that returns 0 when it succeeds; its
    /// failure as [`Self::model_error`].
    pub(crate) fn check(
        what: &str,
        call: impl FnOnce(*mut c_char, usize) -> c_int,
    ) -> Result<(), ModelError> {
        let mut error = Self::new();
        match call(error.as_mut_ptr(), Self::CAPACITY) {
            0 => Ok(()),
            _ => Err(error.model_error(what)),
        }
    }

    /// The shim's failure as a libtorch error of the model: `what` failed, and why.
    pub(crate) fn model_error(&self, what: &str) -> ModelError {
        ModelError::Torch(TchError::Torch(format!("{what}: {}", self.message())))
    }

    /// The message the shim wrote (up to its NUL), empty if none.
    pub(crate) fn message(&self) -> String {
        let end = self
            .buffer
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(Self::CAPACITY);
        String::from_utf8_lossy(&self.buffer[..end]).into_owned()
    }
}
