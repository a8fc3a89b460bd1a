//! Fuzzes the gateway's request parsers (chat completions, the Responses API, Anthropic
//! messages): no body may panic; a Responses request that parses yields a turn whose messages
//! are its instructions, the history and its input, in that order.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_core::Message;
use uniagent_gateway::wire::{anthropic, openai, responses};

fuzz_target!(|data: &[u8]| {
    let _ = openai::parse_request(data);
    let _ = anthropic::parse_request(data);
    if let Ok(parsed) = responses::parse_request(data) {
        let input = parsed.input.len();
        let instructions = usize::from(parsed.instructions.is_some());
        let history = [Message::user("earlier")];
        let (turn, conversation, _) = parsed.into_turn(&history);
        assert_eq!(conversation.len(), history.len() + input);
        assert_eq!(turn.messages.len(), instructions + conversation.len());
        assert_eq!(turn.messages[instructions], history[0]);
    }
});
