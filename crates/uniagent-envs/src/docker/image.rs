//! The image a sandbox starts from: the configured image with the payload (server, toolbox)
//! added as one committed layer.
//!
//! The payload is uploaded through the Docker API (a tar archive, no bind mounts) into a
//! created, never started container, which is committed as `uniagent-sandbox-payload:<key>`,
//! the key hashing the base image id and the payload files' paths, sizes and modification
//! times. Every later sandbox of that image starts from the committed image, so 64 starts copy
//! the binaries once instead of 64 times, and a read-only root needs no writable place for
//! them.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CommitContainerOptions, CreateContainerOptions, UploadToContainerOptions,
};
use bollard::Docker;
use tokio::sync::Mutex;
use uniagent_core::{Error, Result};

use super::engine::{docker_error, is_not_found};
use super::guard::ContainerGuard;
use super::labels::{random_hex, LABEL_MANAGED};
use super::payload::Payload;

/// The repository of committed payload images.
pub const PAYLOAD_REPO: &str = "uniagent-sandbox-payload";

static BUILDING: Mutex<Option<HashMap<u64, String>>> = Mutex::const_new(None);

/// The tag of `base_id` + `payload`, committed when missing.
pub(crate) async fn payload_image(
    docker: &Docker,
    base_id: &str,
    payload: &Payload,
    labels: HashMap<String, String>,
) -> Result<String> {
    let key = cache_key(base_id, payload)?;
    let tag = format!("{PAYLOAD_REPO}:{key:016x}");
    // One build per key at a time in this process; other processes may race, which only
    // commits the same content twice.
    let mut built = BUILDING.lock().await;
    if built.get_or_insert_with(HashMap::new).contains_key(&key) {
        return Ok(tag);
    }
    match docker.inspect_image(&tag).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => commit(docker, base_id, payload, &tag, labels).await?,
        Err(e) => return Err(docker_error(&format!("inspecting `{tag}`"), e)),
    }
    built
        .get_or_insert_with(HashMap::new)
        .insert(key, tag.clone());
    Ok(tag)
}

async fn commit(
    docker: &Docker,
    base_id: &str,
    payload: &Payload,
    tag: &str,
    labels: HashMap<String, String>,
) -> Result<()> {
    let name = format!("uniagent-build-{}", random_hex(8));
    let guard = ContainerGuard::new(name.clone());
    docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.clone()),
                ..Default::default()
            }),
            ContainerCreateBody {
                image: Some(base_id.to_owned()),
                labels: Some(labels),
                network_disabled: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| docker_error("creating the payload build container", e))?;
    docker
        .upload_to_container(
            &name,
            Some(UploadToContainerOptions {
                path: "/".into(),
                ..Default::default()
            }),
            bollard::body_full(payload.archive()?.into()),
        )
        .await
        .map_err(|e| docker_error("copying the sandbox server into the image", e))?;
    let (repo, tag_part) = tag.split_once(':').unwrap_or((tag, "latest"));
    docker
        .commit_container(
            CommitContainerOptions {
                container: Some(name.clone()),
                repo: Some(repo.to_owned()),
                tag: Some(tag_part.to_owned()),
                comment: Some("uniagent sandbox payload".into()),
                changes: Some(format!("LABEL {LABEL_MANAGED}=true")),
                pause: false,
                ..Default::default()
            },
            bollard::models::ContainerConfig::default(),
        )
        .await
        .map_err(|e| docker_error("committing the payload image", e))?;
    guard.remove(docker).await
}

/// Hash of the base image id and the payload files' identity (path, size, mtime).
fn cache_key(base_id: &str, payload: &Payload) -> Result<u64> {
    let mut hasher = DefaultHasher::new();
    base_id.hash(&mut hasher);
    for path in std::iter::once(&payload.server).chain(payload.toolbox.iter()) {
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        path.hash(&mut hasher);
        meta.len().hash(&mut hasher);
        meta.modified().ok().hash(&mut hasher);
    }
    Ok(hasher.finish())
}
