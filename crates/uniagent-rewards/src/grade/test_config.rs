//! Pytest's configuration inside files a fix may legitimately change (`setup.cfg`, `tox.ini`,
//! `pyproject.toml`): the patch keeps its other edits, the pytest sections go back to the base
//! commit's. An `addopts = -p plugin_in_repo` there loads code of the agent's into pytest
//! (which can rewrite reports), `--deselect` or `-k` hides tests, and neither is a fix.

use std::sync::LazyLock;

use regex::Regex;

/// The configuration files whose pytest sections are put back (by file name).
pub(crate) fn holds_pytest_sections(path: &str) -> bool {
    matches!(
        path.rsplit('/').next().unwrap_or(path),
        "setup.cfg" | "tox.ini" | "pyproject.toml"
    )
}

/// A TOML key line outside a `[tool.pytest...]` table that still sets pytest options
/// (`tool.pytest.ini_options.addopts = ...` at top level, `pytest.ini_options = {...}` in
/// `[tool]`).
static DOTTED_PYTEST_KEY: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a constant pattern
    Regex::new(r#"^\s*("?tool"?\s*\.\s*)?"?pytest"?\s*[.=]"#).expect("valid pattern")
});

/// One section: its header's name (`None` for the text before the first header) and its text
/// (header line included).
struct Section<'a> {
    name: Option<String>,
    text: &'a str,
}

fn sections(text: &str) -> Vec<Section<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut name: Option<String> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            if offset > start || name.is_some() {
                out.push(Section {
                    name: name.take(),
                    text: &text[start..offset],
                });
            }
            start = offset;
            let inner = trimmed.trim_start_matches('[');
            let inner = inner.split(']').next().unwrap_or_default();
            name = Some(inner.replace(['"', '\'', ' ', '\t'], ""));
        }
        offset += line.len();
    }
    if offset > start || name.is_some() {
        out.push(Section {
            name,
            text: &text[start..],
        });
    }
    out
}

fn is_pytest(name: Option<&str>) -> bool {
    match name {
        None => false,
        Some(n) => {
            n == "pytest"
                || n == "tool:pytest"
                || n == "tool.pytest"
                || n.starts_with("tool.pytest.")
        }
    }
}

/// What to write to the patched configuration file so pytest reads the base commit's options,
/// or `None` when the patch left them alone. `base` is the file at the base commit (`None`:
/// the patch created it).
///
/// Sections other than pytest's keep the patch's text; pytest's come from `base`, at the end
/// of the file. When a changed line outside those sections still sets pytest options (a TOML
/// dotted key), the whole file goes back to `base` (or is emptied).
pub(crate) fn restore_pytest_sections(base: Option<&str>, patched: &str) -> Option<String> {
    let base_text = base.unwrap_or_default();
    let base_sections = sections(base_text);
    let patched_sections = sections(patched);
    let pytest_text = |s: &[Section<'_>]| -> Vec<String> {
        s.iter()
            .filter(|s| is_pytest(s.name.as_deref()))
            .map(|s| s.text.trim_end().to_owned())
            .collect()
    };
    let base_lines: Vec<&str> = base_text.lines().collect();
    let dotted_edit = patched_sections
        .iter()
        .filter(|s| !is_pytest(s.name.as_deref()))
        .flat_map(|s| s.text.lines())
        .any(|l| DOTTED_PYTEST_KEY.is_match(l) && !base_lines.contains(&l));
    if dotted_edit {
        return Some(base_text.to_owned());
    }
    if pytest_text(&base_sections) == pytest_text(&patched_sections) {
        return None;
    }
    let mut out = String::new();
    for s in patched_sections
        .iter()
        .filter(|s| !is_pytest(s.name.as_deref()))
    {
        out.push_str(s.text);
    }
    for s in base_sections
        .iter()
        .filter(|s| is_pytest(s.name.as_deref()))
    {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(s.text);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE_CFG: &str =
        "[metadata]\nname = x\n\n[tool:pytest]\naddopts = -rA\n\n[flake8]\nmax-line-length = 99\n";

    #[test]
    fn other_sections_keep_the_patch_pytest_sections_come_back() {
        let patched = "[metadata]\nname = x\nversion = 2\n\n[tool:pytest]\naddopts = -rA -p evil\n\n[flake8]\nmax-line-length = 99\n";
        let out = restore_pytest_sections(Some(BASE_CFG), patched).unwrap();
        assert!(out.contains("version = 2"), "{out}");
        assert!(
            out.contains("addopts = -rA\n") && !out.contains("evil"),
            "{out}"
        );
        assert!(out.contains("[flake8]"), "{out}");
        // Untouched pytest sections: nothing to do.
        let honest = BASE_CFG.replace("name = x", "name = y");
        assert_eq!(restore_pytest_sections(Some(BASE_CFG), &honest), None);
    }

    #[test]
    fn added_sections_go_and_toml_tables_and_dotted_keys_are_caught() {
        let out =
            restore_pytest_sections(None, "[pytest]\naddopts = --deselect t.py::x\n").unwrap();
        assert_eq!(out, "");
        let base = "[project]\nname = \"x\"\n";
        let patched =
            "[project]\nname = \"x\"\n\n[tool.pytest.ini_options]\naddopts = \"-p evil\"\n";
        assert_eq!(
            restore_pytest_sections(Some(base), patched).unwrap(),
            "[project]\nname = \"x\"\n\n"
        );
        let dotted = "tool.pytest.ini_options.addopts = \"-p evil\"\n[project]\nname = \"x\"\n";
        assert_eq!(restore_pytest_sections(Some(base), dotted).unwrap(), base);
        let in_tool =
            "[project]\nname = \"x\"\n[tool]\npytest.ini_options = { addopts = \"-p evil\" }\n";
        assert_eq!(restore_pytest_sections(Some(base), in_tool).unwrap(), base);
        // A dependency on pytest is not a pytest option.
        let deps = "[project]\nname = \"x\"\ndependencies = [\"pytest>=7\"]\n";
        assert_eq!(restore_pytest_sections(Some(base), deps), None);
        assert!(holds_pytest_sections("sub/setup.cfg") && !holds_pytest_sections("setup.py"));
    }
}
