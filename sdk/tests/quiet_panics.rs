//! `catch_quietly` keeps the panics it catches off the panic hook that was installed before it,
//! and every other panic still reaches that hook. One test in its own process: the panic hook and
//! the environment are process-wide.

use std::panic;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use drmas_sdk::catch_quietly;

#[test]
fn caught_panics_stay_quiet_and_others_reach_the_hook_installed_before() {
    // With backtraces asked for, caught panics are printed too; the quiet hook reads this once.
    std::env::remove_var("RUST_BACKTRACE");
    let reported = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&reported);
    panic::set_hook(Box::new(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
    }));

    let caught = catch_quietly(|| -> () { panic!("a parser gave up") }).expect_err("caught");
    assert_eq!(caught.message(), "a parser gave up");
    let nested = catch_quietly(|| catch_quietly(|| -> () { panic!("inner") }));
    assert_eq!(
        nested
            .expect("the outer call returns")
            .expect_err("the inner call caught it")
            .message(),
        "inner"
    );
    assert_eq!(
        reported.load(Ordering::SeqCst),
        0,
        "caught panics print nothing"
    );

    let outside = std::thread::spawn(|| panic!("a bug elsewhere")).join();
    assert!(outside.is_err());
    assert_eq!(
        reported.load(Ordering::SeqCst),
        1,
        "other panics reach the earlier hook"
    );

    let after = catch_quietly(|| -> () { panic!("again") }).expect_err("caught");
    assert_eq!(after.message(), "again");
    assert_eq!(reported.load(Ordering::SeqCst), 1);
}
