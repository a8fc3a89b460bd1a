//! After a restart: the pool's containers are found by label and reached again; each becomes a
//! lease with `max_ttl` to be renewed (its last renewal is not in the labels, and labels cannot
//! change), so the leases of live clients survive and abandoned ones are reaped. Containers
//! that cannot be reached again are removed.

use std::collections::HashMap;
use std::time::Instant;

use bollard::query_parameters::ListContainersOptions;
use uniagent_core::Result;

use super::sandbox::{pool_error, Sandbox};
use super::table::Held;
use super::Pool;
use crate::docker::reaper::remove_container;
use crate::leases::{LABEL_IMAGE, LABEL_LEASE, LABEL_POOL};

pub(super) async fn recover(pool: &Pool) -> Result<()> {
    let docker = &pool.inner.docker;
    let config = &pool.inner.config;
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("{LABEL_POOL}={}", config.name)],
        )])),
        ..Default::default()
    };
    let found = docker
        .list_containers(Some(options))
        .await
        .map_err(|e| pool_error(format!("listing the pool's containers: {e}")))?;
    let (mut recovered, mut removed) = (0usize, 0usize);
    for container in found {
        let Some(container_id) = container.id else {
            continue;
        };
        let labels = container.labels.unwrap_or_default();
        let lease = labels.get(LABEL_LEASE).cloned();
        let image = labels
            .get(LABEL_IMAGE)
            .filter(|image| config.image(image).is_some())
            .cloned();
        let attached = match (lease, image) {
            (Some(id), Some(image)) => Sandbox::attach(docker, id, container_id.clone())
                .await
                .map(|sandbox| (sandbox, image)),
            _ => Err(pool_error(
                "no lease label or an image this pool no longer serves",
            )),
        };
        match attached {
            Ok((sandbox, image)) => {
                let now = Instant::now();
                let held = Held {
                    image,
                    client: None,
                    ttl: config.max_ttl,
                    expires: now + config.max_ttl,
                    recovered: true,
                    warm: false,
                    sandbox,
                };
                pool.table().leases.insert(held.sandbox.id.clone(), held);
                recovered += 1;
            }
            Err(e) => {
                tracing::info!(container = %container_id, reason = %e, "removing a container the pool cannot recover");
                if let Err(e) = remove_container(docker, &container_id).await {
                    tracing::warn!(container = %container_id, error = %e, "could not remove it");
                }
                removed += 1;
            }
        }
    }
    if recovered + removed > 0 {
        tracing::info!(
            recovered,
            removed,
            "recovered the sandboxes of a previous run"
        );
    }
    Ok(())
}
