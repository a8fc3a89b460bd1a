//! `jinja2`'s `Markup` strings, emulated exactly for what chat templates do with them.
//!
//! In `transformers`' environment (`jinja2`'s `ImmutableSandboxedEnvironment`, autoescape off)
//! `x|safe` is a `markupsafe.Markup`, a `str` subclass whose operations keep it `Markup` and
//! HTML-escape (`&` `<` `>` `"` `'` to `&amp;` `&lt;` `&gt;` `&#34;` `&#39;`) the plain
//! strings mixed into it: `Markup + str` and `str + Markup` escape the `str`; `Markup +
//! Markup` concatenates; `Markup * n` repeats; `~` converts both sides with `str()` and escapes
//! nothing; printing a `Markup` prints its text. MeetKai Functionary v3.1 builds its tool list
//! with `"..."|safe + description + ...`, so the descriptions come out escaped.
//!
//! # Design
//!
//! A `Markup` is a minijinja *safe string* ([`Value::from_safe_string`]): it behaves as a
//! string everywhere (comparisons, `in`, `length`, tests, iteration) and carries the markup
//! status in [`Value::is_safe`]. With autoescape off nothing else makes safe strings: the
//! codec's `tojson` returns a plain string as `transformers`' does, macros and `{% set %}`
//! blocks return plain strings, and `{% autoescape %}` blocks are refused
//! ([`super::UnsupportedFeature::AutoEscapeBlock`]). What keeps or drops the status:
//!
//! - `+` and `~`: minijinja's `+` of two strings neither escapes nor keeps the flag, and an
//!   object cannot overload it, so in a template that can create markup (it names `safe`,
//!   `escape`, `e` or `forceescape`) every `left + right` becomes `__uniagent_markup_add(left,
//!   right)` and every `left ~ right` `__uniagent_markup_concat(left, right)` ([`rewrite`]).
//!   The rewrite works on minijinja's own syntax tree ([`super::syntax::scan`], the
//!   `unstable_machinery` parser): each operand is the exact source text the parser read for
//!   it, so precedence (`|filter` binds tighter than `~`, `~` than `+`), parentheses, string
//!   literals and line breaks are the parser's, and a call is a primary expression, so the
//!   replacement groups exactly as the operator did. Every rewritten operand is re-parsed and
//!   the result is scanned again to hold no `+`/`~` left; any inconsistency refuses the
//!   template instead of rendering something else. The functions do the markup cases
//!   themselves and hand every other operand pair to minijinja's own operator (a compiled `a +
//!   b` / `a ~ b` expression), so non-markup arithmetic, list concatenation and errors are
//!   unchanged. Templates that cannot create markup are not rewritten at all.
//!   (The alternatives: compiling a modified syntax tree needs minijinja's unstable code
//!   generator and VM entry points, a much larger unstable surface; a regex or hand-written
//!   parser could disagree with minijinja's grammar.)
//! - `*` needs nothing: minijinja's string repetition already keeps the flag, as
//!   `Markup.__mul__` does.
//! - Filters ([`register`]): `safe`, `escape`/`e`, `forceescape` make markup with markupsafe's
//!   escaping (minijinja's own writes `&quot;`, `&#x27;` and `&#x2f;`); `trim` keeps it;
//!   `format` on a markup format string escapes its arguments. minijinja's `upper`, `lower`,
//!   `capitalize`, `indent`, `reverse` and `last` already keep it and `title`, `replace`,
//!   `first` and the codec's `join` return plain strings, as `jinja2`'s do.
//! - `str` methods on markup ([`unknown_method`]): `strip`, `lstrip`, `rstrip`, `upper`,
//!   `lower`, `title`, `capitalize` return markup; `replace` escapes its replacement, `join` its
//!   items and `format` its arguments (markupsafe 3); `split` and `splitlines` return markup
//!   parts; predicates (`startswith`, `find`, ...) are unchanged.
//! - Printed inside a container a markup string is `Markup('...')`, as Python's `repr`.
//!
//! Not emulated: subscripts and slices of markup (`m[0]`, `m[1:]` are `Markup` in Python and
//! plain strings here; no public template does this). `str.format` fields with a conversion,
//! a format spec or an attribute on markup and `%r` in a markup `|format` fail the render with
//! an error rather than render differently. (The `%` operator on strings is minijinja's, which
//! raises for any string, markup or not.)

use std::sync::OnceLock;

use minijinja::value::{from_args, ArgType, Kwargs, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{Environment, Error, ErrorKind, Expression, State};

use super::pyrepr::py_str;
use super::syntax::{Operator, OperatorSite, Scan};

/// The function `+` becomes in a template that can create markup.
const ADD_FN: &str = "__uniagent_markup_add";
/// The function `~` becomes in a template that can create markup.
const CONCAT_FN: &str = "__uniagent_markup_concat";

/// The filters through which a `jinja2` template without autoescape creates `Markup`.
const MARKUP_FILTERS: [&str; 4] = ["safe", "escape", "e", "forceescape"];

/// Whether `value` is `Markup` (a safe string).
pub(crate) fn is_markup(value: &Value) -> bool {
    value.kind() == ValueKind::String && value.is_safe()
}

/// The text of a string value.
fn text_of(value: &Value) -> Option<&str> {
    value.as_str().filter(|_| value.kind() == ValueKind::String)
}

/// markupsafe's escape of `text`: `&` `<` `>` `'` `"` become `&amp;` `&lt;` `&gt;` `&#39;`
/// `&#34;`.
pub(crate) fn push_escaped(text: &str, out: &mut String) {
    let mut rest = text;
    while let Some(at) = rest.find(['&', '<', '>', '\'', '"']) {
        out.push_str(&rest[..at]);
        out.push_str(match rest.as_bytes()[at] {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'\'' => "&#39;",
            _ => "&#34;",
        });
        // The escaped characters are ASCII: one byte.
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// `text` escaped (see [`push_escaped`]).
pub(crate) fn escape_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_escaped(text, &mut out);
    out
}

/// Appends `markupsafe.escape(value)`'s text: markup as it is, anything else as `str(value)`
/// escaped.
fn push_escaped_value(value: &Value, out: &mut String) {
    match text_of(value) {
        Some(s) if value.is_safe() => out.push_str(s),
        Some(s) => push_escaped(s, out),
        None => {
            let mut text = String::new();
            py_str(value, &mut text);
            push_escaped(&text, out);
        }
    }
}

/// `markupsafe.escape(value)`: markup unchanged, anything else `str(value)` escaped, as markup.
pub(crate) fn escape_value(value: &Value) -> Value {
    if is_markup(value) {
        return value.clone();
    }
    let mut out = String::new();
    push_escaped_value(value, &mut out);
    Value::from_safe_string(out)
}

/// Whether a template that `scan` describes can create markup (names a markup filter, or
/// names one in a string, as `xs|map('safe')` does).
pub(crate) fn can_create_markup(scan: &Scan) -> bool {
    MARKUP_FILTERS
        .iter()
        .any(|f| scan.filters.contains(*f) || scan.strings.contains(*f))
}

/// Why [`rewrite`] could not rewrite a template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("markup operators could not be rewritten: {0}")]
pub(crate) struct RewriteError(String);

/// `source` with every `+` and `~` of `scan` turned into a call of the markup functions
/// ([`register`]), for a template that [`can_create_markup`]. See the module documentation.
pub(crate) fn rewrite(
    source: &str,
    scan: &Scan,
    syntax: minijinja::syntax::SyntaxConfig,
) -> Result<String, RewriteError> {
    let sites = scan
        .operators
        .iter()
        .map(|site| locate(source, site))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = String::with_capacity(source.len() + sites.len() * (ADD_FN.len() + 4));
    let mut next = 0;
    emit(source, &sites, &mut next, 0, source.len(), &mut out)?;
    if next != sites.len() {
        return Err(RewriteError("operator sites overlap".into()));
    }
    // The result must hold none of the operators any more (and must parse).
    let again = super::syntax::scan(&out, syntax)
        .map_err(|e| RewriteError(format!("the rewritten template does not parse: {e}")))?;
    if !again.operators.is_empty() {
        return Err(RewriteError(format!(
            "{} operators are left after the rewrite",
            again.operators.len()
        )));
    }
    Ok(out)
}

/// An operator site with the operator token's own offset.
#[derive(Debug, Clone, Copy)]
struct Located {
    op: Operator,
    start: usize,
    op_at: usize,
    end: usize,
}

/// Finds the operator token of `site`: after `left`'s last token only whitespace and the
/// closing parentheses of `left` may come before it. Both operands must parse on their own.
fn locate(source: &str, site: &OperatorSite) -> Result<Located, RewriteError> {
    let bad = |why: &str| {
        let near: String = source
            .get(site.start..)
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect();
        RewriteError(format!("{why} at `{near}`"))
    };
    let after_left = source
        .get(site.left_end..site.end)
        .ok_or_else(|| bad("operand offsets outside the template"))?;
    let skipped = after_left
        .find(|c: char| !(c.is_whitespace() || c == ')'))
        .ok_or_else(|| bad("no operator after the left operand"))?;
    if !after_left[skipped..].starts_with(site.op.token()) {
        return Err(bad("the operator does not follow the left operand"));
    }
    let op_at = site.left_end + skipped;
    let located = Located {
        op: site.op,
        start: site.start,
        op_at,
        end: site.end,
    };
    for operand in [(site.start, op_at), (op_at + 1, site.end)] {
        let text = source
            .get(operand.0..operand.1)
            .ok_or_else(|| bad("operand offsets outside the template"))?;
        minijinja::machinery::parse_expr(text)
            .map_err(|e| bad(&format!("an operand does not parse alone ({e})")))?;
    }
    Ok(located)
}

/// Writes `source[from..to]` with the sites from `sites[*next]` on that lie in it replaced by
/// calls (recursively: an operand's own sites are replaced inside the call).
fn emit(
    source: &str,
    sites: &[Located],
    next: &mut usize,
    from: usize,
    to: usize,
    out: &mut String,
) -> Result<(), RewriteError> {
    let mut at = from;
    while let Some(site) = sites.get(*next).copied() {
        if site.start >= to {
            break;
        }
        if site.start < at || site.end > to {
            return Err(RewriteError("operator sites overlap".into()));
        }
        *next += 1;
        out.push_str(&source[at..site.start]);
        out.push_str(match site.op {
            Operator::Add => ADD_FN,
            Operator::Concat => CONCAT_FN,
        });
        out.push('(');
        emit(source, sites, next, site.start, site.op_at, out)?;
        out.push(',');
        emit(source, sites, next, site.op_at + 1, site.end, out)?;
        out.push(')');
        at = site.end;
    }
    out.push_str(&source[at..to]);
    Ok(())
}

/// Which minijinja operator [`native`] evaluates.
#[derive(Debug, Clone, Copy)]
enum NativeOp {
    Add,
    Concat,
}

/// minijinja's own `a + b` / `a ~ b` on values that involve no markup: a compiled expression
/// of a plain environment with the codec's defaults (lenient undefined, no autoescape), so
/// numbers, lists, tuples and errors behave exactly as the operator in a template does.
fn native(op: NativeOp, a: Value, b: Value) -> Result<Value, Error> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    static ADD: OnceLock<Option<Expression<'static, 'static>>> = OnceLock::new();
    static CONCAT: OnceLock<Option<Expression<'static, 'static>>> = OnceLock::new();
    let env = ENV.get_or_init(Environment::new);
    let (cell, source) = match op {
        NativeOp::Add => (&ADD, "a + b"),
        NativeOp::Concat => (&CONCAT, "a ~ b"),
    };
    let expr = cell
        .get_or_init(|| env.compile_expression(source).ok())
        .as_ref()
        .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "operator does not compile"))?;
    expr.eval(minijinja::context! { a => a, b => b })
}

/// Python's name of a value's type, for error messages.
fn py_type(value: &Value) -> &'static str {
    if is_markup(value) {
        return "Markup";
    }
    match value.kind() {
        ValueKind::String => "str",
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if value.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::Seq | ValueKind::Iterable => "list",
        ValueKind::Map => "dict",
        _ => "object",
    }
}

/// `a + b` with `jinja2`'s semantics: markup plus a string escapes the string and is markup;
/// markup plus anything else raises (`TypeError`, or `UndefinedError` for an undefined side);
/// everything else is minijinja's `+`.
fn markup_add(a: Value, b: Value) -> Result<Value, Error> {
    match (text_of(&a), text_of(&b)) {
        (Some(x), Some(y)) if !a.is_safe() && !b.is_safe() => Ok(Value::from([x, y].concat())),
        (Some(_), Some(_)) => {
            let mut out = String::new();
            push_escaped_value(&a, &mut out);
            push_escaped_value(&b, &mut out);
            Ok(Value::from_safe_string(out))
        }
        _ if is_markup(&a) || is_markup(&b) => {
            if a.is_undefined() || b.is_undefined() {
                Err(Error::new(
                    ErrorKind::UndefinedError,
                    "an undefined value is added to markup",
                ))
            } else {
                Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "unsupported operand type(s) for +: '{}' and '{}'",
                        py_type(&a),
                        py_type(&b)
                    ),
                ))
            }
        }
        _ => native(NativeOp::Add, a, b),
    }
}

/// `a ~ b` with `jinja2`'s semantics without autoescape: `str(a) + str(b)`, never markup.
fn markup_concat(a: Value, b: Value) -> Result<Value, Error> {
    match (text_of(&a), text_of(&b)) {
        (Some(x), Some(y)) => Ok(Value::from([x, y].concat())),
        // minijinja's `~` makes markup only of two markup strings, handled above.
        _ => native(NativeOp::Concat, a, b),
    }
}

/// `|safe`: `Markup(value)`, i.e. `str(value)` as markup (markup unchanged).
fn safe_filter(value: Value) -> Value {
    if is_markup(&value) {
        return value;
    }
    let mut text = String::new();
    py_str(&value, &mut text);
    Value::from_safe_string(text)
}

/// `|escape` and `|e`: `markupsafe.escape(value)`.
fn escape_filter(value: Value) -> Value {
    escape_value(&value)
}

/// `|forceescape`: `escape(str(value))`, escaping markup too.
fn forceescape_filter(value: Value) -> Value {
    let mut text = String::new();
    py_str(&value, &mut text);
    Value::from_safe_string(escape_text(&text))
}

/// `|trim`: `str(value).strip(chars)` as in `jinja2`; markup stays markup.
fn trim_filter(value: Value, chars: Option<String>) -> Value {
    let mut text = String::new();
    py_str(&value, &mut text);
    let trimmed = match chars {
        Some(chars) => text.trim_matches(|c| chars.contains(c)),
        None => text.trim(),
    };
    if is_markup(&value) {
        Value::from_safe_string(trimmed.to_owned())
    } else {
        Value::from(trimmed)
    }
}

/// `value`, escaped as a markup formatting escapes an argument: markup, numbers and booleans
/// as they are (numeric conversions still apply), anything else `str(value)` escaped; the
/// values of keyword arguments likewise.
fn escaped_argument(value: &Value) -> Result<Value, Error> {
    if let Ok(kwargs) = Kwargs::from_value(Some(value)) {
        let mut escaped = Vec::new();
        for name in kwargs.args() {
            let v: Value = kwargs.peek(name)?;
            escaped.push((name.to_owned(), escaped_argument(&v)?));
        }
        return Ok(Value::from(escaped.into_iter().collect::<Kwargs>()));
    }
    Ok(match value.kind() {
        ValueKind::Number | ValueKind::Bool => value.clone(),
        _ => escape_value(value),
    })
}

/// Whether a printf-style format string uses `%r` or `%a` (which `Markup % args` fills with the
/// escaped `repr`, not emulated).
fn printf_uses_repr(format: &str) -> bool {
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        // `%(name)`, flags, width, precision and length, then the conversion.
        let mut in_name = false;
        for c in chars.by_ref() {
            match c {
                '(' => in_name = true,
                ')' if in_name => in_name = false,
                _ if in_name => {}
                '#' | '0' | '-' | ' ' | '+' | '*' | '.' | 'h' | 'l' | 'L' => {}
                _ if c.is_ascii_digit() => {}
                'r' | 'a' => return true,
                _ => break,
            }
        }
    }
    false
}

/// `|format`: on a markup format string `Markup % args`, which escapes the arguments; on a
/// plain one minijinja's `format`.
fn format_filter(
    state: &mut State<'_, '_>,
    format: Value,
    args: Rest<ValueOrKwargs>,
) -> Result<Value, Error> {
    if !is_markup(&format) {
        return minijinja::filters::format(state, &format, args);
    }
    if printf_uses_repr(text_of(&format).unwrap_or_default()) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "`%r` in a markup format string is not supported by the codec",
        ));
    }
    let escaped = args
        .0
        .iter()
        .map(|a| escaped_argument(a).map(ValueOrKwargs::from))
        .collect::<Result<Vec<_>, _>>()?;
    minijinja::filters::format(state, &format, Rest(escaped))
}

/// Whether every replacement field of a `str.format` string is plain (`{}`, `{0}`, `{name}`):
/// no conversion, format spec, attribute or index, which `Markup.format` would apply before
/// escaping.
fn str_format_fields_are_plain(format: &str) -> bool {
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
            }
            '{' => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                    if !(c.is_alphanumeric() || c == '_') {
                        return false;
                    }
                }
            }
            _ => {}
        }
    }
    true
}

/// Marks a string result as markup (other results unchanged).
fn markup_result(value: Value) -> Value {
    match text_of(&value) {
        Some(s) if !value.is_safe() => Value::from_safe_string(s.to_owned()),
        _ => value,
    }
}

/// Marks the string items of a list result as markup.
fn markup_items(value: Value) -> Result<Value, Error> {
    Ok(Value::from(
        value.try_iter()?.map(markup_result).collect::<Vec<Value>>(),
    ))
}

/// Methods on values: `str` methods on markup as markupsafe 3 defines them (see the module
/// documentation), everything else as `minijinja_contrib::pycompat`.
pub(crate) fn unknown_method(
    state: &mut State<'_, '_>,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    use minijinja_contrib::pycompat::unknown_method_callback as pycompat;
    if !is_markup(value) {
        return pycompat(state, value, method, args);
    }
    match method {
        "strip" | "lstrip" | "rstrip" | "upper" | "lower" | "title" | "capitalize" => {
            pycompat(state, value, method, args).map(markup_result)
        }
        "replace" => {
            let mut args = args.to_vec();
            if let Some(new) = args.get_mut(1) {
                *new = escape_value(new);
            }
            pycompat(state, value, method, &args).map(markup_result)
        }
        "split" | "splitlines" => pycompat(state, value, method, args).and_then(markup_items),
        "join" => {
            let (items,): (&Value,) = from_args(args)?;
            let sep = text_of(value).unwrap_or_default();
            let mut out = String::new();
            for (i, item) in items.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                push_escaped_value(&item, &mut out);
            }
            Ok(Value::from_safe_string(out))
        }
        "format" => {
            if !str_format_fields_are_plain(text_of(value).unwrap_or_default()) {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "`format` fields with a conversion, a spec or an attribute on markup are \
                     not supported by the codec",
                ));
            }
            let escaped = args
                .iter()
                .map(escaped_argument)
                .collect::<Result<Vec<_>, _>>()?;
            pycompat(state, value, method, &escaped).map(markup_result)
        }
        _ => pycompat(state, value, method, args),
    }
}

/// Registers the markup filters and operator functions and the method callback on `env`.
pub(crate) fn register(env: &mut Environment<'_>) {
    env.add_filter("safe", safe_filter);
    env.add_filter("escape", escape_filter);
    env.add_filter("e", escape_filter);
    env.add_filter("forceescape", forceescape_filter);
    env.add_filter("trim", trim_filter);
    env.add_filter("format", format_filter);
    env.add_function(ADD_FN, markup_add);
    env.add_function(CONCAT_FN, markup_concat);
    env.set_unknown_method_callback(unknown_method);
}

/// `Markup('...')`: Python's `repr` of markup with `text`.
pub(crate) fn write_markup_repr(text: &str, out: &mut String) {
    out.push_str("Markup(");
    crate::pyfmt::write_str_repr(text, out);
    out.push(')');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::syntax::scan;
    use minijinja::syntax::SyntaxConfig;

    fn rewritten(source: &str) -> String {
        let s = scan(source, SyntaxConfig::default()).unwrap();
        rewrite(source, &s, SyntaxConfig::default()).unwrap()
    }

    #[test]
    fn escape_is_markupsafes() {
        assert_eq!(
            escape_text(r#"<a href="x">&'</a> é"#),
            "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt; é"
        );
        assert_eq!(escape_text(""), "");
        assert_eq!(escape_text("plain"), "plain");
    }

    #[test]
    fn operators_become_calls_grouped_as_the_parser_grouped_them() {
        assert_eq!(
            rewritten("{{ 'a'|safe + b ~ c|upper + (d + e) }}"),
            "{{ __uniagent_markup_add(__uniagent_markup_add('a'|safe , __uniagent_markup_concat(b , c|upper)) , (__uniagent_markup_add(d , e))) }}"
        );
        assert_eq!(
            rewritten("{% set x = ((a)) + 'a + b' %}{{ -x\n+ y if z else w }}"),
            "{% set x = __uniagent_markup_add(((a)) , 'a + b') %}{{ __uniagent_markup_add(-x\n, y) if z else w }}"
        );
    }

    #[test]
    fn printf_repr_and_format_fields_are_recognised() {
        assert!(printf_uses_repr("%r"));
        assert!(printf_uses_repr("x %(k)-5r"));
        assert!(!printf_uses_repr("%s %d %% %(r)s"));
        assert!(str_format_fields_are_plain("{} {0} {name} {{x}}"));
        assert!(!str_format_fields_are_plain("{:>5}"));
        assert!(!str_format_fields_are_plain("{0.attr}"));
        assert!(!str_format_fields_are_plain("{!r}"));
    }
}
