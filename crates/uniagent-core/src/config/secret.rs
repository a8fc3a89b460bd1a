//! Keeping secrets of a configuration (API keys, tokens) out of `Debug` output and logs.

/// What `Debug` prints instead of a secret.
pub const REDACTED: &str = "<redacted>";

/// Formats an optional secret for `Debug`: whether it is set, never its value.
///
/// ```
/// use uniagent_core::config::redacted;
/// assert_eq!(redacted(Some("sk-123")), "<redacted>");
/// assert_eq!(redacted(Some("")), "<none>");
/// assert_eq!(redacted(None), "<none>");
/// ```
pub fn redacted(secret: Option<&str>) -> &'static str {
    match secret {
        Some(s) if !s.is_empty() => REDACTED,
        _ => "<none>",
    }
}
