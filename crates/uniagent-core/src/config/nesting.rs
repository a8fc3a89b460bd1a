//! [`check_nesting`]: refuses absurdly nested configuration text before a parser sees it.
//!
//! A YAML document nested 100,000 levels deep (`[[[[...` in a 200 KB file) took the YAML
//! parser over 30 s before any limit of the deserializer applied. Real configurations nest a
//! handful of levels, so a linear scan that measures the nesting first lets such input fail in
//! microseconds with the line it happens on.
//!
//! The scan follows YAML's structure closely enough to measure real documents exactly (block
//! mappings and sequences by indentation, compact `- - x` and `- key: v` entries, sequences
//! written at their key's indentation, flow `[...]` / `{...}` collections, quoted scalars,
//! comments and `|` / `>` block scalars); JSON is YAML, so it measures JSON too.

use crate::error::{Error, Result};

/// The deepest nesting of collections a configuration may have.
pub const MAX_NESTING: usize = 64;

/// One open block collection: its indentation and whether it is a sequence written at the
/// indentation of the key that holds it (`key:` then `- a` below it).
#[derive(Debug, Clone, Copy)]
struct Level {
    indent: usize,
    compact_seq: bool,
}

/// The deepest nesting of collections in YAML (or JSON) `text`, with the first line (1-based)
/// where it is reached; `(0, 0)` for a document without collections.
///
/// ```
/// use uniagent_core::config::nesting_depth;
/// assert_eq!(nesting_depth("a: 1\nb:\n  c: [1, {d: 2}]\n").0, 4);
/// assert_eq!(nesting_depth("- - x\n").0, 2);
/// assert_eq!(nesting_depth("42").0, 0);
/// ```
pub fn nesting_depth(text: &str) -> (usize, usize) {
    let mut scan = Scan::default();
    for (index, line) in text.lines().enumerate() {
        scan.line(line, index + 1);
        if scan.deepest > MAX_NESTING * 4 {
            // Far past any limit: the rest cannot change the verdict.
            break;
        }
    }
    (scan.deepest, scan.deepest_line)
}

/// Refuses `text` when its collections nest deeper than [`MAX_NESTING`] levels.
///
/// ```
/// use uniagent_core::config::check_nesting;
/// assert!(check_nesting("a: {b: [1, 2]}").is_ok());
/// let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
/// let err = check_nesting(&deep).unwrap_err();
/// assert!(err.to_string().contains("line 1"), "{err}");
/// ```
pub fn check_nesting(text: &str) -> Result<()> {
    let (depth, line) = nesting_depth(text);
    if depth > MAX_NESTING {
        return Err(Error::Config {
            message: format!(
                "line {line}: collections nest more than {MAX_NESTING} levels deep; \
                 a configuration this deep is refused before parsing"
            ),
            source: None,
        });
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Scan {
    /// Open block collections, outermost first.
    levels: Vec<Level>,
    /// Open flow collections (`[` and `{` not yet closed).
    flow: usize,
    /// Block levels under the open flow collections.
    flow_base: usize,
    /// Inside a quoted scalar that continues on the next line.
    quote: Option<char>,
    /// Inside a block scalar opened on a line of this indentation.
    block_scalar: Option<usize>,
    /// The column of the last block line's key when it had no value on its line (`key:`): a
    /// sequence at that column is the key's value, one level down.
    open_key: Option<usize>,
    deepest: usize,
    deepest_line: usize,
}

impl Scan {
    fn reach(&mut self, depth: usize, line: usize) {
        if depth > self.deepest {
            self.deepest = depth;
            self.deepest_line = line;
        }
    }

    fn line(&mut self, line: &str, number: usize) {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let body = &line[indent..];
        if let Some(parent) = self.block_scalar {
            if body.trim().is_empty() || indent > parent {
                return;
            }
            self.block_scalar = None;
        }
        let chars: Vec<char> = body.chars().collect();
        let mut at = 0;
        if self.quote.is_none() && self.flow == 0 {
            if body.trim().is_empty() || body.starts_with('#') || body.starts_with("---") {
                return;
            }
            let is_dash = is_dash_at(&chars, 0);
            // Only a sequence entry or a `key:` is part of a block collection; a scalar line
            // (a document that is one scalar, a plain scalar's continuation) opens nothing.
            if is_dash || find_key(&chars).is_some() {
                self.place(indent, is_dash);
            }
            // Each `- ` after the first opens a sequence at its column.
            let mut dashes = 0;
            while is_dash_at(&chars, at) {
                if dashes > 0 {
                    self.push(indent + at);
                }
                dashes += 1;
                at += 1;
                while chars.get(at) == Some(&' ') {
                    at += 1;
                }
            }
            let key = find_key(&chars[at..]);
            if dashes > 0 && key.is_some() {
                // `- key: v` opens a mapping at the key's column.
                self.push(indent + at);
            }
            self.flow_base = self.levels.len();
            let ends_open = key.is_some_and(|k| {
                chars[at + k + 1..]
                    .iter()
                    .collect::<String>()
                    .split(" #")
                    .next()
                    .is_some_and(|rest| rest.trim().is_empty())
            });
            self.open_key = ends_open.then_some(indent + at);
            let rest: String = chars[at..].iter().collect();
            if is_block_scalar_start(strip_comment(&rest).trim_end()) {
                self.block_scalar = Some(indent);
            }
        }
        let peak = self.scan_flow(&chars[at..]);
        self.reach(self.flow_base + peak, number);
    }

    fn push(&mut self, indent: usize) {
        self.levels.push(Level {
            indent,
            compact_seq: false,
        });
    }

    /// Pops the block levels a line at `indent` closes and pushes the one it opens.
    fn place(&mut self, indent: usize, is_dash: bool) {
        while let Some(top) = self.levels.last() {
            if top.indent > indent || (top.compact_seq && top.indent == indent && !is_dash) {
                self.levels.pop();
            } else {
                break;
            }
        }
        match self.levels.last().copied() {
            Some(level) if level.indent == indent => {
                if is_dash && !level.compact_seq && self.open_key == Some(indent) {
                    self.levels.push(Level {
                        indent,
                        compact_seq: true,
                    });
                }
            }
            _ => self.push(indent),
        }
    }

    /// Follows quotes and flow collections through `chars`; returns the most flow
    /// collections open at once on the line.
    fn scan_flow(&mut self, chars: &[char]) -> usize {
        let mut peak = self.flow;
        let mut last_significant: Option<char> = None;
        let mut prev: Option<char> = None;
        let mut closed_quote_at: Option<usize> = None;
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if let Some(q) = self.quote {
                if q == '"' && c == '\\' {
                    i += 2;
                    continue;
                }
                if c == q {
                    if q == '\'' && chars.get(i + 1) == Some(&'\'') {
                        i += 2;
                        continue;
                    }
                    self.quote = None;
                    last_significant = Some('a');
                    closed_quote_at = Some(i);
                }
                i += 1;
                continue;
            }
            let token_start = matches!(last_significant, None | Some(':' | ',' | '[' | '{' | '?'));
            // What the character is to the structure: an indicator, or part of a plain scalar
            // ('a'). `[`, `{`, `,` and `?` inside a plain scalar (`a{[`, `x,y`) are text, and
            // `:` is an indicator only before a space (or the line's end) or right after a
            // quoted key (`"a":[1]`).
            let mut role = 'a';
            match c {
                '#' if prev.is_none_or(char::is_whitespace) => break,
                '"' | '\'' if token_start => self.quote = Some(c),
                '[' | '{' if token_start || self.flow > 0 => {
                    self.flow += 1;
                    peak = peak.max(self.flow);
                    role = c;
                }
                ']' | '}' if self.flow > 0 => {
                    self.flow -= 1;
                    role = c;
                }
                ',' if self.flow > 0 => role = ',',
                '?' if token_start && chars.get(i + 1).is_none_or(|n| n.is_whitespace()) => {
                    role = '?';
                }
                ':' if chars.get(i + 1).is_none_or(|n| n.is_whitespace())
                    || (i > 0 && closed_quote_at == Some(i - 1)) =>
                {
                    role = ':';
                }
                _ => {}
            }
            if !c.is_whitespace() {
                last_significant = Some(role);
            }
            prev = Some(c);
            i += 1;
        }
        peak
    }
}

/// Whether a block sequence entry indicator (`-` then a space or the line's end) is at `at`.
fn is_dash_at(chars: &[char], at: usize) -> bool {
    chars.get(at) == Some(&'-') && chars.get(at + 1).is_none_or(|c| *c == ' ')
}

/// The position of a block mapping key's `:` in a line's content (outside quotes, before any
/// flow collection or comment), if the content is a `key: value` pair.
fn find_key(chars: &[char]) -> Option<usize> {
    let mut i = 0;
    match chars.first() {
        Some(&q @ ('"' | '\'')) => {
            // A quoted key: skip it (with its `\x` or `''` escapes).
            i = 1;
            loop {
                match chars.get(i) {
                    None => return None,
                    Some('\\') if q == '"' => i += 2,
                    Some(&c) if c == q => {
                        if q == '\'' && chars.get(i + 1) == Some(&'\'') {
                            i += 2;
                        } else {
                            i += 1;
                            break;
                        }
                    }
                    Some(_) => i += 1,
                }
            }
        }
        Some('[' | '{') => return None,
        _ => {}
    }
    while i < chars.len() {
        match chars[i] {
            '#' if i == 0 || chars[i - 1] == ' ' => return None,
            ':' if chars.get(i + 1).is_none_or(|n| *n == ' ') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The line without a trailing ` # comment` (used on a line's last token only).
fn strip_comment(line: &str) -> &str {
    match line.find(" #") {
        Some(at) => &line[..at],
        None => line,
    }
}

/// Whether a line ends with a block scalar indicator (`|`, `>`, with `+`, `-` or a digit)
/// as a value (`key: |`, `- >-`, or alone).
fn is_block_scalar_start(line: &str) -> bool {
    let last = line.rsplit(' ').next().unwrap_or("");
    let mut chars = last.chars();
    let indicator = matches!(chars.next(), Some('|' | '>'))
        && chars.all(|c| c == '+' || c == '-' || c.is_ascii_digit());
    let before = line[..line.len() - last.len()].trim_end();
    // A `-` glued to other text (`-- >`) is a plain scalar, not a sequence entry.
    let before_token = before.rsplit(' ').next().unwrap_or("");
    indicator && (before.is_empty() || before.ends_with(':') || before_token == "-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    /// Collections nested in `v` (a scalar is 0 deep).
    fn depth(v: &Value) -> usize {
        match v {
            Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<i32>().prop_map(Value::from),
            "[a-z #:'\"\\[\\]{}|>-]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(12, 64, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// What serde_norway writes (block style) and serde_json writes (flow style) is
        /// measured exactly.
        #[test]
        fn measures_serialized_documents_exactly(v in value()) {
            let yaml = serde_norway::to_string(&v).unwrap_or_else(|e| panic!("{e}"));
            prop_assert_eq!(nesting_depth(&yaml).0, depth(&v), "yaml:\n{}", yaml);
            let json = serde_json::to_string_pretty(&v).unwrap_or_else(|e| panic!("{e}"));
            prop_assert_eq!(nesting_depth(&json).0, depth(&v), "json:\n{}", json);
        }
    }

    #[test]
    fn hand_written_forms() {
        let cases = [
            ("a: 1\n", 1),
            ("a:\n  b:\n    c: 1\n", 3),
            ("a:\n- 1\n- 2\nb: 3\n", 2),
            ("- a: 1\n  b:\n    c: 1\n", 3),
            ("- - a: 1\n    b: [1, [2]]\n", 5),
            ("- - -- >\n  - []\n", 3),
            ("script: |\n  a:\n    b:\n      c: [[[\n", 1),
            ("cmd: echo [unbalanced\nnext: {a: 1}\n", 2),
            ("msg: 'it''s [not] flow'\n", 1),
            ("# a: {b: {c: 1}}\nx: 1 # [[[\n", 1),
            ("a: \"multi\n  line [\"\nb: 1\n", 1),
            ("- a: :{[\n", 2),
        ];
        for (text, expected) in cases {
            assert_eq!(nesting_depth(text).0, expected, "{text:?}");
        }
    }

    #[test]
    fn deep_documents_fail_fast_naming_the_line() {
        let flow = format!("a: 1\nb: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let err = check_nesting(&flow).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("64"), "{err}");
        let mut block = String::new();
        for level in 0..100 {
            block.push_str(&format!("{}k{level}:\n", "  ".repeat(level)));
        }
        assert!(check_nesting(&block).is_err());
        let dashes = format!("{}x\n", "- ".repeat(70));
        assert!(check_nesting(&dashes).is_err());
        assert!(check_nesting(&format!("{}x\n", "- ".repeat(60))).is_ok());
    }
}
