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

/// The golden cases run through the binary: one of each kind of input (multi-turn, tools with
/// tool calls and results, template kwargs, reasoning history). Every case is checked against
/// the library in-process by `crates/uniagent-core/tests/codec_golden.rs`; here what is tested
/// is the binary's plumbing, and each run loads a 150k-token tokenizer.
const CASES: [&str; 5] = [
    "multi_turn_gen",
    "tools_qwen_docs_roundtrip_gen",
    "system_user_gen_enable_thinking_false",
    "multi_turn_reasoning_history_gen",
    "tools_agent_multistep_gen",
];

#[test]
fn render_and_incremental_match_the_goldens() {
    let mut ran = 0;
    for family in ["qwen2.5", "qwen3"] {
        let golden: Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures(family).join("templates_golden.json")).unwrap(),
        )
        .unwrap();
        let chosen = golden["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|case| CASES.contains(&case["name"].as_str().unwrap()));
        for case in chosen {
            ran += 1;
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
    // A renamed golden case must not silently shrink the test.
    assert_eq!(ran, CASES.len());
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
