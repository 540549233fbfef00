//! [`guarded`]: one call into plugin code, recorded for the crash report and, under a time
//! limit, run on a thread of its own so a call that never returns cannot hang the run. A thread
//! cannot be killed: a call past its limit is abandoned — its thread keeps running and keeps
//! whatever it holds (the episode's routing or environment state) until it returns or the
//! process ends — and the caller gets an error naming the component and the method.

use std::sync::mpsc;
use std::time::Duration;

use crate::crash_report::PluginScope;

/// A plugin call that did not come back.
#[derive(Debug, thiserror::Error)]
pub enum PluginCallError {
    /// It ran past its limit.
    #[error(
        "{origin} did not return from `{method}` within {} s ([rollout] plugin_call_timeout_s); \
         its thread is abandoned (a thread cannot be stopped) and the episode fails. Raise the \
         limit if the call is slow rather than stuck",
        limit.as_secs()
    )]
    TimedOut {
        /// The component.
        origin: &'static str,
        /// The method.
        method: &'static str,
        /// The limit it ran past.
        limit: Duration,
    },
    /// Its thread ended without an answer (host code around the call panicked).
    #[error("{origin}: the thread running `{method}` ended without an answer")]
    Lost {
        /// The component.
        origin: &'static str,
        /// The method.
        method: &'static str,
    },
    /// No thread could be started for it.
    #[error("{origin}: cannot start a thread for `{method}`: {reason}")]
    NoThread {
        /// The component.
        origin: &'static str,
        /// The method.
        method: &'static str,
        /// What the OS said.
        reason: String,
    },
    /// A call past its limit still holds this object (an episode's routing or environment).
    #[error("{origin}: `{method}` called after an earlier call on the same object was abandoned")]
    Abandoned {
        /// The component.
        origin: &'static str,
        /// The method.
        method: &'static str,
    },
}

/// Runs `work`, a call of `method` into the component `origin` describes. Without a `limit` it
/// runs on this thread; with one, on its own thread, waited for at most `limit`.
pub fn guarded<R: Send + 'static>(
    origin: &'static str,
    method: &'static str,
    limit: Option<Duration>,
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, PluginCallError> {
    let Some(limit) = limit else {
        let _scope = PluginScope::enter(origin, method);
        return Ok(work());
    };
    let (sender, answer) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name(format!("plugin {method}"))
        .spawn(move || {
            let _scope = PluginScope::enter(origin, method);
            // The caller may have given up waiting; the answer is then dropped.
            let _ = sender.send(work());
        });
    if let Err(error) = spawned {
        return Err(PluginCallError::NoThread {
            origin,
            method,
            reason: error.to_string(),
        });
    }
    answer.recv_timeout(limit).map_err(|error| match error {
        mpsc::RecvTimeoutError::Timeout => PluginCallError::TimedOut {
            origin,
            method,
            limit,
        },
        mpsc::RecvTimeoutError::Disconnected => PluginCallError::Lost { origin, method },
    })
}
