//! Names the plugin a crash happened in. A plugin is native code: an abort, a null dereference or
//! an illegal instruction in it kills the process, and nothing can catch that. What can be done
//! is to say where: every call into plugin code records, per thread, which component and method
//! is running ([`PluginScope`]), and a handler for the fatal signals prints it, with the faulting
//! address of a SIGSEGV or SIGBUS, before the signal takes its default course. The handler only
//! reads that record and the signal's information and calls `write(2)`.

use std::cell::Cell;

/// The fatal signals the report covers.
const FATAL_SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGABRT,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
];

/// A call into plugin code: the component's description (plugin, library, component) and the
/// method.
#[derive(Debug, Clone, Copy)]
struct PluginCall {
    origin: &'static str,
    method: &'static str,
}

thread_local! {
    /// The plugin call this thread is in. Const-initialised and without a destructor, so a signal
    /// handler can read it without allocating or locking.
    static CURRENT: Cell<Option<PluginCall>> = const { Cell::new(None) };
}

/// While alive, this thread is inside `method` of the component described by `origin`.
#[must_use = "the record lasts only as long as the scope"]
pub struct PluginScope {
    outer: Option<PluginCall>,
}

impl PluginScope {
    /// Records that this thread enters plugin code.
    pub fn enter(origin: &'static str, method: &'static str) -> Self {
        let outer = CURRENT.replace(Some(PluginCall { origin, method }));
        Self { outer }
    }
}

impl Drop for PluginScope {
    fn drop(&mut self) {
        CURRENT.set(self.outer);
    }
}

/// Each fatal signal's action before [`install`], in the order of [`FATAL_SIGNALS`]: the handler
/// puts it back before the signal runs its course (Rust's own handler reports stack overflows).
static PREVIOUS: std::sync::OnceLock<Vec<libc::sigaction>> = std::sync::OnceLock::new();

/// Installs the handler for the fatal signals (once, for the rest of the process). It runs on
/// the thread's alternate stack where there is one (Rust gives its threads one), so a stack
/// overflow still reaches it.
pub fn install() -> std::io::Result<()> {
    let mut previous = Vec::with_capacity(FATAL_SIGNALS.len());
    for signal in FATAL_SIGNALS {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler only
        // reads a thread-local Cell and a OnceLock and calls async-signal-safe functions.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal_signal
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, &action, &mut old) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            previous.push(old);
        }
    }
    // A second install keeps the first record: the actions before drmas-host's own.
    let _ = PREVIOUS.set(previous);
    Ok(())
}

/// Says which plugin call the thread was in, then puts the signal's previous action back and
/// returns: a fault re-runs its instruction and meets that action; `abort`'s SIGABRT is raised
/// again.
extern "C" fn on_fatal_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    if let Some(call) = CURRENT.try_with(Cell::get).ok().flatten() {
        // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t; `si_addr` is the faulting
        // address for SIGSEGV and SIGBUS (and means something else, or nothing, for the others).
        let address = (!info.is_null() && matches!(signal, libc::SIGSEGV | libc::SIGBUS))
            .then(|| unsafe { (*info).si_addr() } as usize);
        report(signal, address, call);
    }
    let previous = PREVIOUS.get().and_then(|actions| {
        FATAL_SIGNALS
            .iter()
            .position(|&s| s == signal)
            .and_then(|index| actions.get(index))
    });
    // SAFETY: sigaction(2), signal(2) and raise(3) are async-signal-safe; `previous` is a
    // complete action the kernel handed back at install time.
    unsafe {
        match previous {
            Some(action) => libc::sigaction(signal, action, std::ptr::null_mut()),
            None => {
                libc::signal(signal, libc::SIG_DFL);
                0
            }
        };
        if signal == libc::SIGABRT {
            libc::raise(signal);
        }
    }
}

/// Writes "crashed (SIGNAL at address A) inside COMPONENT, method M" and how to see more to
/// stderr with `write(2)` only.
fn report(signal: libc::c_int, address: Option<usize>, call: PluginCall) {
    let name: &[u8] = match signal {
        libc::SIGSEGV => b"SIGSEGV",
        libc::SIGABRT => b"SIGABRT",
        libc::SIGBUS => b"SIGBUS",
        libc::SIGILL => b"SIGILL",
        libc::SIGFPE => b"SIGFPE",
        _ => b"a fatal signal",
    };
    let mut hex = [0u8; HEX_CAPACITY];
    let (at, address): (&[u8], &[u8]) = match address {
        Some(address) => (b" at address ", hex_address(address, &mut hex)),
        None => (b"", b""),
    };
    for part in [
        b"\ndrmas-host: crashed (".as_slice(),
        name,
        at,
        address,
        b") inside ",
        call.origin.as_bytes(),
        b", method ",
        call.method.as_bytes(),
        b"; a plugin's crash cannot be caught, the process ends. To see where: run again \
          with core dumps on (`ulimit -c unlimited`) and open the core with gdb \
          (`thread apply all bt`)\n",
    ] {
        // SAFETY: write(2) is async-signal-safe; each slice is valid for its length.
        unsafe {
            libc::write(libc::STDERR_FILENO, part.as_ptr().cast(), part.len());
        }
    }
}

/// Bytes of the longest address [`hex_address`] writes: `0x` and 16 digits.
const HEX_CAPACITY: usize = 2 + 2 * size_of::<usize>();

/// `address` as `0x…` lower-case hex without leading zeros, written into `buffer` (no allocation:
/// a signal handler calls it).
fn hex_address(address: usize, buffer: &mut [u8; HEX_CAPACITY]) -> &[u8] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut start = HEX_CAPACITY;
    let mut rest = address;
    loop {
        start -= 1;
        buffer[start] = DIGITS[rest % 16];
        rest /= 16;
        if rest == 0 {
            break;
        }
    }
    buffer[start - 2..start].copy_from_slice(b"0x");
    &buffer[start - 2..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_written_in_hex_without_leading_zeros() {
        let mut buffer = [0u8; HEX_CAPACITY];
        for (address, expected) in [
            (0, "0x0"),
            (0x8, "0x8"),
            (0x7f3a_0000_10f0, "0x7f3a000010f0"),
            (usize::MAX, "0xffffffffffffffff"),
        ] {
            assert_eq!(hex_address(address, &mut buffer), expected.as_bytes());
        }
    }
}
