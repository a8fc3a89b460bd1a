//! The isolated network used when `network: none`: an internal bridge (no gateway route, no
//! NAT) with inter-container traffic disabled, created once and shared by every sandbox.
//!
//! Why not Docker's `none` network: a container there has only loopback, so the host could not
//! reach the server without a relay process inside the container. On an internal bridge the
//! container has an address the host can connect to, while the container has no default route
//! (connecting anywhere outside the subnet fails with "Network is unreachable") and, with ICC
//! off, cannot reach the other sandboxes either. The one address it can reach is the host's end
//! of the bridge; services that listen on all interfaces of the host are therefore reachable
//! from the sandbox (bind host services to 127.0.0.1, or use a firewall rule on the bridge).

use std::collections::HashMap;

use bollard::models::NetworkCreateRequest;
use bollard::Docker;
use tokio::sync::Mutex;
use uniagent_core::Result;

use super::engine::{docker_error, is_not_found};
use super::labels::LABEL_MANAGED;

/// The name of the shared internal network.
pub const ISOLATED_NETWORK: &str = "uniagent-isolated";

static CREATING: Mutex<()> = Mutex::const_new(());

/// The id of [`ISOLATED_NETWORK`], created when missing.
pub(crate) async fn isolated_network(docker: &Docker) -> Result<String> {
    let _one_at_a_time = CREATING.lock().await;
    match docker
        .inspect_network(
            ISOLATED_NETWORK,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
    {
        Ok(network) => {
            if network.internal != Some(true) {
                return Err(super::engine::sandbox_error(format!(
                    "network `{ISOLATED_NETWORK}` exists but is not internal; remove it \
                     (`docker network rm {ISOLATED_NETWORK}`) so it is recreated isolated"
                )));
            }
            return Ok(network.id.unwrap_or_else(|| ISOLATED_NETWORK.into()));
        }
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(docker_error("inspecting the isolated network", e)),
    }
    let request = NetworkCreateRequest {
        name: ISOLATED_NETWORK.into(),
        driver: Some("bridge".into()),
        internal: Some(true),
        attachable: Some(true),
        options: Some(HashMap::from([
            (
                "com.docker.network.bridge.enable_icc".into(),
                "false".into(),
            ),
            (
                "com.docker.network.bridge.enable_ip_masquerade".into(),
                "false".into(),
            ),
        ])),
        labels: Some(HashMap::from([(LABEL_MANAGED.into(), "true".into())])),
        ..Default::default()
    };
    let created = docker
        .create_network(request)
        .await
        .map_err(|e| docker_error("creating the isolated network", e))?;
    Ok(created.id)
}
