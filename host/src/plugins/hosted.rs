//! [`Hosted`]: a component the host drives through the SDK's own trait — built by a plugin
//! library, linked in as a crate, or a test double — with where it came from, for messages, and
//! the time limit of its calls. [`HostedSession`]: an object such a component handed out (an
//! episode's routing or environment state), called under the same rules. Every call goes
//! through [`guarded`], so a crash names it and a hang ends in an error.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::call::{guarded, PluginCallError};

/// A component behind its trait (`Hosted<dyn Agent>`, `Hosted<dyn Orchestra>`,
/// `Hosted<dyn Environment>`, `Hosted<dyn drmas_sdk::Estimator>`), a description of where it
/// came from, and how long one of its calls may take.
pub struct Hosted<T: ?Sized> {
    component: Arc<T>,
    origin: &'static str,
    limit: Option<Duration>,
}

impl<T: ?Sized + Send + Sync + 'static> Hosted<T> {
    /// `component`, described by `origin` (e.g. "agent `Solver Agent` of plugin `drmas-math`
    /// (plugins/math/…/libdrmas_math.so)"), its calls without a time limit. The description is
    /// kept for the life of the process (the crash report may need it at any moment).
    pub fn new(component: Box<T>, origin: impl Into<String>) -> Self {
        Self {
            component: Arc::from(component),
            origin: Box::leak(origin.into().into_boxed_str()),
            limit: None,
        }
    }

    /// Limits each call to `limit` (`None`: no limit).
    pub fn set_limit(&mut self, limit: Option<Duration>) {
        self.limit = limit;
    }

    /// Where the component came from.
    pub fn origin(&self) -> &'static str {
        self.origin
    }

    /// Calls `method` of the component: `work` gets it and makes the call.
    pub fn call<R: Send + 'static>(
        &self,
        method: &'static str,
        work: impl FnOnce(&T) -> R + Send + 'static,
    ) -> Result<R, PluginCallError> {
        let component = Arc::clone(&self.component);
        guarded(self.origin, method, self.limit, move || work(&component))
    }

    /// An object this component handed out, called under the same rules.
    pub fn session<S: ?Sized + Send + 'static>(&self, object: Box<S>) -> HostedSession<S> {
        HostedSession {
            object: Some(object),
            origin: self.origin,
            limit: self.limit,
        }
    }
}

/// The bare component, for tests and checks outside a run; the host's own calls go through
/// [`Hosted::call`].
impl<T: ?Sized> std::ops::Deref for Hosted<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.component
    }
}

impl<T: ?Sized> fmt::Debug for Hosted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hosted")
            .field("origin", &self.origin)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// A stateful object from a plugin (`HostedSession<dyn Routing>`, `HostedSession<dyn Episode>`)
/// with its component's description and time limit. A call past the limit keeps the object, so
/// later calls fail.
pub struct HostedSession<S: ?Sized> {
    object: Option<Box<S>>,
    origin: &'static str,
    limit: Option<Duration>,
}

impl<S: ?Sized + Send + 'static> HostedSession<S> {
    /// Where the object's component came from.
    pub fn origin(&self) -> &'static str {
        self.origin
    }

    /// Calls `method` of the object: `work` gets it and makes the call.
    pub fn call<R: Send + 'static>(
        &mut self,
        method: &'static str,
        work: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, PluginCallError> {
        let origin = self.origin;
        let mut object = self
            .object
            .take()
            .ok_or(PluginCallError::Abandoned { origin, method })?;
        let (object, answer) = guarded(origin, method, self.limit, move || {
            let answer = work(&mut object);
            (object, answer)
        })?;
        self.object = Some(object);
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A component whose `wait` sleeps as long as it is told.
    struct Sleeper;

    impl Sleeper {
        fn wait(&self, duration: Duration) -> u32 {
            std::thread::sleep(duration);
            7
        }
    }

    fn hosted(limit: Option<Duration>) -> Hosted<Sleeper> {
        let mut hosted = Hosted::new(Box::new(Sleeper), "test component `sleeper`");
        hosted.set_limit(limit);
        hosted
    }

    #[test]
    fn a_call_within_its_limit_answers_and_one_past_it_is_named_and_abandoned() {
        let sleeper = hosted(Some(Duration::from_millis(200)));
        let answer = sleeper.call("wait", |s| s.wait(Duration::ZERO));
        assert_eq!(answer.expect("in time"), 7);

        let started = Instant::now();
        let error = sleeper
            .call("wait", |s| s.wait(Duration::from_secs(30)))
            .expect_err("past the limit")
            .to_string();
        assert!(started.elapsed() < Duration::from_secs(5), "{error}");
        assert!(
            error.starts_with("test component `sleeper` did not return from `wait` within 0 s"),
            "{error}"
        );
    }

    #[test]
    fn a_session_whose_call_was_abandoned_refuses_later_calls() {
        let sleeper = hosted(Some(Duration::from_millis(100)));
        let mut session = sleeper.session(Box::new(Sleeper));
        assert_eq!(
            session.call("wait", |s| s.wait(Duration::ZERO)).ok(),
            Some(7)
        );
        assert!(matches!(
            session.call("wait", |s| s.wait(Duration::from_secs(30))),
            Err(PluginCallError::TimedOut { method: "wait", .. })
        ));
        let error = session
            .call("wait", |s| s.wait(Duration::ZERO))
            .expect_err("abandoned")
            .to_string();
        assert_eq!(
            error,
            "test component `sleeper`: `wait` called after an earlier call on the same object \
             was abandoned"
        );
    }

    #[test]
    fn calls_without_a_limit_run_on_the_calling_thread() {
        let sleeper = hosted(None);
        let caller = std::thread::current().id();
        let ran_on = sleeper
            .call("wait", |_| std::thread::current().id())
            .expect("no limit");
        assert_eq!(ran_on, caller);
        let limited = hosted(Some(Duration::from_secs(5)));
        let started = Instant::now();
        for _ in 0..1000 {
            let ran_on = limited
                .call("wait", |_| std::thread::current().id())
                .expect("in time");
            assert_ne!(ran_on, caller);
        }
        eprintln!(
            "1000 limited calls (a thread each): {:?}",
            started.elapsed()
        );
    }
}
