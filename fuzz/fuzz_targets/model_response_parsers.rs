//! Fuzzes the model backends' response parsers: vLLM `/v1/completions`, SGLang `/generate` and
//! OpenAI chat completions. Any bytes give an output or a typed error, never a panic; an output
//! has one logprob per token.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_models::{parse_completion, parse_generate};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        let _ = serde_json::from_slice::<uniagent_core::openai::ChatCompletionResponse>(data);
        return;
    };
    for parsed in [parse_completion(&value), parse_generate(&value)] {
        if let Ok(out) = parsed {
            assert_eq!(Some(out.token_ids.len()), out.logprobs.map(|l| l.len()));
        }
    }
    let _ = serde_json::from_value::<uniagent_core::openai::ChatCompletionResponse>(value);
});
