//! The pytest family: `parse_log_pytest` (and its aliases), `parse_log_pytest_options`,
//! `parse_log_pytest_v2`, `parse_log_matplotlib` and `parse_log_seaborn`.
//!
//! All read pytest's `-rA` summary lines (`STATUS id[ - message]`); v2 also reads progress
//! lines that end with the status word (older pytest versions).

use std::sync::LazyLock;

use regex::Regex;

use super::{compiled, ParseResult};
use crate::swebench::pytext::split;
use crate::swebench::status::{Status, StatusMap};

/// `[N]`: the location count of a `SKIPPED [N] path:line: reason` summary, not a test id.
fn is_skip_summary(status: &str, name: &str) -> bool {
    // Without the pattern (it always compiles) nothing is a skip summary.
    status == "SKIPPED" && SKIP_COUNT.as_ref().is_some_and(|re| re.is_match(name))
}

static SKIP_COUNT: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^\[\d+\]$").ok());
static ANSI_COLOUR: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\[\d+m").ok());

fn starts_with_status(line: &str) -> bool {
    Status::WORDS.iter().any(|w| line.starts_with(w))
}

/// How a summary line's test id is rewritten before it is stored.
#[derive(Clone, Copy)]
pub(super) enum Flavour {
    /// The id as written (`parse_log_pytest`).
    Plain,
    /// `MouseButton.LEFT`/`RIGHT` become `1`/`3` first (`parse_log_matplotlib`).
    Matplotlib,
    /// A parameter that is an absolute path keeps only its last component
    /// (`parse_log_pytest_options`).
    Options,
}

/// `parse_log_pytest`, `parse_log_matplotlib`, `parse_log_pytest_options`.
pub(super) fn summary(log: &str, flavour: Flavour) -> ParseResult {
    let mut map = StatusMap::new();
    for raw in log.split('\n') {
        let mut line = std::borrow::Cow::Borrowed(raw);
        if let Flavour::Matplotlib = flavour {
            line = line
                .replace("MouseButton.LEFT", "1")
                .replace("MouseButton.RIGHT", "3")
                .into();
        }
        if !starts_with_status(&line) {
            continue;
        }
        if line.starts_with("FAILED") {
            line = line.replace(" - ", " ").into();
        }
        let words = split(&line);
        if words.len() <= 1 || is_skip_summary(words[0], words[1]) {
            continue;
        }
        let id = match flavour {
            Flavour::Options => with_short_path_option(words[1]),
            _ => words[1].to_owned(),
        };
        map.insert(id, Status::from_word(words[0]));
    }
    Ok(map)
}

/// `main[option]` with an absolute-path option cut to `/last`: the id up to its first `[`, and
/// the option up to its last `]` (text after that `]` is dropped, as the package's regex does).
fn with_short_path_option(id: &str) -> String {
    let Some(open) = id.find('[') else {
        return id.to_owned();
    };
    let Some(close) = id[open + 1..].rfind(']').map(|c| open + 1 + c) else {
        return id.to_owned();
    };
    let (main, mut option) = (&id[..open], &id[open + 1..close]);
    let short;
    if option.starts_with('/') && !option.starts_with("//") && !option.contains('*') {
        short = format!("/{}", option.rsplit('/').next().unwrap_or_default());
        option = &short;
    }
    format!("{main}[{option}]")
}

/// `parse_log_pytest_v2` (astropy, scikit-learn, sphinx): colour codes and control characters
/// removed, summary lines keep the whole rest of the line as the id, and lines that end with a
/// status word are read too.
pub(super) fn v2(log: &str) -> ParseResult {
    let colour = compiled(&ANSI_COLOUR)?;
    let mut map = StatusMap::new();
    for raw in log.split('\n') {
        let line: String = colour
            .replace_all(raw, "")
            .chars()
            .filter(|c| !('\u{1}'..='\u{1f}').contains(c))
            .collect();
        if starts_with_status(&line) {
            let line = if line.starts_with("FAILED") {
                line.split(" - ").next().unwrap_or_default()
            } else {
                &line
            };
            let words = split(line);
            if words.len() >= 2 && !is_skip_summary(words[0], words[1]) {
                map.insert(words[1..].join(" "), Status::from_word(words[0]));
            }
        } else if Status::WORDS.iter().any(|w| line.ends_with(w)) {
            let words = split(&line);
            if let [head @ .., last] = words.as_slice() {
                if !head.is_empty() {
                    map.insert(head.join(" "), Status::from_word(last));
                }
            }
        }
    }
    Ok(map)
}

/// `parse_log_seaborn`: `FAILED id` and `PASSED id` summaries and `id PASSED ...` progress.
pub(super) fn seaborn(log: &str) -> ParseResult {
    let mut map = StatusMap::new();
    for line in log.split('\n') {
        let words = split(line);
        if words.len() < 2 {
            continue;
        }
        if line.starts_with("FAILED") {
            map.insert(words[1], Status::Failed);
        } else if line.contains(" PASSED ") {
            if words[1] == "PASSED" {
                map.insert(words[0], Status::Passed);
            }
        } else if line.starts_with("PASSED") {
            map.insert(words[1], Status::Passed);
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_options_keep_their_last_component() {
        assert_eq!(
            with_short_path_option("t.py::x[/a/b/c.txt]"),
            "t.py::x[/c.txt]"
        );
        assert_eq!(with_short_path_option("t.py::x[//a/b]"), "t.py::x[//a/b]");
        assert_eq!(with_short_path_option("t.py::x[/a/*]"), "t.py::x[/a/*]");
        assert_eq!(with_short_path_option("t.py::x[a][b]tail"), "t.py::x[a][b]");
        assert_eq!(with_short_path_option("t.py::x[a"), "t.py::x[a");
    }

    #[test]
    fn skip_summaries_are_not_tests() {
        assert!(is_skip_summary("SKIPPED", "[12]"));
        assert!(is_skip_summary("SKIPPED", "[١]"));
        assert!(!is_skip_summary("SKIPPED", "[]"));
        assert!(!is_skip_summary("PASSED", "[100%]"));
    }
}
