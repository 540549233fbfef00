//! `[worker_groups.NAME.rollout]`: where a worker group's rollouts are generated — in process
//! (`local`, the default), on servers speaking SGLang's protocol (`sglang`) or OpenAI's
//! `/v1/completions` (`openai`: vLLM) — how the servers get new weights, and how patiently to
//! use them.

use serde::Deserialize;
use toml::Spanned;

use super::{AgentSection, ConfigError, RunConfig, RunFile, Step, WorkerGroupSection};

/// The longest timeout accepted, in seconds (a day).
const MAX_TIMEOUT_S: f64 = 86_400.0;
/// The longest `model_name` accepted, in characters.
const MAX_MODEL_NAME_CHARS: usize = 256;
/// The largest `prefix_cache_mb` accepted (1 TiB).
const MAX_PREFIX_CACHE_MB: usize = 1 << 20;

/// Which engine generates a worker group's rollouts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutBackend {
    /// The in-process engine on the group's own model.
    #[default]
    Local,
    /// Servers speaking SGLang's native HTTP protocol: SGLang, sglang-router, or
    /// `drmas-host serve`.
    Sglang,
    /// Servers speaking OpenAI's `/v1/completions` with token-id prompts and logprobs: vLLM,
    /// SGLang, or `drmas-host serve`.
    Openai,
}

/// How a remote worker group's servers are given the trainer's new weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum WeightSync {
    /// SGLang's `POST /update_weights_from_disk` (SGLang, `drmas-host serve`).
    #[serde(rename = "sglang")]
    Sglang,
    /// vLLM's development routes (a server started with `VLLM_SERVER_DEV_MODE=1`):
    /// `/collective_rpc` calling its workers' `reload_weights` on the folder, then
    /// `/reset_prefix_cache` and `/update_weight_version`.
    #[serde(rename = "vllm")]
    Vllm,
    /// Not at all: the servers keep the weights they started with, so the group can be
    /// evaluated on them but not trained.
    #[serde(rename = "none")]
    Off,
}

/// `[worker_groups.NAME.rollout]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupRolloutSection {
    /// `local`, `sglang` or `openai`.
    pub backend: Spanned<RolloutBackend>,
    /// With `sglang`: the servers' base URLs (`http://host:port`), or one router's that
    /// forwards weight updates itself.
    pub urls: Vec<Spanned<String>>,
    /// With `sglang`: a router in front of `urls` (sglang-router) that generation goes
    /// through; the servers are still probed and sent weight updates directly.
    pub router: Option<Spanned<String>>,
    /// The longest one generation request or weight update may take, in seconds.
    pub request_timeout_s: f64,
    /// The longest a connection may take to open, in seconds.
    pub connect_timeout_s: f64,
    /// Requests in flight at once, over all servers.
    pub max_in_flight: usize,
    /// Attempts at one request before the run stops with an error.
    pub max_tries: u32,
    /// The most prompts in one request.
    pub max_batch_per_request: usize,
    /// The folder the trainer writes the group's weights to for the servers to load (they
    /// must be able to read it); default: `weights/` in the run folder. Relative to the run
    /// file.
    pub weights_dir: Option<String>,
    /// With `openai`: the model name the servers serve (their `GET /v1/models`), sent as each
    /// request's `model`.
    pub model_name: Option<Spanned<String>>,
    /// With `openai`: how the servers get new weights (`vllm`, `sglang` or `none`, the
    /// default).
    pub weight_sync: Option<Spanned<WeightSync>>,
    /// With `local`: MiB of the keys and values of sequences the rollout finished, kept while
    /// it lasts so that a prompt beginning with one (an agent's next turn, which resends the
    /// conversation) prefills only the rest; 0, the default, keeps none. Servers keep their own
    /// (`drmas-host serve --prefix-cache-mb`, SGLang's radix cache).
    pub prefix_cache_mb: Option<Spanned<usize>>,
}

impl GroupRolloutSection {
    /// Whether the group generates on inference servers rather than in process.
    pub fn is_remote(&self) -> bool {
        *self.backend.get_ref() != RolloutBackend::Local
    }

    /// Bytes of finished sequences' keys and values a local group's rollout keeps.
    pub fn prefix_cache_bytes(&self) -> usize {
        let mb = self.prefix_cache_mb.as_ref().map_or(0, |mb| *mb.get_ref());
        mb.saturating_mul(1 << 20)
    }

    /// How the group's servers get new weights; `None` for a local group.
    pub fn sync_mode(&self) -> Option<WeightSync> {
        match self.backend.get_ref() {
            RolloutBackend::Local => None,
            RolloutBackend::Sglang => Some(WeightSync::Sglang),
            RolloutBackend::Openai => Some(
                self.weight_sync
                    .as_ref()
                    .map_or(WeightSync::Off, |sync| *sync.get_ref()),
            ),
        }
    }
}

impl Default for GroupRolloutSection {
    fn default() -> Self {
        Self {
            backend: Spanned::new(0..0, RolloutBackend::Local),
            urls: Vec::new(),
            router: None,
            request_timeout_s: 600.0,
            connect_timeout_s: 5.0,
            max_in_flight: 8,
            max_tries: 4,
            max_batch_per_request: 64,
            weights_dir: None,
            model_name: None,
            weight_sync: None,
            prefix_cache_mb: None,
        }
    }
}

/// Checks worker group `name`'s rollout section: URLs, limits, and what `sglang` cannot do.
pub(super) fn check(
    name: &str,
    group: &WorkerGroupSection,
    file: &RunFile,
) -> Result<(), ConfigError> {
    let section = &group.rollout;
    let at = section.backend.span().start;
    let table = format!("[worker_groups.{name}.rollout]");
    let backend = match section.backend.get_ref() {
        RolloutBackend::Local => {
            if let Some(url) = section.urls.first().or(section.router.as_ref()) {
                return Err(file.invalid(
                    url.span().start,
                    format!(
                        "{table}: urls and router are for backend = \"sglang\" or \"openai\"; \
                         set one, or remove them"
                    ),
                ));
            }
            check_openai_keys(section, &table, file)?;
            if let Some(mb) = section.prefix_cache_mb.as_ref() {
                if *mb.get_ref() > MAX_PREFIX_CACHE_MB {
                    return Err(file.invalid(
                        mb.span().start,
                        format!(
                            "{table}: prefix_cache_mb = {} is more than {MAX_PREFIX_CACHE_MB} \
                             (1 TiB); the cache lives in the group's device memory",
                            mb.get_ref()
                        ),
                    ));
                }
            }
            return Ok(());
        }
        RolloutBackend::Sglang => {
            check_openai_keys(section, &table, file)?;
            "sglang"
        }
        RolloutBackend::Openai => {
            check_openai_section(section, &table, file)?;
            "openai"
        }
    };
    if section.urls.is_empty() {
        return Err(file.invalid(
            at,
            format!("{table}: backend = \"{backend}\" needs urls = [\"http://host:port\", …]"),
        ));
    }
    if let Some(mb) = &section.prefix_cache_mb {
        return Err(file.invalid(
            mb.span().start,
            format!(
                "{table}: prefix_cache_mb is for backend = \"local\"; servers keep their own \
                 prefix cache (drmas-host serve --prefix-cache-mb, SGLang's radix cache): remove it"
            ),
        ));
    }
    // SGLang's LoRA routes with its protocol, vLLM's with OpenAI's.
    let adapter_routes = match section.backend.get_ref() {
        RolloutBackend::Sglang => true,
        RolloutBackend::Openai => section.sync_mode() == Some(WeightSync::Vllm),
        RolloutBackend::Local => false,
    };
    if group.lora.is_some() && !adapter_routes {
        return Err(file.invalid(
            at,
            format!(
                "{table}: a LoRA group's servers must load every agent's adapter through their \
                 LoRA routes: set backend = \"sglang\" (SGLang started with --enable-lora, or \
                 drmas-host serve with --max-loras), or backend = \"openai\" with weight_sync = \
                 \"vllm\" (vLLM started with --enable-lora and \
                 VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or drmas-host serve with --max-loras); \
                 or generate locally (remove backend = \"{backend}\")"
            ),
        ));
    }
    for url in section.urls.iter().chain(&section.router) {
        if let Err(why) = check_url(url.get_ref()) {
            return Err(file.invalid(
                url.span().start,
                format!("{table}: url `{}` {why}", url.get_ref()),
            ));
        }
    }
    let timeouts = [section.request_timeout_s, section.connect_timeout_s];
    if timeouts.iter().any(|&t| !(t > 0.0 && t <= MAX_TIMEOUT_S)) {
        return Err(file.invalid(
            at,
            format!(
                "{table}: request_timeout_s and connect_timeout_s must be in (0, {MAX_TIMEOUT_S}]"
            ),
        ));
    }
    if section.max_in_flight == 0 || section.max_tries == 0 || section.max_batch_per_request == 0 {
        return Err(file.invalid(
            at,
            format!("{table}: max_in_flight, max_tries and max_batch_per_request must be ≥ 1"),
        ));
    }
    Ok(())
}

/// `model_name` and `weight_sync` belong to `openai`: refused with another backend.
fn check_openai_keys(
    section: &GroupRolloutSection,
    table: &str,
    file: &RunFile,
) -> Result<(), ConfigError> {
    let name = section.model_name.as_ref().map(Spanned::span);
    let sync = section.weight_sync.as_ref().map(Spanned::span);
    match name.or(sync) {
        Some(span) => Err(file.invalid(
            span.start,
            format!(
                "{table}: model_name and weight_sync are for backend = \"openai\"; set it, or \
                 remove them"
            ),
        )),
        None => Ok(()),
    }
}

/// What `openai` needs: the served model's name; no router (sglang-router's typed
/// `/v1/completions` is not what drmas checks a vLLM answer against).
fn check_openai_section(
    section: &GroupRolloutSection,
    table: &str,
    file: &RunFile,
) -> Result<(), ConfigError> {
    if let Some(router) = &section.router {
        return Err(file.invalid(
            router.span().start,
            format!(
                "{table}: router is for backend = \"sglang\"; with \"openai\" list the servers \
                 (or one load balancer) in urls"
            ),
        ));
    }
    let Some(name) = &section.model_name else {
        return Err(file.invalid(
            section.backend.span().start,
            format!(
                "{table}: backend = \"openai\" needs model_name = \"…\", the name the servers \
                 serve (vLLM: --served-model-name, else its --model; listed by GET /v1/models)"
            ),
        ));
    };
    let length = name.get_ref().chars().count();
    if !(1..=MAX_MODEL_NAME_CHARS).contains(&length) {
        return Err(file.invalid(
            name.span().start,
            format!("{table}: model_name must be 1 to {MAX_MODEL_NAME_CHARS} characters"),
        ));
    }
    Ok(())
}

/// `train` needs an agent that trains, and the servers of every remote group that trains to
/// load new weights: refuses a run whose agents all have `train = false`, and a training group
/// on servers that cannot load weights (`openai` with `weight_sync = "none"`), naming what to
/// do.
pub fn check_trainable(config: &RunConfig, file: &RunFile) -> Result<(), ConfigError> {
    if !config.agents.iter().any(AgentSection::trains) {
        return Err(file.invalid_at(
            &[Step::Key("agents"), Step::Index(0), Step::Key("train")],
            "no agent trains (train = false on every [[agents]]): train one, or evaluate with \
             `drmas-host eval`"
                .to_owned(),
        ));
    }
    for (name, group) in &config.worker_groups {
        let section = &group.rollout;
        if section.sync_mode() != Some(WeightSync::Off) || !config.group_trains(name) {
            continue;
        }
        let at = section
            .weight_sync
            .as_ref()
            .map_or(section.backend.span(), Spanned::span);
        return Err(file.invalid(
            at.start,
            format!(
                "[worker_groups.{name}.rollout]: a run that trains needs the servers to load each \
                 update's weights, and weight_sync = \"none\" (the default with backend = \
                 \"openai\") gives them none; set weight_sync = \"vllm\" (vLLM started with \
                 VLLM_SERVER_DEV_MODE=1) or \"sglang\" (SGLang, `drmas-host serve`), or \
                 evaluate with `drmas-host eval`"
            ),
        ));
    }
    Ok(())
}

/// What is wrong with a server URL, if anything: it must be `http://host[:port]`.
fn check_url(url: &str) -> Result<(), String> {
    if url.starts_with("https://") {
        return Err(
            "uses https; servers are spoken to in plain http:// (keep them on a private network)"
                .into(),
        );
    }
    let rest = url
        .strip_prefix("http://")
        .ok_or("is not an http:// URL (write http://host:port)")?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') || authority.contains('?') {
        return Err("has a path; give the server's base URL, http://host:port".into());
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => (host, Some(port)),
        _ => (authority, None),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err("has no host".into());
    }
    if let Some(port) = port {
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(format!("has port `{port}`, not a port number 1-65535"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn server_urls_are_plain_http_base_urls() {
        for good in [
            "http://127.0.0.1:30000",
            "http://node-3:8000/",
            "http://[::1]:30000",
            "http://router",
        ] {
            assert_eq!(check_url(good), Ok(()), "{good}");
        }
        for (bad, says) in [
            ("https://a:1", "https"),
            ("127.0.0.1:30000", "not an http:// URL"),
            ("http://a:1/generate", "path"),
            ("http://:30000", "no host"),
            ("http://a:99999", "not a port number"),
            ("http://a:0", "not a port number"),
        ] {
            let error = check_url(bad).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
