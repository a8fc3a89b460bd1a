//! The image a sandbox starts from: the configured image with the payload (server, toolbox)
//! added as one committed layer.
//!
//! The payload is uploaded through the Docker API (a tar archive, no bind mounts). The first
//! sandbox a process starts from an image gets it uploaded into its own container before it
//! starts (tens of milliseconds): an image used once, as each SWE-bench instance's is when
//! grading, never pays for a commit. From the second start on, the payload goes into a
//! created, never started container, which is committed as `uniagent-sandbox-payload:<key>`,
//! the key hashing the base image id and the payload files' paths, sizes and modification
//! times. Every later sandbox of that image starts from the committed image, so 64 starts copy
//! the binaries twice instead of 64 times. A read-only root cannot be uploaded into: it always
//! starts from the committed image.
//!
//! Each payload image records which files it was built from (labels [`LABEL_PAYLOAD_FILES`] and
//! [`LABEL_PAYLOAD_STAMP`]). Once those files change (a rebuilt binary) or disappear, nobody can
//! ask for that image again: [`prune_payload_images`] removes such images after every new
//! commit and in `uniagent-docker cleanup`, leaving the ones a container still uses.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CommitContainerOptions, CreateContainerOptions, ListImagesOptions, RemoveImageOptions,
    UploadToContainerOptions,
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
/// Label of a payload image: the host paths of the files it holds, as a JSON array.
pub const LABEL_PAYLOAD_FILES: &str = "dev.uniagent.payload-files";
/// Label of a payload image: hash (hex) of those files' sizes and modification times when it
/// was built.
pub const LABEL_PAYLOAD_STAMP: &str = "dev.uniagent.payload-stamp";

/// Serializes commits in this process.
static BUILDING: Mutex<()> = Mutex::const_new(());

/// Payload keys this process has started a container for without a committed image.
static UPLOADED_ONCE: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// Where a new container gets the payload from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PayloadSource {
    /// A committed payload image: the container starts from it.
    Image(String),
    /// Nothing committed yet: the container starts from the base image and the payload is
    /// uploaded into it before it starts.
    Upload,
}

/// Where a container of `base_id` gets `payload` from: the committed image when it exists;
/// else, the first time this process starts that image (and the root is writable), an upload
/// into the container; else the image, committed now.
///
/// Committing costs seconds, worth it only for an image that starts again: the sandboxes of a
/// rollout run share a few images, while grading SWE-bench starts each instance's image once.
/// So the first start uploads (tens of milliseconds) and the second commits.
pub(crate) async fn payload_source(
    docker: &Docker,
    base_id: &str,
    payload: &Payload,
    read_only_root: bool,
    labels: HashMap<String, String>,
) -> Result<PayloadSource> {
    let key = cache_key(base_id, payload)?;
    let tag = payload_tag(key);
    if image_exists(docker, &tag).await? {
        return Ok(PayloadSource::Image(tag));
    }
    if !read_only_root {
        let mut uploaded = UPLOADED_ONCE.lock().unwrap_or_else(|e| e.into_inner());
        if !uploaded.contains(&key) {
            uploaded.push(key);
            return Ok(PayloadSource::Upload);
        }
    }
    // Committing: `payload_image` looks again under its lock (a concurrent start may have
    // committed it meanwhile).
    payload_image(docker, base_id, payload, labels)
        .await
        .map(PayloadSource::Image)
}

/// Copies `payload` into the created, not yet started container `name`.
pub(crate) async fn upload_payload(docker: &Docker, name: &str, payload: &Payload) -> Result<()> {
    super::engine::count_call();
    docker
        .upload_to_container(
            name,
            Some(UploadToContainerOptions {
                path: "/".into(),
                ..Default::default()
            }),
            bollard::body_full(payload.archive()?.into()),
        )
        .await
        .map_err(|e| docker_error("copying the sandbox server into the container", e))
}

fn payload_tag(key: u64) -> String {
    format!("{PAYLOAD_REPO}:{key:016x}")
}

/// The tag of `base_id` + `payload`, committed when missing.
///
/// The tag is looked up on every start rather than remembered: another process may have pruned
/// it since (its binary was rebuilt in a shared target directory), and a start must then
/// commit it again rather than fail on a missing image.
pub(crate) async fn payload_image(
    docker: &Docker,
    base_id: &str,
    payload: &Payload,
    labels: HashMap<String, String>,
) -> Result<String> {
    let tag = payload_tag(cache_key(base_id, payload)?);
    if image_exists(docker, &tag).await? {
        return Ok(tag);
    }
    // One build at a time in this process (the others find it done); other processes may
    // race, which only commits the same content twice.
    let _one_at_a_time = BUILDING.lock().await;
    if image_exists(docker, &tag).await? {
        return Ok(tag);
    }
    let mut labels = labels;
    labels.extend(payload_labels(payload)?);
    commit(docker, base_id, payload, &tag, labels).await?;
    // A new payload usually means a rebuilt binary: the images of the old one are garbage now.
    match prune_payload_images(docker).await {
        Ok(removed) if !removed.is_empty() => {
            tracing::info!(count = removed.len(), "removed stale payload images")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not prune stale payload images"),
    }
    Ok(tag)
}

/// The preflight of a docker config: the daemon answers and the image is local (or `pull` is
/// set, and the start will pull it).
pub(crate) async fn preflight_image(config: &super::DockerConfig) -> Result<()> {
    let docker = super::engine().await?;
    if config.pull || image_exists(&docker, &config.image).await? {
        return Ok(());
    }
    Err(Error::config(format!(
        "docker image `{}` does not exist locally; build it (scripts/build-sandbox-image.sh) or set docker.pull = true",
        config.image
    )))
}

pub(crate) async fn image_exists(docker: &Docker, tag: &str) -> Result<bool> {
    super::engine::count_call();
    match docker.inspect_image(tag).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(docker_error(&format!("inspecting `{tag}`"), e)),
    }
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
    super::engine::count_call();
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
    upload_payload(docker, &name, payload).await?;
    let (repo, tag_part) = tag.split_once(':').unwrap_or((tag, "latest"));
    super::engine::count_call();
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
    files_stamp(&payload_files(payload))
        .map_err(|(path, e)| Error::io(format!("reading {path}"), e))?
        .hash(&mut hasher);
    Ok(hasher.finish())
}

fn payload_files(payload: &Payload) -> Vec<String> {
    std::iter::once(&payload.server)
        .chain(payload.toolbox.iter())
        .map(|p| p.display().to_string())
        .collect()
}

/// Hash of each file's path, size and modification time; `Err((path, error))` when one cannot
/// be read.
fn files_stamp(files: &[String]) -> std::result::Result<u64, (String, std::io::Error)> {
    let mut hasher = DefaultHasher::new();
    for path in files {
        let meta = std::fs::metadata(path).map_err(|e| (path.clone(), e))?;
        path.hash(&mut hasher);
        meta.len().hash(&mut hasher);
        meta.modified().ok().hash(&mut hasher);
    }
    Ok(hasher.finish())
}

/// The labels recording which files a payload image was built from.
fn payload_labels(payload: &Payload) -> Result<HashMap<String, String>> {
    let files = payload_files(payload);
    let stamp = files_stamp(&files).map_err(|(path, e)| Error::io(format!("reading {path}"), e))?;
    let files = serde_json::to_string(&files)
        .map_err(|e| Error::internal(format!("encoding the payload file list: {e}")))?;
    Ok(HashMap::from([
        (LABEL_PAYLOAD_FILES.to_owned(), files),
        (LABEL_PAYLOAD_STAMP.to_owned(), format!("{stamp:016x}")),
    ]))
}

/// Whether a payload image with these labels can never be asked for again: the files it was
/// built from changed or are gone. Images without the labels (or with unreadable ones) are
/// kept.
fn is_stale_payload(labels: &HashMap<String, String>) -> bool {
    let (Some(files), Some(stamp)) = (
        labels.get(LABEL_PAYLOAD_FILES),
        labels.get(LABEL_PAYLOAD_STAMP),
    ) else {
        return false;
    };
    let Ok(files) = serde_json::from_str::<Vec<String>>(files) else {
        return false;
    };
    match files_stamp(&files) {
        Ok(now) => format!("{now:016x}") != *stamp,
        Err((_, e)) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Removes this backend's payload images (`uniagent-sandbox-payload:*`, labelled
/// [`LABEL_MANAGED`]) whose binaries were rebuilt or deleted since (see the module docs).
/// Images a container still uses are left; returns the removed tags.
pub async fn prune_payload_images(docker: &Docker) -> Result<Vec<String>> {
    super::engine::count_call();
    let images = docker
        .list_images(Some(ListImagesOptions {
            filters: Some(HashMap::from([
                ("label".to_owned(), vec![format!("{LABEL_MANAGED}=true")]),
                ("reference".to_owned(), vec![format!("{PAYLOAD_REPO}:*")]),
            ])),
            ..Default::default()
        }))
        .await
        .map_err(|e| docker_error("listing payload images", e))?;
    let mut removed = Vec::new();
    for image in images {
        if !is_stale_payload(&image.labels) {
            continue;
        }
        for tag in image
            .repo_tags
            .iter()
            .filter(|t| t.starts_with(&format!("{PAYLOAD_REPO}:")))
        {
            super::engine::count_call();
            match docker
                .remove_image(tag, None::<RemoveImageOptions>, None)
                .await
            {
                Ok(_) => removed.push(tag.clone()),
                // In use by a container (409) or removed meanwhile (404): not ours to force.
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404 | 409,
                    ..
                }) => {}
                Err(e) => return Err(docker_error(&format!("removing image `{tag}`"), e)),
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_image_is_stale_once_its_files_change_or_vanish() {
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join("uniagent-sandbox");
        std::fs::write(&server, b"v1").unwrap();
        let payload = Payload {
            server: server.clone(),
            toolbox: None,
        };
        let labels = payload_labels(&payload).unwrap();
        assert!(!is_stale_payload(&labels), "the files are as built");
        std::fs::write(&server, b"v2, longer").unwrap();
        assert!(is_stale_payload(&labels), "rebuilt");
        std::fs::remove_file(&server).unwrap();
        assert!(is_stale_payload(&labels), "deleted");
        assert!(
            !is_stale_payload(&HashMap::new()),
            "unlabelled images are kept"
        );
    }
}
