//! Finds the line of a dotted key path in YAML or TOML text, so that errors found on the
//! parsed value (after `--set` overrides) can still point at the line of the file.
//!
//! A best-effort scan of the text, not a parser: it follows indentation (YAML) or table
//! headers (TOML), and answers `None` when it cannot tell.

use uniagent_core::config::ConfigFormat;

/// 1-based line of the deepest key of `path` that can be found in `text`.
pub fn line_of(text: &str, format: ConfigFormat, path: &[String]) -> Option<usize> {
    let keys: Vec<&str> = path
        .iter()
        .map(String::as_str)
        .filter(|k| k.parse::<usize>().is_err())
        .collect();
    if keys.is_empty() {
        return None;
    }
    match format {
        ConfigFormat::Yaml => yaml_line(text, &keys),
        ConfigFormat::Toml => toml_line(text, &keys),
        ConfigFormat::Json => json_line(text, &keys),
    }
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '-']).len()
}

/// The key a YAML line starts with (`key:` or `- key:`), if any.
fn yaml_key(line: &str) -> Option<&str> {
    let t = line.trim_start_matches([' ', '-']);
    if t.starts_with('#') {
        return None;
    }
    let (key, _) = t.split_once(':')?;
    Some(key.trim().trim_matches(['"', '\'']))
}

fn yaml_line(text: &str, keys: &[&str]) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    fn content(l: &&&str) -> bool {
        !l.trim().is_empty() && !l.trim_start().starts_with('#')
    }
    let mut found = None;
    let mut start = 0;
    let mut parent_indent: Option<usize> = None;
    for key in keys {
        // The children of the parent are the lines at the indentation of its first child.
        let Some(level) = lines.iter().skip(start).find(content).map(|l| indent_of(l)) else {
            break;
        };
        if parent_indent.is_some_and(|p| level <= p) {
            break;
        }
        let mut hit = None;
        for (i, line) in lines.iter().enumerate().skip(start) {
            if !content(&line) {
                continue;
            }
            let indent = indent_of(line);
            if indent < level {
                break;
            }
            if indent == level && yaml_key(line) == Some(key) {
                hit = Some(i);
                break;
            }
        }
        match hit {
            Some(i) => {
                found = Some(i + 1);
                start = i + 1;
                parent_indent = Some(level);
            }
            None => break,
        }
    }
    found
}

fn toml_header(line: &str) -> Option<String> {
    let t = line.trim();
    let inner = t
        .strip_prefix("[[")
        .and_then(|s| s.strip_suffix("]]"))
        .or_else(|| t.strip_prefix('[').and_then(|s| s.strip_suffix(']')))?;
    Some(
        inner
            .split('.')
            .map(|p| p.trim().trim_matches('"'))
            .collect::<Vec<_>>()
            .join("."),
    )
}

fn toml_assigns(line: &str, key: &str) -> bool {
    let t = line.trim_start();
    t.strip_prefix(key)
        .is_some_and(|rest| rest.trim_start().starts_with('=') || rest.starts_with('.'))
}

fn toml_line(text: &str, keys: &[&str]) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut best: Option<(usize, usize)> = None; // (depth matched, line)
    for split in 0..=keys.len() {
        let table = keys[..split].join(".");
        let rest = &keys[split..];
        let mut in_table = split == 0;
        for (i, line) in lines.iter().enumerate() {
            if let Some(h) = toml_header(line) {
                in_table = h == table;
                // `[a.b]` also opens `a` when `a` has no header of its own.
                let opens = in_table || (split > 0 && h.starts_with(&format!("{table}.")));
                if opens && rest.is_empty() && best.is_none_or(|(d, _)| d < split) {
                    best = Some((split, i + 1));
                }
                continue;
            }
            if !in_table {
                continue;
            }
            for take in (1..=rest.len()).rev() {
                if toml_assigns(line, &rest[..take].join(".")) {
                    let depth = split + take;
                    if best.is_none_or(|(d, _)| d < depth) {
                        best = Some((depth, i + 1));
                    }
                    break;
                }
            }
        }
    }
    best.map(|(_, line)| line)
}

fn json_line(text: &str, keys: &[&str]) -> Option<usize> {
    let last = keys.last()?;
    let needle = format!("\"{last}\"");
    text.lines()
        .position(|l| l.contains(&needle))
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        s.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn yaml_follows_indentation() {
        let text = "tasks:\n  path: a.jsonl\nloop:\n  max_turns: 3\n  limits:\n    max_model_len: 9\nrunner:\n  max_turns: 1\n";
        let y = ConfigFormat::Yaml;
        assert_eq!(line_of(text, y, &p("loop.max_turns")), Some(4));
        assert_eq!(line_of(text, y, &p("loop.limits.max_model_len")), Some(6));
        assert_eq!(line_of(text, y, &p("runner.max_turns")), Some(8));
        // A key that is absent: the deepest parent found.
        assert_eq!(line_of(text, y, &p("loop.sampling")), Some(3));
        assert_eq!(line_of(text, y, &p("nothing")), None);
    }

    #[test]
    fn toml_follows_tables_and_dotted_keys() {
        let text = "[tasks]\npath = \"a\"\n\n[loop]\nmax_turns = 3\nlimits.max_model_len = 9\n\n[runner]\nmax_turns = 1\n";
        let t = ConfigFormat::Toml;
        assert_eq!(line_of(text, t, &p("loop.max_turns")), Some(5));
        assert_eq!(line_of(text, t, &p("loop.limits.max_model_len")), Some(6));
        assert_eq!(line_of(text, t, &p("runner.max_turns")), Some(9));
        assert_eq!(line_of(text, t, &p("runner")), Some(8));
    }
}
