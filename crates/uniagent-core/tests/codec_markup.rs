//! `jinja2`'s `Markup` semantics in the codec (`|safe`, `+`, `~`, `*`, `escape`, `trim`,
//! `format`, `str` methods on markup, ...): renders compared with golden renders by
//! `transformers`' own environment (`scripts/codec/gen_markup_goldens.py`, no Python at run
//! time), and properties: markup concatenation against a model of markupsafe's escape, and the
//! operator rewrite leaving every non-markup `+`/`~` expression as minijinja evaluates it.
#![cfg(feature = "codec")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns unwrap too

use std::collections::BTreeMap;
use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::{Map, Value};
use uniagent_core::codec::{ChatInput, ChatTemplate};

/// Golden cases the codec renders differently on purpose: subscripts and slices of markup are
/// `Markup` in Python and plain strings here (see `codec/markup.rs`). Each must still differ,
/// so that this list stays true.
const KNOWN_GAPS: [&str; 2] = ["subscript", "slice"];

fn goldens() -> Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/codec_markup/goldens.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Renders `source` as the goldens were rendered: no messages, `vars` as template variables.
fn render(source: &str, vars: &Map<String, Value>) -> Result<String, String> {
    let template = ChatTemplate::new(source, BTreeMap::new()).map_err(|e| e.to_string())?;
    template
        .render(&ChatInput {
            template_kwargs: vars.clone(),
            ..ChatInput::default()
        })
        .map_err(|e| e.to_string())
}

#[test]
fn markup_goldens_match_jinja2() {
    let goldens = goldens();
    assert_eq!(
        goldens["versions"]["jinja2"], "3.1.6",
        "goldens of the pinned jinja2"
    );
    let vars = goldens["vars"].as_object().unwrap();
    let cases = goldens["cases"].as_array().unwrap();
    assert!(cases.len() >= 90, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let template = case["template"].as_str().unwrap();
        let got = render(template, vars);
        let matches = match (&got, case["render"].as_str()) {
            (Ok(got), Some(want)) => got == want,
            (Err(_), None) => true,
            _ => false,
        };
        let gap = KNOWN_GAPS.contains(&name);
        if matches == gap {
            failures.push(format!(
                "{name}{}: {template:?} gave {got:?}, jinja2 {}",
                if gap {
                    " (a known gap that now matches: update KNOWN_GAPS)"
                } else {
                    ""
                },
                case.get("render").unwrap_or(&case["error"])
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// markupsafe's `escape`, written out for the model (the goldens pin it against jinja2).
fn escaped(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('>', "&gt;")
        .replace('<', "&lt;")
        .replace('\'', "&#39;")
        .replace('"', "&#34;")
}

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("<"),
            Just(">"),
            Just("&"),
            Just("'"),
            Just("\""),
            Just("&amp;"),
            Just("a"),
            Just(" "),
            Just("\n"),
            Just("é"),
            Just("😀"),
            Just("+"),
            Just("~"),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// A chain `x0 + x1 + ... ` of strings, some `|safe`: once markup is on the left, each
    /// plain string is escaped; before it, plain strings concatenate unchanged (Python
    /// evaluates left to right, and `str + Markup` escapes the `str` side).
    #[test]
    fn markup_chains_escape_like_markupsafe(parts in proptest::collection::vec((text(), any::<bool>()), 1..6)) {
        let mut vars = Map::new();
        let mut terms = Vec::new();
        let mut want = String::new();
        let mut markup = false;
        for (i, (s, safe)) in parts.iter().enumerate() {
            vars.insert(format!("v{i}"), Value::String(s.clone()));
            terms.push(if *safe { format!("v{i}|safe") } else { format!("v{i}") });
            if *safe && !markup {
                // `plain-so-far + Markup`: the plain prefix is escaped.
                want = escaped(&want);
                markup = true;
            }
            if markup && !safe { want.push_str(&escaped(s)) } else { want.push_str(s) }
        }
        // The rewrite runs in templates that can make markup, with or without markup here.
        let source = format!("{{{{ {} }}}}{{% if false %}}{{{{ ''|safe }}}}{{% endif %}}", terms.join(" + "));
        prop_assert_eq!(render(&source, &vars).unwrap(), want);
        // `~` never escapes.
        let source = format!("{{{{ {} }}}}{{{{ ''|safe }}}}", terms.join(" ~ "));
        let plain: String = parts.iter().map(|(s, _)| s.as_str()).collect();
        prop_assert_eq!(render(&source, &vars).unwrap(), plain);
    }
}

/// A random expression over numbers, strings, lists and variables with `+`, `~`, `-`, `*`,
/// parentheses, filters, subscripts and conditionals: no markup anywhere.
fn expression() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("1".to_owned()),
        Just("2.5".to_owned()),
        Just("'a<'".to_owned()),
        Just("\"b + c\"".to_owned()),
        Just("[1, 'x']".to_owned()),
        Just("(1, 2)".to_owned()),
        Just("none".to_owned()),
        Just("n".to_owned()),
        Just("s".to_owned()),
        Just("l".to_owned()),
        Just("missing".to_owned()),
        Just("-n".to_owned()),
    ];
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} + {b}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a}~{b}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} - {b}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} * {b}")),
            inner.clone().prop_map(|a| format!("({a})")),
            inner.clone().prop_map(|a| format!("{a}|length")),
            inner.clone().prop_map(|a| format!("{a}|string")),
            inner.clone().prop_map(|a| format!("[{a}][0]")),
            (inner.clone(), inner.clone(), inner)
                .prop_map(|(a, b, c)| format!("{a} if {b} else {c}")),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// In a template that can create markup every `+` and `~` becomes a call; on values without
    /// markup the result (or the failure) is exactly minijinja's operator's.
    #[test]
    fn the_rewrite_keeps_non_markup_operators_exact(expr in expression()) {
        let mut vars = Map::new();
        vars.insert("n".into(), Value::from(3));
        vars.insert("s".into(), Value::from("<s>"));
        vars.insert("l".into(), serde_json::json!(["<", 2]));
        let plain = format!("{{{{ {expr} }}}}|{{% set x = {expr} %}}{{{{ x }}}}");
        // Naming `safe` (never applied) makes the codec rewrite the operators.
        let rewritten = format!("{plain}{{% if false %}}{{{{ x|safe }}}}{{% endif %}}");
        let want = render(&plain, &vars);
        let got = render(&rewritten, &vars);
        prop_assert_eq!(got.is_ok(), want.is_ok(), "{} vs {:?}", expr, want);
        if let (Ok(got), Ok(want)) = (got, want) {
            prop_assert_eq!(got, want);
        }
    }
}

#[test]
fn autoescape_blocks_that_escape_are_refused_with_a_typed_error() {
    let err = ChatTemplate::new(
        "{% autoescape true %}{{ x }}{% endautoescape %}",
        BTreeMap::new(),
    )
    .unwrap_err();
    let typed = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<uniagent_core::codec::UnsupportedTemplate>())
        .map(|u| u.feature);
    assert_eq!(
        typed,
        Some(uniagent_core::codec::UnsupportedFeature::AutoEscapeBlock)
    );
    assert!(ChatTemplate::new(
        "{% autoescape false %}{{ x }}{% endautoescape %}",
        BTreeMap::new()
    )
    .is_ok());
}
