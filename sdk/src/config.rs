//! A component's parameters: the TOML text of its `params` table in the run file and the run
//! file's folder. Each component parses the text with its own strict struct.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::Error;

/// What [`crate::Component::from_config`] receives: the component's `params` table as TOML text,
/// and the folder of the run file that wrote it.
///
/// ```
/// use drmas_sdk::Params;
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Config {
///     corpus: String,
/// }
///
/// let params = Params::new("corpus = \"data/corpus.jsonl\"").with_base_dir("/runs/nq");
/// let config: Config = params.parse().expect("valid params");
/// assert_eq!(params.resolve(&config.corpus), std::path::Path::new("/runs/nq/data/corpus.jsonl"));
/// assert!(Params::new("corpse = 1").parse::<Config>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Params {
    text: String,
    base_dir: PathBuf,
}

impl Params {
    /// Parameters from TOML text, with relative paths resolving against the working directory
    /// (what tests want; the host also sets [`Params::with_base_dir`]).
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            base_dir: PathBuf::new(),
        }
    }

    /// The same parameters, with relative paths resolving against `base_dir`.
    pub fn with_base_dir(self, base_dir: impl Into<PathBuf>) -> Self {
        Self {
            base_dir: base_dir.into(),
            ..self
        }
    }

    /// The TOML text (empty when the run file gives no params).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The run file's folder (empty: the working directory).
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// Parses the text into `T`, with line and column in the error. Use
    /// `#[serde(deny_unknown_fields)]` on `T` so that a typo is an error, not an ignored key; an
    /// empty text parses as an empty table (all defaults).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, Error> {
        toml::from_str(&self.text)
            .map_err(|error| Error::new(error.to_string().trim_end().to_owned()))
    }

    /// A path from the params as a file path: absolute as is, relative against the run file's
    /// folder, like every other path in the run file.
    pub fn resolve(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        if path.is_absolute() {
            path.to_owned()
        } else {
            self.base_dir.join(path)
        }
    }
}

impl From<&str> for Params {
    /// [`Params::new`]: relative paths resolve against the working directory.
    fn from(text: &str) -> Self {
        Params::new(text)
    }
}

impl From<String> for Params {
    /// [`Params::new`]: relative paths resolve against the working directory.
    fn from(text: String) -> Self {
        Params::new(text)
    }
}
