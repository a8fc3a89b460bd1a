//! Hugging Face chat templates rendered with minijinja, with `transformers`' semantics.

use std::collections::BTreeMap;

use std::sync::{Arc, Mutex};

use minijinja::value::{Kwargs, Object, ObjectRepr, Serde, Value as JinjaValue, ValueKind};
use minijinja::{Environment, ErrorKind as JinjaErrorKind};
use serde_json::{Map, Value};

use super::markup;
use super::pyjson::{py_json_dumps_with, PyJsonOptions};
use super::pyrepr::py_str;
use super::render_cache::{BaseContext, MemoJson};
use super::syntax;
use super::unsupported::find_unsupported;
use crate::error::{Error, Result};

const TEMPLATE_NAME: &str = "chat_template";

/// Python's `None` as `transformers` passes it for top-level variables (`tools=None`,
/// `documents=None`): falsy, `is none`, printed `None`, and, unlike minijinja's none, not
/// iterable and without a length (`for t in tools` raises in Python when there are no tools).
#[derive(Debug)]
struct PyNone;

impl Object for PyNone {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn is_true(self: &Arc<Self>) -> bool {
        false
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("None")
    }
}

fn is_py_none(value: &JinjaValue) -> bool {
    value.is_none() || value.downcast_object_ref::<PyNone>().is_some()
}

/// `is none`: minijinja's none or a top-level Python `None`.
fn test_none(value: &JinjaValue) -> bool {
    is_py_none(value)
}

/// `is iterable`: Python's `None` is not (minijinja iterates it as empty).
fn test_iterable(value: &JinjaValue) -> bool {
    !is_py_none(value) && value.try_iter().is_ok()
}

/// What a chat template is rendered with: the `apply_chat_template` arguments.
///
/// Messages and tools are plain JSON so that what the caller wrote reaches the template
/// unchanged (e.g. tool-call `arguments` given as a string stay a string).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatInput {
    /// The conversation, in OpenAI chat format.
    pub messages: Vec<Value>,
    /// Tool schemas; empty means no tools are passed (`tools=None`).
    pub tools: Vec<Value>,
    /// Whether to end with the assistant header.
    pub add_generation_prompt: bool,
    /// Extra template variables (`enable_thinking`, ...).
    pub template_kwargs: Map<String, Value>,
}

/// A compiled chat template plus the special-token variables it sees.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The special-token variables, converted once: every render starts from them.
    jinja_globals: BTreeMap<String, JinjaValue>,
    /// The variables of the last (tools, kwargs) rendered with, converted: the renders of one
    /// rollout share them.
    base: Mutex<Option<Arc<BaseContext>>>,
}

fn tojson(value: JinjaValue, kwargs: Kwargs) -> std::result::Result<JinjaValue, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    // `separators` is accepted for compatibility; Python's defaults are what templates use.
    let _: Option<JinjaValue> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let options = PyJsonOptions {
        indent,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    // A plain string, as `transformers`' `json.dumps` filter returns (not `jinja2`'s markup).
    if options == PyJsonOptions::default() {
        if let Some(memo) = value.downcast_object_ref::<MemoJson>() {
            return Ok(JinjaValue::from(memo.json.clone()));
        }
    }
    Ok(JinjaValue::from(tojson_text(&value, &options)?))
}

/// `value|tojson(...)` as text: Python's `json.dumps` with `options`.
fn tojson_text(
    value: &JinjaValue,
    options: &PyJsonOptions,
) -> std::result::Result<String, minijinja::Error> {
    if is_py_none(value) {
        return Ok("null".into());
    }
    if value.kind() == ValueKind::Iterable {
        // A lazy iterator (Python: a generator) is not JSON-serialisable.
        return Err(minijinja::Error::new(
            JinjaErrorKind::InvalidOperation,
            "tojson: an iterator is not JSON serialisable",
        ));
    }
    if value.is_undefined() {
        // Python's json.dumps raises on jinja2's Undefined.
        return Err(minijinja::Error::new(
            JinjaErrorKind::UndefinedError,
            "tojson: value is undefined",
        ));
    }
    let json = serde_json::to_value(value).map_err(|e| {
        minijinja::Error::new(
            JinjaErrorKind::InvalidOperation,
            format!("tojson: value is not JSON-serialisable: {e}"),
        )
    })?;
    Ok(py_json_dumps_with(&json, options))
}

/// The source minijinja compiles: refused when it uses an
/// [`UnsupportedFeature`](super::UnsupportedFeature), with its `+` and `~` rewritten for the
/// markup emulation when it can create markup ([`markup`]). A source that does not parse is
/// returned unchanged: compiling it reports the syntax error.
fn prepare_source(source: String, config: &minijinja::syntax::SyntaxConfig) -> Result<String> {
    let Ok(scan) = syntax::scan(&source, config.clone()) else {
        return Ok(source);
    };
    if let Some(u) = find_unsupported(&source, &scan) {
        return Err(Error::Codec {
            message: u.to_string(),
            source: Some(Box::new(u)),
        });
    }
    if !markup::can_create_markup(&scan) || scan.operators.is_empty() {
        return Ok(source);
    }
    markup::rewrite(&source, &scan, config.clone()).map_err(|e| Error::Codec {
        message: e.to_string(),
        source: Some(Box::new(e)),
    })
}

/// `|string`: Python's `str()` (`None`, `True`, ...).
fn string_filter(value: JinjaValue) -> JinjaValue {
    if value.kind() == minijinja::value::ValueKind::String {
        return value;
    }
    let mut out = String::new();
    py_str(&value, &mut out);
    JinjaValue::from(out)
}

/// `|map(...)`: in `jinja2` a generator, which is not JSON-serialisable and has no length. Of
/// Python's `None` it yields nothing (`jinja2` maps only a truthy value).
fn map_filter(
    state: &mut minijinja::State<'_, '_>,
    value: JinjaValue,
    args: minijinja::value::Rest<minijinja::value::ValueOrKwargs>,
) -> std::result::Result<JinjaValue, minijinja::Error> {
    if is_py_none(&value) {
        return Ok(JinjaValue::make_one_shot_iterator(std::iter::empty::<
            JinjaValue,
        >()));
    }
    let items = minijinja::filters::map(state, value, args)?;
    Ok(JinjaValue::make_one_shot_iterator(items.into_iter()))
}

/// `|join(d, attribute)`: items converted with Python's `str()`.
fn join_filter(
    value: JinjaValue,
    sep: Option<String>,
    attribute: Option<JinjaValue>,
) -> std::result::Result<String, minijinja::Error> {
    let mut out = String::new();
    for (i, item) in value.try_iter()?.enumerate() {
        if i > 0 {
            out.push_str(sep.as_deref().unwrap_or(""));
        }
        let item = match &attribute {
            Some(attr) => item.get_item(attr)?,
            None => item,
        };
        py_str(&item, &mut out);
    }
    Ok(out)
}

/// The arguments of `|select`, `|reject`, `|selectattr` and `|rejectattr` after the value.
type SelectArgs = minijinja::value::Rest<minijinja::value::ValueOrKwargs>;

/// A `|select`-family filter of minijinja, except on Python's `None` (a top-level `tools=None`),
/// of which `jinja2` selects nothing (`if value:`) where minijinja's would raise.
macro_rules! none_selects_nothing {
    ($name:ident, $inner:path $(, $attr:ident)?) => {
        fn $name(
            state: &mut minijinja::State<'_, '_>,
            value: JinjaValue,
            $($attr: std::borrow::Cow<'_, str>,)?
            test_name: Option<std::borrow::Cow<'_, str>>,
            args: SelectArgs,
        ) -> std::result::Result<Vec<JinjaValue>, minijinja::Error> {
            if is_py_none(&value) {
                return Ok(Vec::new());
            }
            $inner(state, value, $($attr,)? test_name, args)
        }
    };
}

none_selects_nothing!(select_filter, minijinja::filters::select);
none_selects_nothing!(reject_filter, minijinja::filters::reject);
none_selects_nothing!(selectattr_filter, minijinja::filters::selectattr, attr);
none_selects_nothing!(rejectattr_filter, minijinja::filters::rejectattr, attr);

fn raise_exception(message: String) -> std::result::Result<JinjaValue, minijinja::Error> {
    Err(minijinja::Error::new(
        JinjaErrorKind::InvalidOperation,
        format!("raise_exception: {message}"),
    ))
}

fn strftime_now(format: String) -> std::result::Result<String, minijinja::Error> {
    let now = jiff::Zoned::now();
    jiff::fmt::strtime::format(format.as_str(), &now).map_err(|e| {
        minijinja::Error::new(
            JinjaErrorKind::InvalidOperation,
            format!("strftime_now: {e}"),
        )
    })
}

/// `for TARGET in ITER [if COND] [recursive]` becomes `for TARGET in (ITER)|__pyiter ...`, so
/// that loops iterate as Python's do (see [`py_iter`]).
fn rewrite_for(body: &str) -> Option<String> {
    let rest = body.strip_prefix("for ")?;
    let in_at = rest.find(" in ")?;
    let (targets, iter) = (&rest[..in_at], &rest[in_at + 4..]);
    // The iterable ends at the loop's own `if` filter or `recursive`, outside brackets and
    // string literals (Jinja's grammar: an unparenthesised `if` there is the loop filter).
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut end = iter.len();
    let mut prev = ' ';
    for (i, c) in iter.char_indices() {
        match quote {
            Some(q) if c == q && prev != '\\' => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                ' ' if depth == 0
                    && (iter[i..].starts_with(" if ") || iter[i..].starts_with(" recursive")) =>
                {
                    end = i;
                    break;
                }
                _ => {}
            },
        }
        prev = c;
    }
    let (expr, tail) = iter.split_at(end);
    Some(format!("for {targets} in ({})|__pyiter{tail}", expr.trim()))
}

/// What a `for` loop iterates, as in Python: `None` raises ("'NoneType' object is not
/// iterable"), and a string is iterated as a list of its characters (minijinja's own string
/// iterator has no exact length, so `loop.last` would always be false).
fn py_iter(value: JinjaValue) -> std::result::Result<JinjaValue, minijinja::Error> {
    if is_py_none(&value) {
        return Err(minijinja::Error::new(
            JinjaErrorKind::InvalidOperation,
            "'NoneType' object is not iterable",
        ));
    }
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => Ok(JinjaValue::from(
            s.chars().map(JinjaValue::from).collect::<Vec<_>>(),
        )),
        _ => Ok(value),
    }
}

/// `transformers`' `{% generation %}...{% endgeneration %}` extension marks the assistant's
/// tokens for `return_assistant_tokens_mask`; the render is the body unchanged. minijinja has no
/// custom tags, so each tag becomes an always-true `if` with the same whitespace control, which
/// renders identically (`trim_blocks`/`lstrip_blocks` treat both as block tags). `for` tags are
/// rewritten by [`rewrite_for`].
fn without_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, trail) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[body.len() - 1..]),
            None => (body, ""),
        };
        let replacement = match body.trim() {
            "generation" => Some("if true".to_owned()),
            "endgeneration" => Some("endif".to_owned()),
            b => rewrite_for(b),
        };
        match replacement {
            Some(r) => out.push_str(&format!("{{%{lead} {r} {trail}%}}")),
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

impl ChatTemplate {
    /// Makes `strftime_now` read a fixed local time (`"2024-07-26T10:30:00"`) instead of the
    /// clock: for reproducible renders of templates that print today's date (Llama 3.x).
    pub fn with_fixed_clock(mut self, local_time: &str) -> Result<Self> {
        let at: jiff::civil::DateTime = local_time.parse().map_err(|e| {
            Error::invalid_input(format!(
                "fixed clock `{local_time}` is not a local date-time: {e}"
            ))
        })?;
        self.env
            .add_function("strftime_now", move |format: String| {
                jiff::fmt::strtime::format(format.as_str(), at).map_err(|e| {
                    minijinja::Error::new(
                        JinjaErrorKind::InvalidOperation,
                        format!("strftime_now: {e}"),
                    )
                })
            });
        Ok(self)
    }

    /// Compiles `source` with `trim_blocks`, `lstrip_blocks`, loop controls, Python-style
    /// `tojson`, Python string/dict methods (`pycompat`), `raise_exception` and `strftime_now`.
    /// `globals` are the special-token variables (`eos_token`, `bos_token`, ...).
    pub fn new(source: impl Into<String>, globals: BTreeMap<String, Value>) -> Result<Self> {
        // jinja2's lexer turns `\r\n` and `\r` into `\n` (its default `newline_sequence`).
        let source = source.into().replace("\r\n", "\n").replace('\r', "\n");
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| Error::Codec {
                message: format!("template syntax config: {e}"),
                source: Some(Box::new(e)),
            })?;
        env.set_syntax(syntax.clone());
        // `str` methods as Python's (`minijinja_contrib::pycompat`), on markup as markupsafe's;
        // `safe`, `escape`, `trim`, `format`, `+` and `~` with `jinja2`'s markup semantics.
        markup::register(&mut env);
        // `{{ x }}` is Python's `str(x)`: `None`, `True`, `1e-05`, `{'k': 1}`.
        env.set_formatter(|out, _state, value| {
            let mut text = String::new();
            py_str(value, &mut text);
            out.write_str(&text).map_err(minijinja::Error::from)
        });
        env.add_filter("tojson", tojson);
        env.add_filter("string", string_filter);
        env.add_filter("join", join_filter);
        env.add_filter("map", map_filter);
        env.add_filter("select", select_filter);
        env.add_filter("reject", reject_filter);
        env.add_filter("selectattr", selectattr_filter);
        env.add_filter("rejectattr", rejectattr_filter);
        env.add_filter("__pyiter", py_iter);
        env.add_test("none", test_none);
        env.add_test("iterable", test_iterable);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        let source = prepare_source(without_generation_tags(&source), &syntax)?;
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|e| Error::Codec {
                message: format!("chat template does not compile: {e:#}"),
                source: Some(Box::new(e)),
            })?;
        let jinja_globals = globals
            .iter()
            .map(|(k, v)| (k.clone(), to_jinja(v)))
            .collect();
        Ok(Self {
            env,
            jinja_globals,
            base: Mutex::new(None),
        })
    }

    /// Renders the template like `apply_chat_template(..., tokenize=False)`.
    ///
    /// Fails with [`Error::Codec`] where `transformers` raises (`raise_exception`, type errors,
    /// undefined attribute access).
    pub fn render(&self, input: &ChatInput) -> Result<String> {
        self.render_parts(
            &input.messages,
            &input.tools,
            input.add_generation_prompt,
            &input.template_kwargs,
        )
    }

    /// [`ChatTemplate::render`] on borrowed parts: the incremental codec renders windows
    /// built from slices it already holds, without assembling a [`ChatInput`].
    pub(crate) fn render_parts<M: serde::Serialize>(
        &self,
        messages: &[M],
        tools: &[Value],
        add_generation_prompt: bool,
        template_kwargs: &Map<String, Value>,
    ) -> Result<String> {
        let base = self.base_context(tools, template_kwargs);
        let mut ctx: BTreeMap<String, JinjaValue> = base.ctx.clone();
        // `messages` and `add_generation_prompt` override the caller's variables.
        ctx.insert("messages".into(), JinjaValue::from(Serde(messages)));
        ctx.insert(
            "add_generation_prompt".into(),
            JinjaValue::from(add_generation_prompt),
        );
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| Error::Codec {
                message: format!("chat template missing: {e}"),
                source: Some(Box::new(e)),
            })?;
        template
            .render(JinjaValue::from(ctx))
            .map_err(|e| Error::Codec {
                message: format!("chat template failed: {e}"),
                source: Some(Box::new(e)),
            })
    }
}

impl ChatTemplate {
    /// The converted variables for `tools` and `kwargs`: the last ones when they match.
    fn base_context(&self, tools: &[Value], kwargs: &Map<String, Value>) -> Arc<BaseContext> {
        if let Ok(last) = self.base.lock() {
            if let Some(base) = last.as_ref().filter(|b| b.matches(tools, kwargs)) {
                return Arc::clone(base);
            }
        }
        let base = Arc::new(BaseContext::new(
            &self.jinja_globals,
            tools,
            kwargs,
            to_jinja,
            || JinjaValue::from_object(PyNone),
            |value, options| tojson_text(value, options).ok(),
        ));
        if let Ok(mut last) = self.base.lock() {
            *last = Some(Arc::clone(&base));
        }
        base
    }
}

/// A top-level template variable: JSON `null` is Python's `None` ([`PyNone`]).
fn to_jinja(v: &Value) -> JinjaValue {
    if v.is_null() {
        JinjaValue::from_object(PyNone)
    } else {
        JinjaValue::from(Serde(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, ctx: Value) -> String {
        let globals = BTreeMap::new();
        let t = ChatTemplate::new(source, globals).unwrap();
        let messages = ctx["messages"].as_array().cloned().unwrap_or_default();
        t.render(&ChatInput {
            messages,
            ..ChatInput::default()
        })
        .unwrap()
    }

    #[test]
    fn generation_blocks_render_their_body_with_the_same_whitespace() {
        let src = "{%- for m in messages %}{% generation -%}\n[{{ m.content }}]\n{%- endgeneration %}\n{% endfor %}";
        let plain =
            "{%- for m in messages %}{% if true -%}\n[{{ m.content }}]\n{%- endif %}\n{% endfor %}";
        let ctx = serde_json::json!({"messages": [{"content": "a"}, {"content": "b"}]});
        assert_eq!(render(src, ctx.clone()), render(plain, ctx));
        assert_eq!(
            without_generation_tags("{%+ generation +%}x{%- endgeneration -%}"),
            "{%+ if true +%}x{%- endif -%}"
        );
    }

    #[test]
    fn values_print_as_python_prints_them() {
        let ctx = serde_json::json!({"messages": [{"content": null, "flag": true, "x": 1e-05}]});
        let src = "{% set m = messages[0] %}{{ m.content }}|{{ m.flag }}|{{ m.x }}|{{ m.content|string }}|{{ [m.content, 1]|join(',') }}|{{ m.missing }}|{{ documents }}";
        assert_eq!(render(src, ctx), "None|True|1e-05|None|None,1||None");
    }

    #[test]
    fn select_and_map_of_none_yield_nothing() {
        // jinja2 3.1.6 with `tools=None`: '0|[]|[]|[]|[]'.
        let src = "{{ tools|selectattr('type', 'equalto', 'x')|list|length }}|{{ tools|rejectattr('type')|list }}|{{ tools|select|list }}|{{ tools|reject('none')|list }}|{{ tools|map(attribute='x')|list }}";
        assert_eq!(render(src, serde_json::json!({})), "0|[]|[]|[]|[]");
    }

    #[test]
    fn loops_iterate_like_python() {
        let ctx = serde_json::json!({"messages": [{"content": "abc", "none": null}]});
        let src = "{% for c in messages[0].content %}{{ c }}{% if not loop.last %},{% endif %}{% endfor %}";
        assert_eq!(render(src, ctx.clone()), "a,b,c");
        let src = "{% for c in messages[0].content if c != 'b' %}{{ c }}{% endfor %}";
        assert_eq!(render(src, ctx.clone()), "ac");
        let t = ChatTemplate::new(
            "{% for x in messages[0].none %}{% endfor %}",
            BTreeMap::new(),
        )
        .unwrap();
        let input = ChatInput {
            messages: ctx["messages"].as_array().cloned().unwrap_or_default(),
            ..ChatInput::default()
        };
        assert!(t.render(&input).is_err());
    }
}
