//! [`panic_message`]: the text of a caught panic.

use std::any::Any;

/// The message a panic was raised with (`panic!("…")` gives a `&str` or a `String`); `None`
/// for any other payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
}
