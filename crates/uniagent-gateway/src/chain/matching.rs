//! Whether a request's messages continue a chain, and how.
//!
//! Messages are compared as a harness echoes them: role, text (`null` and `""` alike), tool
//! calls by name and parsed arguments, and the call a tool message answers. Reasoning text,
//! author names and unknown fields are not compared: harnesses drop or rewrite them, and the
//! chain keeps the sampled tokens either way.

use serde_json::Value;
use uniagent_core::{Message, Role, ToolCall, ToolSpec};

/// How a request relates to one chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relation {
    /// The chain's messages are a prefix of the request: append the rest.
    Extends {
        /// Index in the request of the first message to append.
        from: usize,
    },
    /// The request keeps the chain up to (not including) its last assistant turn and then
    /// differs there: roll the chain back to before that turn.
    RollsBack {
        /// Index in the request of the first message after the shared prefix.
        from: usize,
    },
    /// The request rewrites earlier history, or declares other tools.
    Unrelated,
}

/// Relates a request (`messages`, `tools`) to a chain (`chain`, `chain_tools`), whose last
/// message is the assistant turn the gateway sampled.
pub fn relate(
    chain: &[Message],
    chain_tools: &[ToolSpec],
    messages: &[Message],
    tools: &[ToolSpec],
) -> Relation {
    if chain_tools != tools || chain.is_empty() {
        return Relation::Unrelated;
    }
    let shared = chain
        .iter()
        .zip(messages)
        .take_while(|(a, b)| same_message(a, b))
        .count();
    let last = chain.len() - 1;
    if shared == chain.len() {
        Relation::Extends { from: shared }
    } else if shared == last && chain[last].role == Role::Assistant {
        Relation::RollsBack { from: shared }
    } else {
        Relation::Unrelated
    }
}

/// Equality of two messages as a harness echoes them (see the module docs).
pub fn same_message(a: &Message, b: &Message) -> bool {
    a.role == b.role
        && a.content.as_deref().unwrap_or("") == b.content.as_deref().unwrap_or("")
        && a.tool_call_id == b.tool_call_id
        && a.tool_calls.len() == b.tool_calls.len()
        && a.tool_calls
            .iter()
            .zip(&b.tool_calls)
            .all(|(x, y)| same_call(x, y))
}

fn same_call(a: &ToolCall, b: &ToolCall) -> bool {
    let (x, y) = (&a.function.arguments, &b.function.arguments);
    // Byte-equal arguments (the usual echo) need no parse.
    a.function.name == b.function.name && (x == y || args(x) == args(y))
}

/// Arguments held as a JSON string compare as the JSON they hold.
fn args(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn convo() -> Vec<Message> {
        vec![
            Message::user("hi"),
            Message::assistant_with_calls(
                None,
                vec![ToolCall::new("c1", "ls", json!({"path": "/"}))],
            ),
            Message::tool("c1", "a b"),
            Message::assistant("done"),
        ]
    }

    #[test]
    fn extension_rollback_and_rewrite_are_told_apart() {
        let chain = convo();
        let mut req = chain.clone();
        req.push(Message::user("more"));
        assert_eq!(
            relate(&chain, &[], &req, &[]),
            Relation::Extends { from: 4 }
        );
        let mut edited = chain.clone();
        edited[3] = Message::assistant("edited");
        edited.push(Message::user("more"));
        assert_eq!(
            relate(&chain, &[], &edited, &[]),
            Relation::RollsBack { from: 3 }
        );
        assert_eq!(
            relate(&chain, &[], &chain[..3], &[]),
            Relation::RollsBack { from: 3 }
        );
        let mut rewritten = chain.clone();
        rewritten[0] = Message::user("hello");
        assert_eq!(relate(&chain, &[], &rewritten, &[]), Relation::Unrelated);
        let tool = ToolSpec::function("ls", "list", json!({"type": "object"}));
        assert_eq!(relate(&chain, &[], &req, &[tool]), Relation::Unrelated);
    }

    #[test]
    fn echoed_messages_match_despite_wire_differences() {
        let ours = Message::assistant_with_calls(
            None,
            vec![ToolCall::new("c1", "ls", json!({"path": "/"}))],
        );
        let wire: Message = serde_json::from_value(json!({"role": "assistant", "content": "",
            "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "ls", "arguments": "{ \"path\" : \"/\" }"}}]}))
        .unwrap();
        assert!(same_message(&ours, &wire));
        let other: Message = serde_json::from_value(json!({"role": "assistant", "content": "",
            "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "ls", "arguments": "{\"path\": \"/tmp\"}"}}]}))
        .unwrap();
        assert!(!same_message(&ours, &other));
    }
}
