//! `[worker_groups.NAME.rollout]`: where a worker group's rollouts are generated — in process
//! (`local`, the default) or on servers speaking SGLang's protocol (`sglang`) — and how
//! patiently to use the servers.

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, RunFile, WorkerGroupSection};

/// The longest timeout accepted, in seconds (a day).
const MAX_TIMEOUT_S: f64 = 86_400.0;

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
}

/// `[worker_groups.NAME.rollout]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupRolloutSection {
    /// `local` or `sglang`.
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
    match section.backend.get_ref() {
        RolloutBackend::Local => {
            if let Some(url) = section.urls.first().or(section.router.as_ref()) {
                return Err(file.invalid(
                    url.span().start,
                    format!(
                        "{table}: urls and router are for backend = \"sglang\"; set it, or remove \
                         them"
                    ),
                ));
            }
            return Ok(());
        }
        RolloutBackend::Sglang => {}
    }
    if section.urls.is_empty() {
        return Err(file.invalid(
            at,
            format!("{table}: backend = \"sglang\" needs urls = [\"http://host:port\", …]"),
        ));
    }
    if group.lora.is_some() {
        return Err(file.invalid(
            at,
            format!(
                "{table}: LoRA groups generate locally (servers would need every agent's \
                 adapter); remove backend = \"sglang\" or [worker_groups.{name}.lora]"
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
