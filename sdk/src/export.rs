//! What [`crate::export_plugin!`] expands to calls into; hidden from the docs. Everything
//! here runs inside the plugin library.

use abi_stable::library::CheckTypeLayout;
use abi_stable::prefix_type::PrefixTypeTrait;

use crate::ffi::{guard, Exported, FfiComponentInfo, PluginModule, PluginModuleRef};
use crate::{
    Agent, Component, ComponentKind, Environment, Error, Estimator, Orchestra, Params, Result,
};

// The types the macro's `extern "C"` functions name.
pub use crate::ffi::{FfiComponent, FfiError, FfiKind, FfiLogger, FfiParams, FfiPluginInfo};
pub use abi_stable::library::{LibHeader, RootModuleResult};
pub use abi_stable::std_types::{RResult, RStr};

/// The exported symbol abi_stable looks up (its mangled "root module loader" name); a test
/// checks it against abi_stable's own constant.
pub const ROOT_MODULE_LOADER_NAME: &str = "_1as_0lib_1header_0root_bmodule_bloader";

/// One exported component: its kind, name, description and constructor.
pub struct Entry {
    kind: ComponentKind,
    name: &'static str,
    description: &'static str,
    create: fn(&Params) -> Result<FfiComponent>,
}

impl Entry {
    /// An agent type.
    pub const fn agent<T: Agent + Component>() -> Self {
        Self {
            kind: ComponentKind::Agent,
            name: T::NAME,
            description: T::DESCRIPTION,
            create: create_agent::<T>,
        }
    }
    /// An orchestra type.
    pub const fn orchestra<T: Orchestra + Component>() -> Self {
        Self {
            kind: ComponentKind::Orchestra,
            name: T::NAME,
            description: T::DESCRIPTION,
            create: create_orchestra::<T>,
        }
    }
    /// An environment type.
    pub const fn environment<T: Environment + Component>() -> Self {
        Self {
            kind: ComponentKind::Environment,
            name: T::NAME,
            description: T::DESCRIPTION,
            create: create_environment::<T>,
        }
    }
    /// An estimator type.
    pub const fn estimator<T: Estimator + Component>() -> Self {
        Self {
            kind: ComponentKind::Estimator,
            name: T::NAME,
            description: T::DESCRIPTION,
            create: create_estimator::<T>,
        }
    }
}

fn create_agent<T: Agent + Component>(params: &Params) -> Result<FfiComponent> {
    Ok(FfiComponent::Agent(Exported::agent(T::from_config(
        params,
    )?)))
}

fn create_orchestra<T: Orchestra + Component>(params: &Params) -> Result<FfiComponent> {
    Ok(FfiComponent::Orchestra(Exported::orchestra(
        T::from_config(params)?,
    )))
}

fn create_environment<T: Environment + Component>(params: &Params) -> Result<FfiComponent> {
    Ok(FfiComponent::Environment(Exported::environment(
        T::from_config(params)?,
    )))
}

fn create_estimator<T: Estimator + Component>(params: &Params) -> Result<FfiComponent> {
    Ok(FfiComponent::Estimator(Exported::estimator(
        T::from_config(params)?,
    )))
}

/// The plugin's listing.
pub fn info(plugin: &str, version: &str, entries: &[Entry]) -> FfiPluginInfo {
    FfiPluginInfo {
        name: plugin.into(),
        version: version.into(),
        sdk_version: crate::SDK_VERSION.into(),
        components: entries
            .iter()
            .map(|e| FfiComponentInfo {
                kind: e.kind.into(),
                name: e.name.into(),
                description: e.description.into(),
                version: version.into(),
            })
            .collect(),
    }
}

/// Builds the component `name` of `kind`, catching panics in its constructor.
pub fn create(
    entries: &[Entry],
    kind: FfiKind,
    name: RStr<'_>,
    params: &FfiParams,
) -> RResult<FfiComponent, FfiError> {
    let kind = ComponentKind::from(kind);
    guard(|| {
        let entry = entries
            .iter()
            .find(|e| e.kind == kind && e.name == name.as_str())
            .ok_or_else(|| {
                Error::new(format!(
                    "this plugin has no {kind} named `{}`",
                    name.as_str()
                ))
            })?;
        (entry.create)(&Params::from(params))
    })
}

/// Installs the host's log sink.
pub fn set_logger(sink: FfiLogger) {
    crate::ffi::install_logger(sink);
}

/// The root module value, from the plugin's three entry points.
pub fn module(
    info: extern "C" fn() -> FfiPluginInfo,
    set_logger: extern "C" fn(FfiLogger),
    create: extern "C" fn(FfiKind, RStr<'_>, &FfiParams) -> RResult<FfiComponent, FfiError>,
) -> PluginModuleRef {
    PluginModule {
        info,
        set_logger,
        create,
    }
    .leak_into_prefix()
}

/// Runs the root-module constructor the way abi_stable's loader expects.
pub fn load_root(root: fn() -> PluginModuleRef) -> RootModuleResult {
    abi_stable::library::__call_root_module_loader(root)
}

/// The library header static's value.
///
/// # Safety
/// `loader` must return the module built by [`module`] (what `export_plugin!` generates).
pub const unsafe fn header(loader: extern "C" fn() -> RootModuleResult) -> LibHeader {
    // SAFETY: the caller guarantees the loader returns a `PluginModuleRef`.
    unsafe { LibHeader::from_constructor::<PluginModuleRef>(loader, CheckTypeLayout::Yes) }
}

/// Exports a plugin: its name and the component types it offers, by kind.
///
/// Each listed type implements [`crate::Component`] and the trait of its kind. Generates the
/// stable-ABI root module the host loads; the plugin crate must be a `cdylib`. The plugin crate
/// itself may `#![forbid(unsafe_code)]`: the code this macro writes keeps its `unsafe` to itself.
///
/// ```ignore
/// drmas_sdk::export_plugin! {
///     name: "math",
///     agents: [SolverAgent, VerifierAgent],
///     orchestras: [MathOrchestra],
///     environments: [MathEnvironment],
///     estimators: [SignEstimator],
/// }
/// ```
#[macro_export]
macro_rules! export_plugin {
    (
        name: $name:literal
        $(, agents: [$($agent:ty),* $(,)?])?
        $(, orchestras: [$($orchestra:ty),* $(,)?])?
        $(, environments: [$($environment:ty),* $(,)?])?
        $(, estimators: [$($estimator:ty),* $(,)?])?
        $(,)?
    ) => {
        // No `allow(unsafe_code)` here: the one `unsafe` block and the `export_name` below come
        // from this macro, and rustc does not report `unsafe_code` in another crate's macro, so a
        // plugin crate may `#![forbid(unsafe_code)]` (an `allow` here would collide with it).
        #[doc(hidden)]
        #[allow(missing_docs)]
        pub mod __drmas_plugin {
            #[allow(unused_imports)]
            use super::*;
            use $crate::export as x;

            static ENTRIES: &[x::Entry] = &[
                $($(x::Entry::agent::<$agent>(),)*)?
                $($(x::Entry::orchestra::<$orchestra>(),)*)?
                $($(x::Entry::environment::<$environment>(),)*)?
                $($(x::Entry::estimator::<$estimator>(),)*)?
            ];

            extern "C" fn info() -> x::FfiPluginInfo {
                x::info($name, env!("CARGO_PKG_VERSION"), ENTRIES)
            }

            extern "C" fn set_logger(sink: x::FfiLogger) {
                x::set_logger(sink)
            }

            extern "C" fn create(
                kind: x::FfiKind,
                name: x::RStr<'_>,
                params: &x::FfiParams,
            ) -> x::RResult<x::FfiComponent, x::FfiError> {
                x::create(ENTRIES, kind, name, params)
            }

            fn root() -> $crate::ffi::PluginModuleRef {
                x::module(info, set_logger, create)
            }

            extern "C" fn loader() -> x::RootModuleResult {
                x::load_root(root)
            }

            /// The header abi_stable's loader reads (see `ROOT_MODULE_LOADER_NAME`).
            #[export_name = "_1as_0lib_1header_0root_bmodule_bloader"]
            pub static HEADER: x::LibHeader = unsafe { x::header(loader) };
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_exported_symbol_is_the_one_abi_stable_looks_up() {
        assert_eq!(
            super::ROOT_MODULE_LOADER_NAME,
            abi_stable::library::ROOT_MODULE_LOADER_NAME
        );
    }
}
