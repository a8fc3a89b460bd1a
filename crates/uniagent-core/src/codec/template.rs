//! Hugging Face chat templates rendered with minijinja, with `transformers`' semantics.

use std::collections::BTreeMap;

use minijinja::value::{Kwargs, Value as JinjaValue};
use minijinja::{Environment, ErrorKind as JinjaErrorKind};
use serde_json::{Map, Value};

use super::pyjson::{py_json_dumps_with, PyJsonOptions};
use crate::error::{Error, Result};

const TEMPLATE_NAME: &str = "chat_template";

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
    globals: BTreeMap<String, Value>,
}

fn tojson(value: JinjaValue, kwargs: Kwargs) -> std::result::Result<JinjaValue, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    // `separators` is accepted for compatibility; Python's defaults are what templates use.
    let _: Option<JinjaValue> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value).map_err(|e| {
        minijinja::Error::new(
            JinjaErrorKind::InvalidOperation,
            format!("tojson: value is not JSON-serialisable: {e}"),
        )
    })?;
    let options = PyJsonOptions {
        indent,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    Ok(JinjaValue::from_safe_string(py_json_dumps_with(
        &json, &options,
    )))
}

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

impl ChatTemplate {
    /// Compiles `source` with `trim_blocks`, `lstrip_blocks`, loop controls, Python-style
    /// `tojson`, Python string/dict methods (`pycompat`), `raise_exception` and `strftime_now`.
    /// `globals` are the special-token variables (`eos_token`, `bos_token`, ...).
    pub fn new(source: impl Into<String>, globals: BTreeMap<String, Value>) -> Result<Self> {
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
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, source.into())
            .map_err(|e| Error::Codec {
                message: format!("chat template does not compile: {e:#}"),
                source: Some(Box::new(e)),
            })?;
        Ok(Self { env, globals })
    }

    /// Renders the template like `apply_chat_template(..., tokenize=False)`.
    ///
    /// Fails with [`Error::Codec`] where `transformers` raises (`raise_exception`, type errors,
    /// undefined attribute access).
    pub fn render(&self, input: &ChatInput) -> Result<String> {
        let mut ctx: Map<String, Value> = Map::new();
        for (k, v) in &self.globals {
            ctx.insert(k.clone(), v.clone());
        }
        for (k, v) in &input.template_kwargs {
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), Value::Array(input.messages.clone()));
        ctx.insert(
            "tools".into(),
            if input.tools.is_empty() {
                Value::Null
            } else {
                Value::Array(input.tools.clone())
            },
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Value::Bool(input.add_generation_prompt),
        );
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| Error::Codec {
                message: format!("chat template missing: {e}"),
                source: Some(Box::new(e)),
            })?;
        template
            .render(JinjaValue::from(minijinja::value::Serde(&ctx)))
            .map_err(|e| Error::Codec {
                message: format!("chat template failed: {e}"),
                source: Some(Box::new(e)),
            })
    }
}
