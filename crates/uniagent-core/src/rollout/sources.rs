//! [`TokenSourceRuns`]: where every token of a trajectory came from, run-length encoded.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::TokenSource;

impl TokenSource {
    /// The name written in `token_sources`: `prompt`, `sampled`, `template` or `observation`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Prompt => "prompt",
            Self::Sampled => "sampled",
            Self::TemplateGlue => "template",
            Self::Observation => "observation",
        }
    }

    /// The source named `label` (a [`TokenSource::label`], or the enum's serde name).
    pub fn from_label(label: &str) -> Option<Self> {
        Some(match label {
            "prompt" => Self::Prompt,
            "sampled" => Self::Sampled,
            "template" | "template_glue" => Self::TemplateGlue,
            "observation" => Self::Observation,
            _ => return None,
        })
    }
}

/// The source of every token of `prompt_ids` followed by `response_ids`, as runs: written as
/// `[["prompt", 120], ["sampled", 31], ["template", 5], ["observation", 40], ...]`, a few
/// entries per turn whatever the length of the trace.
///
/// ```
/// use uniagent_core::{TokenSource, TokenSourceRuns};
/// use TokenSource::*;
///
/// let runs = TokenSourceRuns::encode([Prompt, Prompt, Sampled, Sampled, TemplateGlue, Sampled]);
/// assert_eq!(serde_json::to_string(&runs).unwrap(),
///            r#"[["prompt",2],["sampled",2],["template",1],["sampled",1]]"#);
/// assert_eq!(runs.len(), 6);
/// assert_eq!(runs.expand(), vec![Prompt, Prompt, Sampled, Sampled, TemplateGlue, Sampled]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenSourceRuns(Vec<(TokenSource, u32)>);

impl TokenSourceRuns {
    /// Run-length encodes `sources`, one per token.
    pub fn encode(sources: impl IntoIterator<Item = TokenSource>) -> Self {
        let mut runs: Vec<(TokenSource, u32)> = Vec::new();
        for s in sources {
            match runs.last_mut() {
                Some((last, n)) if *last == s => *n += 1,
                _ => runs.push((s, 1)),
            }
        }
        Self(runs)
    }

    /// The runs, in token order (no run is empty; neighbours differ).
    pub fn runs(&self) -> &[(TokenSource, u32)] {
        &self.0
    }

    /// How many tokens the runs cover.
    pub fn len(&self) -> usize {
        self.0.iter().map(|(_, n)| *n as usize).sum()
    }

    /// Whether the runs cover no token.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One source per token.
    pub fn expand(&self) -> Vec<TokenSource> {
        self.0
            .iter()
            .flat_map(|(s, n)| std::iter::repeat_n(*s, *n as usize))
            .collect()
    }
}

impl Serialize for TokenSourceRuns {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for (s, n) in &self.0 {
            seq.serialize_element(&(s.label(), n))?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for TokenSourceRuns {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Runs;
        impl<'de> Visitor<'de> for Runs {
            type Value = TokenSourceRuns;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of [source, count] pairs")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut runs: Vec<(TokenSource, u32)> = Vec::new();
                while let Some((label, n)) = seq.next_element::<(String, u32)>()? {
                    let s = TokenSource::from_label(&label).ok_or_else(|| {
                        de::Error::custom(format!("unknown token source `{label}`"))
                    })?;
                    // Re-merge so that equal neighbours and empty runs never survive a round trip.
                    match runs.last_mut() {
                        _ if n == 0 => {}
                        Some((last, k)) if *last == s => *k += n,
                        _ => runs.push((s, n)),
                    }
                }
                Ok(TokenSourceRuns(runs))
            }
        }
        deserializer.deserialize_seq(Runs)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn source() -> impl Strategy<Value = TokenSource> {
        prop_oneof![
            Just(TokenSource::Prompt),
            Just(TokenSource::Sampled),
            Just(TokenSource::TemplateGlue),
            Just(TokenSource::Observation),
        ]
    }

    #[test]
    fn empty_and_unknown() {
        let runs = TokenSourceRuns::encode([]);
        assert!(runs.is_empty());
        assert_eq!(serde_json::to_string(&runs).unwrap(), "[]");
        assert!(serde_json::from_str::<TokenSourceRuns>(r#"[["tool", 3]]"#).is_err());
        let merged: TokenSourceRuns =
            serde_json::from_str(r#"[["sampled",2],["template",0],["sampled",1]]"#).unwrap();
        assert_eq!(merged.runs(), &[(TokenSource::Sampled, 3)]);
    }

    proptest! {
        #[test]
        fn round_trips_and_is_minimal(sources in proptest::collection::vec(source(), 0..200)) {
            let runs = TokenSourceRuns::encode(sources.iter().copied());
            prop_assert_eq!(runs.expand(), sources.clone());
            prop_assert_eq!(runs.len(), sources.len());
            prop_assert!(runs.runs().windows(2).all(|w| w[0].0 != w[1].0));
            prop_assert!(runs.runs().iter().all(|(_, n)| *n > 0));
            let back: TokenSourceRuns = serde_json::from_str(&serde_json::to_string(&runs).unwrap()).unwrap();
            prop_assert_eq!(back, runs);
        }
    }
}
