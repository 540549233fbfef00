//! [`keep_freed_memory`]: tells glibc's `malloc` to keep the memory a training step frees for
//! the next step instead of handing it back to the kernel.
//!
//! A training step allocates gigabytes of activations and gradients and frees them all at the
//! end. By default glibc serves every block over 32 MiB with its own `mmap` (unmapped again on
//! `free`) and trims the heap's free top back to the kernel after large frees, so each step
//! faults all that memory in again and the kernel zeroes every page first: on SmolLM2 at 8 × 256
//! tokens that is ~0.5 M page faults per step, and `clear_page_erms` was the largest item after
//! the matmuls in a profile of `cargo bench --bench train_step`. With both turned off, the
//! second step onwards reuses the first step's pages (docs/status.md has the numbers). The cost:
//! the process keeps its peak heap until it exits, which is what a training process reaches
//! again at every step anyway.

/// Makes `malloc` serve large blocks from its heap and never trim the heap, for the rest of the
/// process (glibc on Linux; elsewhere it does nothing). Returns whether both settings took.
///
/// Call it at the start of `main`, before the first large allocation: blocks that were
/// `mmap`ed before keep being unmapped when freed. Threads other than the main one allocate
/// from arenas of at most 64 MiB, so their larger blocks are still `mmap`ed; libtorch runs a
/// CPU backward pass on the thread that calls it, and the trainer calls it from the main thread.
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only changes the allocator's tuning parameters, which glibc
        // reads under its own locks; no memory is touched.
        unsafe {
            // No `mmap` for large blocks: they come from the heap and go back to it.
            let heap_only = libc::mallopt(libc::M_MMAP_MAX, 0) == 1;
            // -1 (SIZE_MAX once glibc widens it): never trim the heap's free top.
            let no_trim = libc::mallopt(libc::M_TRIM_THRESHOLD, -1) == 1;
            heap_only && no_trim
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_freed_large_block_is_reused_without_new_page_faults() {
        assert!(keep_freed_memory());
        // This thread's page faults served without I/O, as the kernel counts them.
        let minor_faults = || {
            // SAFETY: getrusage only writes the struct it is given; a zeroed rusage is valid.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: `usage` is a valid, writable rusage.
            assert_eq!(
                unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) },
                0
            );
            usage.ru_minflt
        };
        // Over glibc's largest `mmap` threshold (32 MiB) and within a thread arena (64 MiB):
        // tests run on threads of their own.
        let bytes = 48 << 20;
        let touch = || {
            let mut block = vec![1u8; bytes];
            block[bytes - 1] = 2;
            std::hint::black_box(&block);
        };
        touch();
        let before = minor_faults();
        touch();
        let faults = minor_faults() - before;
        // 48 MiB freshly mapped is 12,288 faults of 4 KiB pages (measured without the call).
        assert!(
            faults < 1_000,
            "{faults} page faults for a reused 48 MiB block"
        );
    }
}
