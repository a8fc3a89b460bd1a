//! The model-server parsers' never-panic properties: arbitrary JSON shaped like a server's
//! answer gives an output or a typed error.

use proptest::prelude::*;
use serde_json::{json, Value};

/// Any JSON value whose object keys are often one of `keys` (so that the parser gets past
/// its first lookups) and whose strings match `strings`.
fn any_json(
    keys: &'static [&'static str],
    strings: &'static str,
) -> impl Strategy<Value = Value> {
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
}
