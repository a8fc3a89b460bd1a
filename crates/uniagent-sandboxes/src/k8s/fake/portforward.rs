//! `GET /api/v1/namespaces/{ns}/pods/{name}/portforward?ports=P`: the pod port-forward
//! subresource over a WebSocket with the `v4.channel.k8s.io` subprotocol, as kubectl and kube-rs
//! speak it. One port per request (kube asks for the ports it forwards); channel 0 carries the
//! port's bytes and channel 1 its errors, each opened by a frame holding the port (2 bytes,
//! little-endian), every later frame being the channel byte followed by data.

use std::net::IpAddr;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::api::{error_response, ApiState};
use super::store::{ApiError, Resource};

/// The only subprotocol offered (kube-rs asks for v5, then v4).
const PROTOCOL: &str = "v4.channel.k8s.io";
/// How long connecting to the pod's port may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const DATA: u8 = 0;
const ERROR: u8 = 1;

/// The handler of the portforward subresource.
pub(crate) async fn portforward(
    State(state): State<ApiState>,
    Path((namespace, name)): Path<(String, String)>,
    Query(params): Query<std::collections::HashMap<String, String>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match target(&state, &namespace, &name, &params) {
        Err(error) => error_response(&error),
        Ok((ip, port)) => match upgrade {
            Err(rejection) => error_response(&ApiError::bad_request(format!(
                "portforward needs a WebSocket upgrade (v4.channel.k8s.io): {rejection}"
            ))),
            Ok(upgrade) => upgrade
                .protocols([PROTOCOL])
                .on_upgrade(move |socket| forward(socket, ip, port))
                .into_response(),
        },
    }
}

/// The pod's IP and the one port asked for.
fn target(
    state: &ApiState,
    namespace: &str,
    name: &str,
    params: &std::collections::HashMap<String, String>,
) -> Result<(IpAddr, u16), ApiError> {
    if let Some(error) = state
        .faults
        .on_request("create", "pods/portforward", namespace)
    {
        return Err(error);
    }
    let ports: Vec<&str> = params
        .get("ports")
        .map(|p| p.split(',').filter(|p| !p.is_empty()).collect())
        .unwrap_or_default();
    let port = match ports.as_slice() {
        [one] => one
            .trim()
            .parse::<u16>()
            .map_err(|_| ApiError::bad_request(format!("invalid port {one:?}")))?,
        [] => return Err(ApiError::bad_request("at least one port must be given")),
        _ => {
            return Err(ApiError::bad_request(
                "the fake API server forwards one port per request",
            ))
        }
    };
    let pod = state
        .store
        .get(Resource::Pods, namespace, name)
        .ok_or_else(|| ApiError::not_found(Resource::Pods, name))?;
    let ip = pod["status"]["podIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| {
            ApiError::bad_request(format!("pod {name} does not have a host assigned"))
        })?;
    Ok((ip, port))
}

/// Bridges the WebSocket and a TCP connection to `ip:port` until either side ends.
async fn forward(mut socket: WebSocket, ip: IpAddr, port: u16) {
    let [lo, hi] = port.to_le_bytes();
    for channel in [DATA, ERROR] {
        if socket
            .send(Message::Binary(vec![channel, lo, hi].into()))
            .await
            .is_err()
        {
            return;
        }
    }
    let connected =
        tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect((ip, port))).await;
    let tcp = match connected {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return fail(socket, port, &e.to_string()).await,
        Err(_) => return fail(socket, port, "connection timed out").await,
    };
    let (mut from_pod, mut to_pod) = tcp.into_split();
    let (mut sink, mut stream) = socket.split();
    let to_pod_loop = async {
        while let Some(Ok(message)) = stream.next().await {
            match message {
                Message::Binary(bytes)
                    if bytes.first() == Some(&DATA)
                        && to_pod.write_all(&bytes[1..]).await.is_err() =>
                {
                    return
                }
                Message::Close(_) => return,
                _ => {}
            }
        }
    };
    let from_pod_loop = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_pod.read(&mut buf[1..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf[0] = DATA;
            if sink
                .send(Message::Binary(buf[..=n].to_vec().into()))
                .await
                .is_err()
            {
                return;
            }
        }
    };
    tokio::select! {
        () = to_pod_loop => {}
        () = from_pod_loop => {}
    }
    let _ = sink.send(Message::Close(None)).await;
}

/// Reports a failed connection on the error channel, as the kubelet does, and closes.
async fn fail(mut socket: WebSocket, port: u16, why: &str) {
    let mut frame = vec![ERROR];
    frame.extend_from_slice(format!("error forwarding port {port} to pod: {why}").as_bytes());
    let _ = socket.send(Message::Binary(frame.into())).await;
    let _ = socket.send(Message::Close(None)).await;
}
