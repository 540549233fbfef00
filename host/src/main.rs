//! `drmas-host`: parse the command line, set up logging, hand over to the library.

use clap::Parser;
use drmas_host::cli::Cli;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    drmas_host::allocator::keep_freed_memory();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr())
        .init();
    let cli = Cli::parse();
    match drmas_host::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Whether log lines may carry ANSI colours: only on a terminal, and never when `NO_COLOR` is
/// set to anything non-empty (no-color.org), so logs written to a file or a CI log stay plain.
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
