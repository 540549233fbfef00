//! Embeds libtorch's folder as the runtime search path of every binary and test executable of
//! the crate that uses this script: tch sets none, so without it they fail to start with
//! "libtorch_cpu.so: cannot open shared object file". torch-sys (`links = "tch"`) publishes its
//! library folder to direct dependents as `DEP_TCH_LIBTORCH_LIB`. The folder's `build-version`
//! (as libtorch releases and our install scripts write it) becomes `DRMAS_LIBTORCH_VERSION`,
//! which `drmas-host devices` reports.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        let version_file = std::path::Path::new(&lib).join("../build-version");
        println!("cargo:rerun-if-changed={}", version_file.display());
        if let Ok(version) = std::fs::read_to_string(&version_file) {
            println!("cargo:rustc-env=DRMAS_LIBTORCH_VERSION={}", version.trim());
        }
    }
}
