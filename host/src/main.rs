//! `drmas-host`: parse the command line, set up logging, hand over to the library.

use clap::Parser;
use drmas_host::cli::Cli;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    drmas_host::allocator::keep_freed_memory();
    end_quietly_on_broken_pipe();
    if let Err(error) = drmas_host::crash_report::install() {
        eprintln!("warning: no crash report naming plugins: {error}");
    }
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
            match drmas_host::interrupt::interruption(&error) {
                Some(interrupted) => std::process::ExitCode::from(interrupted.exit_code()),
                None => std::process::ExitCode::FAILURE,
            }
        }
    }
}

/// Restores SIGPIPE's default action, which Rust's runtime sets to "ignore": when stdout's reader
/// goes away (`drmas-host check … | head -1`) the process ends quietly, as Unix tools do, instead
/// of panicking in `println!` on the broken pipe.
fn end_quietly_on_broken_pipe() {
    // SAFETY: called first thing in `main`, before any other thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE and no handler of ours is replaced.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Whether log lines may carry ANSI colours: only on a terminal, and never when `NO_COLOR` is
/// set to anything non-empty (no-color.org), so logs written to a file or a CI log stay plain.
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
