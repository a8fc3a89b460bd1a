//! Golden tests: our renders and token ids equal `transformers`' on the Qwen2.5 and Qwen3
//! fixtures (see `tests/fixtures/NOTICE` and the fixture README in the repository).
#![cfg(feature = "codec")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns unwrap too

mod codec_common;

use codec_common::{input_of, tokenizer_dir};
use serde_json::Value;
use uniagent_core::codec::{ChatInput, Codec};

fn load(family: &str, file: &str) -> Value {
    let text = std::fs::read_to_string(tokenizer_dir(family).join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn check_templates(family: &str, expected_cases: usize) {
    let codec = Codec::from_dir(tokenizer_dir(family)).unwrap();
    let golden = load(family, "templates_golden.json");
    let cases = golden["cases"].as_array().unwrap();
    assert_eq!(cases.len(), expected_cases);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let input = input_of(case);
        let text = codec
            .render(&input)
            .unwrap_or_else(|e| panic!("{family}/{name}: {e}"));
        assert_eq!(
            text,
            case["rendered"].as_str().unwrap(),
            "{family}/{name}: rendered text"
        );
        let ids: Vec<u64> = codec
            .render_ids(&input)
            .unwrap()
            .into_iter()
            .map(u64::from)
            .collect();
        let want: Vec<u64> = case["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(ids, want, "{family}/{name}: token ids");
    }
}

fn check_encode(family: &str) {
    let codec = Codec::from_dir(tokenizer_dir(family)).unwrap();
    let golden = load(family, "encode_golden.json");
    let cases = golden["cases"].as_array().unwrap();
    assert!(cases.len() >= 50);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let ids = codec.encode(text).unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(ids, want, "{family}: encode {text:?}");
        assert_eq!(
            codec.decode(&ids, false).unwrap(),
            case["decoded"].as_str().unwrap(),
            "{family}: decode {text:?}"
        );
    }
}

#[test]
fn qwen25_templates_match_transformers() {
    check_templates("qwen2.5", 9);
}

#[test]
fn qwen3_templates_match_transformers() {
    check_templates("qwen3", 11);
}

#[test]
fn qwen25_encode_matches_tokenizers() {
    check_encode("qwen2.5");
}

#[test]
fn qwen3_encode_matches_tokenizers() {
    check_encode("qwen3");
}

#[test]
fn special_tokens_and_generation_prompt_are_loaded() {
    for family in ["qwen2.5", "qwen3"] {
        let codec = Codec::from_dir(tokenizer_dir(family)).unwrap();
        assert_eq!(codec.eos_token(), "<|im_end|>");
        assert_eq!(codec.eos_token_id(), 151645);
        assert_eq!(codec.stop_token_ids(), &[151645]);
        assert_eq!(codec.generation_prompt(), "<|im_start|>assistant\n");
    }
}

#[test]
fn template_errors_are_typed_not_renders() {
    let codec = Codec::from_dir(tokenizer_dir("qwen3")).unwrap();
    // Qwen3 reads `messages[0]`: an empty conversation fails inside the template.
    let err = codec.render(&ChatInput::default()).unwrap_err();
    assert_eq!(err.kind(), uniagent_core::ErrorKind::InvalidInput, "{err}");
}

#[test]
fn probing_reports_glue_and_append_only_structure() {
    let kwargs = serde_json::Map::new();
    let qwen25 = Codec::from_dir(tokenizer_dir("qwen2.5"))
        .unwrap()
        .probe_template(&kwargs)
        .unwrap();
    assert_eq!(qwen25.generation_prompt, "<|im_start|>assistant\n");
    assert_eq!(qwen25.turn_glue, "\n");
    assert!(qwen25.append_only_after_tool && qwen25.append_only_after_user);
    assert!(
        qwen25.window_exact,
        "appends render a constant-size window, not the conversation"
    );
    assert!(
        qwen25.append_only_after_user_with_reasoning,
        "Qwen2.5 ignores reasoning_content"
    );
    let qwen3 = Codec::from_dir(tokenizer_dir("qwen3"))
        .unwrap()
        .probe_template(&kwargs)
        .unwrap();
    assert_eq!(qwen3.turn_glue, "\n");
    assert!(qwen3.window_exact);
    assert!(
        qwen3.append_only_after_tool,
        "reasoning after the last query is kept"
    );
    assert!(
        !qwen3.append_only_after_user_with_reasoning,
        "Qwen3 drops reasoning before a new query"
    );
    // Without reasoning, Qwen3 wraps only the *last* assistant turn in an empty think block.
    assert!(!qwen3.append_only_after_user);
    let mut off = serde_json::Map::new();
    off.insert("enable_thinking".into(), serde_json::json!(false));
    let qwen3_off = Codec::from_dir(tokenizer_dir("qwen3"))
        .unwrap()
        .probe_template(&off)
        .unwrap();
    assert_eq!(
        qwen3_off.generation_prompt,
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
}
