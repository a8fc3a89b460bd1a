//! Fuzzes the Hermes tool-call parser: no input may panic, and every parsed call names a
//! declared tool and has object arguments.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use uniagent_core::parsers::parse_hermes;
use uniagent_core::ToolSpec;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let tools = [
        ToolSpec::function(
            "bash",
            "",
            json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        ),
        ToolSpec::function("finish", "", json!({"type": "object", "properties": {}})),
    ];
    if let Ok(parsed) = parse_hermes(&text, &tools) {
        for call in &parsed.calls {
            assert!(tools.iter().any(|t| t.name() == call.function.name));
            assert!(call.function.arguments.is_object());
        }
    }
    let _ = parse_hermes(&text, &[]);
});
