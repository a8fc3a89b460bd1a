//! The `codec` binary against the golden renders of the Qwen fixtures.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns unwrap too

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{json, Value};
use uniagent_core::testing::output_with_stdin;

fn fixtures(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/uniagent-core/tests/fixtures/tokenizers")
        .join(family)
}

fn run(sub: &str, family: &str, input: &Value) -> Output {
    // The conversation goes through stdin (`--input -`).
    output_with_stdin(
        Command::new(env!("CARGO_BIN_EXE_codec"))
            .args([sub, "--model-dir"])
            .arg(fixtures(family))
            .args(["--input", "-"]),
        serde_json::to_string(input).unwrap().as_bytes(),
    )
    .unwrap()
}

fn ok(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn render_and_incremental_match_the_goldens() {
    for family in ["qwen2.5", "qwen3"] {
        let golden: Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures(family).join("templates_golden.json")).unwrap(),
        )
        .unwrap();
        for case in golden["cases"].as_array().unwrap() {
            let input = json!({"messages": case["messages"], "tools": case["tools"],
                "add_generation_prompt": case["add_generation_prompt"], "template_kwargs": case["template_kwargs"]});
            let render = ok(&run("render", family, &input));
            assert_eq!(
                render["text"], case["rendered"],
                "{family}/{}",
                case["name"]
            );
            assert_eq!(
                render["ids"], case["token_ids"],
                "{family}/{}",
                case["name"]
            );
            if !case["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["role"] == "assistant")
            {
                continue;
            }
            let inc = ok(&run("incremental", family, &input));
            let ids = inc["ids"].as_array().unwrap();
            assert_eq!(ids.len(), inc["mask"].as_array().unwrap().len());
            if inc["append_only"] == json!(true) {
                assert_eq!(&inc["ids"], &case["token_ids"], "{family}/{}", case["name"]);
            }
            if family == "qwen2.5" {
                assert_eq!(inc["append_only"], json!(true), "{family}/{}", case["name"]);
            }
        }
    }
}

#[test]
fn template_errors_exit_non_zero_without_a_render() {
    let out = run(
        "render",
        "qwen2.5",
        &json!({"messages": [{"role": "assistant", "content": null}]}),
    );
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("codec"));
    let out = run("incremental", "qwen3", &json!({"messages": "nope"}));
    assert!(!out.status.success());
}
