//! Putting the toolbox binary into a sandbox: [`install_toolbox`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use uniagent_core::sandbox::{Command, UploadRequest};
use uniagent_core::{Deployment, Error, Result};

use crate::toolbox::VERSION;

/// The toolbox binary's file name.
pub const TOOLBOX_BINARY_NAME: &str = "uniagent-toolbox";

/// Environment variable naming the toolbox binary to upload (e.g. the static build).
pub const TOOLBOX_BINARY_ENV: &str = "UNIAGENT_TOOLBOX_BIN";

/// Where the toolbox comes from and where it goes in the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolboxConfig {
    /// The binary to upload. `None`: `$UNIAGENT_TOOLBOX_BIN`, else next to the current
    /// executable (or one level up from cargo's `deps/`), else on `PATH`.
    pub binary: Option<PathBuf>,
    /// Directory in the sandbox for the binary (`<dir>/uniagent-toolbox`) and its state
    /// (`<dir>/state`: edit histories, argument files). Sandboxes sharing a file system (two
    /// host sandboxes) should use different directories.
    pub install_dir: String,
    /// How long each install step may take.
    pub timeout: Duration,
}

impl Default for ToolboxConfig {
    fn default() -> Self {
        Self {
            binary: None,
            install_dir: "/tmp/uniagent-toolbox".into(),
            timeout: Duration::from_secs(60),
        }
    }
}

impl ToolboxConfig {
    /// The config with another install directory.
    pub fn with_install_dir(mut self, dir: impl Into<String>) -> Self {
        self.install_dir = dir.into();
        self
    }

    /// The config with an explicit binary.
    pub fn with_binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Path of the binary inside the sandbox.
    pub fn binary_path(&self) -> String {
        format!(
            "{}/{TOOLBOX_BINARY_NAME}",
            self.install_dir.trim_end_matches('/')
        )
    }

    /// The state directory inside the sandbox.
    pub fn state_dir(&self) -> String {
        format!("{}/state", self.install_dir.trim_end_matches('/'))
    }
}

/// The toolbox binary on this machine, following [`ToolboxConfig::binary`]'s search order.
pub fn find_toolbox_binary(configured: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = configured {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(Error::config(format!(
                "toolbox binary `{}` is not a file",
                path.display()
            )))
        };
    }
    let mut candidates = Vec::new();
    if let Some(path) = std::env::var_os(TOOLBOX_BINARY_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::config(format!(
                "{TOOLBOX_BINARY_ENV}=`{}` is not a file",
                path.display()
            )))
        };
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        candidates.push(dir.join(TOOLBOX_BINARY_NAME));
        if dir.file_name().is_some_and(|n| n == "deps") {
            if let Some(up) = dir.parent() {
                candidates.push(up.join(TOOLBOX_BINARY_NAME));
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join(TOOLBOX_BINARY_NAME)));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        Error::config(format!(
            "cannot find the `{TOOLBOX_BINARY_NAME}` binary: set {TOOLBOX_BINARY_ENV}, or build it with \
             `cargo build -p uniagent-tools --bin {TOOLBOX_BINARY_NAME}` (scripts/build-static-toolbox.sh for containers)"
        ))
    })
}

/// Uploads the toolbox into the sandbox with the default [`ToolboxConfig`] and checks that it
/// runs. Returns the binary's path in the sandbox.
pub async fn install_toolbox(deployment: &dyn Deployment) -> Result<String> {
    install_toolbox_with(deployment, &ToolboxConfig::default()).await
}

/// Uploads the toolbox into the sandbox and checks that it runs there.
///
/// The bytes go to a temporary name, are made executable and renamed into place, so a sandbox
/// already running an older copy never sees half a binary. Needs the sandbox's `upload` and
/// `execute` operations; works over SWE-ReX's own server as well as ours.
pub async fn install_toolbox_with(
    deployment: &dyn Deployment,
    config: &ToolboxConfig,
) -> Result<String> {
    let local = find_toolbox_binary(config.binary.as_deref())?;
    let data = std::fs::read(&local).map_err(|source| Error::Io {
        context: format!("reading the toolbox binary {}", local.display()),
        source,
    })?;
    let target = config.binary_path();
    let staging = format!(
        "{}/.{TOOLBOX_BINARY_NAME}.{:016x}",
        config.install_dir.trim_end_matches('/'),
        fastrand::u64(..)
    );
    deployment
        .upload(UploadRequest {
            data,
            target_path: staging.clone(),
            unzip: false,
        })
        .await?;
    let script = "chmod 755 \"$1\" && mv -f \"$1\" \"$2\" && mkdir -p \"$3\" && \"$2\" --version";
    let argv = [
        "sh",
        "-c",
        script,
        "sh",
        staging.as_str(),
        target.as_str(),
        &config.state_dir(),
    ];
    let response = deployment
        .execute(Command::argv(argv, Some(config.timeout.as_secs_f64())))
        .await?;
    if response.exit_code != Some(0) || !response.stdout.starts_with(VERSION) {
        return Err(Error::Sandbox {
            backend: deployment.backend().to_owned(),
            message: format!(
                "installing the toolbox at {target} failed (exit code {:?}): {}{}",
                response.exit_code, response.stdout, response.stderr
            ),
            retryable: false,
            source: None,
        });
    }
    Ok(target)
}
