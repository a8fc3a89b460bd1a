//! Loading configuration files (YAML, TOML, JSON) into serde structs.
//!
//! Every configuration struct in uniagent uses `#[serde(deny_unknown_fields)]` with defaults, so
//! a misspelled key fails loudly with a message that names it.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

mod nesting;
mod secret;

pub use nesting::{check_nesting, nesting_depth, MAX_NESTING};
pub use secret::{redacted, REDACTED};

/// A configuration file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    /// YAML 1.2 (`.yaml`, `.yml`).
    Yaml,
    /// TOML (`.toml`).
    Toml,
    /// JSON (`.json`).
    Json,
}

impl ConfigFormat {
    /// The format implied by a file extension.
    pub fn from_path(path: &Path) -> Result<Self> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("yaml" | "yml") => Ok(Self::Yaml),
            Some("toml") => Ok(Self::Toml),
            Some("json") => Ok(Self::Json),
            _ => Err(Error::Config {
                message: format!(
                    "{}: unknown config format (use .yaml, .yml, .toml or .json)",
                    path.display()
                ),
                source: None,
            }),
        }
    }
}

/// Parses configuration text.
///
/// ```
/// use uniagent_core::config::{parse, ConfigFormat};
/// use uniagent_core::SamplingParams;
///
/// let p: SamplingParams = parse("temperature: 0.5\nmax_tokens: 64\n", ConfigFormat::Yaml).unwrap();
/// assert_eq!(p.max_tokens, Some(64));
/// let err = parse::<SamplingParams>("temprature = 0.5", ConfigFormat::Toml).unwrap_err();
/// assert!(err.to_string().contains("temprature"));
/// ```
///
/// Text whose collections nest deeper than [`MAX_NESTING`] levels is refused before it is
/// parsed (see [`check_nesting`]).
pub fn parse<T: DeserializeOwned>(text: &str, format: ConfigFormat) -> Result<T> {
    check_nesting(text)?;
    let result: std::result::Result<T, Box<dyn std::error::Error + Send + Sync>> = match format {
        ConfigFormat::Yaml => serde_norway::from_str(text).map_err(Into::into),
        ConfigFormat::Toml => toml::from_str(text).map_err(Into::into),
        ConfigFormat::Json => serde_json::from_str(text).map_err(Into::into),
    };
    result.map_err(|e| Error::Config {
        message: e.to_string(),
        source: Some(e),
    })
}

/// Reads and parses a configuration file; the format follows the extension.
pub fn load<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<T> {
    let path = path.as_ref();
    let format = ConfigFormat::from_path(path)?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("reading config {}", path.display()), e))?;
    parse(&text, format).map_err(|e| match e {
        Error::Config { message, source } => Error::Config {
            message: format!("{}: {message}", path.display()),
            source,
        },
        other => other,
    })
}

/// Serialises a configuration to text in the given format.
pub fn to_string<T: serde::Serialize>(value: &T, format: ConfigFormat) -> Result<String> {
    let result: std::result::Result<String, Box<dyn std::error::Error + Send + Sync>> = match format
    {
        ConfigFormat::Yaml => serde_norway::to_string(value).map_err(Into::into),
        ConfigFormat::Toml => toml::to_string(value).map_err(Into::into),
        ConfigFormat::Json => serde_json::to_string_pretty(value).map_err(Into::into),
    };
    result.map_err(|e| Error::Config {
        message: e.to_string(),
        source: Some(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LengthLimits, RetryConfig, SamplingParams};

    #[test]
    fn round_trips_in_every_format() {
        let retry = RetryConfig {
            max_attempts: 7,
            jitter: 0.25,
            ..RetryConfig::default()
        };
        let limits = LengthLimits {
            max_prompt_len: Some(10),
            max_response_len: None,
            max_model_len: Some(99),
        };
        let sampling = SamplingParams {
            top_k: Some(20),
            stop: vec!["</x>".into()],
            ..SamplingParams::default()
        };
        for format in [ConfigFormat::Yaml, ConfigFormat::Toml, ConfigFormat::Json] {
            let back: RetryConfig = parse(&to_string(&retry, format).unwrap(), format).unwrap();
            assert_eq!(back, retry);
            let back: LengthLimits = parse(&to_string(&limits, format).unwrap(), format).unwrap();
            assert_eq!(back, limits);
            let back: SamplingParams =
                parse(&to_string(&sampling, format).unwrap(), format).unwrap();
            assert_eq!(back, sampling);
        }
    }

    #[test]
    fn misspelled_keys_are_named() {
        for (text, format) in [
            ("max_attempt: 3", ConfigFormat::Yaml),
            ("max_attempt = 3", ConfigFormat::Toml),
            ("{\"max_attempt\": 3}", ConfigFormat::Json),
        ] {
            let err = parse::<RetryConfig>(text, format).unwrap_err();
            assert!(err.to_string().contains("max_attempt"), "{format:?}: {err}");
        }
    }

    #[test]
    fn negative_durations_are_rejected() {
        let err = parse::<RetryConfig>("max_elapsed: -1", ConfigFormat::Yaml).unwrap_err();
        assert!(err.to_string().contains("invalid duration"), "{err}");
    }

    #[test]
    fn load_picks_the_format_from_the_extension() {
        let dir = std::env::temp_dir().join(format!("uniagent-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("retry.toml");
        std::fs::write(&path, "max_attempts = 2\n").unwrap();
        let cfg: RetryConfig = load(&path).unwrap();
        assert_eq!(cfg.max_attempts, 2);
        let err = load::<RetryConfig>(dir.join("retry.ini")).unwrap_err();
        assert!(err.to_string().contains("unknown config format"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
