//! Template features the codec cannot render exactly as `transformers` does. They are found in
//! the template's syntax tree when it is loaded, so a template that uses one is refused up front
//! with an error naming the feature, instead of rendering (and masking) something else.
//!
//! `|safe` markup is no longer among them: [`super::markup`] emulates `jinja2`'s `Markup`.

use serde::Serialize;

use super::syntax::Scan;

/// A chat-template feature the codec does not support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum UnsupportedFeature {
    /// `{% autoescape true %}...{% endautoescape %}` (or with any argument other than a constant
    /// `false`/`none`): inside it `jinja2` HTML-escapes every printed plain string and `~`
    /// escapes its plain side, which the codec does not emulate (its markup emulation assumes
    /// `transformers`' environment, where autoescape is off).
    AutoEscapeBlock,
}

impl UnsupportedFeature {
    /// A short name of the feature.
    pub fn name(self) -> &'static str {
        match self {
            Self::AutoEscapeBlock => "`{% autoescape %}` block that turns escaping on",
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

/// The first unsupported feature the template that `scan` describes uses, if any (`source` is
/// the scanned text, for the snippet).
pub(crate) fn find_unsupported(source: &str, scan: &Scan) -> Option<UnsupportedTemplate> {
    let block = scan.autoescape.iter().find(|a| !a.statically_off)?;
    Some(UnsupportedTemplate {
        feature: UnsupportedFeature::AutoEscapeBlock,
        snippet: source
            .get(block.at..)
            .unwrap_or_default()
            .chars()
            .take(80)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::syntax::scan;
    use minijinja::syntax::SyntaxConfig;

    fn found(source: &str) -> Option<UnsupportedFeature> {
        let s = scan(source, SyntaxConfig::default()).unwrap();
        find_unsupported(source, &s).map(|u| u.feature)
    }

    #[test]
    fn escaping_autoescape_blocks_are_found_and_markup_is_not() {
        assert_eq!(
            found("{% autoescape true %}{{ x }}{% endautoescape %}"),
            Some(UnsupportedFeature::AutoEscapeBlock)
        );
        assert_eq!(
            found("{% autoescape flag %}{{ x }}{% endautoescape %}"),
            Some(UnsupportedFeature::AutoEscapeBlock)
        );
        assert_eq!(
            found("{% autoescape false %}{{ x }}{% endautoescape %}"),
            None
        );
        assert_eq!(found(r#"{{ "Use '"|safe + t["name"] }}"#), None);
        assert_eq!(found("{% if a %}{{ a + b }}{% endif %}"), None);
    }
}
