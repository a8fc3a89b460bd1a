//! What a pod becomes as a Docker container: the pod spec read as a kubelet reads it, without
//! Docker calls (unit-tested on the pods the backend's own templates produce).
//!
//! Covered: the first container's image, `command`/`args` (entrypoint and cmd), `workingDir`,
//! `env` (plain values and the downward API's name, namespace and pod IP), `resources.limits`
//! (cpu, memory), `ports` (published on the pod's address), `allowPrivilegeEscalation`, and the
//! volumes it mounts: a ConfigMap's keys become files, and an `emptyDir` receives what the init
//! containers put there. The one init container the fake runs is the carrier's copy,
//! `/bin/cp /uniagent-sandbox DEST`: DEST gets the fake's server binary. Anything else is an
//! error naming it (a pod the fake cannot run faithfully is not run at all).

use std::net::Ipv4Addr;

use serde_json::Value;

/// The file the carrier image holds the server in.
pub(crate) const CARRIER_SERVER: &str = "/uniagent-sandbox";

/// A file to put into the container before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileSource {
    /// These bytes.
    Bytes(Vec<u8>),
    /// The fake's `uniagent-sandbox` binary (read when the archive is built).
    ServerBinary,
}

/// One file of the container's volumes, by absolute path in the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlannedFile {
    pub(crate) path: String,
    pub(crate) source: FileSource,
    pub(crate) mode: u32,
}

/// The container one pod runs as.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ContainerPlan {
    pub(crate) image: String,
    pub(crate) entrypoint: Option<Vec<String>>,
    pub(crate) cmd: Option<Vec<String>>,
    pub(crate) working_dir: Option<String>,
    pub(crate) env: Vec<String>,
    pub(crate) memory_bytes: Option<i64>,
    pub(crate) nano_cpus: Option<i64>,
    /// Container ports (TCP), each published on the pod's address under the same number.
    pub(crate) ports: Vec<u16>,
    pub(crate) no_new_privileges: bool,
    pub(crate) files: Vec<PlannedFile>,
}

/// A ConfigMap by namespace and name, as the store holds it.
pub(crate) type ConfigMaps<'a> = &'a dyn Fn(&str, &str) -> Option<Value>;

/// The container for `pod` at `ip`, or why the fake cannot run it.
pub(crate) fn plan(
    pod: &Value,
    ip: Ipv4Addr,
    config_maps: ConfigMaps<'_>,
) -> Result<ContainerPlan, String> {
    let spec = &pod["spec"];
    let container = spec["containers"]
        .get(0)
        .ok_or("the pod has no containers")?;
    let image = container["image"]
        .as_str()
        .filter(|i| !i.is_empty())
        .ok_or("the pod's container names no image")?
        .to_string();
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array().map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
    };
    let entrypoint = strings(&container["command"]);
    // As in Kubernetes: a `command` without `args` drops the image's CMD too.
    let cmd = strings(&container["args"]).or_else(|| entrypoint.as_ref().map(|_| Vec::new()));
    let env = environment(pod, container, ip)?;
    let limits = &container["resources"]["limits"];
    let memory_bytes = match limits["memory"].as_str() {
        Some(q) => Some(quantity(q).ok_or(format!("cannot read memory limit `{q}`"))? as i64),
        None => None,
    };
    let nano_cpus = match limits["cpu"].as_str() {
        Some(q) => Some((quantity(q).ok_or(format!("cannot read cpu limit `{q}`"))? * 1e9) as i64),
        None => None,
    };
    let ports = container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["protocol"].as_str().unwrap_or("TCP") == "TCP")
        .filter_map(|p| p["containerPort"].as_u64())
        .filter_map(|p| u16::try_from(p).ok())
        .collect();
    let files = volume_files(pod, container, config_maps)?;
    Ok(ContainerPlan {
        image,
        entrypoint,
        cmd,
        working_dir: container["workingDir"].as_str().map(str::to_string),
        env,
        memory_bytes,
        nano_cpus,
        ports,
        no_new_privileges: container["securityContext"]["allowPrivilegeEscalation"] == false,
        files,
    })
}

fn environment(pod: &Value, container: &Value, ip: Ipv4Addr) -> Result<Vec<String>, String> {
    let mut env = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().ok_or("an env var without a name")?;
        let value = if let Some(value) = var["value"].as_str() {
            value.to_string()
        } else if let Some(field) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match field {
                "metadata.name" => pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
                "metadata.namespace" => pod["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                "status.podIP" => ip.to_string(),
                other => {
                    return Err(format!(
                        "env {name}: the fake does not resolve field `{other}`"
                    ))
                }
            }
        } else if var["valueFrom"].is_object() {
            return Err(format!(
                "env {name}: the fake resolves only plain values and fieldRef"
            ));
        } else {
            String::new()
        };
        env.push(format!("{name}={value}"));
    }
    Ok(env)
}

/// The files the container's volume mounts show it: ConfigMap keys, and what the init
/// containers copy into shared `emptyDir`s.
fn volume_files(
    pod: &Value,
    container: &Value,
    config_maps: ConfigMaps<'_>,
) -> Result<Vec<PlannedFile>, String> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let volumes = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name).cloned();
    // What the init containers wrote into each emptyDir, by volume name.
    let mut written: Vec<(String, PlannedFile)> = Vec::new();
    for init in pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let words: Vec<&str> = init["command"]
            .as_array()
            .into_iter()
            .chain(init["args"].as_array())
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let init_name = init["name"].as_str().unwrap_or("?");
        let dest = match words.as_slice() {
            ["/bin/cp" | "cp", CARRIER_SERVER, dest] => *dest,
            _ => {
                return Err(format!(
                    "init container {init_name} runs `{}`; the fake runs only the carrier's `/bin/cp {CARRIER_SERVER} DEST`",
                    words.join(" ")
                ))
            }
        };
        let (mount, relative) = mount_of(init, dest).ok_or(format!(
            "init container {init_name} copies to {dest}, which no volume of it holds"
        ))?;
        written.push((
            mount["name"].as_str().unwrap_or("").to_string(),
            PlannedFile {
                path: relative,
                source: FileSource::ServerBinary,
                mode: 0o755,
            },
        ));
    }
    let mut files = Vec::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let name = mount["name"].as_str().unwrap_or("");
        let at = mount["mountPath"]
            .as_str()
            .unwrap_or("/")
            .trim_end_matches('/');
        let volume =
            volume(name).ok_or(format!("volume mount {name} names no volume of the pod"))?;
        if volume["emptyDir"].is_object() {
            for (_, file) in written.iter().filter(|(v, _)| v == name) {
                files.push(PlannedFile {
                    path: format!("{at}/{}", file.path),
                    ..file.clone()
                });
            }
        } else if let Some(map_name) = volume["configMap"]["name"].as_str() {
            let optional = volume["configMap"]["optional"] == true;
            let Some(map) = config_maps(namespace, map_name) else {
                if optional {
                    continue;
                }
                return Err(format!("configmap \"{map_name}\" not found"));
            };
            let data = map["data"].as_object().cloned().unwrap_or_default();
            let mode = volume["configMap"]["defaultMode"].as_u64().unwrap_or(0o644) as u32;
            let items: Vec<(String, String)> = match volume["configMap"]["items"].as_array() {
                Some(items) => items
                    .iter()
                    .map(|i| {
                        (
                            i["key"].as_str().unwrap_or("").to_string(),
                            i["path"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect(),
                None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
            };
            for (key, path) in items {
                let text = data
                    .get(&key)
                    .and_then(Value::as_str)
                    .ok_or(format!("configmap \"{map_name}\" has no key {key}"))?;
                files.push(PlannedFile {
                    path: format!("{at}/{}", path.trim_start_matches('/')),
                    source: FileSource::Bytes(text.as_bytes().to_vec()),
                    mode,
                });
            }
        } else {
            return Err(format!(
                "volume {name}: the fake mounts only emptyDir and configMap volumes"
            ));
        }
    }
    Ok(files)
}

/// The mount of `container` holding `path`, and `path` relative to it.
fn mount_of(container: &Value, path: &str) -> Option<(Value, String)> {
    container["volumeMounts"]
        .as_array()?
        .iter()
        .filter_map(|m| {
            let at = m["mountPath"].as_str()?.trim_end_matches('/');
            let rest = path.strip_prefix(at)?.strip_prefix('/')?;
            Some((at.len(), m.clone(), rest.to_string()))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, m, rest)| (m, rest))
}

/// A Kubernetes quantity as a number: `500m`, `2`, `256Mi`, `1G`, `268435456`, `1e3`.
pub(crate) fn quantity(text: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 15] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Pi", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Ei", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let text = text.trim();
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    text.parse::<f64>().ok().filter(|n| n.is_finite())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::k8s::{render, K8sConfig};

    /// A pod of the template the backend renders for `image`, as the controller makes one.
    fn rendered_pod(cfg: &K8sConfig, image: &str) -> Value {
        let rendered = render::template_and_pool(cfg, image).unwrap();
        let template = serde_json::to_value(&rendered.template).unwrap();
        json!({
            "metadata": {"name": "ua-pod-1", "namespace": "sandboxes"},
            "spec": template["spec"]["podTemplate"]["spec"].clone(),
        })
    }

    fn keys(namespace: &str, name: &str) -> Option<Value> {
        (namespace == "sandboxes" && name == "uniagent-sandbox-keys")
            .then(|| json!({"data": {"keys": "fake AAAA\n"}}))
    }

    #[test]
    fn the_backends_template_runs_the_installed_server_with_its_keys() {
        let cfg = K8sConfig {
            carrier_image: "carrier:1".into(),
            work_dir: "/testbed".into(),
            cpus: 0.5,
            memory_bytes: 256 << 20,
            ..K8sConfig::default()
        };
        let pod = rendered_pod(&cfg, "uniagent-swe-mini:task-1");
        let plan = plan(&pod, Ipv4Addr::new(127, 9, 0, 3), &keys).unwrap();
        assert_eq!(plan.image, "uniagent-swe-mini:task-1");
        let entrypoint = plan.entrypoint.clone().unwrap();
        assert_eq!(entrypoint, ["/uniagent/uniagent-sandbox"]);
        let cmd = plan.cmd.clone().unwrap();
        assert!(cmd.contains(&"--port=8000".to_string()), "{cmd:?}");
        assert!(
            cmd.contains(&"--auth-public-key-file=/etc/uniagent/keys/keys".to_string()),
            "{cmd:?}"
        );
        assert_eq!(plan.working_dir.as_deref(), Some("/testbed"));
        // The downward API gives the server its pod's name.
        assert_eq!(plan.env, ["UNIAGENT_SANDBOX_NAME=ua-pod-1"]);
        assert_eq!(plan.memory_bytes, Some(256 << 20));
        assert_eq!(plan.nano_cpus, Some(500_000_000));
        assert_eq!(plan.ports, [8000]);
        assert!(plan.no_new_privileges);
        // What the init container installs, and the ConfigMap's key, at the paths the
        // container's command reads them from.
        assert_eq!(
            plan.files,
            [
                PlannedFile {
                    path: entrypoint[0].clone(),
                    source: FileSource::ServerBinary,
                    mode: 0o755,
                },
                PlannedFile {
                    path: "/etc/uniagent/keys/keys".into(),
                    source: FileSource::Bytes(b"fake AAAA\n".to_vec()),
                    mode: 0o644,
                },
            ]
        );
    }

    #[test]
    fn what_the_fake_cannot_run_faithfully_is_an_error_naming_it() {
        let cfg = K8sConfig {
            carrier_image: "carrier:1".into(),
            ..K8sConfig::default()
        };
        let pod = rendered_pod(&cfg, "img:1");
        let ip = Ipv4Addr::LOCALHOST;
        let err = plan(&pod, ip, &|_: &str, _: &str| None).unwrap_err();
        assert!(
            err.contains("configmap \"uniagent-sandbox-keys\" not found"),
            "{err}"
        );

        let mut other_init = pod.clone();
        other_init["spec"]["initContainers"][0]["command"] = json!(["sh", "-c", "true"]);
        let err = plan(&other_init, ip, &keys).unwrap_err();
        assert!(err.contains("runs `sh -c true`"), "{err}");

        let mut secret = pod.clone();
        secret["spec"]["volumes"][1] = json!({"name": "keys", "secret": {"secretName": "k"}});
        let err = plan(&secret, ip, &keys).unwrap_err();
        assert!(err.contains("only emptyDir and configMap"), "{err}");

        let mut no_image = pod;
        no_image["spec"]["containers"][0]["image"] = json!("");
        assert!(plan(&no_image, ip, &keys).unwrap_err().contains("no image"));
    }

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(quantity("500m"), Some(0.5));
        assert_eq!(quantity("2"), Some(2.0));
        assert_eq!(quantity("256Mi"), Some(268_435_456.0));
        assert_eq!(quantity("1G"), Some(1e9));
        assert_eq!(quantity("268435456"), Some(268_435_456.0));
        assert_eq!(quantity("1e3"), Some(1000.0));
        assert_eq!(quantity("lots"), None);
        assert_eq!(quantity("NaN"), None);
    }
}
