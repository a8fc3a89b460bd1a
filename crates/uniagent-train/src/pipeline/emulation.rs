//! [`EmulatedDevice`]: a generator wrapper that makes every generation call last as long as it
//! would on a separate inference server (put on by its settings, [`GenerationEmulation`], a
//! [`Layer`]), for measuring async RL on a machine where generation
//! and training share the same cores. An emulation for benchmarks, off by default
//! (`generation_emulation` in [`PipelineConfig`](super::PipelineConfig)).
//!
//! The call still computes its tokens with the inner generator; the layer then sleeps for the
//! rest of the emulated time (`per_request_s + per_token_s · tokens`). Sleeping holds no core,
//! so while a rollout waits out its emulated generation time the trainer has the CPU, as it
//! would if generation ran on another device. With a tiny policy the computing part is small
//! next to the emulated time.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use uniagent_core::layer::Layer;
use uniagent_core::{Error, GenerateOutput, GenerateRequest, Result, TokenGenerator};

/// How long a generation call takes on the emulated inference device.
///
/// ```
/// use std::time::Duration;
/// use uniagent_train::pipeline::GenerationEmulation;
/// let device = GenerationEmulation { per_request_s: 0.05, per_token_s: 0.002 };
/// // 100 tokens take 0.25 s; a call that already computed for 0.1 s sleeps the rest.
/// assert_eq!(device.remaining(Duration::from_millis(100), 100), Duration::from_millis(150));
/// assert_eq!(device.remaining(Duration::from_secs(1), 100), Duration::ZERO);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GenerationEmulation {
    /// Seconds of every call (prefill, scheduling, the network hop).
    pub per_request_s: f64,
    /// Seconds per generated token (decoding).
    pub per_token_s: f64,
}

impl GenerationEmulation {
    /// What is left to sleep after a call that computed `tokens` tokens in `elapsed`.
    pub fn remaining(&self, elapsed: Duration, tokens: usize) -> Duration {
        let total = self.per_request_s + self.per_token_s * tokens as f64;
        Duration::from_secs_f64(total.max(0.0)).saturating_sub(elapsed)
    }

    /// Checks the times (finite, ≥ 0); the message names the key.
    pub fn validate(&self) -> Result<()> {
        for (key, v) in [
            ("generation_emulation.per_request_s", self.per_request_s),
            ("generation_emulation.per_token_s", self.per_token_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(format!("{key} must be a finite number >= 0")));
            }
        }
        Ok(())
    }
}

/// The emulated device is the [`Layer`] that puts it around a generator.
impl Layer<Arc<dyn TokenGenerator>> for GenerationEmulation {
    fn wrap(&self, inner: Arc<dyn TokenGenerator>) -> Arc<dyn TokenGenerator> {
        Arc::new(EmulatedDevice::new(inner, *self))
    }
}

/// `inner`, each call lasting at least the emulated device's time.
#[derive(Debug)]
pub struct EmulatedDevice<G> {
    inner: G,
    device: GenerationEmulation,
}

impl<G> EmulatedDevice<G> {
    /// Wraps `inner`.
    pub fn new(inner: G, device: GenerationEmulation) -> Self {
        Self { inner, device }
    }
}

#[async_trait]
impl<G: TokenGenerator> TokenGenerator for EmulatedDevice<G> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        let started = Instant::now();
        let out = self.inner.generate(request).await?;
        let rest = self
            .device
            .remaining(started.elapsed(), out.token_ids.len());
        if !rest.is_zero() {
            tokio::time::sleep(rest).await;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uniagent_core::FinishReason;

    /// Answers 10 tokens at once.
    #[derive(Debug)]
    struct Instant10;

    #[async_trait]
    impl TokenGenerator for Instant10 {
        fn name(&self) -> &str {
            "instant"
        }
        async fn generate(&self, _request: GenerateRequest) -> Result<GenerateOutput> {
            Ok(GenerateOutput {
                token_ids: vec![1; 10],
                logprobs: None,
                finish_reason: FinishReason::Stop,
                weight_version: None,
            })
        }
    }

    #[tokio::test]
    async fn a_call_lasts_the_emulated_time_and_returns_the_inner_output() {
        let device = GenerationEmulation {
            per_request_s: 0.03,
            per_token_s: 0.002,
        };
        let layer = EmulatedDevice::new(Instant10, device);
        let started = Instant::now();
        let out = layer
            .generate(GenerateRequest::new(vec![1, 2, 3], Default::default(), 16))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(out.token_ids.len(), 10);
        assert_eq!(layer.name(), "instant");
    }

    #[test]
    fn bad_times_name_the_key() {
        let bad = GenerationEmulation {
            per_request_s: -1.0,
            per_token_s: 0.0,
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("per_request_s"), "{e}");
        assert!(GenerationEmulation::default().validate().is_ok());
    }
}
