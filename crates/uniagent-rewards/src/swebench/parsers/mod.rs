//! The log parsers of the `swebench` package's `PARSER_REGISTRY`, ported line for line for
//! every Python repository it knows, with its names and its status strings.

mod django;
mod pytest;
mod sympy;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

use regex::Regex;

use crate::error::RewardError;
use crate::swebench::pytext::universal_newlines;
use crate::swebench::status::{Status, StatusMap};

pub(crate) type ParseResult = Result<StatusMap, RewardError>;

/// A Python log parser of the package's registry.
///
/// Several names share one implementation in the package (`parse_log_flask` is
/// `parse_log_pytest`); they are kept apart here so names round-trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Parser {
    /// `parse_log_pytest` (pytest-dev/pytest)
    Pytest,
    /// `parse_log_pytest_options`
    PytestOptions,
    /// `parse_log_django` (django/django)
    Django,
    /// `parse_log_pytest_v2`
    PytestV2,
    /// `parse_log_seaborn` (mwaskom/seaborn)
    Seaborn,
    /// `parse_log_sympy` (sympy/sympy)
    Sympy,
    /// `parse_log_matplotlib` (matplotlib/matplotlib)
    Matplotlib,
    /// `parse_log_astroid` = pytest (pylint-dev/astroid)
    Astroid,
    /// `parse_log_flask` = pytest (pallets/flask)
    Flask,
    /// `parse_log_marshmallow` = pytest (marshmallow-code/marshmallow)
    Marshmallow,
    /// `parse_log_pvlib` = pytest (pvlib/pvlib-python)
    Pvlib,
    /// `parse_log_pyvista` = pytest (pyvista/pyvista)
    Pyvista,
    /// `parse_log_sqlfluff` = pytest (sqlfluff/sqlfluff)
    Sqlfluff,
    /// `parse_log_xarray` = pytest (pydata/xarray)
    Xarray,
    /// `parse_log_pydicom` = pytest_options (pydicom/pydicom)
    Pydicom,
    /// `parse_log_requests` = pytest_options (psf/requests)
    Requests,
    /// `parse_log_pylint` = pytest_options (pylint-dev/pylint)
    Pylint,
    /// `parse_log_astropy` = pytest_v2 (astropy/astropy)
    Astropy,
    /// `parse_log_scikit` = pytest_v2 (scikit-learn/scikit-learn)
    Scikit,
    /// `parse_log_sphinx` = pytest_v2 (sphinx-doc/sphinx)
    Sphinx,
}

/// `(short name, parser)` for every Python parser, in the package's registry order.
const PYTHON: [(&str, Parser); 20] = [
    ("pytest", Parser::Pytest),
    ("pytest_options", Parser::PytestOptions),
    ("django", Parser::Django),
    ("pytest_v2", Parser::PytestV2),
    ("seaborn", Parser::Seaborn),
    ("sympy", Parser::Sympy),
    ("matplotlib", Parser::Matplotlib),
    ("astroid", Parser::Astroid),
    ("flask", Parser::Flask),
    ("marshmallow", Parser::Marshmallow),
    ("pvlib", Parser::Pvlib),
    ("pyvista", Parser::Pyvista),
    ("sqlfluff", Parser::Sqlfluff),
    ("xarray", Parser::Xarray),
    ("pydicom", Parser::Pydicom),
    ("requests", Parser::Requests),
    ("pylint", Parser::Pylint),
    ("astropy", Parser::Astropy),
    ("scikit", Parser::Scikit),
    ("sphinx", Parser::Sphinx),
];

/// The registry's parsers for other languages (JS, C, Go, Java, PHP, Ruby, Rust): known names
/// that are not ported, so asking for one says so instead of "unknown".
const OTHER_LANGUAGES: [&str; 37] = [
    "calypso",
    "bpmn_js",
    "carbon",
    "eslint",
    "grommet",
    "highlightjs",
    "lighthouse",
    "next",
    "openlayers",
    "prismjs",
    "quarto_cli",
    "chart_js",
    "marked",
    "p5js",
    "react_pdf",
    "jest",
    "jest_json",
    "vitest",
    "karma",
    "tap",
    "immutable_js",
    "redis",
    "jq",
    "doctest",
    "micropython_test",
    "googletest",
    "gotest",
    "maven",
    "ant",
    "gradle_custom",
    "phpunit",
    "minitest",
    "cucumber",
    "ruby_unit",
    "rspec_transformed_json",
    "jekyll",
    "cargo",
];

/// `repo` (`owner/name`) → its parser, the package's `MAP_REPO_TO_PARSER_PY`.
const REPOS: [(&str, Parser); 18] = [
    ("astropy/astropy", Parser::Astropy),
    ("django/django", Parser::Django),
    ("marshmallow-code/marshmallow", Parser::Marshmallow),
    ("matplotlib/matplotlib", Parser::Matplotlib),
    ("mwaskom/seaborn", Parser::Seaborn),
    ("pallets/flask", Parser::Flask),
    ("psf/requests", Parser::Requests),
    ("pvlib/pvlib-python", Parser::Pvlib),
    ("pydata/xarray", Parser::Xarray),
    ("pydicom/pydicom", Parser::Pydicom),
    ("pylint-dev/astroid", Parser::Astroid),
    ("pylint-dev/pylint", Parser::Pylint),
    ("pytest-dev/pytest", Parser::Pytest),
    ("pyvista/pyvista", Parser::Pyvista),
    ("scikit-learn/scikit-learn", Parser::Scikit),
    ("sqlfluff/sqlfluff", Parser::Sqlfluff),
    ("sphinx-doc/sphinx", Parser::Sphinx),
    ("sympy/sympy", Parser::Sympy),
];

impl Parser {
    /// Every Python parser, in the package's registry order.
    pub fn all() -> impl Iterator<Item = Parser> {
        PYTHON.iter().map(|(_, p)| *p)
    }

    /// The package's name, `parse_log_<short>`.
    pub fn name(self) -> String {
        format!("parse_log_{}", self.short_name())
    }

    /// The name without the `parse_log_` prefix.
    pub fn short_name(self) -> &'static str {
        PYTHON
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("pytest", |(name, _)| name)
    }

    /// The parser the package uses for a SWE-bench repository (`owner/name`), if it is one of
    /// its Python repositories.
    pub fn for_repo(repo: &str) -> Option<Parser> {
        REPOS.iter().find(|(r, _)| *r == repo).map(|(_, p)| *p)
    }

    /// Parses a log exactly as the package's function does on the same string (no newline
    /// translation: see [`parse_log`] for the file-reading behaviour).
    ///
    /// Errors only where the package's parser raises on this input
    /// ([`RewardError::ParserFailed`]).
    pub fn parse(self, log: &str) -> Result<StatusMap, RewardError> {
        use pytest::Flavour;
        match self {
            Self::Pytest
            | Self::Astroid
            | Self::Flask
            | Self::Marshmallow
            | Self::Pvlib
            | Self::Pyvista
            | Self::Sqlfluff
            | Self::Xarray => pytest::summary(log, Flavour::Plain),
            Self::Matplotlib => pytest::summary(log, Flavour::Matplotlib),
            Self::PytestOptions | Self::Pydicom | Self::Requests | Self::Pylint => {
                pytest::summary(log, Flavour::Options)
            }
            Self::PytestV2 | Self::Astropy | Self::Scikit | Self::Sphinx => pytest::v2(log),
            Self::Seaborn => pytest::seaborn(log),
            Self::Django => django::parse(log),
            Self::Sympy => sympy::parse(log),
        }
    }
}

impl fmt::Display for Parser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "parse_log_{}", self.short_name())
    }
}

impl serde::Serialize for Parser {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Parser {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for Parser {
    type Err = RewardError;

    /// A parser by the package's name, with or without the `parse_log_` prefix.
    fn from_str(name: &str) -> Result<Self, RewardError> {
        let short = name.strip_prefix("parse_log_").unwrap_or(name);
        if let Some((_, parser)) = PYTHON.iter().find(|(n, _)| *n == short) {
            return Ok(*parser);
        }
        if OTHER_LANGUAGES.contains(&short) {
            return Err(RewardError::UnsupportedParser {
                name: name.to_owned(),
            });
        }
        Err(RewardError::UnknownParser {
            name: name.to_owned(),
            known: PYTHON
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Parses a test log with the package's parser `parser_name` (`parse_log_pytest` or `pytest`),
/// reading it as the harness reads a log file: universal newlines (`\r\n` and a lone `\r`
/// end a line). Ids map to exactly the status strings the package yields.
///
/// ```
/// use uniagent_rewards::swebench::{parse_log, Status};
/// let log = "PASSED tests/t.py::test_a\r\nFAILED tests/t.py::test_b - assert 1 == 2\n";
/// let map = parse_log("parse_log_pytest", log).unwrap();
/// assert_eq!(map["tests/t.py::test_a"], Status::Passed);
/// assert_eq!(map["tests/t.py::test_b"].as_str(), "FAILED");
/// assert!(parse_log("no_such_parser", log).is_err());
/// ```
pub fn parse_log(parser_name: &str, text: &str) -> Result<BTreeMap<String, Status>, RewardError> {
    Ok(parse_log_ordered(parser_name, text)?.to_btree())
}

/// [`parse_log`] keeping the package's dict order (first appearance of each id), which is what
/// the JSON object of `uniagent parse-log` should list.
pub fn parse_log_ordered(parser_name: &str, text: &str) -> Result<StatusMap, RewardError> {
    let parser: Parser = parser_name.parse()?;
    parser.parse(&universal_newlines(text))
}

/// A pattern compiled once; the patterns are constants covered by tests, so `None` (a pattern
/// that does not compile) is an internal error rather than a panic.
pub(crate) fn compiled(
    pattern: &'static LazyLock<Option<Regex>>,
) -> Result<&'static Regex, RewardError> {
    compiled_ref(pattern)
}

/// [`compiled`] for a pattern that is one of a list.
pub(crate) fn compiled_ref(pattern: &Option<Regex>) -> Result<&Regex, RewardError> {
    pattern.as_ref().ok_or_else(|| RewardError::ParserFailed {
        parser: "regex".into(),
        message: "a built-in pattern failed to compile".into(),
    })
}

pub(crate) fn crashed(parser: &str, message: String) -> RewardError {
    RewardError::ParserFailed {
        parser: parser.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_with_and_without_the_prefix() {
        for parser in Parser::all() {
            assert_eq!(parser.name().parse::<Parser>().unwrap(), parser);
            assert_eq!(parser.short_name().parse::<Parser>().unwrap(), parser);
        }
        assert_eq!(Parser::all().count(), 20);
        assert!(matches!(
            "parse_log_jest".parse::<Parser>(),
            Err(RewardError::UnsupportedParser { .. })
        ));
        let err = "parse_log_nose".parse::<Parser>().unwrap_err();
        assert!(err.to_string().contains("parse_log_nose"), "{err}");
        assert_eq!(Parser::for_repo("django/django"), Some(Parser::Django));
    }
}
