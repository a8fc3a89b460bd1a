//! Test support: arbitrary JSON shaped like a model server's answer, for the parsers'
//! never-panic properties.

use proptest::prelude::*;
use serde_json::{json, Value};

/// Any JSON value whose object keys are often one of `keys` (so that the parser gets past
/// its first lookups) and whose strings match `strings`.
pub(super) fn any_json(
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
