//! The error type of plugin code: a message, convertible from any standard error; and its twin
//! that is a standard error, for the code that calls plugins.

use std::fmt;

/// An error raised by a plugin component, carried to the host as text.
///
/// Like `anyhow::Error` it converts from any `std::error::Error`, so `?` works on I/O, serde and
/// parse errors; unlike it, it is plain data that can cross the plugin boundary.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
}

/// A plugin [`Error`] as a `std::error::Error`, so a host can `?` it into `anyhow::Error` or
/// `Box<dyn std::error::Error>` after one conversion: `.map_err(PluginError::from)?`.
///
/// [`Error`] cannot be a standard error itself: it converts from every standard error, so that
/// plugin code can `?` anything, and that conversion would then have to include `From<Error> for
/// Error`, which `std` already defines.
///
/// ```
/// use drmas_sdk::{Error, PluginError};
///
/// fn load() -> drmas_sdk::Result<Vec<String>> {
///     Err(Error::new("train.jsonl:3: invalid JSON"))
/// }
///
/// fn host() -> Result<(), Box<dyn std::error::Error>> {
///     let tasks = load().map_err(PluginError::from)?;
///     println!("{} tasks", tasks.len());
///     Ok(())
/// }
///
/// assert_eq!(host().unwrap_err().to_string(), "train.jsonl:3: invalid JSON");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError(Error);

/// `Result` with the plugin [`Error`] as its default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prefixes the message with what was being done, e.g. the file being read.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self {
            message: format!("{context}: {}", self.message),
        }
    }
}

impl<E: std::error::Error> From<E> for Error {
    fn from(error: E) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self { message }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?})", self.message)
    }
}

impl From<Error> for PluginError {
    fn from(error: Error) -> Self {
        Self(error)
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for PluginError {}
