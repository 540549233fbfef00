//! Embeds libtorch's folder as the runtime search path of every binary and test executable of
//! the crate that uses this script: tch sets none, so without it they fail to start with
//! "libtorch_cpu.so: cannot open shared object file". torch-sys (`links = "tch"`) publishes its
//! library folder to direct dependents as `DEP_TCH_LIBTORCH_LIB`. The folder's `build-version`
//! (as libtorch releases and our install scripts write it) becomes `DRMAS_LIBTORCH_VERSION`,
//! which `drmas-host devices` reports.
//!
//! It also compiles the crate's C++ shims over libtorch operators that tch does not bind
//! (`src/devices/profiler.cpp`: the profiler; `src/engine/cuda_graph.cpp`: CUDA graphs, with
//! CUDA where libtorch has it and the CUDA runtime's headers are found;
//! `src/model/cudnn_attention.cpp`: whether attention may use cuDNN; `src/update/fused_adamw.cpp`:
//! the multi-tensor AdamW kernel and list copy; `src/update/gradient_lists.cpp`: norms and
//! scaling of gradient lists) against the same libtorch's headers.
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
            "src/engine/cuda_graph.cpp",
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
        let cuda = cuda_runtime_headers(std::path::Path::new(&lib), &root);
        compile_shims(&root.join("include"), cuda.as_deref(), &shims);
        if cuda.is_some() {
            // The graph shim calls c10's CUDA streams; torch-sys links libtorch_cuda only.
            println!("cargo:rustc-link-lib=dylib=c10_cuda");
        }
    }
}

/// The CUDA runtime's headers, when libtorch is a CUDA build: `DRMAS_CUDA_INCLUDE`, else the
/// `cuda-include` folder scripts/gpu/install-libtorch.sh lays out beside libtorch's, else a
/// CUDA toolkit's (`CUDA_HOME`, `CUDA_PATH`, /usr/local/cuda). Without them the CUDA graph shim
/// (`src/engine/cuda_graph.cpp`) is built without CUDA and refuses graphs at run time.
fn cuda_runtime_headers(
    lib: &std::path::Path,
    root: &std::path::Path,
) -> Option<std::path::PathBuf> {
    for var in ["DRMAS_CUDA_INCLUDE", "CUDA_HOME", "CUDA_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if !lib.join("libtorch_cuda.so").exists() {
        return None;
    }
    let toolkit =
        |var: &str| std::env::var_os(var).map(|p| std::path::Path::new(&p).join("include"));
    let candidates = [
        std::env::var_os("DRMAS_CUDA_INCLUDE").map(std::path::PathBuf::from),
        Some(root.join("cuda-include")),
        toolkit("CUDA_HOME"),
        toolkit("CUDA_PATH"),
        Some(std::path::PathBuf::from("/usr/local/cuda/include")),
    ];
    let found = candidates.into_iter().flatten().find(|dir| {
        dir.join("cuda_runtime_api.h").exists() && dir.join("crt/host_config.h").exists()
    });
    if found.is_none() {
        println!(
            "cargo:warning=libtorch has CUDA but the CUDA runtime's headers were not found \
             (DRMAS_CUDA_INCLUDE, CUDA_HOME, /usr/local/cuda/include): this build cannot run \
             decode steps as CUDA graphs"
        );
    }
    found
}

/// Compiles the C++ `shims` against libtorch's headers in `include` into one static library,
/// with CUDA where `cuda` holds the CUDA runtime's headers.
fn compile_shims(include: &std::path::Path, cuda: Option<&std::path::Path>, shims: &[&str]) {
    // torch-sys compiles its own glue with the same ABI setting (default: the C++11 ABI, which
    // every libtorch 2.x from PyPI uses).
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .files(shims)
        .include(include)
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", abi.as_str())
        .warnings(false)
        .flag("-w");
    if let Some(cuda) = cuda {
        build.include(cuda).define("DRMAS_WITH_CUDA", None);
    }
    build.compile("drmas_shims");
}
