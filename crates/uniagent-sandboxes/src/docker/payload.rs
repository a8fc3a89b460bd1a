//! What is copied into every container: the sandbox server and, when present, the toolbox, as a
//! tar archive uploaded through the Docker API (no bind mounts).

use std::path::{Path, PathBuf};

use uniagent_core::{Error, Result};

use crate::binaries::{checked, is_executable, search};

/// Where the binaries live inside the container.
pub const BIN_DIR: &str = "/opt/uniagent/bin";
/// The server binary's file name.
pub(crate) const SERVER_NAME: &str = "uniagent-sandbox";
/// The toolbox binary's file name.
pub(crate) const TOOLBOX_NAME: &str = "uniagent-toolbox";
/// Environment variable naming the server binary when the configuration does not.
pub const SERVER_BINARY_ENV: &str = "UNIAGENT_SANDBOX_BINARY";

/// The binaries to copy in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// The `uniagent-sandbox` server.
    pub server: PathBuf,
    /// The `uniagent-toolbox`, when found.
    pub toolbox: Option<PathBuf>,
}

impl Payload {
    /// Finds the server (`configured`, else `$UNIAGENT_SANDBOX_BINARY`, else next to the current
    /// executable or one level up from cargo's `deps/`, else on `PATH`) and the toolbox
    /// (`toolbox`, else next to the server).
    ///
    /// ```
    /// use std::path::Path;
    /// use uniagent_sandboxes::docker::Payload;
    /// let err = Payload::locate(Some(Path::new("/no/such/server")), None).unwrap_err();
    /// assert!(err.to_string().contains("/no/such/server"));
    /// ```
    pub fn locate(configured: Option<&Path>, toolbox: Option<&Path>) -> Result<Self> {
        let server = match configured {
            Some(path) => checked(path, "docker.server_binary")?,
            None => match std::env::var_os(SERVER_BINARY_ENV) {
                Some(path) => checked(Path::new(&path), SERVER_BINARY_ENV)?,
                None => search(SERVER_NAME).ok_or_else(|| {
                    Error::config(format!(
                        "cannot find the `{SERVER_NAME}` binary next to the current executable \
                         or on PATH; build it (`cargo build -p uniagent-sandboxes --bin {SERVER_NAME}`) \
                         or set docker.server_binary / ${SERVER_BINARY_ENV}"
                    ))
                })?,
            },
        };
        let toolbox = match toolbox {
            Some(path) => Some(checked(path, "docker.toolbox_binary")?),
            None => server
                .parent()
                .map(|dir| dir.join(TOOLBOX_NAME))
                .filter(|p| is_executable(p)),
        };
        Ok(Self { server, toolbox })
    }

    /// A tar archive holding [`BIN_DIR`] with the binaries (mode 0755), to be extracted at `/`.
    pub fn archive(&self) -> Result<Vec<u8>> {
        let mut builder = tar::Builder::new(Vec::new());
        let mut entries = vec![(SERVER_NAME, &self.server)];
        if let Some(toolbox) = &self.toolbox {
            entries.push((TOOLBOX_NAME, toolbox));
        }
        let bin = BIN_DIR.trim_start_matches('/');
        for dir in ["opt/", "opt/uniagent/", "opt/uniagent/bin/"] {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            builder
                .append_data(&mut header, dir, std::io::empty())
                .map_err(|e| Error::io("building the container payload", e))?;
        }
        for (name, path) in entries {
            let bytes = std::fs::read(path)
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            let mut header = tar::Header::new_gnu();
            header.set_mode(0o755);
            header.set_size(bytes.len() as u64);
            builder
                .append_data(&mut header, format!("{bin}/{name}"), bytes.as_slice())
                .map_err(|e| Error::io("building the container payload", e))?;
        }
        builder
            .into_inner()
            .map_err(|e| Error::io("building the container payload", e))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_archive_holds_executable_binaries_under_the_bin_dir() {
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join(SERVER_NAME);
        std::fs::write(&server, b"server-bytes").unwrap();
        std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o700)).unwrap();
        let toolbox = dir.path().join(TOOLBOX_NAME);
        std::fs::write(&toolbox, b"toolbox").unwrap();
        std::fs::set_permissions(&toolbox, std::fs::Permissions::from_mode(0o755)).unwrap();
        let payload = Payload::locate(Some(&server), None).unwrap();
        assert_eq!(
            payload.toolbox.as_deref(),
            Some(toolbox.as_path()),
            "found next to the server"
        );
        let bytes = payload.archive().unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut files = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().display().to_string();
            let mode = entry.header().mode().unwrap();
            let mut content = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut content).unwrap();
            files.push((path, mode, content));
        }
        assert!(files.contains(&(
            "opt/uniagent/bin/uniagent-sandbox".into(),
            0o755,
            b"server-bytes".to_vec()
        )));
        assert!(files.contains(&(
            "opt/uniagent/bin/uniagent-toolbox".into(),
            0o755,
            b"toolbox".to_vec()
        )));
    }

    #[test]
    fn a_non_executable_server_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join("s");
        std::fs::write(&server, b"x").unwrap();
        std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Payload::locate(Some(&server), None).unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
    }
}
