//! [`run_parts`]: one product split over the threads of libtorch's own OpenMP team.
//!
//! libtorch's intra-op threads are OpenMP threads that spin for a while after each parallel
//! region before they sleep. Threads of our own would compete with them for the cores between
//! libtorch's operations, slowing decode steps down markedly. So the kernel's parts run as an
//! OpenMP parallel region of the runtime libtorch loaded, found by name at run time: the
//! threads that would spin waiting for libtorch's next region take our parts.
//! Without that runtime (a libtorch built without OpenMP), the parts run on the calling thread.

use std::ffi::{c_uint, c_void, CStr};
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};

/// A part of a product: called with the part's index in `0..parts`.
type Part<'a> = dyn Fn(usize) + Sync + 'a;

/// Runs `part(0)`, …, `part(parts - 1)` over the threads of an OpenMP team of at most `parts`
/// threads (the calling thread among them) and returns when all have finished; a team smaller
/// than asked for (inside another parallel region, or no OpenMP runtime) runs several parts
/// per thread. A panic in a part is re-raised here.
pub fn run_parts(parts: usize, part: &Part<'_>) {
    let Some(openmp) = openmp().filter(|_| parts > 1) else {
        (0..parts).for_each(part);
        return;
    };
    let region = Region {
        part,
        parts,
        openmp,
        panic: Mutex::new(None),
    };
    // SAFETY: `GOMP_parallel` calls `region_body` with `data` on every thread of a new team and
    // returns after all have returned, so the `Region` it points to outlives every use;
    // `region_body` catches panics, so none unwinds through the runtime. `parts` fits in a
    // `c_uint` as any thread count does.
    unsafe {
        (openmp.parallel)(
            region_body,
            std::ptr::from_ref(&region).cast_mut().cast(),
            c_uint::try_from(parts).unwrap_or(c_uint::MAX),
            0,
        );
    }
    let payload = region.panic.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(payload) = payload {
        panic::resume_unwind(payload);
    }
}

/// Part `part`'s share of `items` split into `parts` contiguous, balanced ranges: the first
/// `items % parts` get one item more.
pub fn share(part: usize, parts: usize, items: usize) -> std::ops::Range<usize> {
    let first = part * (items / parts) + part.min(items % parts);
    first..first + items / parts + usize::from(part < items % parts)
}

/// How many parts a product may be split into: libtorch's intra-op thread count, so
/// `tch::set_num_threads` governs the kernel too; 1 without an OpenMP runtime.
pub fn parts() -> usize {
    if openmp().is_none() {
        return 1;
    }
    usize::try_from(tch::get_num_threads()).unwrap_or(1).max(1)
}

/// What a parallel region's threads share.
struct Region<'a, 'b> {
    part: &'a Part<'b>,
    parts: usize,
    openmp: OpenMp,
    /// The first panic of a part, re-raised by the caller.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

/// The body of the parallel region: thread `t` of a team of `n` runs parts `t, t + n, …`.
extern "C" fn region_body(data: *mut c_void) {
    // SAFETY: `run_parts` passes a `Region` that lives until `GOMP_parallel` returns.
    let region = unsafe { &*data.cast_const().cast::<Region<'_, '_>>() };
    // SAFETY: plain queries of the OpenMP runtime, called inside its parallel region.
    let (thread, team) = unsafe { ((region.openmp.thread_num)(), (region.openmp.num_threads)()) };
    let (thread, team) = (
        usize::try_from(thread).unwrap_or(0),
        usize::try_from(team).unwrap_or(1).max(1),
    );
    let ran = panic::catch_unwind(AssertUnwindSafe(|| {
        (thread..region.parts).step_by(team).for_each(region.part);
    }));
    if let Err(payload) = ran {
        let mut first = region.panic.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(payload);
    }
}

/// The OpenMP entry points used, from the runtime already loaded into the process.
#[derive(Clone, Copy)]
struct OpenMp {
    /// `GOMP_parallel(fn, data, num_threads, flags)`: libgomp's parallel region (also provided
    /// by LLVM's and Intel's runtimes for GCC-compiled code).
    parallel: unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, c_uint, c_uint),
    thread_num: unsafe extern "C" fn() -> i32,
    num_threads: unsafe extern "C" fn() -> i32,
}

/// The loaded OpenMP runtime's entry points, looked up once; `None` when there is none.
fn openmp() -> Option<OpenMp> {
    static OPENMP: OnceLock<Option<OpenMp>> = OnceLock::new();
    *OPENMP.get_or_init(|| {
        let find = |name: &CStr| {
            // SAFETY: `dlsym` with `RTLD_DEFAULT` only reads the process's loaded symbol
            // tables; a null result means the symbol is absent.
            let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!symbol.is_null()).then_some(symbol)
        };
        let (parallel, thread_num, num_threads) = (
            find(c"GOMP_parallel")?,
            find(c"omp_get_thread_num")?,
            find(c"omp_get_num_threads")?,
        );
        // SAFETY: these are the OpenMP runtime's exported functions with exactly these C
        // signatures (libgomp's ABI, `omp.h`).
        unsafe {
            Some(OpenMp {
                parallel: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, c_uint, c_uint),
                >(parallel),
                thread_num: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> i32>(
                    thread_num,
                ),
                num_threads: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> i32>(
                    num_threads,
                ),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn libtorchs_openmp_runtime_is_found() {
        // libtorch's CPU builds for Linux ship libgomp: without it the kernel would run on
        // one thread, which this catches.
        let _ = tch::get_num_threads();
        assert!(openmp().is_some(), "no OpenMP runtime in the process");
    }

    #[test]
    fn shares_cover_the_items_in_order_with_sizes_one_apart() {
        for (items, parts) in [(10, 3), (2, 2), (7, 1), (3, 5)] {
            let shares: Vec<_> = (0..parts).map(|p| share(p, parts, items)).collect();
            assert_eq!(shares[0].start, 0);
            assert_eq!(shares[parts - 1].end, items);
            assert!(shares.windows(2).all(|w| w[0].end == w[1].start));
            let sizes: Vec<usize> = shares.iter().map(|r| r.len()).collect();
            let (min, max) = (sizes.iter().min(), sizes.iter().max());
            assert!(
                max.zip(min).is_some_and(|(max, min)| max - min <= 1),
                "{sizes:?}"
            );
        }
    }

    #[test]
    fn runs_every_part_once() {
        for parts in 0..6 {
            let runs: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..200 {
                run_parts(parts, &|i| {
                    runs[i].fetch_add(1, Ordering::Relaxed);
                });
            }
            for (i, count) in runs.iter().enumerate() {
                assert_eq!(count.load(Ordering::Relaxed), 200, "part {i} of {parts}");
            }
        }
    }

    #[test]
    fn concurrent_callers_each_get_all_their_parts() {
        std::thread::scope(|scope| {
            for caller in 0..3 {
                scope.spawn(move || {
                    for round in 0..100 {
                        let sum = AtomicUsize::new(0);
                        run_parts(4, &|i| {
                            sum.fetch_add(i + caller + round, Ordering::Relaxed);
                        });
                        assert_eq!(sum.load(Ordering::Relaxed), 6 + 4 * (caller + round));
                    }
                });
            }
        });
    }

    #[test]
    fn a_panicking_part_panics_the_caller_and_later_products_run() {
        let outcome = panic::catch_unwind(|| {
            run_parts(2, &|i| assert!(i != 1, "part one fails"));
        });
        assert!(outcome.is_err());
        let runs = AtomicUsize::new(0);
        run_parts(2, &|_| {
            runs.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(runs.load(Ordering::Relaxed), 2);
    }
}
