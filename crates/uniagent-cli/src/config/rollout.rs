//! `trainer.rollout`: where rollouts come from — our own loop, or a black-box harness through
//! a gateway. Read by `train` and by `serve` (a harness trained by verl).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uniagent_core::agent::LoopConfig;
use uniagent_gateway::harness::HarnessConfig;
use uniagent_gateway::GatewayConfig;

use super::{resolve, ConfigDoc, RunConfig};
use crate::error::Result;

/// Where every phase's rollouts (demonstrations, evaluations, RL) come from.
///
/// ```yaml
/// rollout:
///   source: harness                 # default: loop
///   command: [python3, agent.py]    # launched per task x sample, OPENAI_BASE_URL set
///   cwd: harness/                   # relative to the config file
///   timeout: 300
///   reward: {command: [python3, grade.py]}   # or `route`: the harness posts it
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum RolloutSection {
    /// Our own loop over the environment's tools, reward and sandboxes.
    #[default]
    Loop,
    /// An unmodified agent harness, launched per task × sample against its own gateway
    /// session; its chains are the trajectories (`uniagent_gateway::harness`).
    Harness(HarnessConfig),
}

impl RolloutSection {
    /// Decodes `value` (the `trainer.rollout` key; null: the loop), validates a harness and
    /// resolves its `cwd` against the config file's directory. Errors name
    /// `trainer.rollout` and its line.
    pub fn decode(doc: &ConfigDoc, value: Value) -> Result<Self> {
        if value.is_null() {
            return Ok(Self::Loop);
        }
        let mut rollout: Self = doc.decode(&["trainer", "rollout"], &value)?;
        if let Self::Harness(h) = &mut rollout {
            h.validate()
                .map_err(|e| doc.error_at(&["trainer".into(), "rollout".into()], e.to_string()))?;
            if let Some(cwd) = &h.cwd {
                h.cwd = Some(resolve(&doc.base_dir(), cwd));
            }
        }
        Ok(rollout)
    }

    /// The `trainer.rollout` key of `run` (the loop when absent).
    pub fn of(doc: &ConfigDoc, run: &RunConfig) -> Result<Self> {
        let value = run
            .trainer
            .as_ref()
            .and_then(|t| t.get("rollout"))
            .cloned()
            .unwrap_or(Value::Null);
        Self::decode(doc, value)
    }
}

/// The gateway a harness talks to: the loop's context window and default answer length, and
/// the policy codec's own tool parser. The harness decides its turns; these are the loop
/// settings that still apply.
pub fn harness_gateway(loop_config: &LoopConfig) -> GatewayConfig {
    GatewayConfig {
        max_model_len: loop_config.limits.max_model_len,
        default_max_tokens: loop_config
            .sampling
            .max_tokens
            .map_or(GatewayConfig::default().default_max_tokens, |n| n as usize),
        tool_parser: None,
        ..GatewayConfig::default()
    }
}
