//! [`ServerMetrics`]: what a `drmas-host serve` process has done, answered on `GET /metrics` in
//! Prometheus's text format, as SGLang and vLLM answer theirs, so a fleet of workers is watched
//! with the tools that watch theirs. Every series is bounded: answers are counted by route
//! (paths outside the served routes count as `other`) and status.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The `Content-Type` of Prometheus's text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Counters since the server started; gauges are read when [`ServerMetrics::render`] is asked.
#[derive(Debug)]
pub struct ServerMetrics {
    /// The `model_name` label of every series.
    model_name: String,
    /// Answers by (route, status).
    answers: Mutex<BTreeMap<(&'static str, u16), u64>>,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    batches: AtomicU64,
    batch_sequences: AtomicU64,
    batch_joins: AtomicU64,
    /// Sequences in the engine's running batch now (a gauge the engine sets).
    batch_rows: AtomicU64,
    /// Bytes the prefix cache holds (a gauge the engine sets).
    prefix_cache_bytes: AtomicU64,
    generation_micros: AtomicU64,
    weight_updates: AtomicU64,
    /// Generation requests answered with their outputs, and the microseconds they took in all.
    requests_served: AtomicU64,
    request_micros: AtomicU64,
}

/// What one engine batch did, for [`ServerMetrics::record_batch`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchCounts {
    /// Sequences generated, those of requests that joined it included.
    pub sequences: usize,
    /// Requests that joined it while it ran.
    pub joined_requests: usize,
    /// Prompt tokens of its sequences.
    pub prompt_tokens: usize,
    /// Of those, the ones whose keys and values came from the prefix cache.
    pub cached_tokens: usize,
    /// Tokens it generated.
    pub generation_tokens: usize,
    /// From its start until its last sequence finished.
    pub took: Duration,
}

/// The gauges of one [`ServerMetrics::render`].
#[derive(Debug, Clone, Copy)]
pub struct Gauges {
    /// Generation requests in progress.
    pub running_requests: usize,
    /// LoRA adapters held.
    pub lora_adapters: usize,
}

impl ServerMetrics {
    /// Nothing counted yet, every series labelled with `model_name`.
    pub fn new(model_name: &str) -> Self {
        Self {
            model_name: model_name.to_owned(),
            answers: Mutex::new(BTreeMap::new()),
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batch_sequences: AtomicU64::new(0),
            batch_joins: AtomicU64::new(0),
            batch_rows: AtomicU64::new(0),
            prefix_cache_bytes: AtomicU64::new(0),
            generation_micros: AtomicU64::new(0),
            weight_updates: AtomicU64::new(0),
            requests_served: AtomicU64::new(0),
            request_micros: AtomicU64::new(0),
        }
    }

    /// Counts an answer of `status` on `route` (one of the served routes, or `other`).
    pub fn record_answer(&self, route: &'static str, status: u16) {
        let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        *answers.entry((route, status)).or_default() += 1;
    }

    /// Counts an engine batch, from its start until its last sequence finished.
    pub fn record_batch(&self, batch: &BatchCounts) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        add(&self.batch_sequences, batch.sequences);
        add(&self.batch_joins, batch.joined_requests);
        add(&self.prompt_tokens, batch.prompt_tokens);
        add(&self.cached_tokens, batch.cached_tokens);
        add(&self.generation_tokens, batch.generation_tokens);
        add(&self.generation_micros, micros(batch.took));
    }

    /// Sets the sequences in the engine's running batch (0 between batches).
    pub fn set_running_sequences(&self, sequences: usize) {
        let sequences = u64::try_from(sequences).unwrap_or(u64::MAX);
        self.batch_rows.store(sequences, Ordering::Relaxed);
    }

    /// Sets the bytes of keys and values the prefix cache holds.
    pub fn set_prefix_cache_bytes(&self, bytes: usize) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.prefix_cache_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Counts a generation request answered with its outputs after `took`.
    pub fn record_request(&self, took: Duration) {
        self.requests_served.fetch_add(1, Ordering::Relaxed);
        add(&self.request_micros, micros(took));
    }

    /// Counts new weights loaded.
    pub fn record_weight_update(&self) {
        self.weight_updates.fetch_add(1, Ordering::Relaxed);
    }

    /// Every series in Prometheus's text format, with `gauges` as they are now.
    pub fn render(&self, gauges: Gauges) -> String {
        let label = format!("model_name=\"{}\"", escape(&self.model_name));
        let mut text = String::new();
        let mut series = |name: &str, kind: &str, help: &str, values: &[(String, f64)]| {
            let _ = writeln!(text, "# HELP drmas:{name} {help}");
            let _ = writeln!(text, "# TYPE drmas:{name} {kind}");
            for (suffix, value) in values {
                let _ = writeln!(text, "drmas:{name}{suffix} {value}");
            }
        };
        let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as f64;
        let seconds = |counter: &AtomicU64| count(counter) / 1e6;
        let answers: Vec<(String, f64)> = self
            .answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|((route, status), &n)| {
                (
                    format!("{{{label},route=\"{route}\",code=\"{status}\"}}"),
                    n as f64,
                )
            })
            .collect();
        series(
            "requests_total",
            "counter",
            "Answers by route and HTTP status.",
            &answers,
        );
        let plain_series = [
            (
                "prompt_tokens_total",
                "counter",
                "Prompt tokens of the sequences generated.",
                count(&self.prompt_tokens),
            ),
            (
                "cached_prompt_tokens_total",
                "counter",
                "Prompt tokens whose keys and values came from the prefix cache (over \
                 prompt_tokens_total: the hit rate).",
                count(&self.cached_tokens),
            ),
            (
                "generation_tokens_total",
                "counter",
                "Tokens generated.",
                count(&self.generation_tokens),
            ),
            (
                "batches_total",
                "counter",
                "Engine batches run.",
                count(&self.batches),
            ),
            (
                "batch_sequences_total",
                "counter",
                "Sequences of those batches (over batches_total: the mean batch size).",
                count(&self.batch_sequences),
            ),
            (
                "batch_joins_total",
                "counter",
                "Generation requests that joined an engine batch while it ran (continuous \
                 batching).",
                count(&self.batch_joins),
            ),
            (
                "generation_seconds_total",
                "counter",
                "Seconds the engine spent generating.",
                seconds(&self.generation_micros),
            ),
            (
                "weight_updates_total",
                "counter",
                "New weights loaded.",
                count(&self.weight_updates),
            ),
            (
                "num_running_reqs",
                "gauge",
                "Generation requests in progress.",
                gauges.running_requests as f64,
            ),
            (
                "num_running_seqs",
                "gauge",
                "Sequences in the engine's running batch.",
                count(&self.batch_rows),
            ),
            (
                "prefix_cache_bytes",
                "gauge",
                "Bytes of keys and values the prefix cache holds.",
                count(&self.prefix_cache_bytes),
            ),
            (
                "lora_adapters_loaded",
                "gauge",
                "LoRA adapters held.",
                gauges.lora_adapters as f64,
            ),
        ];
        for (name, kind, help, value) in plain_series {
            series(name, kind, help, &[(format!("{{{label}}}"), value)]);
        }
        series(
            "e2e_request_latency_seconds",
            "summary",
            "Seconds from a generation request's arrival to its answer, of those answered with \
             outputs.",
            &[
                (format!("_sum{{{label}}}"), seconds(&self.request_micros)),
                (format!("_count{{{label}}}"), count(&self.requests_served)),
            ],
        );
        text
    }
}

fn add(counter: &AtomicU64, amount: usize) {
    counter.fetch_add(u64::try_from(amount).unwrap_or(u64::MAX), Ordering::Relaxed);
}

fn micros(took: Duration) -> usize {
    usize::try_from(took.as_micros()).unwrap_or(usize::MAX)
}

/// `value` as a label value: backslashes, double quotes and line feeds escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_each_series_once_with_its_type_and_escaped_labels() {
        let metrics = ServerMetrics::new("a \"b\"\\c\n");
        metrics.record_answer("/generate", 200);
        metrics.record_answer("/generate", 200);
        metrics.record_answer("other", 404);
        metrics.record_batch(&BatchCounts {
            sequences: 3,
            joined_requests: 1,
            prompt_tokens: 30,
            cached_tokens: 20,
            generation_tokens: 12,
            took: Duration::from_millis(1500),
        });
        metrics.set_running_sequences(4);
        metrics.set_prefix_cache_bytes(4096);
        metrics.record_request(Duration::from_millis(250));
        let text = metrics.render(Gauges {
            running_requests: 2,
            lora_adapters: 1,
        });
        let label = r#"model_name="a \"b\"\\c\n""#;
        for line in [
            format!(r#"drmas:requests_total{{{label},route="/generate",code="200"}} 2"#),
            format!(r#"drmas:requests_total{{{label},route="other",code="404"}} 1"#),
            format!("drmas:prompt_tokens_total{{{label}}} 30"),
            format!("drmas:cached_prompt_tokens_total{{{label}}} 20"),
            format!("drmas:generation_tokens_total{{{label}}} 12"),
            format!("drmas:batches_total{{{label}}} 1"),
            format!("drmas:batch_sequences_total{{{label}}} 3"),
            format!("drmas:batch_joins_total{{{label}}} 1"),
            format!("drmas:generation_seconds_total{{{label}}} 1.5"),
            format!("drmas:e2e_request_latency_seconds_sum{{{label}}} 0.25"),
            format!("drmas:e2e_request_latency_seconds_count{{{label}}} 1"),
            format!("drmas:weight_updates_total{{{label}}} 0"),
            format!("drmas:num_running_reqs{{{label}}} 2"),
            format!("drmas:num_running_seqs{{{label}}} 4"),
            format!("drmas:prefix_cache_bytes{{{label}}} 4096"),
            format!("drmas:lora_adapters_loaded{{{label}}} 1"),
            "# TYPE drmas:e2e_request_latency_seconds summary".to_owned(),
            "# TYPE drmas:num_running_reqs gauge".to_owned(),
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert_eq!(text.matches("# TYPE ").count(), 14, "{text}");
        assert!(
            text.lines()
                .all(|l| l.starts_with("# ") || l.starts_with("drmas:")),
            "{text}"
        );
    }
}
