//! The official `openai` Python SDK (pinned, `.venv-gateway`, see
//! `scripts/setup/60-gateway-clients.sh`) through the Responses API route, against the gateway
//! over the real Qwen2.5 codec and a scripted generator (`tests/clients/responses.py`):
//! `responses.create` and `responses.stream`, each a multi-turn session whose function call is
//! answered through `previous_response_id`. The SDK parses every answer and stream; each
//! session is one token chain whose sampled runs are exactly the generator's ids; an unknown
//! `previous_response_id` is the SDK's `BadRequestError` with the gateway's code.
//!
//! Skips with a printed reason when `UNIAGENT_GATEWAY_VENV` is unset; fails when it is set and
//! the venv is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::sdk::{client_script, venv_python};
use common::{sampled, serve};
use serde_json::{json, Value};
use uniagent_gateway::GatewayConfig;

const CALL: &str =
    "Let me look.\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": \"/\"}}\n</tool_call>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_drives_the_responses_route_token_exactly() {
    let Some(python) = venv_python(
        "UNIAGENT_GATEWAY_VENV",
        "scripts/setup/60-gateway-clients.sh",
    ) else {
        return;
    };
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    // What the generator samples, in the order the script asks.
    let created = [
        s.turn(CALL),
        s.turn("There are two files."),
        s.turn("You are welcome."),
    ];
    let streamed = [s.turn(CALL), s.turn("Two files: a.txt and b.txt.")];
    for ids in created.iter().chain(&streamed) {
        s.script.push_ids(ids.clone());
    }
    let base = s.base.clone();
    let script = client_script("responses.py");
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(python)
                .arg(script)
                .arg(base)
                .output()
                .unwrap()
        }),
    )
    .await
    .expect("responses.py finishes within 120 s")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "responses.py failed:\n{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let flat = |turns: &[Vec<u32>]| -> Vec<u64> {
        turns.iter().flatten().map(|&i| u64::from(i)).collect()
    };

    let c = &report["created"];
    assert_eq!(c["arguments"], json!({"path": "/"}), "{c}");
    let texts: Vec<&str> = c["responses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["output_text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["Let me look.", "There are two files.", "You are welcome."]
    );
    let t = c["trajectories"].as_array().unwrap();
    assert_eq!(t.len(), 1, "one chain: {t:?}");
    assert_eq!(sampled(&t[0]), flat(&created));

    let st = &report["streamed"];
    for kinds in st["kinds"].as_array().unwrap() {
        let kinds: Vec<&str> = kinds
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        assert_eq!(kinds.first(), Some(&"response.created"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"response.completed"), "{kinds:?}");
        assert!(kinds.contains(&"response.output_text.delta"), "{kinds:?}");
    }
    let first = &st["responses"][0];
    let call = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap();
    assert_eq!(call["name"], "ls");
    assert_eq!(
        st["responses"][1]["output_text"],
        "Two files: a.txt and b.txt."
    );
    let t = st["trajectories"].as_array().unwrap();
    assert_eq!(t.len(), 1, "one chain: {t:?}");
    assert_eq!(sampled(&t[0]), flat(&streamed));

    assert_eq!(
        report["missing"],
        json!({"status": 400, "code": "previous_response_not_found"})
    );
    for session in ["rs", "rst"] {
        s.assert_replays(session).await;
    }
}
