//! [`Hosted`]: a component the host drives through the SDK's own trait — built by a plugin
//! library, linked in as a crate, or a test double — with where it came from, for messages.

use std::fmt;
use std::ops::Deref;

/// A component behind its trait (`Hosted<dyn Agent>`, `Hosted<dyn Orchestra>`,
/// `Hosted<dyn Environment>`, `Hosted<dyn drmas_sdk::Estimator>`) and a description of where it
/// came from.
pub struct Hosted<T: ?Sized> {
    component: Box<T>,
    origin: String,
}

impl<T: ?Sized> Hosted<T> {
    /// `component`, described by `origin` (e.g. "agent `Solver Agent` of plugin `drmas-math`
    /// (plugins/math/…/libdrmas_math.so)").
    pub fn new(component: Box<T>, origin: impl Into<String>) -> Self {
        Self {
            component,
            origin: origin.into(),
        }
    }

    /// Where the component came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

impl<T: ?Sized> Deref for Hosted<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.component
    }
}

impl<T: ?Sized> fmt::Debug for Hosted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hosted")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}
