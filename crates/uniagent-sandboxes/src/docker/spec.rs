//! The container a [`DockerConfig`] asks for: image, command, labels, resource limits and
//! security settings.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, PortBinding, ResourcesUlimits,
};

use super::payload::{BIN_DIR, SERVER_NAME};
use crate::config::{DockerConfig, NetworkMode};

/// The environment variable `uniagent-sandbox` reads its token from.
pub(crate) const TOKEN_ENV: &str = "UNIAGENT_SANDBOX_TOKEN";

/// The port the server listens on inside the container (`none` and `bridge` networks).
pub(crate) const SERVER_PORT: u16 = 8000;

/// How much longer than the configured lifetime the server in the container lives by itself.
pub(crate) const SERVER_LIFETIME_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// How the host reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Through a [`Relay`](super::relay::Relay) (one multiplexer exec) to
    /// 127.0.0.1:[`SERVER_PORT`] inside a container that has only loopback.
    Relay,
    /// At 127.0.0.1 on the ephemeral host port Docker published for [`SERVER_PORT`].
    PublishedPort,
    /// At 127.0.0.1 on this port, in the host's network namespace.
    HostPort(u16),
}

/// Everything [`container_body`] needs besides the configuration.
pub(crate) struct Launch<'a> {
    pub config: &'a DockerConfig,
    /// The image to start: the configured one with the payload committed in, or the configured
    /// one itself when the payload is uploaded into the container before it starts.
    pub image: String,
    pub token: &'a str,
    pub labels: HashMap<String, String>,
    /// `PATH` of the image, to which the binaries' directory is prepended.
    pub image_path: Option<String>,
    pub reach: Reach,
}

/// The body of `POST /containers/create`.
pub(crate) fn container_body(launch: &Launch<'_>) -> ContainerCreateBody {
    let config = launch.config;
    let (listen_host, port) = match launch.reach {
        Reach::HostPort(port) => ("127.0.0.1", port),
        Reach::Relay => ("127.0.0.1", SERVER_PORT),
        Reach::PublishedPort => ("0.0.0.0", SERVER_PORT),
    };
    let port_key = format!("{SERVER_PORT}/tcp");
    let mut cmd = vec![
        "--host".to_owned(),
        listen_host.to_owned(),
        "--port".to_owned(),
        port.to_string(),
    ];
    if let Some(lifetime) = config.lifetime {
        // The server itself ends at its lifetime: a container outlives a SIGKILLed controller
        // by at most that much even before a sweep removes it.
        // A short grace after the controller's own timer, which removes the container first
        // and explains the end to the caller.
        let own = lifetime + SERVER_LIFETIME_GRACE;
        cmd.extend(["--lifetime".to_owned(), own.as_secs_f64().to_string()]);
    }
    let path = format!(
        "{BIN_DIR}:{}",
        launch
            .image_path
            .as_deref()
            .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    );
    // The token travels in the environment, not the command line (which every host user sees
    // in `ps`); the server removes it from its own environment before any shell starts.
    let mut env = vec![
        format!("PATH={path}"),
        format!("{TOKEN_ENV}={}", launch.token),
    ];
    env.extend(config.env.iter().map(|(k, v)| format!("{k}={v}")));
    let mut host = HostConfig {
        network_mode: Some(network_mode(config.network).into()),
        privileged: Some(false),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: (!config.cap_add.is_empty()).then(|| config.cap_add.clone()),
        security_opt: Some(vec!["no-new-privileges".into()]),
        // docker-init as PID 1 reaps the orphans of the agent's background jobs.
        init: Some(true),
        memory: config.memory_bytes.and_then(|b| i64::try_from(b).ok()),
        // No swap: the memory limit is the limit.
        memory_swap: config.memory_bytes.and_then(|b| i64::try_from(b).ok()),
        nano_cpus: config.cpus.map(|c| (c * 1e9).round() as i64),
        pids_limit: config.pids_limit,
        readonly_rootfs: Some(config.read_only_root),
        // Bounded logs: the daemon would otherwise keep everything the server prints.
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(HashMap::from([
                ("max-size".to_owned(), "10m".to_owned()),
                ("max-file".to_owned(), "1".to_owned()),
            ])),
        }),
        // No core dumps (they land in the sandbox and can fill it).
        ulimits: Some(vec![ResourcesUlimits {
            name: Some("core".into()),
            soft: Some(0),
            hard: Some(0),
        }]),
        ..Default::default()
    };
    if config.read_only_root {
        // Writable scratch space on tmpfs (charged to the memory limit), each at most half of
        // it, so that a full disk is an ENOSPC and not an OOM kill.
        let tmpfs_size = config
            .memory_bytes
            .map_or(1 << 30, |m| (m / 2).max(1 << 20));
        // Docker ignores a tmpfs `mode` on a path the image has (it copies the directory's
        // own), so a non-root user gets the work dir by ownership.
        let owner = match config.user.as_deref().and_then(super::numeric_user) {
            Some((uid, Some(gid))) => format!(",uid={uid},gid={gid}"),
            Some((uid, None)) => format!(",uid={uid}"),
            None => String::new(),
        };
        host.tmpfs = Some(HashMap::from([
            (
                config.work_dir.clone(),
                format!("rw,exec,mode=1777,size={tmpfs_size}{owner}"),
            ),
            (
                "/tmp".to_owned(),
                format!("rw,exec,nosuid,mode=1777,size={tmpfs_size}"),
            ),
        ]));
    }
    let mut exposed = None;
    if launch.reach == Reach::PublishedPort {
        host.port_bindings = Some(HashMap::from([(
            port_key.clone(),
            Some(vec![PortBinding {
                host_ip: Some("127.0.0.1".into()),
                host_port: Some(String::new()),
            }]),
        )]));
        exposed = Some(HashMap::from([(port_key, HashMap::new())]));
    }
    ContainerCreateBody {
        image: Some(launch.image.clone()),
        entrypoint: Some(vec![format!("{BIN_DIR}/{SERVER_NAME}")]),
        cmd: Some(cmd),
        env: Some(env),
        working_dir: Some(config.work_dir.clone()),
        user: config.user.clone(),
        labels: Some(launch.labels.clone()),
        exposed_ports: exposed,
        host_config: Some(host),
        ..Default::default()
    }
}

/// Docker's network mode for `network`: `none` leaves the container only loopback.
pub(crate) fn network_mode(network: NetworkMode) -> &'static str {
    match network {
        NetworkMode::None => "none",
        NetworkMode::Bridge => "bridge",
        NetworkMode::Host => "host",
    }
}

/// How `network` is reached, before the container exists.
pub(crate) fn reach_for(network: NetworkMode, free_host_port: impl FnOnce() -> u16) -> Reach {
    match network {
        NetworkMode::None => Reach::Relay,
        NetworkMode::Bridge => Reach::PublishedPort,
        NetworkMode::Host => Reach::HostPort(free_host_port()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(config: &DockerConfig, reach: Reach) -> ContainerCreateBody {
        container_body(&Launch {
            config,
            image: "img+payload".into(),
            token: "tok",
            labels: HashMap::from([("l".into(), "v".into())]),
            image_path: Some("/usr/bin:/bin".into()),
            reach,
        })
    }

    #[test]
    fn defaults_are_locked_down() {
        let config = DockerConfig {
            image: "img".into(),
            ..DockerConfig::default()
        };
        let body = body(&config, Reach::Relay);
        let host = body.host_config.unwrap();
        assert_eq!(host.privileged, Some(false));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(host.cap_add, None);
        assert_eq!(host.memory, Some(2 << 30));
        assert_eq!(host.memory_swap, host.memory);
        assert_eq!(host.nano_cpus, Some(1_000_000_000));
        assert_eq!(host.pids_limit, Some(512));
        assert_eq!(host.network_mode.as_deref(), Some("none"), "only loopback");
        assert_eq!(host.port_bindings, None, "nothing published");
        assert_eq!(body.exposed_ports, None);
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_owned()])
        );
        let env = body.env.unwrap();
        assert_eq!(env[0], "PATH=/opt/uniagent/bin:/usr/bin:/bin");
        assert!(env.contains(&"UNIAGENT_SANDBOX_TOKEN=tok".to_owned()));
        let log = host.log_config.unwrap();
        assert_eq!(log.config.unwrap()["max-size"], "10m");
        assert_eq!(body.image.as_deref(), Some("img+payload"));
        assert_eq!(
            body.cmd.unwrap(),
            [
                "--host",
                "127.0.0.1",
                "--port",
                "8000",
                "--lifetime",
                "3610"
            ],
            "reached through the relay on the container's loopback; no token on the command line"
        );
    }

    #[test]
    fn bridge_publishes_on_loopback_only_and_host_mode_listens_on_loopback() {
        let config = DockerConfig {
            image: "img".into(),
            ..DockerConfig::default()
        };
        let bridged = body(
            &DockerConfig {
                network: NetworkMode::Bridge,
                ..config.clone()
            },
            Reach::PublishedPort,
        );
        assert_eq!(bridged.cmd.unwrap()[..2], ["--host", "0.0.0.0"]);
        let host = bridged.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("bridge"));
        let bindings = host.port_bindings.unwrap();
        let binding = &bindings["8000/tcp"].as_ref().unwrap()[0];
        assert_eq!(binding.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(binding.host_port.as_deref(), Some(""), "ephemeral");
        let cmd = body(&config, Reach::HostPort(4321)).cmd.unwrap();
        assert_eq!(cmd[..4], ["--host", "127.0.0.1", "--port", "4321"]);
    }

    #[test]
    fn a_read_only_root_keeps_the_work_dir_and_tmp_writable() {
        let config = DockerConfig {
            image: "img".into(),
            read_only_root: true,
            ..DockerConfig::default()
        };
        let body = body(&config, Reach::Relay);
        let host = body.host_config.unwrap();
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(body.user, None, "the image's user by default");
        let tmpfs = host.tmpfs.unwrap();
        assert!(tmpfs.contains_key("/work") && tmpfs.contains_key("/tmp"));
        assert!(
            tmpfs["/tmp"].ends_with(&format!("size={}", 1u64 << 30)),
            "{tmpfs:?}"
        );
    }
}
