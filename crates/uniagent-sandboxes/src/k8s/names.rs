//! Names and label values of the objects the backend creates, within Kubernetes' rules: object
//! names are DNS-1123 labels (lowercase alphanumerics and `-`, at most 63 characters, starting
//! and ending alphanumeric), label values at most 63 characters of `[A-Za-z0-9._-]`.

use sha2::{Digest, Sha256};

/// Longest DNS-1123 label, and longest label value.
pub const MAX_NAME: usize = 63;

/// `text` as a DNS-1123 label fragment of at most `max` characters: lowercased, every run of
/// other characters one `-`, no `-` at either end; `x` when nothing is left.
///
/// ```
/// use uniagent_sandboxes::k8s::names::slug;
///
/// assert_eq!(slug("ghcr.io/Org/SWE_bench:django-11099", 40), "ghcr-io-org-swe-bench-django-11099");
/// assert_eq!(slug("///", 10), "x");
/// assert_eq!(slug("abcdef-ghij", 7), "abcdef");
/// ```
pub fn slug(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(max);
    let trimmed = out.trim_end_matches('-');
    if trimmed.is_empty() {
        "x".into()
    } else {
        trimmed.into()
    }
}

/// The first `hex` hex digits of the SHA-256 of `parts`, each part length-prefixed so that
/// `("ab", "c")` and `("a", "bc")` differ.
pub fn digest(parts: &[&[u8]], hex: usize) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .chars()
        .take(hex)
        .collect()
}

/// The name of the template and the warm pool of `image` rendered as `spec` (its JSON): the same
/// settings give the same name on every run, changed settings a new one.
///
/// ```
/// use uniagent_sandboxes::k8s::names::template_name;
///
/// let a = template_name("python:3.12-slim", b"{\"cpu\":1}");
/// assert!(a.starts_with("ua-python-3-12-slim-") && a.len() <= 63);
/// assert_eq!(a, template_name("python:3.12-slim", b"{\"cpu\":1}"));
/// assert_ne!(a, template_name("python:3.12-slim", b"{\"cpu\":2}"));
/// ```
pub fn template_name(image: &str, spec: &[u8]) -> String {
    // "ua-" + slug + "-" + 8 hex fits 63 with a slug of at most 51.
    format!(
        "ua-{}-{}",
        slug(image, MAX_NAME - 12),
        digest(&[image.as_bytes(), spec], 8)
    )
}

/// A fresh claim name for run `run_id`: `ua-<run slug>-<12 random hex>`.
pub fn claim_name(run_id: &str) -> String {
    let random: String = (0..12)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
        .collect();
    format!("ua-{}-{random}", slug(run_id, MAX_NAME - 16))
}

/// `value` when it is a valid label value, else `h-` and 40 hex digits of its hash (stable, so
/// a selector on the same input finds it).
///
/// ```
/// use uniagent_sandboxes::k8s::names::label_value;
///
/// assert_eq!(label_value("run-2026.12_06"), "run-2026.12_06");
/// assert!(label_value("a/b").starts_with("h-"));
/// assert_eq!(label_value(&"x".repeat(64)).len(), 42);
/// ```
pub fn label_value(value: &str) -> String {
    let valid = value.len() <= MAX_NAME
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && value
            .chars()
            .next()
            .is_none_or(|c| c.is_ascii_alphanumeric())
        && value
            .chars()
            .last()
            .is_none_or(|c| c.is_ascii_alphanumeric());
    if valid {
        value.into()
    } else {
        format!("h-{}", digest(&[value.as_bytes()], 40))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn is_dns_label(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= MAX_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.starts_with('-')
            && !name.ends_with('-')
    }

    proptest! {
        #[test]
        fn every_generated_name_is_a_dns_label(image in ".{0,300}", run in ".{0,300}", spec in any::<Vec<u8>>()) {
            prop_assert!(is_dns_label(&template_name(&image, &spec)), "{}", template_name(&image, &spec));
            prop_assert!(is_dns_label(&claim_name(&run)), "{}", claim_name(&run));
        }

        #[test]
        fn every_label_value_is_valid_and_stable(value in ".{0,100}") {
            let label = label_value(&value);
            prop_assert!(label.len() <= MAX_NAME);
            prop_assert!(label.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')));
            prop_assert_eq!(label, label_value(&value));
        }
    }

    #[test]
    fn claim_names_differ() {
        assert_ne!(claim_name("r"), claim_name("r"));
        assert!(claim_name("My Run!").starts_with("ua-my-run-"));
    }

    #[test]
    fn digests_separate_their_parts() {
        assert_ne!(digest(&[b"ab", b"c"], 16), digest(&[b"a", b"bc"], 16));
        assert_eq!(digest(&[b"abc"], 8).len(), 8);
    }
}
