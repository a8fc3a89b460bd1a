//! The template and warm pool of an image, applied once per process: server-side apply with
//! the field manager `uniagent`, so reruns with the same settings change nothing and another
//! worker applying the same objects does not conflict.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

use kube::api::{Patch, PatchParams};
use kube::Api;
use uniagent_core::Result;

use super::client::Connection;
use super::crd::{SandboxTemplate, SandboxWarmPool};
use super::render::template_and_pool;
use super::K8sConfig;

/// The field manager of everything the backend applies.
pub(super) const FIELD_MANAGER: &str = "uniagent";

/// The warm pool a claim for `image` names: with `manage_templates`, the template and pool are
/// applied first (once per process and name); otherwise the configured `template`.
pub(super) async fn pool_for(
    conn: &Connection,
    cfg: &K8sConfig,
    image: &str,
    deadline: tokio::time::Instant,
) -> Result<String> {
    if !cfg.manage_templates {
        return Ok(cfg.template.clone().unwrap_or_default());
    }
    static APPLIED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let rendered = template_and_pool(cfg, image)?;
    let key = format!(
        "{}|{}|{}|{}",
        conn.config.cluster_url, cfg.namespace, rendered.name, cfg.warm
    );
    let applied = APPLIED.get_or_init(Default::default);
    if applied
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(&key)
    {
        return Ok(rendered.name);
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let template_patch = Patch::Apply(&rendered.template);
    let pool_patch = Patch::Apply(&rendered.pool);
    let templates: Api<SandboxTemplate> = Api::namespaced(conn.client.clone(), &cfg.namespace);
    conn.call_retrying(
        "apply",
        "sandboxtemplates",
        &cfg.namespace,
        &cfg.retry,
        deadline,
        || templates.patch(&rendered.name, &params, &template_patch),
    )
    .await
    .map_err(|(_, e)| e)?;
    let pools: Api<SandboxWarmPool> = Api::namespaced(conn.client.clone(), &cfg.namespace);
    conn.call_retrying(
        "apply",
        "sandboxwarmpools",
        &cfg.namespace,
        &cfg.retry,
        deadline,
        || pools.patch(&rendered.name, &params, &pool_patch),
    )
    .await
    .map_err(|(_, e)| e)?;
    applied
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key);
    Ok(rendered.name)
}
