#!/usr/bin/env python3
"""Golden renders of jinja2's `Markup` semantics for the codec's markup tests
(crates/uniagent-core/src/codec/markup.rs, crates/uniagent-core/tests/codec_markup.rs).

In `transformers`' chat-template environment (jinja2's ImmutableSandboxedEnvironment without
autoescape, `tojson` returning a plain `str`) `x|safe` is a `markupsafe.Markup`, and what a
template does with it afterwards follows markupsafe: `Markup + str` HTML-escapes the `str`, `~`
converts both sides with `str()`, `|trim` and `str` methods return `Markup`, ... Each case below
is one small template rendered here with `transformers`' own environment; the Rust test renders
the same template with the codec and compares (the render, or that both raise).

Writes crates/uniagent-core/tests/data/codec_markup/goldens.json.

Usage: $UNIAGENT_CODEC_VENV/bin/python scripts/codec/gen_markup_goldens.py
"""

import json
from importlib.metadata import version
from pathlib import Path

from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/uniagent-core/tests/data/codec_markup/goldens.json"

# Every template sees these variables (as `template_kwargs`, next to `messages=[]`).
VARS = {
    "s": "<a href=\"x\">&'</a>",
    "t": "plain",
    "n": 3,
    "f": 1.5,
    "b": True,
    "z": None,
    "d": {"k": "<v>", "q": "'"},
    "l": ["<", "b&"],
    "tool": {"name": "get_weather", "description": "Weather in \"<city>\" & 'more'"},
}

# (name, template). Grouped by what they check.
CASES = [
    # The escape itself and where it applies.
    ("add_markup_str", "{{ 'a'|safe + s }}"),
    ("add_str_markup", "{{ s + 'a'|safe }}"),
    ("add_markup_markup", "{{ '<'|safe + '>'|safe }}"),
    ("add_str_str", "{{ s + t }}"),
    ("add_markup_status_kept", "{{ ('<'|safe + '<'|safe) + '<' }}"),
    ("add_chain_left", "{{ '<'|safe + s + t + '>' }}"),
    ("add_chain_right", "{{ s + t + '>'|safe + '<' }}"),
    ("add_parenthesised", "{{ s + ('<'|safe + s) }}"),
    ("add_nested_parentheses", "{{ ((('x'|safe))) + (('<')) }}"),
    ("add_all_specials", "{{ ''|safe + '&<>\"\\'' }}"),
    ("add_unicode", "{{ 'é'|safe + '中文 😀 <' }}"),
    ("add_empty", "{{ ''|safe + '' }}|{{ '' + ''|safe }}"),
    ("add_markup_int", "{{ 'a'|safe + 1 }}"),
    ("add_int_markup", "{{ 1 + 'a'|safe }}"),
    ("add_markup_none", "{{ 'a'|safe + z }}"),
    ("add_markup_list", "{{ 'a'|safe + l }}"),
    ("add_markup_dict", "{{ 'a'|safe + d }}"),
    ("add_markup_undefined", "{{ 'a'|safe + nothing }}"),
    ("add_undefined_markup", "{{ nothing + 'a'|safe }}"),
    ("add_markup_float", "{{ 'a'|safe + f }}"),
    ("add_markup_bool", "{{ 'a'|safe + b }}"),
    # `+` that does not involve markup is unchanged in a template that uses markup.
    ("add_plain_in_markup_template", "{{ 'x'|safe }}|{{ 1 + 2 }}|{{ 1.5 + n }}|{{ l + ['>'] }}|{{ b + 1 }}"),
    ("add_plain_str_int_raises", "{{ 'x'|safe }}{{ t + 1 }}"),
    ("add_loop_index", "{% for x in l %}{{ loop.index0 + 1 }}{{ x|safe + '>' }}{% endfor %}"),
    # Precedence: filters bind tighter than `+`, `~` tighter than `+`, `*` tighter than `~`.
    ("precedence_filter", "{{ 'a'|safe + d|tojson }}"),
    ("precedence_tilde", "{{ 'a'|safe + '<' ~ '>' }}"),
    ("precedence_mul", "{{ '<'|safe * 2 + '<' }}"),
    ("precedence_unary_minus", "{{ -n + 1 }}{{ ''|safe }}"),
    ("precedence_not", "{{ not 'a'|safe + '' }}"),
    ("precedence_compare", "{{ 'a'|safe + '<' == 'a&lt;' }}|{{ 'a'|safe + '<' == 'a<' }}"),
    ("precedence_conditional", "{{ 'a'|safe + '<' if b else 'no' }}"),
    ("precedence_and_or", "{{ ('a'|safe + '<') and ('<'|safe + s) }}"),
    ("precedence_subscript", "{{ 'a'|safe + l[0] }}|{{ 'a'|safe + d['k'] }}|{{ 'a'|safe + d.q }}"),
    # Where expressions appear: set, if, for, call and filter arguments, macros, lists, dicts.
    ("in_set", "{% set x = 'a'|safe + s %}{{ x }}|{{ x + '<' }}"),
    ("in_if", "{% if 'a'|safe + '<' == 'a&lt;' %}escaped{% else %}plain{% endif %}"),
    ("in_for", "{% for c in ('a'|safe + '<')|list %}[{{ c }}]{% endfor %}"),
    ("in_filter_argument", "{{ ['<', '>']|join('x'|safe + '&') }}"),
    ("in_call_argument", "{{ dict(k='a'|safe + '<').k }}"),
    ("in_list_and_dict", "{{ ['a'|safe + '<'][0] }}|{{ {'k': 'a'|safe + '<'}.k }}"),
    ("in_macro_default", "{% macro m(x='a'|safe + '<') %}{{ x }}{% endmacro %}{{ m() }}"),
    ("in_macro_body", "{% macro m(x) %}{{ x|safe + '<' }}{% endmacro %}{{ m('>') }}|{{ m('>') + '<' }}"),
    ("in_namespace", "{% set ns = namespace(v='') %}{% for x in l %}{% set ns.v = ns.v + x|safe %}{% endfor %}{{ ns.v }}|{{ ns.v + '<' }}"),
    ("in_loop_filter", "{% for x in l if x|safe + '<' != '<&lt;' %}{{ x }}{% endfor %}"),
    ("in_set_block", "{% set x %}{{ '<'|safe + '<' }}{% endset %}{{ x + '<' }}"),
    ("string_literal_plus_sign", "{{ 'a + b'|safe + ' + <' }}"),
    ("newlines_in_expression", "{{ 'a'|safe\n   +\n   '<' }}"),
    ("whitespace_control", "x  {{- 'a'|safe + '<' -}}  y"),
    # `~` converts both sides with str(): no escaping, and the result is plain.
    ("tilde_markup_str", "{{ 'a'|safe ~ s }}"),
    ("tilde_str_markup", "{{ s ~ 'a'|safe }}"),
    ("tilde_result_plain", "{{ ('<'|safe ~ '<'|safe) + '<' }}"),
    ("tilde_non_strings", "{{ 'a'|safe ~ n ~ f ~ b }}"),
    # `*` repeats and keeps markup.
    ("mul_markup", "{{ ('<'|safe * 2) + '<' }}|{{ (2 * '<'|safe) + '<' }}|{{ ('<'|safe * 0) + '<' }}"),
    ("mul_markup_markup", "{{ '<'|safe * '<'|safe }}"),
    # `|safe` of other values.
    ("safe_int", "{{ 1|safe + '<' }}"),
    ("safe_float", "{{ f|safe + '<' }}"),
    ("safe_none", "{{ z|safe + '<' }}"),
    ("safe_bool", "{{ b|safe + '<' }}"),
    ("safe_list", "{{ l|safe + '<' }}"),
    ("safe_dict", "{{ d|safe + '<' }}"),
    ("safe_undefined", "{{ nothing|safe + '<' }}"),
    ("safe_twice", "{{ s|safe|safe + '<' }}"),
    ("safe_prints_plain", "{{ s|safe }}|{{ [s|safe] }}"),
    # escape / e / forceescape.
    ("escape_str", "{{ s|e }}|{{ s|escape }}"),
    ("escape_markup", "{{ s|safe|e }}"),
    ("escape_then_add", "{{ s|e + '<' }}"),
    ("escape_twice", "{{ s|e|e }}"),
    ("escape_non_strings", "{{ n|e }}|{{ z|e }}|{{ l|e }}|{{ d|e }}|{{ b|e }}"),
    ("forceescape", "{{ s|safe|forceescape }}|{{ s|forceescape + '<' }}"),
    # Filters after markup: which keep it.
    ("filter_string", "{{ ('<'|safe|string) + '<' }}"),
    ("filter_trim", "{{ (' <'|safe|trim) + '<' }}|{{ ('x<x'|safe|trim('x')) + '<' }}"),
    ("filter_upper_lower", "{{ ('a<'|safe|upper) + '<' }}|{{ ('A<'|safe|lower) + '<' }}"),
    ("filter_capitalize_title", "{{ ('ab <'|safe|capitalize) + '<' }}|{{ ('ab cd'|safe|title) + '<' }}"),
    ("filter_replace", "{{ ('a<'|safe|replace('a', '>')) + '<' }}"),
    ("filter_join", "{{ (['<'|safe, '>']|join) + '<' }}|{{ (['a', 'b']|join('<'|safe)) + '<' }}"),
    ("filter_tojson", "{{ (d|tojson) + '<'|safe }}|{{ ('<'|safe|tojson) + '<' }}"),
    ("filter_length_list", "{{ ('<'|safe + '<')|length }}|{{ ('a'|safe + '<')|list }}"),
    ("filter_default", "{{ (nothing|default('<'|safe)) + '<' }}"),
    ("filter_first_last", "{{ ('<>'|safe|first) + '<' }}|{{ ('<>'|safe|last) + '<' }}"),
    ("filter_reverse", "{{ ('ab'|safe|reverse) + '<' }}"),
    ("filter_indent", "{{ ('a\nb'|safe|indent(2)) + '<' }}"),
    ("filter_format", "{{ ('%s'|safe|format('<')) + '<' }}|{{ '%s-%d-%s'|safe|format(s, 2, '<'|safe) }}|{{ '%(k)s'|safe|format(k='<') }}"),
    ("filter_format_plain", "{{ ('%s'|format('<'|safe)) + '<' }}"),
    # str methods on markup (markupsafe 3 escapes only replace's `new`, the fill characters and
    # join's items; the results are markup).
    ("method_strip", "{{ (' <'|safe).strip() + '<' }}|{{ ('<a<'|safe).strip('<') + '<' }}"),
    ("method_lstrip_rstrip", "{{ (' <'|safe).lstrip() + '<' }}|{{ ('< '|safe).rstrip() + '<' }}"),
    ("method_upper_lower", "{{ ('a'|safe).upper() + '<' }}|{{ ('A'|safe).lower() + '<' }}"),
    ("method_title_capitalize", "{{ ('ab cd'|safe).title() + '<' }}|{{ ('ab'|safe).capitalize() + '<' }}"),
    ("method_replace", "{{ ('a-a'|safe).replace('a', '<') + '<' }}|{{ ('a-a'|safe).replace('a', '<'|safe) }}|{{ ('a-a'|safe).replace('a', 'b', 1) }}"),
    ("method_split", "{% for p in ('a b'|safe).split() %}{{ p + '<' }}{% endfor %}|{% for p in ('a,b'|safe).split(',') %}{{ p + '<' }}{% endfor %}"),
    ("method_splitlines", "{% for p in ('a\nb'|safe).splitlines() %}{{ p + '<' }}{% endfor %}"),
    ("method_join", "{{ ('<'|safe).join(['a', '>', 'b'|safe]) }}|{{ ('-'|safe).join(l) + '<' }}"),
    ("method_predicates", "{{ ('<a'|safe).startswith('<') }}|{{ ('a>'|safe).endswith('>') }}|{{ ('a<a'|safe).count('a') }}|{{ ('a<'|safe).find('<') }}|{{ ('ab'|safe).isalpha() }}"),
    ("method_format", "{{ ('{}-{}'|safe).format('<', 1) + '<' }}|{{ ('{0}{k}'|safe).format('<', k='>') }}"),
    ("str_method_with_markup_argument", "{{ 'a-a'.replace('a', '<'|safe) + '<' }}|{{ '-'.join(['<'|safe, '>']) + '<' }}"),
    # Subscripts and iteration.
    ("subscript", "{{ ('<>'|safe)[0] + '<' }}"),
    ("slice", "{{ ('<>'|safe)[1:] + '<' }}"),
    ("iterate", "{% for c in '<>'|safe %}{{ c + '<' }}{% endfor %}"),
    # Comparisons and tests see the text.
    ("compare", "{{ '<'|safe == '<' }}|{{ '<' in '<>'|safe }}|{{ '<'|safe is string }}|{{ ('a'|safe + '<')|length }}"),
    # Functionary v3.1's tool line.
    ("functionary_tool_line", "{{ \"Use the function '\"|safe + tool[\"name\"] + \"' to '\"|safe + tool[\"description\"] + \"'\\n\"|safe + tool | tojson() }}"),
]


def render(template: str) -> dict:
    try:
        compiled = _compile_jinja_template(template)
        out = compiled.render(messages=[], tools=None, documents=None, add_generation_prompt=False, **VARS)
        return {"render": out}
    except Exception as e:  # noqa: BLE001 - the golden records that jinja2 raises
        return {"error": f"{type(e).__name__}: {e}"}


def main() -> None:
    names = [name for name, _ in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    cases = []
    for name, template in CASES:
        case = {"name": name, "template": template}
        case.update(render(template))
        cases.append(case)
    doc = {
        "generator": "scripts/codec/gen_markup_goldens.py",
        "versions": {p: version(p) for p in ("transformers", "jinja2", "markupsafe")},
        "vars": VARS,
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
    for case in cases:
        print(f"{case['name']:<34} {json.dumps(case.get('render', case.get('error')), ensure_ascii=False)}")


if __name__ == "__main__":
    main()
