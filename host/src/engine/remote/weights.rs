//! Pushing new weights to a worker group's servers, all at once: SGLang's `POST
//! /update_weights_from_disk`, or vLLM's development routes (reload the folder, drop the
//! prefix cache, set the version); the next rollout starts only when every server still in
//! the fleet serves the new version.

use std::path::Path;

use anyhow::bail;

use super::connection::Failure;
use super::generator::RemoteGenerator;
use super::settings::WeightLoading;
use super::vllm_wire::{
    CollectiveRpcAnswer, ReloadWeightsArguments, ReloadWeightsCall, SuccessAnswer,
    UpdateWeightVersionBody, WeightInfo, COLLECTIVE_RPC_PATH, RELOAD_WEIGHTS_METHOD,
    RESET_PREFIX_CACHE_PATH, UPDATE_WEIGHT_VERSION_PATH, WEIGHT_INFO_PATH,
};
use super::wire::{UpdateWeightsAnswer, UpdateWeightsBody, UPDATE_WEIGHTS_PATH};

impl RemoteGenerator {
    /// Makes every server load the HF folder `folder` (a path the servers can read) as
    /// `version` (see `push_everywhere` for servers that cannot).
    /// Answers of other versions are refused from then on.
    pub fn update_weights(&self, folder: &Path, version: &str) -> anyhow::Result<()> {
        self.push_everywhere(
            &format!("weight version {version} from {}", folder.display()),
            version,
            |server| match self.settings.weight_loading {
                WeightLoading::Vllm => self.load_on_vllm(server, folder, version),
                WeightLoading::Sglang
                | WeightLoading::None
                | WeightLoading::VllmAdapters
                | WeightLoading::SglangAdapters => self.load_on_sglang(server, folder, version),
            },
        )
    }

    /// Runs `push` (given the server) on every server still in the fleet at once, each
    /// retried on transient failures, then serves `version`. A server whose push fails leaves
    /// the fleet with a warning; when none is left, the error names `what` was not loaded,
    /// each server and why.
    pub(super) fn push_everywhere(
        &self,
        what: &str,
        version: &str,
        push: impl Fn(usize) -> Result<(), Failure> + Sync,
    ) -> anyhow::Result<()> {
        let active = self.active();
        let push = &push;
        let results: Vec<(usize, Result<(), String>)> = std::thread::scope(|scope| {
            let pushes: Vec<_> = active
                .iter()
                .map(|&server| scope.spawn(move || (server, self.retried(server, push))))
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
                    self.retire(server, &format!("it did not load {what}: {reason}"));
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
                "worker group `{}`: no server loaded {what}: {}",
                self.settings.group,
                failures.join("; ")
            );
        }
        Ok(())
    }

    /// One server's push, retried on transient failures.
    fn retried(
        &self,
        server: usize,
        push: &(impl Fn(usize) -> Result<(), Failure> + Sync),
    ) -> Result<(), String> {
        let tries = self.settings.max_tries.max(1);
        let mut last = String::new();
        for attempt in 1..=tries {
            std::thread::sleep(self.backoff(attempt));
            match push(server) {
                Ok(()) => return Ok(()),
                Err(Failure::Fatal(reason)) => return Err(reason),
                Err(Failure::Transient(reason)) => last = reason,
            }
        }
        Err(format!("{last} (after {tries} attempts)"))
    }

    /// SGLang's `/update_weights_from_disk`, which loads and names the version at once.
    fn load_on_sglang(&self, server: usize, folder: &Path, version: &str) -> Result<(), Failure> {
        let body = UpdateWeightsBody {
            model_path: folder.display().to_string(),
            weight_version: Some(version.to_owned()),
            load_format: None,
        };
        let answer: UpdateWeightsAnswer = self.servers[server].post(UPDATE_WEIGHTS_PATH, &body)?;
        if answer.success {
            Ok(())
        } else {
            Err(Failure::Fatal(answer.message))
        }
    }

    /// vLLM: every worker reloads the folder in place, the prefix cache (keys and values
    /// computed with the old weights) is dropped, then the version is set and read back.
    fn load_on_vllm(&self, server: usize, folder: &Path, version: &str) -> Result<(), Failure> {
        let connection = &self.servers[server];
        let reload = ReloadWeightsCall {
            method: RELOAD_WEIGHTS_METHOD.to_owned(),
            kwargs: ReloadWeightsArguments {
                weights_path: folder.display().to_string(),
            },
        };
        connection.post::<_, CollectiveRpcAnswer>(COLLECTIVE_RPC_PATH, &reload)?;
        let reset: SuccessAnswer =
            connection.post(RESET_PREFIX_CACHE_PATH, &serde_json::json!({}))?;
        if !reset.success {
            return Err(Failure::Transient(format!(
                "{RESET_PREFIX_CACHE_PATH} answered success = false (requests were running)"
            )));
        }
        let body = UpdateWeightVersionBody {
            new_version: version.to_owned(),
        };
        connection.post::<_, SuccessAnswer>(UPDATE_WEIGHT_VERSION_PATH, &body)?;
        let info: WeightInfo = connection.get(WEIGHT_INFO_PATH)?;
        if info.weight_version != version {
            return Err(Failure::Fatal(format!(
                "{WEIGHT_INFO_PATH} reports weight version {} after {version} was set",
                info.weight_version
            )));
        }
        Ok(())
    }
}
