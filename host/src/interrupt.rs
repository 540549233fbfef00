//! Ctrl-C and SIGTERM during `train`. The first signal only asks the run to stop: the trainer
//! polls [`check`] at the points where stopping is safe (between rollout rounds, after an
//! update), saves a checkpoint (unless the run saves none) and exits with `128 + signal`. A
//! second signal ends the process at once. The handler does only what is async-signal-safe: an
//! atomic swap, `write(2)`, `_exit`.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The first stop signal received (0: none yet).
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// Whether an update, which a signal does not cut short, is running.
static UPDATING: AtomicBool = AtomicBool::new(false);
/// Whether the first signal arrived while an update was running.
static DURING_UPDATE: AtomicBool = AtomicBool::new(false);

/// Whether the run saves a checkpoint when it stops (not with `[run] save_every = -1`).
static SAVES: AtomicBool = AtomicBool::new(true);

/// What the handler writes on the first signal.
const FIRST_NOTICE: &[u8] = b"\ndrmas-host: stopping after the current phase and saving a \
checkpoint (send the signal again to stop at once, without saving)\n";
/// What the handler writes on the first signal to a run that saves no checkpoint.
const FIRST_NOTICE_UNSAVED: &[u8] = b"\ndrmas-host: stopping after the current phase, saving \
nothing ([run] save_every = -1; send the signal again to stop at once)\n";
/// What the handler writes on the second signal, before `_exit`.
const SECOND_NOTICE: &[u8] = b"\ndrmas-host: second signal; stopping at once, nothing saved\n";

/// The run was asked to stop by `signal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted by {}", signal_name(*.signal))]
pub struct Interrupted {
    /// SIGINT or SIGTERM.
    pub signal: i32,
    /// Whether it arrived during an update (which was then finished, not cut short).
    pub during_update: bool,
}

impl Interrupted {
    /// The exit status a process stopped by this signal reports, as shells expect (130 for
    /// SIGINT, 143 for SIGTERM).
    pub fn exit_code(self) -> u8 {
        u8::try_from(128 + self.signal).unwrap_or(1)
    }

    /// The signal's name, for messages: `SIGINT (Ctrl-C)`, `SIGTERM`.
    pub fn signal_name(self) -> &'static str {
        signal_name(self.signal)
    }
}

/// The name of a stop signal, for messages.
fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT (Ctrl-C)",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// Routes SIGINT and SIGTERM to the handler above, for the rest of the process; `saves` says
/// whether the run saves a checkpoint when it stops, for the notice the first signal prints.
pub fn install(saves: bool) -> std::io::Result<()> {
    SAVES.store(saves, Ordering::SeqCst);
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler is an
        // `extern "C" fn(c_int)` that only calls async-signal-safe functions.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Marks an update as running until the guard is dropped, so that a signal arriving meanwhile
/// is reported as one the update finished through.
#[must_use = "the update counts as running only while the guard lives"]
pub struct Updating(());

impl Drop for Updating {
    fn drop(&mut self) {
        UPDATING.store(false, Ordering::SeqCst);
    }
}

/// Marks the update phase as running (see [`Updating`]).
pub fn updating() -> Updating {
    UPDATING.store(true, Ordering::SeqCst);
    Updating(())
}

extern "C" fn on_signal(signal: libc::c_int) {
    let first = RECEIVED.swap(signal, Ordering::SeqCst) == 0;
    if first {
        // Atomic loads and stores are async-signal-safe.
        DURING_UPDATE.store(UPDATING.load(Ordering::SeqCst), Ordering::SeqCst);
    }
    let notice = match (first, SAVES.load(Ordering::SeqCst)) {
        (true, true) => FIRST_NOTICE,
        (true, false) => FIRST_NOTICE_UNSAVED,
        (false, _) => SECOND_NOTICE,
    };
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is a static.
    unsafe {
        libc::write(libc::STDERR_FILENO, notice.as_ptr().cast(), notice.len());
        if !first {
            libc::_exit(128 + signal);
        }
    }
}

/// `Err` once a stop signal has arrived.
pub fn check() -> Result<(), Interrupted> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => Ok(()),
        signal => Err(Interrupted {
            signal,
            during_update: DURING_UPDATE.load(Ordering::SeqCst),
        }),
    }
}

/// Whether `error` (or one of its contexts) is an [`Interrupted`].
pub fn interruption(error: &anyhow::Error) -> Option<Interrupted> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<Interrupted>())
        .copied()
}
