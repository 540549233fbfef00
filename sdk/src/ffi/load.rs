//! Host side: opening a plugin library, checking it was built against this SDK, and building
//! its components.
//!
//! abi_stable's `RootModule::load_from_*` caches one module per root-module type, so a second
//! plugin would silently come back as the first; each library is opened on its own with
//! `lib_header_from_path(..).init_root_module()` instead. Libraries are never unloaded.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use abi_stable::library::{lib_header_from_path, LibraryError};
use abi_stable::std_types::RStr;

use super::{
    FfiComponent, FfiKind, FfiLogger, FfiParams, ForeignAgent, ForeignEnvironment,
    ForeignEstimator, ForeignOrchestra, Origin, PluginModuleRef,
};
use crate::{ComponentInfo, ComponentKind, Error, Params, Result};

/// Why a library could not be loaded as a plugin. Each message names the file and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The file could not be opened as a shared library.
    Open {
        /// The file.
        path: PathBuf,
        /// The dynamic loader's message.
        reason: String,
    },
    /// A shared library without a drmas root module.
    NotAPlugin {
        /// The file.
        path: PathBuf,
    },
    /// Built against an SDK whose ABI version differs from the host's.
    SdkMismatch {
        /// The file.
        path: PathBuf,
        /// The SDK version the plugin was built with.
        plugin_sdk: String,
        /// The SDK version of this host.
        host_sdk: String,
    },
    /// Same SDK version number, but the ABI layout differs (a modified SDK).
    LayoutMismatch {
        /// The file.
        path: PathBuf,
        /// The SDK version the plugin claims.
        plugin_sdk: String,
    },
    /// The plugin's root module failed to initialise.
    Init {
        /// The file.
        path: PathBuf,
        /// What it said.
        reason: String,
    },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = crate::SDK_VERSION;
        match self {
            LoadError::Open { path, reason } => {
                write!(f, "cannot open plugin {}: {reason}", path.display())
            }
            LoadError::NotAPlugin { path } => write!(
                f,
                "{} is not a drmas plugin (no drmas root module); remove it from the plugins folder \
                 or build it with drmas_sdk::export_plugin!",
                path.display()
            ),
            LoadError::SdkMismatch { path, plugin_sdk, host_sdk } => write!(
                f,
                "plugin {} was built against drmas-sdk {plugin_sdk}, but this host needs drmas-sdk \
                 {host_sdk}; rebuild the plugin against drmas-sdk {host_sdk}",
                path.display()
            ),
            LoadError::LayoutMismatch { path, plugin_sdk } => write!(
                f,
                "plugin {} was built against a modified drmas-sdk {plugin_sdk} whose ABI differs from \
                 this host's drmas-sdk {host}; rebuild the plugin against the released drmas-sdk {host} \
                 (RUST_LOG=debug shows the layout differences)",
                path.display()
            ),
            LoadError::Init { path, reason } => {
                write!(f, "plugin {} failed to initialise: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// A loaded plugin library: what it offers and how to build it.
pub struct LoadedPlugin {
    path: PathBuf,
    name: String,
    version: String,
    sdk_version: String,
    components: Vec<ComponentInfo>,
    module: PluginModuleRef,
}

/// Opens `path`, checks its SDK version and ABI layout, installs the log forwarder and reads its
/// component list.
pub fn load_plugin(path: &Path) -> Result<LoadedPlugin, LoadError> {
    let header = lib_header_from_path(path).map_err(|error| classify(path, None, error))?;
    let plugin_sdk = header.version_strings().version.as_str().to_owned();
    let module = header
        .init_root_module::<PluginModuleRef>()
        .map_err(|error| classify(path, Some(&plugin_sdk), error))?;
    (module.set_logger())(FfiLogger {
        log: super::host_sink,
    });
    let info = (module.info())();
    Ok(LoadedPlugin {
        path: path.to_owned(),
        name: info.name.into(),
        version: info.version.into(),
        sdk_version: info.sdk_version.into(),
        components: info.components.iter().map(ComponentInfo::from).collect(),
        module,
    })
}

fn classify(path: &Path, plugin_sdk: Option<&str>, error: LibraryError) -> LoadError {
    let path = path.to_owned();
    match error {
        LibraryError::OpenError { err, .. } => LoadError::Open {
            path,
            reason: err.to_string(),
        },
        LibraryError::GetSymbolError { .. } | LibraryError::InvalidAbiHeader(_) => {
            LoadError::NotAPlugin { path }
        }
        LibraryError::IncompatibleVersionNumber {
            actual_version,
            expected_version,
            ..
        } => LoadError::SdkMismatch {
            path,
            plugin_sdk: actual_version.to_string(),
            host_sdk: expected_version.to_string(),
        },
        LibraryError::AbiInstability(details) => {
            log::debug!("ABI layout differences of {}:\n{details}", path.display());
            let plugin_sdk = plugin_sdk.unwrap_or("?").to_owned();
            // abi_stable lets a 0.1 host past the version check of a 0.2 plugin and then finds
            // the layouts differ: report what the user can act on, the version pair.
            if plugin_sdk != crate::SDK_VERSION {
                LoadError::SdkMismatch {
                    path,
                    plugin_sdk,
                    host_sdk: crate::SDK_VERSION.to_owned(),
                }
            } else {
                LoadError::LayoutMismatch { path, plugin_sdk }
            }
        }
        other => LoadError::Init {
            path,
            reason: other.to_string().trim().to_owned(),
        },
    }
}

impl LoadedPlugin {
    /// The library file.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The plugin crate's version.
    pub fn version(&self) -> &str {
        &self.version
    }
    /// The SDK version it was built against.
    pub fn sdk_version(&self) -> &str {
        &self.sdk_version
    }
    /// Everything it offers.
    pub fn components(&self) -> &[ComponentInfo] {
        &self.components
    }

    fn create(
        &self,
        kind: ComponentKind,
        name: &str,
        params: &Params,
    ) -> Result<(FfiComponent, Arc<Origin>)> {
        let origin = Arc::new(Origin {
            kind,
            component: name.to_owned(),
            plugin: self.name.clone(),
            file: self.path.clone(),
        });
        let built = (self.module.create())(
            FfiKind::from(kind),
            RStr::from(name),
            &FfiParams::from(params),
        )
        .into_result()
        .map_err(|e| Error::new(format!("cannot build {origin}: {}", e.message)))?;
        Ok((built, origin))
    }

    /// Builds the agent `name` from its params.
    pub fn create_agent(&self, name: &str, params: &Params) -> Result<ForeignAgent> {
        match self.create(ComponentKind::Agent, name, params)? {
            (FfiComponent::Agent(inner), origin) => Ok(ForeignAgent { inner, origin }),
            (_, origin) => Err(Error::new(format!(
                "{origin} built a component of another kind"
            ))),
        }
    }

    /// Builds the orchestra `name` from its params.
    pub fn create_orchestra(&self, name: &str, params: &Params) -> Result<ForeignOrchestra> {
        match self.create(ComponentKind::Orchestra, name, params)? {
            (FfiComponent::Orchestra(inner), origin) => Ok(ForeignOrchestra { inner, origin }),
            (_, origin) => Err(Error::new(format!(
                "{origin} built a component of another kind"
            ))),
        }
    }

    /// Builds the environment `name` from its params.
    pub fn create_environment(&self, name: &str, params: &Params) -> Result<ForeignEnvironment> {
        match self.create(ComponentKind::Environment, name, params)? {
            (FfiComponent::Environment(inner), origin) => Ok(ForeignEnvironment { inner, origin }),
            (_, origin) => Err(Error::new(format!(
                "{origin} built a component of another kind"
            ))),
        }
    }

    /// Builds the estimator `name` from its params (the run file's `[algorithm.params]`).
    pub fn create_estimator(&self, name: &str, params: &Params) -> Result<ForeignEstimator> {
        match self.create(ComponentKind::Estimator, name, params)? {
            (FfiComponent::Estimator(inner), origin) => Ok(ForeignEstimator { inner, origin }),
            (_, origin) => Err(Error::new(format!(
                "{origin} built a component of another kind"
            ))),
        }
    }
}
