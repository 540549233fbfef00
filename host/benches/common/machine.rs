//! What the benchmarks print about the machine they ran on: the CPU and its load.

/// Prints the CPU's model name and the load average (from `/proc`; skipped where there is none).
pub fn print_cpu() {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map_or("unknown", |(_, value)| value.trim());
    println!(
        "CPU: {model}, {} logical cores",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    print_load();
}

/// Prints the 1, 5 and 15-minute load averages.
pub fn print_load() {
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let averages: Vec<&str> = load.split_whitespace().take(3).collect();
        println!("load average: {}", averages.join(" "));
    }
}
