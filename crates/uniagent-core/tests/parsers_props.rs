//! Property tests of the tool-call parsers (the same functions the `fuzz/` targets drive):
//! random mixes of tag fragments, JSON and unicode never panic, parsed calls only name declared
//! tools with object arguments, and well-formed calls round-trip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{json, Value};
use uniagent_core::parsers::{parse_hermes, parse_qwen3_coder, ToolCallFormat};
use uniagent_core::ToolSpec;

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::function(
            "edit",
            "",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"},
                "ratio": {"type": "number"}, "force": {"type": "boolean"}, "lines": {"type": "array"}}}),
        ),
        ToolSpec::function("finish", "", json!({"type": "object", "properties": {}})),
    ]
}

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("<tool_call>".to_owned()),
        Just("</tool_call>".to_owned()),
        Just("<function=".to_owned()),
        Just("</function>".to_owned()),
        Just("<parameter=".to_owned()),
        Just("</parameter>".to_owned()),
        Just(">".to_owned()),
        Just("\n".to_owned()),
        Just("edit".to_owned()),
        Just("finish".to_owned()),
        Just("line".to_owned()),
        Just("{\"name\": \"edit\", \"arguments\": ".to_owned()),
        Just("{\"path\": \"/a\"}}".to_owned()),
        Just("null".to_owned()),
        Just("é😀".to_owned()),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_fragments_never_panic_and_calls_are_declared(parts in proptest::collection::vec(fragment(), 0..24)) {
        let text = parts.concat();
        let tools = tools();
        for format in [ToolCallFormat::Hermes, ToolCallFormat::Qwen3Coder] {
            if let Ok(parsed) = format.parse(&text, &tools) {
                for call in &parsed.calls {
                    prop_assert!(tools.iter().any(|t| t.name() == call.function.name));
                    prop_assert!(call.function.arguments.is_object());
                }
            }
            let _ = format.parse(&text, &[]);
        }
    }

    #[test]
    fn well_formed_calls_round_trip(
        path in "[^<>]{0,30}",
        line in any::<i64>(),
        force in any::<bool>(),
        prefix in "[a-zA-Z .]{0,20}",
    ) {
        let args = json!({"path": path, "line": line, "force": force});
        let hermes = format!("{prefix}<tool_call>\n{}\n</tool_call>",
            json!({"name": "edit", "arguments": args}));
        let parsed = parse_hermes(&hermes, &tools()).unwrap();
        prop_assert_eq!(&parsed.calls[0].function.arguments, &args);
        prop_assert_eq!(parsed.content, prefix.trim());

        let xml = format!("{prefix}<tool_call>\n<function=edit>\n<parameter=path>\n{path}\n</parameter>\n\
            <parameter=line>\n{line}\n</parameter>\n<parameter=force>\n{force}\n</parameter>\n</function>\n</tool_call>");
        let parsed = parse_qwen3_coder(&xml, &tools()).unwrap();
        let want = if path.eq_ignore_ascii_case("null") { json!({"path": Value::Null, "line": line, "force": force}) } else { args };
        prop_assert_eq!(&parsed.calls[0].function.arguments, &want);
        prop_assert_eq!(parsed.content, prefix.trim());
    }
}
