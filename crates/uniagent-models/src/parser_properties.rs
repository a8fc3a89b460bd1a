//! The model-server parsers' properties: arbitrary JSON shaped like a server's answer gives
//! an output or a typed error, and well-formed answers round-trip.

use proptest::prelude::*;
use serde_json::{json, Value};

/// Any JSON value whose object keys are often one of `keys` (so that the parser gets past
/// its first lookups) and whose strings match `strings`.
fn any_json(keys: &'static [&'static str], strings: &'static str) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        strings.prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 6, move |inner| {
        let key = prop_oneof![
            proptest::sample::select(keys).prop_map(str::to_owned),
            "[a-z]{1,6}",
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            proptest::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[cfg(feature = "sglang")]
proptest! {
    #[test]
    fn sglang_generate_never_panics(v in any_json(
        &["meta_info", "output_token_logprobs", "output_ids", "finish_reason", "type", "weight_version"],
        "[0-9a-z]{0,8}",
    )) {
        let _ = super::sglang::parse_generate(&v);
    }

    #[test]
    fn sglang_well_formed_responses_round_trip(
        toks in proptest::collection::vec((any::<u32>(), -30.0f64..=0.0), 0..20),
        version in any::<u64>(),
    ) {
        let body = json!({
            "text": "",
            "output_ids": toks.iter().map(|(i, _)| i).collect::<Vec<_>>(),
            "meta_info": {
                "finish_reason": {"type": "length", "length": toks.len()},
                "weight_version": version.to_string(),
                "output_token_logprobs": toks.iter().map(|(i, lp)| json!([lp, i, null])).collect::<Vec<_>>(),
            }
        });
        let out = super::sglang::parse_generate(&body).unwrap();
        prop_assert_eq!(out.token_ids, toks.iter().map(|(i, _)| *i).collect::<Vec<_>>());
        prop_assert_eq!(out.weight_version, Some(version));
    }
}

#[cfg(feature = "vllm")]
proptest! {
    #[test]
    fn vllm_completion_never_panics(v in any_json(
        &["choices", "logprobs", "tokens", "token_logprobs", "token_ids", "finish_reason"],
        "(token_id:)?[0-9a-z:]{0,12}",
    )) {
        let _ = super::vllm::parse_completion(&v);
    }

    #[test]
    fn vllm_well_formed_responses_round_trip(
        toks in proptest::collection::vec((any::<u32>(), -30.0f64..=0.0), 0..20),
        finish in prop_oneof![Just("stop"), Just("length"), Just("abort")],
    ) {
        let body = json!({"choices": [{
            "index": 0, "text": "",
            "logprobs": {
                "tokens": toks.iter().map(|(i, _)| format!("token_id:{i}")).collect::<Vec<_>>(),
                "token_logprobs": toks.iter().map(|(_, lp)| lp).collect::<Vec<_>>(),
            },
            "finish_reason": finish,
        }]});
        let out = super::vllm::parse_completion(&body).unwrap();
        prop_assert_eq!(out.token_ids, toks.iter().map(|(i, _)| *i).collect::<Vec<_>>());
        prop_assert_eq!(out.logprobs.unwrap(), toks.iter().map(|(_, lp)| *lp as f32).collect::<Vec<_>>());
    }
}
