//! Pushing a LoRA group's adapters to its vLLM servers: every adapter of a new version is
//! loaded under a name of its own (`GROUP/ADAPTER@VERSION`) on every server at once, requests
//! then ask for those names, and the group's other adapters are unloaded. A new name and folder
//! per version keep vLLM from reusing keys and values its prefix cache computed with an older
//! adapter (the cache's keys include the adapter's path), without its development mode.

use std::path::PathBuf;
use std::sync::PoisonError;

use super::connection::Failure;
use super::generator::RemoteGenerator;
use super::openai_wire::{ModelList, MODELS_PATH};
use super::vllm_lora_wire::{
    LoadLoraAdapterBody, UnloadLoraAdapterBody, LOAD_LORA_ADAPTER_PATH, UNLOAD_LORA_ADAPTER_PATH,
};

/// One adapter of a version: the name requests ask for it by, and its PEFT folder (a path the
/// servers can read).
#[derive(Debug, Clone)]
pub struct ServedAdapter {
    /// `GROUP/ADAPTER@VERSION`, see [`served_adapter_name`].
    pub name: String,
    /// `adapter_config.json` and `adapter_model.safetensors`.
    pub folder: PathBuf,
}

/// The name adapter `adapter` of worker group `group` is served under at `version`.
pub fn served_adapter_name(group: &str, adapter: &str, version: &str) -> String {
    format!("{group}/{adapter}@{version}")
}

impl RemoteGenerator {
    /// Makes every server load `adapters` (by slot) as `version`; from then on a request for
    /// adapter slot `i` asks for `adapters[i].name`. Servers that cannot load them leave the
    /// fleet as in [`update_weights`](Self::update_weights). Then every other adapter of the
    /// group a server lists (earlier versions, an interrupted run's) is unloaded; a server that
    /// fails to is only warned about (it keeps a few megabytes more).
    pub fn update_adapters(&self, adapters: &[ServedAdapter], version: &str) -> anyhow::Result<()> {
        self.push_everywhere(
            &format!("the LoRA adapters of version {version}"),
            version,
            |server| self.load_adapters(server, adapters),
        )?;
        let names: Vec<String> = adapters.iter().map(|a| a.name.clone()).collect();
        for server in self.active() {
            if let Err(reason) = self.unload_all_but(server, &names) {
                tracing::warn!(
                    "worker group `{}`: {} keeps older LoRA adapters: {reason}",
                    self.settings.group,
                    self.servers[server].url()
                );
            }
        }
        *self
            .served_adapters
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = names;
        Ok(())
    }

    /// Loads every adapter on `server`, each unloaded first: vLLM refuses a name it holds,
    /// which an earlier attempt, or the run this one resumes, may have loaded.
    fn load_adapters(&self, server: usize, adapters: &[ServedAdapter]) -> Result<(), Failure> {
        let connection = &self.servers[server];
        for adapter in adapters {
            let body = UnloadLoraAdapterBody {
                lora_name: adapter.name.clone(),
            };
            // Not holding it (404) is the usual answer.
            let _ = connection.post_for_text(UNLOAD_LORA_ADAPTER_PATH, &body);
            let body = LoadLoraAdapterBody {
                lora_name: adapter.name.clone(),
                lora_path: adapter.folder.display().to_string(),
            };
            connection.post_for_text(LOAD_LORA_ADAPTER_PATH, &body)?;
        }
        Ok(())
    }

    /// Unloads from `server` every adapter of this group it lists in `/v1/models` but `keep`.
    fn unload_all_but(&self, server: usize, keep: &[String]) -> Result<(), Failure> {
        let connection = &self.servers[server];
        let prefix = format!("{}/", self.settings.group);
        let listed: ModelList = connection.get(MODELS_PATH)?;
        for card in listed.data {
            if card.id.starts_with(&prefix) && !keep.contains(&card.id) {
                let body = UnloadLoraAdapterBody { lora_name: card.id };
                connection.post_for_text(UNLOAD_LORA_ADAPTER_PATH, &body)?;
            }
        }
        Ok(())
    }
}
