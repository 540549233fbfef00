//! The process's limit on open files: each connection holds one, and a soft limit left at a
//! common default of 1024 would stop a server accepting long before its other bounds do.

use std::io;

/// Raises this process's soft limit on open files to its hard limit (as Go's runtime, vLLM and
/// SGLang do at start) and returns the soft limit before and after.
pub(crate) fn raise_to_hard_limit() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for getrlimit to write.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: `limit` is a valid rlimit whose soft limit does not pass its hard one.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, limit.rlim_cur))
}
