//! Probing a worker group's servers before any work: each must be healthy and serve the
//! group's model (`/health`, `/get_model_info`).

use anyhow::bail;

use super::connection::Failure;
use super::generator::RemoteGenerator;
use super::wire::{ModelInfo, HEALTH_PATH, MODEL_INFO_PATH};
use crate::model::config::LlamaConfig;

impl RemoteGenerator {
    /// Checks that every server, and the router when there is one, answers `/health` and
    /// serves a model like `model` (the group's own): same architecture and, where the server
    /// reports them, same model type and vocabulary (a router answers with one of its
    /// servers'). Errors name the server and both models.
    pub fn probe(&self, model: &LlamaConfig) -> anyhow::Result<()> {
        let group = &self.settings.group;
        for connection in self.servers.iter().chain(&self.router) {
            let url = connection.url();
            let tries = self.settings.max_tries.max(1);
            let mut answer = Err(Failure::Transient(String::new()));
            for attempt in 1..=tries {
                std::thread::sleep(self.backoff(attempt));
                answer = connection
                    .get_ok(HEALTH_PATH)
                    .and_then(|()| connection.get::<ModelInfo>(MODEL_INFO_PATH));
                if !matches!(answer, Err(Failure::Transient(_))) {
                    break;
                }
            }
            let info = match answer {
                Ok(info) => info,
                Err(reason) => bail!(
                    "worker group `{group}`: server {url} is not usable ({reason}); start it (a \
                     router: with its servers registered) or fix [worker_groups.{group}.rollout] \
                     urls or router"
                ),
            };
            let ours = model.architecture.hf_class();
            let theirs = info.architectures.clone().unwrap_or_default();
            let same = info.is_generation
                && (theirs.is_empty() || theirs.iter().any(|a| a == ours))
                && info
                    .model_type
                    .as_deref()
                    .is_none_or(|t| t == model.architecture.model_type())
                && info.vocab_size.is_none_or(|v| v == model.vocab_size);
            if !same {
                bail!(
                    "worker group `{group}`: server {url} serves another model than the group's: \
                     {} ({}, vocabulary {}) against {ours} (vocabulary {}); start it with the \
                     group's model",
                    info.model_path,
                    theirs.join(", "),
                    info.vocab_size
                        .map_or("not reported".into(), |v| v.to_string()),
                    model.vocab_size
                );
            }
        }
        Ok(())
    }
}
