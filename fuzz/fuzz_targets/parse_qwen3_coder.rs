//! Fuzzes the Qwen3-Coder XML tool-call parser: no input may panic, and every parsed call
//! names a declared tool and has object arguments.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use uniagent_core::parsers::parse_qwen3_coder;
use uniagent_core::ToolSpec;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let tools = [
        ToolSpec::function(
            "edit",
            "",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"},
                "ratio": {"type": "number"}, "force": {"type": "boolean"}, "lines": {"type": "array"},
                "opts": {"type": "object"}, "other": {"type": "tuple"}}}),
        ),
        ToolSpec::function("finish", "", json!({"type": "object", "properties": {}})),
    ];
    if let Ok(parsed) = parse_qwen3_coder(&text, &tools) {
        for call in &parsed.calls {
            assert!(tools.iter().any(|t| t.name() == call.function.name));
            assert!(call.function.arguments.is_object());
        }
    }
    let _ = parse_qwen3_coder(&text, &[]);
});
