//! With the `tch` feature, the binaries link libtorch dynamically (from the PyPI torch wheel, or
//! a LIBTORCH directory). Its directory becomes the binaries' run path, so that `uniagent`
//! finds `libtorch_cpu.so` from any shell, as installed by `cargo install --features tch`,
//! without `LD_LIBRARY_PATH`. torch-sys exports the directory to its direct dependents as
//! `DEP_TCH_LIBTORCH_LIB`.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        if !dir.is_empty() {
            println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
        }
    }
}
