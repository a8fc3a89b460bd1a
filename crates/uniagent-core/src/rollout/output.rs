//! verl's `AgentLoopOutput`, the record a rollout hands to the trainer.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Timing of one rollout, as verl's `AgentLoopMetrics` (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AgentLoopMetrics {
    /// Time spent generating.
    pub generate_sequences: f64,
    /// Time spent in tool calls.
    pub tool_calls: f64,
    /// Time spent computing the reward.
    pub compute_score: f64,
    /// Preemptions; -1 = unknown.
    pub num_preempted: i64,
}

impl Default for AgentLoopMetrics {
    fn default() -> Self {
        Self {
            generate_sequences: 0.0,
            tool_calls: 0.0,
            compute_score: 0.0,
            num_preempted: -1,
        }
    }
}

/// verl's `AgentLoopOutput` (0.9.1): field names and meanings match, so the JSON can be loaded
/// by a verl agent loop unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentLoopOutput {
    /// Initial prompt tokens.
    pub prompt_ids: Vec<u32>,
    /// Everything after the prompt: sampled, template and observation tokens.
    pub response_ids: Vec<u32>,
    /// 1 = sampled by the policy.
    pub response_mask: Vec<u8>,
    /// Engine logprob per response token (0.0 where mask is 0); `None` without token data.
    pub response_logprobs: Option<Vec<f32>>,
    /// Provenance: the weight version of the policy that sampled each response token (same
    /// length as `response_ids`); `null` on mask-0 tokens and where the backend tracks no
    /// version. `None` without token data. Staleness is computed from it, and tokens of a
    /// partial rollout resumed after a weight update keep the version that produced them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_versions: Option<Vec<Option<u64>>>,
    /// Trajectory reward, when computed by the loop.
    pub reward_score: Option<f64>,
    /// user turns + assistant turns + 1, as verl's `ToolAgentLoop` counts.
    pub num_turns: u32,
    /// Timing.
    pub metrics: AgentLoopMetrics,
    /// Free-form: exit reason, per-phase timings, reward details.
    pub extra_fields: Map<String, Value>,
    /// Provenance for inspection (not read by verl): where each token of `prompt_ids` then
    /// `response_ids` came from, run-length encoded. `None` without token data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sources: Option<super::TokenSourceRuns>,
    /// The chat template's full render of the token-traced messages, written only when the
    /// codec flagged the rollout as not append-only (the trace then differs from it): what a
    /// re-tokenizing trainer would have seen instead. `None` for append-only rollouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerender_ids: Option<Vec<u32>>,
}

impl AgentLoopOutput {
    /// The JSON keys of the token-level fields, in the order a reader walks a trace.
    pub const TOKEN_FIELDS: [&'static str; 7] = [
        "prompt_ids",
        "response_ids",
        "response_mask",
        "response_logprobs",
        "weight_versions",
        "token_sources",
        "rerender_ids",
    ];
}
