//! `uniagent gateway`: bad invocations exit 2 with one error line; with `--features tch` the
//! binary serves the tiny model on a free port (first stdout line `listening on http://…`),
//! answers a chat completion, and on SIGTERM ends the open session into
//! `--out/trajectories.jsonl`; after a SIGKILL the next gateway on that `--out` recovers it
//! from the journal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::uniagent;

/// Runs `cmd`, which must exit 2 (bad usage), and returns its stderr.
fn bad_usage(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn gateway_without_a_policy_or_with_a_bad_config_exits_2() {
    let err = bad_usage(uniagent().args(["gateway", "--port", "0"]));
    assert!(
        err.starts_with("error: ") && err.contains("--model-dir"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    let with_config = || {
        let mut cmd = uniagent();
        cmd.args(["gateway", "--port", "0", "--config"])
            .arg(&config);
        cmd
    };
    std::fs::write(&config, "max_model_lenn: 10\n").unwrap();
    let err = bad_usage(&mut with_config());
    assert!(err.contains("max_model_lenn"), "{err}");

    std::fs::write(
        &config,
        "model:\n  type: openai\n  http:\n    endpoints: [http://127.0.0.1:9/v1]\n    model: m\n",
    )
    .unwrap();
    let err = bad_usage(&mut with_config());
    assert!(err.contains("token-level"), "{err}");

    // Cassettes go to the output directory: `--cassettes` needs `--out`.
    let err = bad_usage(uniagent().args(["gateway", "--port", "0", "--cassettes"]));
    assert!(err.contains("--out"), "{err}");
}

#[cfg(not(feature = "tch"))]
#[test]
fn model_dir_needs_the_tch_feature() {
    let err = bad_usage(uniagent().args(["gateway", "--port", "0", "--model-dir", "/nonexistent"]));
    assert!(err.contains("--features tch"));
}

/// One greedy chat completion of `max_tokens` in `session` of the gateway at `base`.
#[cfg(feature = "tch")]
fn chat(base: &str, session: &str, max_tokens: u32, content: &str) -> serde_json::Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{base}/sessions/{session}/v1/chat/completions"))
            .json(
                &serde_json::json!({"model": "m", "max_tokens": max_tokens, "temperature": 0,
                "messages": [{"role": "user", "content": content}]}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    })
}

#[cfg(feature = "tch")]
#[test]
fn serves_the_tiny_model_and_records_open_sessions_on_sigterm() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let model = tempfile::tempdir().unwrap();
    common::link_tiny_qwen2(model.path());
    let out = tempfile::tempdir().unwrap();
    let (mut child, base) = common::spawn_listening(&[
        "gateway".as_ref(),
        "--host".as_ref(),
        "127.0.0.1".as_ref(),
        "--port".as_ref(),
        "0".as_ref(),
        "--model-dir".as_ref(),
        model.path().as_os_str(),
        "--out".as_ref(),
        out.path().as_os_str(),
    ]);
    let answer = chat(&base, "cli", 4, "hi");
    assert_eq!(answer["usage"]["completion_tokens"], 4, "{answer}");
    // A long generation in flight (16,384 tokens, the default cap) when SIGTERM arrives: the
    // gateway gives it the shutdown grace, cancels it (the engine drops the row at its next
    // step) and exits, instead of decoding it to the end first.
    let long = std::thread::spawn({
        let base = base.clone();
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                reqwest::Client::new()
                    .post(format!("{base}/sessions/long/v1/chat/completions"))
                    .json(&serde_json::json!({"model": "m", "max_tokens": 1_000_000,
                        "messages": [{"role": "user", "content": "talk"}]}))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let signalled = std::time::Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    // A deadline, not a timing claim: past it the shutdown is taken as hung.
    let deadline = uniagent_gateway::SHUTDOWN_GRACE + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if signalled.elapsed() > deadline {
            let _ = child.kill();
            panic!("the gateway did not exit within {deadline:?} of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    // The long request's connection ended without an answer of 16,384 tokens.
    assert!(!matches!(long.join().unwrap(), Ok(200)));
    let text = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let record: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(record["task_id"], "cli");
    let mask: Vec<u64> = record["response_mask"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_u64().unwrap())
        .collect();
    assert_eq!(mask, vec![1, 1, 1, 1]);
}

/// SIGKILL mid-session (no shutdown, no `end`): the next gateway on the same `--out` writes
/// the open session's trajectory from the journal, marked recovered, before it listens.
#[cfg(feature = "tch")]
#[test]
fn a_sigkilled_gateways_open_session_is_recovered_by_the_next_one() {
    let model = tempfile::tempdir().unwrap();
    common::link_tiny_qwen2(model.path());
    let out = tempfile::tempdir().unwrap();
    let args = [
        "gateway".as_ref(),
        "--port".as_ref(),
        "0".as_ref(),
        "--model-dir".as_ref(),
        model.path().as_os_str(),
        "--out".as_ref(),
        out.path().as_os_str(),
    ];
    let (mut child, base) = common::spawn_listening(&args);
    let answer = chat(&base, "killed", 3, "hi");
    assert_eq!(answer["usage"]["completion_tokens"], 3, "{answer}");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let trajectories = out.path().join("trajectories.jsonl");
    assert!(common::jsonl(&trajectories).is_empty());

    let (mut again, _) = common::spawn_listening(&args);
    let records = common::jsonl(&trajectories);
    let _ = again.kill();
    let _ = again.wait();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["task_id"], "killed");
    assert_eq!(
        record["extra_fields"]["gateway"]["recovered"],
        "unclean_exit"
    );
    assert_eq!(record["response_mask"], serde_json::json!([1, 1, 1]));
    assert_eq!(
        record["messages"][1]["content"],
        answer["choices"][0]["message"]["content"]
    );
}

/// Without `max_model_len` in a config, `--model-dir` serves the model's own window (the tiny
/// model's `config.json`: 32768 positions): bodies are read up to 4 MiB (413 above it, naming
/// the limit, instead of parsing up to 256 MiB) and longer prompts get a 400 naming 32768.
#[cfg(feature = "tch")]
#[test]
fn model_dir_defaults_max_model_len_from_its_config() {
    let model = tempfile::tempdir().unwrap();
    common::link_tiny_qwen2(model.path());
    let (mut child, base) = common::spawn_listening(&[
        "gateway".as_ref(),
        "--port".as_ref(),
        "0".as_ref(),
        "--model-dir".as_ref(),
        model.path().as_os_str(),
    ]);
    let chat = |session: &str, content: String| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let r = reqwest::Client::new()
                .post(format!("{base}/sessions/{session}/v1/chat/completions"))
                .json(&serde_json::json!({"model": "m", "max_tokens": 1,
                    "messages": [{"role": "user", "content": content}]}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<serde_json::Value>().await.unwrap())
        })
    };
    let (too_big, big) = chat("big", "x".repeat((4 << 20) + 1));
    let (too_long, long) = chat("long", "hi ".repeat(40_000));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(too_big, 413, "{big}");
    assert!(big.to_string().contains(&(4 << 20).to_string()), "{big}");
    assert_eq!(too_long, 400, "{long}");
    assert_eq!(long["error"]["code"], "context_length_exceeded", "{long}");
    assert!(long.to_string().contains("32768"), "{long}");
}
