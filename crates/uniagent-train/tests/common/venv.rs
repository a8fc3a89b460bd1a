//! The `.venv-torch` convention, shared with tests that do not need libtorch
//! (`#[path = "common/venv.rs"] mod venv;`).

use std::path::PathBuf;

/// The Python of `.venv-torch` when `UNIAGENT_TORCH_VENV` is set (it must then exist); `None`
/// (with a printed reason) outside `scripts/test`.
pub fn torch_python() -> Option<PathBuf> {
    match std::env::var_os("UNIAGENT_TORCH_VENV") {
        None => {
            eprintln!("skipped: UNIAGENT_TORCH_VENV is not set (run through scripts/test or source scripts/env/torch.sh)");
            None
        }
        Some(venv) => {
            let python = PathBuf::from(venv).join("bin/python");
            assert!(
                python.is_file(),
                "UNIAGENT_TORCH_VENV is set but {} does not exist: run scripts/setup/30-torch.sh",
                python.display()
            );
            Some(python)
        }
    }
}
