//! Pushing a LoRA group's adapters to its servers, through vLLM's or SGLang's LoRA routes:
//! every adapter of a new version is loaded under a name of its own (`GROUP/ADAPTER@VERSION`)
//! on every server at once, requests then ask for those names, and the group's other adapters
//! are unloaded. A new name and folder per version keep a server from reusing keys and values
//! its prefix cache computed with an older adapter (vLLM's cache keys include the adapter's
//! path), without vLLM's development mode.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use super::connection::{Connection, Failure};
use super::generator::RemoteGenerator;
use super::lora_wire::{
    LoadLoraAdapterBody, LoraUpdateAnswer, UnloadLoraAdapterBody, LOAD_LORA_ADAPTER_PATH,
    SGLANG_LOAD_LORA_ADAPTER_PATH, SGLANG_UNLOAD_LORA_ADAPTER_PATH, UNLOAD_LORA_ADAPTER_PATH,
};
use super::openai_wire::{ModelList, MODELS_PATH};
use super::settings::WeightLoading;
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
        let held: Mutex<BTreeMap<usize, Vec<String>>> = Mutex::new(BTreeMap::new());
        self.push_everywhere(
            &format!("the LoRA adapters of version {version}"),
            version,
            |server| {
                let names = self.load_adapters(server, adapters)?;
                held.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(server, names);
                Ok(())
            },
        )?;
        let held = held.into_inner().unwrap_or_else(PoisonError::into_inner);
        let names: Vec<String> = adapters.iter().map(|a| a.name.clone()).collect();
        for server in self.active() {
            let listed = held.get(&server).map_or(&[][..], Vec::as_slice);
            if let Err(reason) = self.unload_all_but(server, listed, &names) {
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

    /// Loads every adapter on `server`, each unloaded first: a server refuses a name it holds,
    /// which an earlier attempt, or the run this one resumes, may have loaded. Returns the
    /// names of every adapter the server then holds (vLLM lists them in `/v1/models`; SGLang
    /// answers a load with them).
    fn load_adapters(
        &self,
        server: usize,
        adapters: &[ServedAdapter],
    ) -> Result<Vec<String>, Failure> {
        let connection = &self.servers[server];
        let mut held = Vec::new();
        for adapter in adapters {
            // Not holding it is the usual answer.
            let _ = self.unload(connection, &adapter.name);
            let body = LoadLoraAdapterBody {
                lora_name: adapter.name.clone(),
                lora_path: adapter.folder.display().to_string(),
            };
            match self.settings.weight_loading {
                WeightLoading::SglangAdapters => {
                    let answer = sglang_update(connection, SGLANG_LOAD_LORA_ADAPTER_PATH, &body)?;
                    held = answer
                        .loaded_adapters
                        .unwrap_or_default()
                        .into_keys()
                        .collect();
                }
                _ => {
                    connection.post_for_text(LOAD_LORA_ADAPTER_PATH, &body)?;
                }
            }
        }
        if self.settings.weight_loading != WeightLoading::SglangAdapters {
            let listed: ModelList = connection.get(MODELS_PATH)?;
            held = listed.data.into_iter().map(|card| card.id).collect();
        }
        Ok(held)
    }

    /// Unloads from `server` every adapter of this group among `held` but `keep`.
    fn unload_all_but(
        &self,
        server: usize,
        held: &[String],
        keep: &[String],
    ) -> Result<(), Failure> {
        let connection = &self.servers[server];
        let prefix = format!("{}/", self.settings.group);
        for name in held {
            if name.starts_with(&prefix) && !keep.contains(name) {
                self.unload(connection, name)?;
            }
        }
        Ok(())
    }

    /// Unloads the adapter `name` from `connection`'s server.
    fn unload(&self, connection: &Connection, name: &str) -> Result<(), Failure> {
        let body = UnloadLoraAdapterBody {
            lora_name: name.to_owned(),
        };
        match self.settings.weight_loading {
            WeightLoading::SglangAdapters => {
                sglang_update(connection, SGLANG_UNLOAD_LORA_ADAPTER_PATH, &body).map(drop)
            }
            _ => connection
                .post_for_text(UNLOAD_LORA_ADAPTER_PATH, &body)
                .map(drop),
        }
    }
}

/// `POST path` of SGLang's LoRA routes with `body`; its answer, unless it says it failed.
fn sglang_update<B: serde::Serialize>(
    connection: &Connection,
    path: &str,
    body: &B,
) -> Result<LoraUpdateAnswer, Failure> {
    let answer: LoraUpdateAnswer = connection.post(path, body)?;
    if answer.success {
        Ok(answer)
    } else {
        Err(Failure::Fatal(format!(
            "{path} answered success = false: {}",
            answer.error_message.unwrap_or_default()
        )))
    }
}
