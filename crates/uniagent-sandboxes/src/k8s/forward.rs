//! `reach: port_forward`: a local listener per sandbox whose every connection is forwarded to the
//! pod's server port through the API server (`pods/portforward`, kube's WebSocket client), as
//! `kubectl port-forward` does. Dropping it closes the listener and every forwarded connection.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use uniagent_core::{Error, Result};

use super::client::Connection;
use super::render::SERVER_PORT;

/// A running port-forward of one pod's server port.
#[derive(Debug)]
pub(super) struct PortForward {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl PortForward {
    /// Listens on a free loopback port and forwards each connection to `pod`'s server port.
    pub(super) async fn start(conn: &Connection, namespace: &str, pod: &str) -> Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| Error::internal(format!("k8s port-forward: cannot listen: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::internal(format!("k8s port-forward: {e}")))?;
        let pods: Api<Pod> = Api::namespaced(conn.client.clone(), namespace);
        let pod = pod.to_owned();
        let timeout = conn.api_timeout;
        let task = tokio::spawn(async move {
            // Aborting this task drops the set, which aborts every forwarded connection.
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((mut local, _)) = accepted else {
                            // Out of descriptors, say: wait rather than spin.
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        };
                        let (pods, pod) = (pods.clone(), pod.clone());
                        connections.spawn(async move {
                            let opened =
                                tokio::time::timeout(timeout, pods.portforward(&pod, &[SERVER_PORT])).await;
                            let mut forwarder = match opened {
                                Ok(Ok(forwarder)) => forwarder,
                                // The client sees the connection close and retries or fails
                                // with its own transport error.
                                Ok(Err(error)) => {
                                    tracing::warn!(%pod, %error, "k8s port-forward failed");
                                    return;
                                }
                                Err(_) => {
                                    tracing::warn!(%pod, "k8s port-forward: no answer within {timeout:?}");
                                    return;
                                }
                            };
                            if let Some(mut remote) = forwarder.take_stream(SERVER_PORT) {
                                let _ = tokio::io::copy_bidirectional(&mut local, &mut remote).await;
                            }
                            forwarder.abort();
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(Self { addr, task })
    }

    /// The base URL of the forwarded server.
    pub(super) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        self.task.abort();
    }
}
