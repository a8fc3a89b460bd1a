//! Template features the codec cannot render exactly as `transformers` does. They are found in
//! the template source when it is loaded, so a template that uses one is refused up front with
//! an error naming the feature, instead of rendering (and masking) something else.

use serde::Serialize;

/// A chat-template feature the codec does not support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum UnsupportedFeature {
    /// `"text"|safe + value`: in `jinja2` a `|safe` string is `Markup`, and adding a plain
    /// string to it HTML-escapes that string (`"` becomes `&#34;`); minijinja concatenates the
    /// text unchanged. (MeetKai Functionary v3.1 writes its tool list this way.)
    SafeMarkupConcatenation,
}

impl UnsupportedFeature {
    /// A short name of the feature.
    pub fn name(self) -> &'static str {
        match self {
            Self::SafeMarkupConcatenation => "`|safe` markup concatenated with `+`",
        }
    }
}

/// The typed source of the [`Error::Codec`](crate::Error::Codec) a template with an
/// [`UnsupportedFeature`] is refused with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported chat-template feature: {} (at `{snippet}`)", .feature.name())]
pub struct UnsupportedTemplate {
    /// The feature.
    pub feature: UnsupportedFeature,
    /// The template text where it was found.
    pub snippet: String,
}

/// The expressions (`{{ ... }}`) and statements (`{% ... %}`) of a template source.
fn tags(source: &str) -> impl Iterator<Item = &str> {
    let mut rest = source;
    std::iter::from_fn(move || loop {
        let start = rest.find('{')?;
        let after = &rest[start + 1..];
        let close = match after.chars().next() {
            Some('{') => "}}",
            Some('%') => "%}",
            _ => {
                rest = after;
                continue;
            }
        };
        let Some(end) = after.find(close) else {
            rest = "";
            return None;
        };
        let tag = &after[1..end];
        rest = &after[end + close.len()..];
        return Some(tag);
    })
}

/// Code of a tag with string literals blanked out.
fn code_of(tag: &str) -> String {
    let mut out = String::with_capacity(tag.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in tag.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                    out.push(c);
                }
            }
            None => {
                if c == '"' || c == '\'' {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

/// The first unsupported feature `source` uses, if any.
pub(crate) fn find_unsupported(source: &str) -> Option<UnsupportedTemplate> {
    for tag in tags(source) {
        let code: String = code_of(tag)
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        if code.contains("|safe") && code.contains('+') {
            return Some(UnsupportedTemplate {
                feature: UnsupportedFeature::SafeMarkupConcatenation,
                snippet: tag.trim().chars().take(80).collect(),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_concatenation_is_found_and_safe_alone_is_not() {
        let found = find_unsupported(r#"{{ "Use '"|safe + t["name"] }}"#).map(|u| u.feature);
        assert_eq!(found, Some(UnsupportedFeature::SafeMarkupConcatenation));
        assert_eq!(find_unsupported("{{ x|safe }} {{ 'a|safe' + b }}"), None);
        assert_eq!(find_unsupported("{% if a %}{{ a + b }}{% endif %}"), None);
    }
}
