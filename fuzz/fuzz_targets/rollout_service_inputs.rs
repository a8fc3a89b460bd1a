//! Fuzzes what `uniagent serve` reads from the network: `POST /v1/rollouts` bodies (from verl's
//! agent loop) and the generation bridge's answers. Any bytes give a request or a refusal
//! naming a field, an output or a typed protocol error; never a panic. A parsed bridge answer
//! has one log prob per token (when it has any), no more tokens than allowed, and a stop id
//! as its last token whenever it says it stopped on one.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_cli::serve::RolloutRequest;
use uniagent_core::{ErrorKind, FinishReason};
use uniagent_models::parse_bridge_answer;

fuzz_target!(|data: &[u8]| {
    let Some((&budget, rest)) = data.split_first() else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(rest) else {
        return;
    };
    if let Ok(request) = RolloutRequest::parse(value.clone()) {
        assert!(!request.task.id.is_empty() && !request.request_id.is_empty());
        assert!(request.bridge_url.starts_with("http"));
    }
    let max_tokens = usize::from(budget % 64);
    let stop = [7u32, 151_645];
    match parse_bridge_answer(&value, max_tokens, &stop) {
        Ok(out) => {
            assert!(out.token_ids.len() <= max_tokens);
            if let Some(lps) = &out.logprobs {
                assert_eq!(lps.len(), out.token_ids.len());
            }
            if out.finish_reason == FinishReason::Length {
                assert_eq!(out.token_ids.len(), max_tokens);
            }
        }
        Err(e) => assert_eq!(e.kind(), ErrorKind::Protocol, "{e}"),
    }
});
