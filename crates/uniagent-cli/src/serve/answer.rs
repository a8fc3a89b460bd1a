//! A finished rollout in verl's `AgentLoopOutput` terms: the answer of `POST /v1/rollouts`.

use serde_json::{json, Map, Value};
use uniagent_core::agent::{ExitClass, TrainingUse, Trajectory};

/// The answer for `t`: token record, reward, timings and `extra_fields`. `sampled_versions`
/// are the weight versions of the sampled tokens in order (one per mask-1 token), when the
/// generator logged them; otherwise the trajectory's own `weight_versions` are used (the
/// gateway records them per token for harness chains). `num_preempted` is verl's count over
/// the rollout's generations.
///
/// `status` is `failure` when the ending is an infrastructure failure (a sandbox, reward,
/// model-bridge or internal error, a wall-clock timeout, a cancel): verl's v1 manager then
/// marks the whole group failed instead of training on a reward the policy did not earn.
pub fn rollout_answer(
    t: &Trajectory,
    sampled_versions: Option<Vec<Option<u64>>>,
    num_preempted: i64,
) -> Value {
    let o = &t.output;
    let failure = t.exit_reason.class() == ExitClass::Infrastructure;
    let weight_versions: Vec<Option<u64>> = match (sampled_versions, &o.weight_versions) {
        (Some(versions), _) => {
            let mut sampled = versions.into_iter();
            o.response_mask
                .iter()
                .map(|&m| {
                    if m == 1 {
                        sampled.next().flatten()
                    } else {
                        None
                    }
                })
                .collect()
        }
        (None, Some(own)) => own.clone(),
        (None, None) => vec![None; o.response_mask.len()],
    };
    let steps: Vec<u64> = weight_versions.iter().flatten().copied().collect();
    let reward_score = match (failure, t.training_use()) {
        (false, TrainingUse::Train { reward }) => Some(reward),
        _ => None,
    };
    let mut extra = Map::new();
    extra.insert("exit_reason".into(), t.exit_reason.as_str().into());
    extra.insert("weight_versions".into(), json!(weight_versions));
    extra.insert("min_global_steps".into(), json!(steps.iter().min()));
    extra.insert("max_global_steps".into(), json!(steps.iter().max()));
    // verl's batch reads the keys of `reward_extra_info` from its first sample and looks
    // every other sample's up by them: the keys must be the same for every answer, so the
    // reward's own details (whose keys vary) go in `reward_details`.
    let success = if t.is_success() { 1.0 } else { 0.0 };
    extra.insert("reward_extra_info".into(), json!({ "success": success }));
    let details = t
        .reward
        .as_ref()
        .map(|r| r.details.clone())
        .unwrap_or_default();
    extra.insert("reward_details".into(), Value::Object(details));
    extra.insert("success".into(), t.is_success().into());
    extra.insert("masked".into(), t.masked.into());
    let mut answer = json!({
        "status": if failure { "failure" } else { "success" },
        "id": t.id,
        "exit_reason": t.exit_reason.as_str(),
        "exit_class": t.exit_reason.class().as_str(),
        "prompt_ids": o.prompt_ids,
        "response_ids": o.response_ids,
        "response_mask": o.response_mask,
        "response_logprobs": o.response_logprobs,
        "reward_score": reward_score,
        "num_turns": o.num_turns,
        "metrics": {
            "generate_sequences": t.timings.model,
            "tool_calls": t.timings.tools,
            "compute_score": t.timings.reward,
            "num_preempted": num_preempted,
        },
        "extra_fields": extra,
    });
    if let (Some(error), Some(map)) = (&t.error, answer.as_object_mut()) {
        map.insert("error".into(), error.clone().into());
    }
    answer
}
