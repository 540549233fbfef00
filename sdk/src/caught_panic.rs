//! [`catch_quietly`]: a panic caught as a value, with its message and location, and no line of
//! its own on stderr.
//!
//! Every call into plugin code runs under it (a panic must never unwind across the plugin
//! boundary), and the host runs third-party parsers under it that panic on some malformed input
//! instead of failing. Each such panic is reported once, by whoever caught it, as an error. The
//! standard library would also print its "thread … panicked at …" line for each one (a model in
//! RL can make a plugin panic in every episode of a run), so a panic hook keeps panics raised
//! inside `catch_quietly` quiet unless `RUST_BACKTRACE` asks for them, and hands every other
//! panic to the hook that was installed before.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::{self, catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// How many `catch_quietly` calls this thread is inside.
    static CATCHING: Cell<usize> = const { Cell::new(0) };
    /// Where the latest panic on this thread inside `catch_quietly` was raised.
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A panic that [`catch_quietly`] caught.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaughtPanic {
    message: String,
    location: Option<String>,
}

impl CaughtPanic {
    /// The text the panic was raised with (`panic!("…")`), or a placeholder for a payload that
    /// is not text.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// `file:line:column` of the `panic!` (or `unwrap`, …) that raised it.
    pub fn location(&self) -> Option<&str> {
        self.location.as_deref()
    }
}

/// "message (at file:line:column)".
impl fmt::Display for CaughtPanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Some(location) => write!(f, "{} (at {location})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for CaughtPanic {}

/// Runs `call` and returns its value, or the panic it raised as a [`CaughtPanic`] without the
/// standard library's "thread … panicked at" line on stderr (printed still when
/// `RUST_BACKTRACE` is set and not `0`): the caller reports it, once. Panics outside any
/// `catch_quietly` reach the panic hook installed before, as always.
pub fn catch_quietly<T>(call: impl FnOnce() -> T) -> Result<T, CaughtPanic> {
    install_quiet_hook();
    CATCHING.with(|depth| depth.set(depth.get() + 1));
    let outcome = catch_unwind(AssertUnwindSafe(call));
    CATCHING.with(|depth| depth.set(depth.get() - 1));
    outcome.map_err(|payload| CaughtPanic {
        message: text_of(&*payload),
        location: LOCATION.with(|slot| slot.borrow_mut().take()),
    })
}

/// The text of a panic's payload: `panic!("…")` gives a `&str` or a `String`.
fn text_of(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-text payload".to_owned())
}

/// Installs, once per copy of the standard library, the hook that records where a panic inside
/// [`catch_quietly`] was raised instead of printing it, and passes every other panic to the
/// previous hook. A plugin built as a cdylib has a standard library of its own, so its copy of
/// this hook sees only the plugin's panics.
fn install_quiet_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        let backtraces = std::env::var_os("RUST_BACKTRACE").is_some_and(|value| value != "0");
        panic::set_hook(Box::new(move |info| {
            let catching = CATCHING.try_with(Cell::get).unwrap_or(0) > 0;
            if catching {
                let location = info
                    .location()
                    .map(|at| format!("{}:{}:{}", at.file(), at.line(), at.column()));
                let _ = LOCATION.try_with(|slot| *slot.borrow_mut() = location);
            }
            if !catching || backtraces {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_a_value_with_its_message_and_location() {
        let line = line!() + 1;
        let caught = catch_quietly(|| -> u8 { panic!("asked to panic: {}", 7) })
            .expect_err("a panic is caught");
        assert_eq!(caught.message(), "asked to panic: 7");
        let expected = format!("{}:{line}:", file!());
        assert!(
            caught
                .location()
                .is_some_and(|at| at.starts_with(&expected)),
            "{caught:?}"
        );
        assert!(caught.to_string().starts_with("asked to panic: 7 (at "));

        assert_eq!(catch_quietly(|| 7), Ok(7));
        let non_text = catch_quietly(|| panic::panic_any(7_u8)).expect_err("caught");
        assert_eq!(non_text.message(), "a panic with a non-text payload");
        assert_eq!(CATCHING.with(Cell::get), 0, "every call left");
    }
}
