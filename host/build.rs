//! Embeds libtorch's folder as the runtime search path of every binary and test executable of
//! the crate that uses this script: tch sets none, so without it they fail to start with
//! "libtorch_cpu.so: cannot open shared object file". torch-sys (`links = "tch"`) publishes its
//! library folder to direct dependents as `DEP_TCH_LIBTORCH_LIB`. The folder's `build-version`
//! (as libtorch releases and our install scripts write it) becomes `DRMAS_LIBTORCH_VERSION`,
//! which `drmas-host devices` reports.
//!
//! It also compiles the crate's C++ shims over libtorch operators that tch does not bind
//! (`src/devices/profiler.cpp`: the profiler; `src/model/cudnn_attention.cpp`: whether attention
//! may use cuDNN; `src/update/fused_adamw.cpp`: the multi-tensor AdamW kernel and list copy;
//! `src/update/gradient_lists.cpp`: norms and scaling of gradient lists) against the same
//! libtorch's headers.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        panic!(
            "torch-sys published no DEP_TCH_LIBTORCH_LIB: is torch-sys still a direct dependency?"
        );
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    let root = std::path::Path::new(&lib).join("..");
    let version_file = root.join("build-version");
    println!("cargo:rerun-if-changed={}", version_file.display());
    if let Ok(version) = std::fs::read_to_string(&version_file) {
        println!("cargo:rustc-env=DRMAS_LIBTORCH_VERSION={}", version.trim());
    }
    // The shims belong to the drmas-host library; the end-to-end tests crate shares this script
    // for the search path only.
    if std::env::var("CARGO_PKG_NAME").as_deref() == Ok("drmas-host") {
        let shims = [
            "src/devices/profiler.cpp",
            "src/model/cudnn_attention.cpp",
            "src/update/fused_adamw.cpp",
            "src/update/gradient_lists.cpp",
        ];
        for shim in shims
            .iter()
            .chain(&["src/shim_error.h", "src/tensor_list.h"])
        {
            println!("cargo:rerun-if-changed={shim}");
        }
        compile_shims(&root.join("include"), &shims);
    }
}

/// Compiles the C++ `shims` against libtorch's headers in `include` into one static library.
fn compile_shims(include: &std::path::Path, shims: &[&str]) {
    // torch-sys compiles its own glue with the same ABI setting (default: the C++11 ABI, which
    // every libtorch 2.x from PyPI uses).
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    cc::Build::new()
        .cpp(true)
        .files(shims)
        .include(include)
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", abi.as_str())
        .warnings(false)
        .flag("-w")
        .compile("drmas_shims");
}
