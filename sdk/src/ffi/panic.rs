//! Every call into plugin code runs under `catch_unwind`: a panic must never unwind across the
//! boundary (it would abort the host), so it becomes an error value instead.
//!
//! A caught panic is reported once, by the host, with the panic's message and location; the
//! plugin's standard library prints nothing for it ([`crate::catch_quietly`]).

use abi_stable::std_types::{RErr, ROk, RResult};

use super::FfiError;
use crate::{catch_quietly, Result};

/// Runs `call`, turning its `Err` and any panic into an [`FfiError`]; a panic's message ends
/// with its location (`(at src/lib.rs:12:5)`).
pub(crate) fn guard<T>(call: impl FnOnce() -> Result<T>) -> RResult<T, FfiError> {
    match catch_quietly(call) {
        Ok(Ok(value)) => ROk(value),
        Ok(Err(error)) => RErr(FfiError::failed(error.message())),
        Err(panic) => RErr(FfiError::panicked(&panic.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn a_panic_becomes_an_error_with_its_location_and_an_error_stays_as_it_was() {
        let line = line!() + 1;
        let panicked = guard::<()>(|| panic!("asked to panic")).into_result();
        let error = panicked.expect_err("a panic is an error");
        let expected = format!("asked to panic (at {}:{line}:", file!());
        assert!(
            error.message.as_str().contains(&expected),
            "{}",
            error.message
        );

        let failed = guard::<()>(|| Err(Error::new("asked to fail"))).into_result();
        assert_eq!(
            failed.expect_err("an error").message.as_str(),
            "asked to fail"
        );
        assert_eq!(guard(|| Ok(7)).into_result().ok(), Some(7));
    }
}
