//! Fuzzes rendering and incremental tokenization of arbitrary conversations with the Qwen3
//! template: segments separated by 0xFF bytes are messages (first byte: role), assistant
//! messages are appended as sampled tokens and the rest incrementally. Nothing may panic and
//! the rollout cache invariants must hold after every operation, whatever succeeded.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use uniagent_core::codec::{messages_to_json, ChatInput, Codec};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::{LengthLimits, Message, Role};

fn codec() -> Option<&'static Codec> {
    static C: OnceLock<Option<Codec>> = OnceLock::new();
    C.get_or_init(|| {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crates/uniagent-core/tests/fixtures/tokenizers/qwen3"
        );
        Codec::from_dir(dir)
            .ok()
            .map(|c| c.with_tool_parser(ToolCallFormat::Hermes))
    })
    .as_ref()
}

fuzz_target!(|data: &[u8]| {
    let Some(codec) = codec() else { return };
    let messages: Vec<Message> = data
        .split(|b| *b == 0xFF)
        .take(12)
        .filter_map(|seg| {
            let (&role, text) = seg.split_first()?;
            let text = String::from_utf8_lossy(text).into_owned();
            Some(match role % 4 {
                0 => Message::system(text),
                1 => Message::user(text),
                2 => Message::assistant(text),
                _ => Message::tool("call_0", text),
            })
        })
        .collect();
    if let Ok(json) = messages_to_json(&messages) {
        let input = ChatInput {
            messages: json,
            add_generation_prompt: true,
            ..ChatInput::default()
        };
        if let Ok(text) = codec.render(&input) {
            let _ = codec.encode(&text);
        }
        let _ = codec.replay(&input);
    }
    let first = messages
        .iter()
        .position(|m| m.role == Role::Assistant)
        .unwrap_or(messages.len());
    let limits = LengthLimits {
        max_model_len: Some(4096),
        ..LengthLimits::default()
    };
    let Ok(mut cache) = codec.start(
        "f",
        messages[..first].to_vec(),
        vec![],
        Default::default(),
        limits,
    ) else {
        return;
    };
    for m in &messages[first..] {
        if m.role == Role::Assistant {
            if let Ok(mut ids) = codec.encode(m.text()) {
                ids.push(codec.eos_token_id());
                let _ = codec.append_sampled(&mut cache, &ids, &vec![-1.0; ids.len()], None);
            }
        } else {
            let _ = codec.append_messages(&mut cache, std::slice::from_ref(m));
        }
        assert!(cache.check_invariants().is_ok());
    }
});
