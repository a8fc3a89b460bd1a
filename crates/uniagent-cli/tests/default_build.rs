//! What a default build of `uniagent` lacks, it says so: features that are off are refused
//! with an error naming the feature, before anything starts. Runs in `scripts/test`'s
//! default-features step (`cargo test -p uniagent-cli --test default_build`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

/// `reach: port_forward` of the k8s backend needs `k8s-port-forward`, which the default
/// build leaves out: the run stops in its preflight, before any claim or chat completion
/// (the model server is up, so its own preflight passes).
#[cfg(all(feature = "k8s", not(feature = "k8s-port-forward")))]
#[test]
fn k8s_port_forward_needs_its_feature() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let responder: common::Responder =
        std::sync::Arc::new(|_: &serde_json::Value| serde_json::json!({"content": "hi"}));
    let server = rt.block_on(common::ChatServer::start(responder));
    let dir = tempfile::tempdir().unwrap();
    common::write(
        dir.path(),
        "tasks.jsonl",
        "{\"id\": \"t1\", \"metadata\": {\"prompt\": \"hi\"}}\n",
    );
    let key = common::write(dir.path(), "key.pem", "not a key");
    let config = [
        "tasks: {path: tasks.jsonl}".to_owned(),
        "environment:".to_owned(),
        "  type: command".to_owned(),
        "  reward: {command: \"true\"}".to_owned(),
        "  sandbox:".to_owned(),
        "    type: k8s".to_owned(),
        "    image: \"python:3.12-slim\"".to_owned(),
        "    carrier_image: carrier:1".to_owned(),
        "    reach: port_forward".to_owned(),
        "    api_url: http://127.0.0.1:9".to_owned(),
        format!("    signing_key_file: {}", key.display()),
        format!(
            "model: {{type: openai, http: {{endpoints: [\"{}\"], model: m}}}}",
            server.base_url
        ),
    ]
    .join("\n");
    common::write(dir.path(), "run.yaml", &config);
    let out = dir.path().join("out").display().to_string();
    let o = common::run_in(dir.path(), &["run", "run.yaml", "--out", &out, "--quiet"]);
    let err = common::stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("k8s-port-forward"), "{err}");
    assert!(server.requests.lock().unwrap().is_empty());
}
