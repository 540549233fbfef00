//! The benchmarks' `DRMAS_BENCH_*` settings: read from the environment with a default, and a
//! clear message (not a panic) when one is not what the benchmark expects.
// Each benchmark includes this file and uses only the readers it needs.
#![allow(dead_code)]

use std::str::FromStr;

/// `name`'s value parsed as `T`, or `default` when it is unset.
pub fn setting<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => parse_or_exit(name, text.trim()),
        Err(_) => default,
    }
}

/// `name`'s comma-separated values parsed as `T`, or `default` when it is unset.
pub fn setting_list<T: FromStr + Clone>(name: &str, default: &[T]) -> Vec<T> {
    match std::env::var(name) {
        Ok(text) => text
            .split(',')
            .map(|item| parse_or_exit(name, item.trim()))
            .collect(),
        Err(_) => default.to_vec(),
    }
}

fn parse_or_exit<T: FromStr>(name: &str, text: &str) -> T {
    text.parse().unwrap_or_else(|_| {
        eprintln!(
            "{name}={text:?} is not a valid {}; see the benchmark's header comment",
            std::any::type_name::<T>()
        );
        std::process::exit(2)
    })
}
