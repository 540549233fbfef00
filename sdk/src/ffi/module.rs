//! The root module every plugin library exports: what it offers, a logger hook and a constructor.
//!
//! Evolution: new functions go after `create`, marked as the new `last_prefix_field`; then an older
//! host can load a newer plugin but a newer host refuses an older one (see docs/plugins.md).

#![allow(missing_docs)]

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RResult, RStr};
use abi_stable::{declare_root_module_statics, package_version_strings, StableAbi};

use super::{FfiComponent, FfiError, FfiKind, FfiLogger, FfiParams, FfiPluginInfo};

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct PluginModule {
    /// The plugin's name, version, SDK version and components.
    pub info: extern "C" fn() -> FfiPluginInfo,
    /// Installs the host's log sink; called once right after loading.
    pub set_logger: extern "C" fn(FfiLogger),
    /// Builds a component of `kind` named `name` from its params.
    #[sabi(last_prefix_field)]
    pub create: extern "C" fn(FfiKind, RStr<'_>, &FfiParams) -> RResult<FfiComponent, FfiError>,
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "drmas_plugin";
    const NAME: &'static str = "drmas_plugin";
    // Expanded here, so it is drmas-sdk's version: the ABI version.
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}
