//! Pushing new weights to a worker group's servers: `POST /update_weights_from_disk` on each,
//! all at once; the next rollout starts only when every server still in the fleet serves the
//! new version.

use std::path::Path;

use anyhow::bail;

use super::connection::Failure;
use super::generator::RemoteGenerator;
use super::wire::{UpdateWeightsAnswer, UpdateWeightsBody, UPDATE_WEIGHTS_PATH};

impl RemoteGenerator {
    /// Makes every server load the HF folder `folder` (a path the servers can read) as
    /// `version`. A server that cannot (down after every try, or refusing the folder) leaves
    /// the fleet with a warning; when none is left, the error names each server and why.
    /// Answers of other versions are refused from then on.
    pub fn update_weights(&self, folder: &Path, version: &str) -> anyhow::Result<()> {
        let body = UpdateWeightsBody {
            model_path: folder.display().to_string(),
            weight_version: Some(version.to_owned()),
            load_format: None,
        };
        let active = self.active();
        let results: Vec<(usize, Result<(), String>)> = std::thread::scope(|scope| {
            let pushes: Vec<_> = active
                .iter()
                .map(|&server| {
                    let body = &body;
                    scope.spawn(move || (server, self.push(server, body)))
                })
                .collect();
            pushes
                .into_iter()
                .map(|push| {
                    push.join()
                        .unwrap_or_else(|_| (usize::MAX, Err("the push thread panicked".into())))
                })
                .collect()
        });
        let mut failures = Vec::new();
        for (server, result) in results {
            if let Err(reason) = result {
                if let Some(connection) = self.servers.get(server) {
                    failures.push(format!("{}: {reason}", connection.url()));
                    self.retire(
                        server,
                        &format!("it did not load the new weights: {reason}"),
                    );
                } else {
                    failures.push(reason);
                }
            }
        }
        *self
            .version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(version.to_owned());
        if self.active().is_empty() {
            bail!(
                "worker group `{}`: no server loaded weight version {version} from {}: {}",
                self.settings.group,
                folder.display(),
                failures.join("; ")
            );
        }
        Ok(())
    }

    /// One server's update, retried on transient failures.
    fn push(&self, server: usize, body: &UpdateWeightsBody) -> Result<(), String> {
        let tries = self.settings.max_tries.max(1);
        let mut last = String::new();
        for attempt in 1..=tries {
            std::thread::sleep(self.backoff(attempt));
            match self.servers[server].post::<_, UpdateWeightsAnswer>(UPDATE_WEIGHTS_PATH, body) {
                Ok(answer) if answer.success => return Ok(()),
                Ok(answer) => return Err(answer.message),
                Err(Failure::Fatal(reason)) => return Err(reason),
                Err(Failure::Transient(reason)) => last = reason,
            }
        }
        Err(format!("{last} (after {tries} attempts)"))
    }
}
