//! What every render of one rollout recomputes: the template variables other than `messages`
//! and `add_generation_prompt` (special tokens, the caller's kwargs, the tools), converted to
//! minijinja values, and each tool's `tojson` text. An observation append renders the tools
//! once per append with identical inputs, so the last combination is kept.
//!
//! Exactness: the cached values are built by the same conversions a render does, from inputs
//! compared for equality on every render; a tool's memoised `tojson` text is what the filter
//! computes for that very value with its default options, and other options recompute it.

use std::collections::BTreeMap;
use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Serde, Value as JinjaValue};
use serde_json::{Map, Value};

use super::pyjson::PyJsonOptions;

/// A JSON object from `tools`: behaves as the plain converted map (every lookup, the key
/// order and the length are the inner map's) and carries its `tojson` text.
#[derive(Debug)]
pub(super) struct MemoJson {
    inner: JinjaValue,
    keys: Vec<JinjaValue>,
    /// `inner|tojson` with the default options (`tojson` with no arguments).
    pub(super) json: String,
}

impl Object for MemoJson {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &JinjaValue) -> Option<JinjaValue> {
        self.inner.get_item(key).ok().filter(|v| !v.is_undefined())
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.keys.clone())
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.keys.len())
    }
}

/// The `tools` variable: JSON objects wrapped in [`MemoJson`] when their `tojson` text can be
/// computed; anything else converted as a render converts it.
fn tools_value(
    tools: &[Value],
    tojson: impl Fn(&JinjaValue, &PyJsonOptions) -> Option<String>,
) -> JinjaValue {
    let items: Vec<JinjaValue> = tools
        .iter()
        .map(|tool| {
            let plain = JinjaValue::from(Serde(tool));
            if !tool.is_object() {
                return plain;
            }
            let Some(json) = tojson(&plain, &PyJsonOptions::default()) else {
                return plain;
            };
            let Ok(keys) = plain.try_iter() else {
                return plain;
            };
            let keys = keys.collect();
            JinjaValue::from_object(MemoJson {
                inner: plain,
                keys,
                json,
            })
        })
        .collect();
    JinjaValue::from(items)
}

/// The template variables of one (tools, kwargs) combination, converted.
#[derive(Debug)]
pub(super) struct BaseContext {
    tools: Vec<Value>,
    kwargs: Map<String, Value>,
    pub(super) ctx: BTreeMap<String, JinjaValue>,
}

impl BaseContext {
    /// Whether this context was built from `tools` and `kwargs`.
    pub(super) fn matches(&self, tools: &[Value], kwargs: &Map<String, Value>) -> bool {
        self.tools == tools && &self.kwargs == kwargs
    }

    /// Special tokens, then the caller's variables, then `tools` and `documents`: later
    /// entries win, as in `apply_chat_template` (`messages` and `add_generation_prompt` are
    /// added per render).
    pub(super) fn new(
        globals: &BTreeMap<String, JinjaValue>,
        tools: &[Value],
        kwargs: &Map<String, Value>,
        to_jinja: impl Fn(&Value) -> JinjaValue,
        none: impl Fn() -> JinjaValue,
        tojson: impl Fn(&JinjaValue, &PyJsonOptions) -> Option<String>,
    ) -> Self {
        let mut ctx = globals.clone();
        for (k, v) in kwargs {
            ctx.insert(k.clone(), to_jinja(v));
        }
        ctx.insert(
            "tools".into(),
            if tools.is_empty() {
                none()
            } else {
                tools_value(tools, tojson)
            },
        );
        // `transformers` always passes `documents` (None unless given).
        ctx.entry("documents".into()).or_insert_with(none);
        Self {
            tools: tools.to_vec(),
            kwargs: kwargs.clone(),
            ctx,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::codec::{ChatInput, ChatTemplate};

    /// Every operation a template can apply to a tool, on the memoised `tools` entries and on
    /// the same JSON passed as a plain variable: the two halves must render identically.
    const OPS: &str = "{{ t|tojson }}|{{ t|tojson(indent=2) }}|{{ t|tojson(sort_keys=true) }}|{{ t }}|{{ t|string }}|{{ t|length }}|{{ t.items()|list }}|{{ t|dictsort }}|{{ t.function }}|{{ t['type'] }}|{{ 'function' in t }}|{{ t is mapping }}|{{ t == t }}|{{ t.missing is defined }}|{% for k in t %}{{ k }},{% endfor %}|{{ t ~ '' }}|{{ t.keys()|list }}";

    fn template() -> ChatTemplate {
        let src = format!(
            "{{% for t in tools %}}{OPS}\n{{% endfor %}}{{{{ tools|tojson }}}}\n---\n{{% for t in plain %}}{OPS}\n{{% endfor %}}{{{{ plain|tojson }}}}\n"
        );
        ChatTemplate::new(src, Default::default()).unwrap()
    }

    fn input(tools: Vec<serde_json::Value>) -> ChatInput {
        let mut kwargs = serde_json::Map::new();
        kwargs.insert("plain".into(), json!(tools));
        ChatInput {
            messages: vec![json!({"role": "user", "content": "hi"})],
            tools,
            add_generation_prompt: false,
            template_kwargs: kwargs,
        }
    }

    fn halves(t: &ChatTemplate, tools: Vec<serde_json::Value>) -> (String, String) {
        let out = t.render(&input(tools)).unwrap();
        let (a, b) = out.split_once("---\n").unwrap();
        // The template's final newline is dropped (`keep_trailing_newline=false`).
        (a.trim_end().to_owned(), b.trim_end().to_owned())
    }

    #[test]
    fn memoised_tools_render_like_plain_values() {
        let t = template();
        let tools = vec![
            json!({"type": "function", "function": {"name": "bash", "description": "Run é \"x\"",
                "parameters": {"type": "object", "properties": {"n": {"type": "number", "default": 1.5}, "k": {"type": "integer", "maximum": 10}}}}}),
            json!({"z": null, "a": [1, 2.0, true, "s"], "function": {}}),
        ];
        for _ in 0..2 {
            let (memo, plain) = halves(&t, tools.clone());
            for (m, p) in memo.split('|').zip(plain.split('|')) {
                assert_eq!(m, p);
            }
            assert_eq!(memo, plain);
        }
    }

    #[test]
    fn changed_tools_or_kwargs_are_not_served_from_the_cache() {
        let t = template();
        let a = vec![json!({"type": "function", "function": {"name": "a"}})];
        let b = vec![json!({"type": "function", "function": {"name": "b"}})];
        let first = t.render(&input(a.clone())).unwrap();
        let second = t.render(&input(b.clone())).unwrap();
        assert_eq!(second, template().render(&input(b)).unwrap());
        assert_ne!(first, second);
        let mut with_kwarg = input(a.clone());
        with_kwarg.template_kwargs.insert("plain".into(), json!([]));
        let out = t.render(&with_kwarg).unwrap();
        assert_eq!(out, template().render(&with_kwarg).unwrap());
        assert_eq!(t.render(&input(a)).unwrap(), first);
    }
}
