//! Finding the `uniagent-sandbox` server binary.

use std::path::{Path, PathBuf};

use uniagent_core::{Error, Result};

use crate::binaries::{checked, search};

/// The file name of the server binary.
pub const SERVER_BINARY_NAME: &str = "uniagent-sandbox";

/// Where the server binary is: `configured` if given (it must exist), else next to the current
/// executable (or one level up when that is cargo's `deps/` folder), else on `PATH`.
///
/// ```
/// let err = uniagent_sandboxes::host::find_server_binary(Some(std::path::Path::new("/no/such/bin"))).unwrap_err();
/// assert!(err.to_string().contains("/no/such/bin"));
/// ```
pub fn find_server_binary(configured: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = configured {
        return checked(path, "host.server_binary");
    }
    search(SERVER_BINARY_NAME).ok_or_else(|| {
        Error::config(format!(
            "cannot find the `{SERVER_BINARY_NAME}` binary next to the current executable or on PATH; \
             build it (`cargo build -p uniagent-sandboxes --features server --bin {SERVER_BINARY_NAME}`) or set host.server_binary"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_binary_must_be_executable() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        assert!(find_server_binary(Some(&file)).is_err());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_server_binary(Some(&file)).unwrap(), file);
        assert!(
            find_server_binary(Some(dir.path())).is_err(),
            "a directory is not a binary"
        );
    }
}
