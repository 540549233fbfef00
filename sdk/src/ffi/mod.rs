//! The stable-ABI layer, built on `abi_stable`. Plugin authors never use it directly: the
//! [`crate::export_plugin!`] macro builds the plugin side, and the host loads libraries with
//! [`load_plugin`] and talks to components through the `Foreign*` wrappers, which implement the
//! same author-facing traits. abi_stable stays inside this module so it can be replaced.
//!
//! Pairing (as in DataFusion's FFI): each role has an `Ffi*` trait object that crosses the
//! boundary, an exporter that wraps an author's type into it (catching panics), and a
//! `Foreign*` wrapper on the host side that turns it back into the author-facing trait.

mod data;
mod foreign;
mod load;
mod logging;
mod module;
mod objects;
mod panic;

pub use foreign::{ForeignAgent, ForeignEnvironment, ForeignEstimator, ForeignOrchestra, Origin};
pub use load::{load_plugin, LoadError, LoadedPlugin};

// Used by the code `export_plugin!` expands to in plugin crates; not part of the author API.
#[doc(hidden)]
pub use self::{data::*, logging::*, module::*, objects::*};
pub(crate) use panic::guard;
