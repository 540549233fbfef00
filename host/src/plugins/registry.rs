//! Every component of every loaded plugin, by (kind, name). Agents are looked up by name, so a
//! run file can put any plugin's agent into any orchestra's role; estimators are looked up among
//! the built-in ones first, then the plugins'.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use drmas_sdk::ffi::{load_plugin, LoadError, LoadedPlugin};
use drmas_sdk::{Agent, ComponentInfo, ComponentKind, Environment, Orchestra, Params};

use crate::advantage::{self, Estimator, EstimatorError};
use crate::suggest::similar;

use super::discover::{discover, BuildProfile, DiscoverError};
use super::elf::{check_shared_library, ElfError};
use super::estimator::PluginEstimator;
use super::hosted::Hosted;
use super::trust::{refuse_writable_library, ExternalLinks};

/// A plugin or component problem, with the file or name and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The folder could not be scanned or a crate not built.
    #[error(transparent)]
    Discover(#[from] DiscoverError),
    /// A file in the plugins folder is not a shared library for this machine.
    #[error(transparent)]
    NotALibrary(#[from] ElfError),
    /// A library could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Two plugins offer the same (kind, name).
    #[error("two plugins offer the {kind} `{name}`: {first} and {second}; remove one from the plugins folder or rename the component")]
    Duplicate {
        /// Component kind.
        kind: ComponentKind,
        /// The shared name.
        name: String,
        /// The library that offered it first.
        first: PathBuf,
        /// The library that offered it again.
        second: PathBuf,
    },
    /// A plugin offers an estimator under a built-in estimator's name.
    #[error("plugin `{plugin}` ({library}) offers an estimator named `{name}`, but `{name}` is a built-in estimator; rename the plugin's estimator (run files could not tell the two apart)")]
    BuiltinEstimator {
        /// The shared name.
        name: String,
        /// The plugin's name.
        plugin: String,
        /// Its library.
        library: PathBuf,
    },
    /// No plugin offers this (kind, name).
    #[error(
        "no plugin offers the {kind} `{name}`{hint}; `drmas-host plugins` lists what is available"
    )]
    Unknown {
        /// Component kind.
        kind: ComponentKind,
        /// The requested name.
        name: String,
        /// ", did you mean …?" or the list of names of that kind.
        hint: String,
    },
    /// The plugin refused to build the component or failed in a call.
    #[error("{0}")]
    Component(String),
}

/// Loaded plugins and an index of their components.
#[derive(Default)]
pub struct Registry {
    plugins: Vec<LoadedPlugin>,
    index: BTreeMap<(ComponentKind, String), usize>,
}

impl Registry {
    /// Loads every plugin in `folder` (building plugin crates with `profile`; following links
    /// out of the folder only as `links` says).
    pub fn load_folder(
        folder: &Path,
        profile: BuildProfile,
        links: ExternalLinks,
    ) -> Result<Self, RegistryError> {
        let mut registry = Registry::default();
        for library in discover(folder, profile, links)? {
            check_shared_library(&library)?;
            registry.add(load_plugin(&library)?)?;
        }
        Ok(registry)
    }

    /// Loads one library file (refused when users other than its owner can write it or its
    /// folder, or when it is not a shared library for this machine).
    pub fn load_file(&mut self, library: &Path) -> Result<(), RegistryError> {
        refuse_writable_library(library).map_err(DiscoverError::from)?;
        check_shared_library(library)?;
        self.add(load_plugin(library)?)
    }

    fn add(&mut self, plugin: LoadedPlugin) -> Result<(), RegistryError> {
        let slot = self.plugins.len();
        for component in plugin.components() {
            if component.kind == ComponentKind::Estimator && advantage::is_builtin(&component.name)
            {
                return Err(RegistryError::BuiltinEstimator {
                    name: component.name.clone(),
                    plugin: plugin.name().to_owned(),
                    library: plugin.path().to_owned(),
                });
            }
            let key = (component.kind, component.name.clone());
            if let Some(&first) = self.index.get(&key) {
                return Err(RegistryError::Duplicate {
                    kind: component.kind,
                    name: component.name.clone(),
                    first: self.plugins[first].path().to_owned(),
                    second: plugin.path().to_owned(),
                });
            }
            self.index.insert(key, slot);
        }
        tracing::debug!(
            "loaded plugin `{}` {} (sdk {}) from {}",
            plugin.name(),
            plugin.version(),
            plugin.sdk_version(),
            plugin.path().display()
        );
        self.plugins.push(plugin);
        Ok(())
    }

    /// The loaded plugins, in load order.
    pub fn plugins(&self) -> &[LoadedPlugin] {
        &self.plugins
    }

    /// Every component with the plugin that offers it, sorted by kind and name.
    pub fn components(&self) -> impl Iterator<Item = (&ComponentInfo, &LoadedPlugin)> {
        self.index.iter().filter_map(|((kind, name), &slot)| {
            let plugin = &self.plugins[slot];
            plugin
                .components()
                .iter()
                .find(|c| c.kind == *kind && &c.name == name)
                .map(|c| (c, plugin))
        })
    }

    fn plugin_for(&self, kind: ComponentKind, name: &str) -> Result<&LoadedPlugin, RegistryError> {
        match self.index.get(&(kind, name.to_owned())) {
            Some(&slot) => Ok(&self.plugins[slot]),
            None => Err(RegistryError::Unknown {
                kind,
                name: name.to_owned(),
                hint: self.hint(kind, name),
            }),
        }
    }

    /// The names of the components of `kind`, sorted.
    fn names(&self, kind: ComponentKind) -> impl Iterator<Item = &str> {
        self.index
            .keys()
            .filter(move |(k, _)| *k == kind)
            .map(|(_, n)| n.as_str())
    }

    /// ", did you mean `X`?" for close names, else the names of that kind.
    fn hint(&self, kind: ComponentKind, name: &str) -> String {
        let names: Vec<&str> = self.names(kind).collect();
        let close = similar(name, names.iter().copied());
        if !close.is_empty() {
            format!(", did you mean {}?", quoted(&close))
        } else if names.is_empty() {
            format!(" (no plugin offers any {kind})")
        } else {
            format!(" (available: {})", quoted(&names))
        }
    }

    /// Builds the agent `name` with its params (TOML text and the run file's folder).
    pub fn agent(
        &self,
        name: &str,
        params: impl Into<Params>,
    ) -> Result<Hosted<dyn Agent>, RegistryError> {
        let plugin = self.plugin_for(ComponentKind::Agent, name)?;
        let agent = plugin
            .create_agent(name, &params.into())
            .map_err(|e| RegistryError::Component(e.to_string()))?;
        let origin = agent.origin().to_string();
        Ok(Hosted::new(Box::new(agent), origin))
    }

    /// Builds the orchestra `name` with its params (TOML text and the run file's folder).
    pub fn orchestra(
        &self,
        name: &str,
        params: impl Into<Params>,
    ) -> Result<Hosted<dyn Orchestra>, RegistryError> {
        let plugin = self.plugin_for(ComponentKind::Orchestra, name)?;
        let orchestra = plugin
            .create_orchestra(name, &params.into())
            .map_err(|e| RegistryError::Component(e.to_string()))?;
        let origin = orchestra.origin().to_string();
        Ok(Hosted::new(Box::new(orchestra), origin))
    }

    /// Builds the environment `name` with its params (TOML text and the run file's folder).
    pub fn environment(
        &self,
        name: &str,
        params: impl Into<Params>,
    ) -> Result<Hosted<dyn Environment>, RegistryError> {
        let plugin = self.plugin_for(ComponentKind::Environment, name)?;
        let environment = plugin
            .create_environment(name, &params.into())
            .map_err(|e| RegistryError::Component(e.to_string()))?;
        let origin = environment.origin().to_string();
        Ok(Hosted::new(Box::new(environment), origin))
    }

    /// Builds the estimator `name` with the run file's `[algorithm.params]`: the built-in one of
    /// that name, else the plugin estimator (which gets the table as TOML text).
    pub fn estimator(
        &self,
        name: &str,
        params: &toml::Table,
    ) -> Result<Box<dyn Estimator>, EstimatorError> {
        if advantage::is_builtin(name) {
            return advantage::build(name, params);
        }
        let Some(&slot) = self.index.get(&(ComponentKind::Estimator, name.to_owned())) else {
            let plugin_names: Vec<String> = self
                .names(ComponentKind::Estimator)
                .map(str::to_owned)
                .collect();
            return Err(EstimatorError::unknown(name, &plugin_names));
        };
        let config = toml::to_string(params).map_err(|e| {
            EstimatorError::Plugin(format!("cannot write [algorithm.params] as TOML: {e}"))
        })?;
        let estimator = self.plugins[slot]
            .create_estimator(name, &Params::new(config))
            .map_err(|e| EstimatorError::Plugin(e.to_string()))?;
        let origin = estimator.origin().to_string();
        Ok(Box::new(PluginEstimator::new(
            name,
            Hosted::new(Box::new(estimator), origin),
        )))
    }
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
