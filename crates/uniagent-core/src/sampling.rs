//! Sampling parameters passed to a model for one turn.

use serde::{Deserialize, Serialize};

/// How to sample one assistant turn.
///
/// Defaults follow the common RL rollout setting: temperature 1, no top-p/top-k truncation,
/// so that the reported log-probabilities are those of the policy's own distribution.
///
/// ```
/// use uniagent_core::SamplingParams;
/// let p: SamplingParams = serde_json::from_str(r#"{"temperature": 0.7, "max_tokens": 512}"#).unwrap();
/// assert_eq!(p.top_p, 1.0);
/// assert!(serde_json::from_str::<SamplingParams>(r#"{"temprature": 0.7}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingParams {
    /// Softmax temperature; `0.0` means greedy.
    pub temperature: f64,
    /// Nucleus sampling mass in `(0, 1]`; `1.0` disables it.
    pub top_p: f64,
    /// Keep only the `k` most likely tokens; `None` disables it.
    pub top_k: Option<u32>,
    /// Maximum tokens to generate in this turn; `None` = as many as the length limits allow.
    pub max_tokens: Option<u32>,
    /// Stop strings (the API level); token-level engines stop on `stop_token_ids`.
    pub stop: Vec<String>,
    /// Token ids that end generation (in addition to the codec's end-of-turn id).
    pub stop_token_ids: Vec<u32>,
    /// Seed for reproducible sampling, where the backend supports it.
    pub seed: Option<u64>,
    /// Ask for log-probabilities of sampled tokens (always on for token-level backends).
    pub logprobs: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: None,
            max_tokens: None,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            seed: None,
            logprobs: true,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Checks ranges; returns a message naming the bad field.
    pub fn validate(&self) -> Result<(), crate::Error> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(crate::Error::invalid_input(format!(
                "sampling.temperature must be finite and >= 0, got {}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(crate::Error::invalid_input(format!(
                "sampling.top_p must be in (0, 1], got {}",
                self.top_p
            )));
        }
        if self.top_k == Some(0) {
            return Err(crate::Error::invalid_input(
                "sampling.top_k must be >= 1 when set",
            ));
        }
        Ok(())
    }
}
