//! Finding the executables a deployment starts or ships: a configured path must be an
//! executable file; otherwise the file is looked for next to the current executable (one level
//! up too when that is cargo's `deps/` folder, as in tests), then on `PATH`.

use std::path::{Path, PathBuf};

use uniagent_core::{Error, Result};

/// `path` if it is an executable file; else a config error naming the setting (`key`).
pub(crate) fn checked(path: &Path, key: &str) -> Result<PathBuf> {
    if is_executable(path) {
        Ok(path.to_path_buf())
    } else {
        Err(Error::config(format!(
            "{key} `{}` is not an executable file",
            path.display()
        )))
    }
}

/// The first executable `name` next to the current executable or on `PATH`.
pub(crate) fn search(name: &str) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join(name));
        if dir.file_name().is_some_and(|n| n == "deps") {
            if let Some(up) = dir.parent() {
                candidates.push(up.join(name));
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|dir| dir.join(name)));
    }
    candidates.into_iter().find(|p| is_executable(p))
}

/// A regular file with an execute bit.
pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
