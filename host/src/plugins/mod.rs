//! Plugins: finding them in a folder (built libraries or plugin crates to build), loading each
//! through the SDK's stable ABI (after checking who can write them and that each is a library
//! for this machine), and a registry of their components by (kind, name).

mod call;
mod discover;
mod elf;
mod estimator;
mod hosted;
mod registry;
mod trust;

pub use call::PluginCallError;
pub use discover::{discover, BuildProfile, DiscoverError};
pub use elf::ElfError;
pub use estimator::PluginEstimator;
pub use hosted::{Hosted, HostedSession};
pub use registry::{Registry, RegistryError};
pub use trust::{ExternalLinks, TrustError};
