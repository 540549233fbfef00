//! Every call into plugin code runs under `catch_unwind`: a panic must never unwind across the
//! boundary (it would abort the host), so it becomes an error value instead.
//!
//! A caught panic is reported once, by the host, with the panic's message and location. The
//! plugin's standard library would also print its default "thread … panicked at …" message for
//! each one (a model in RL can make a plugin panic in every episode of a run), so the guard's
//! panic hook keeps panics it catches quiet unless `RUST_BACKTRACE` asks for them, and hands
//! every other panic to the hook that was installed before.

use std::cell::{Cell, RefCell};
use std::panic::{self, catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use abi_stable::std_types::{RErr, ROk, RResult};

use super::FfiError;
use crate::Result;

thread_local! {
    /// How many guards this thread is inside.
    static GUARDED: Cell<usize> = const { Cell::new(0) };
    /// Where the latest panic on this thread inside a guard happened.
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `call`, turning its `Err` and any panic into an [`FfiError`]; a panic's message ends
/// with its location (`(at src/lib.rs:12:5)`).
pub(crate) fn guard<T>(call: impl FnOnce() -> Result<T>) -> RResult<T, FfiError> {
    install_quiet_hook();
    GUARDED.with(|depth| depth.set(depth.get() + 1));
    let outcome = catch_unwind(AssertUnwindSafe(call));
    GUARDED.with(|depth| depth.set(depth.get() - 1));
    match outcome {
        Ok(Ok(value)) => ROk(value),
        Ok(Err(error)) => RErr(FfiError::failed(error.message())),
        Err(payload) => {
            let mut message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic with a non-text payload".to_owned());
            if let Some(location) = LOCATION.with(|slot| slot.borrow_mut().take()) {
                message = format!("{message} (at {location})");
            }
            RErr(FfiError::panicked(&message))
        }
    }
}

/// Installs, once per copy of the standard library, the hook that records the location of a
/// panic inside a guard instead of printing it (printing it too when `RUST_BACKTRACE` is set
/// and not `0`), and passes every other panic to the previous hook. A plugin built as a cdylib
/// has a standard library of its own, so this hook sees only the plugin's panics; a plugin
/// linked into the host (tests) shares the host's, whose own panics still reach its hook.
fn install_quiet_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        let backtraces = std::env::var_os("RUST_BACKTRACE").is_some_and(|value| value != "0");
        panic::set_hook(Box::new(move |info| {
            let guarded = GUARDED.try_with(Cell::get).unwrap_or(0) > 0;
            if guarded {
                let location = info
                    .location()
                    .map(|at| format!("{}:{}:{}", at.file(), at.line(), at.column()));
                let _ = LOCATION.try_with(|slot| *slot.borrow_mut() = location);
            }
            if !guarded || backtraces {
                previous(info);
            }
        }));
    });
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
        assert_eq!(GUARDED.with(Cell::get), 0, "every guard left");
    }
}
