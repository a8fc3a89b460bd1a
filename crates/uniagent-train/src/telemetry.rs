//! The trainer's metrics, emitted through the `metrics` facade (`uniagent train
//! --metrics-addr` serves them). The catalogue is in every build; with `tch` the pipeline
//! publishes the step gauges once per RL step from the same record `metrics.jsonl` gets (a
//! term the step did not compute is absent there and leaves its gauge unset), and the engine
//! records each request's time to first token.

#[cfg(feature = "tch")]
use metrics::{counter, gauge};
#[cfg(feature = "tch")]
use serde_json::Value;
use uniagent_core::telemetry::{MetricDef, MetricKind};

/// RL steps done.
pub const STEPS: &str = "uniagent_trainer_steps_total";
/// The last trainer step (1-based).
pub const STEP: &str = "uniagent_trainer_step";
/// The generator's weight version after the last sync.
pub const WEIGHT_VERSION: &str = "uniagent_trainer_weight_version";
/// The last step's loss, by term (`total`, `pg`).
pub const LOSS: &str = "uniagent_trainer_loss";
/// The last step's KL to the reference (only when a KL term is computed).
pub const KL: &str = "uniagent_trainer_kl";
/// The last step's policy entropy.
pub const ENTROPY: &str = "uniagent_trainer_entropy";
/// The last step's gradient norm before clipping.
pub const GRAD_NORM: &str = "uniagent_trainer_grad_norm";
/// Largest staleness (trained version − token version) of a token the last step trained on.
pub const STALENESS: &str = "uniagent_trainer_staleness";
/// Mean reward of the last step's rollouts.
pub const MEAN_REWARD: &str = "uniagent_trainer_mean_reward";
/// Success rate of the last step's rollouts.
pub const SUCCESS_RATE: &str = "uniagent_trainer_success_rate";
/// Share of the last step the trainer spent waiting for rollouts.
pub const IDLE_RATIO: &str = "uniagent_trainer_idle_ratio";
/// Held-out success at the last evaluation.
pub const HELD_OUT_SUCCESS: &str = "uniagent_trainer_held_out_success";
/// Finished rollout groups waiting for the trainer (async mode), after it took a step's.
pub const QUEUED_GROUPS: &str = "uniagent_trainer_queued_groups";
/// Time from a request's arrival at the tch engine to its first sampled token.
pub const TIME_TO_FIRST_TOKEN: &str = "uniagent_model_time_to_first_token_seconds";

const fn gauge_def(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind: MetricKind::Gauge,
        labels,
        help,
    }
}

/// Every metric the trainer emits.
pub const CATALOGUE: &[MetricDef] = &[
    MetricDef {
        name: STEPS,
        kind: MetricKind::Counter,
        labels: &[],
        help: "RL steps done.",
    },
    gauge_def(STEP, &[], "The last trainer step."),
    gauge_def(
        WEIGHT_VERSION,
        &[],
        "The generator's weight version after the last sync.",
    ),
    gauge_def(LOSS, &["term"], "The last step's loss by term (total, pg)."),
    gauge_def(KL, &[], "The last step's KL to the reference policy."),
    gauge_def(ENTROPY, &[], "The last step's policy entropy."),
    gauge_def(
        GRAD_NORM,
        &[],
        "The last step's gradient norm before clipping.",
    ),
    gauge_def(
        STALENESS,
        &[],
        "Largest staleness of a token the last step trained on.",
    ),
    gauge_def(MEAN_REWARD, &[], "Mean reward of the last step's rollouts."),
    gauge_def(
        SUCCESS_RATE,
        &[],
        "Success rate of the last step's rollouts.",
    ),
    gauge_def(
        IDLE_RATIO,
        &[],
        "Share of the last step the trainer waited for rollouts.",
    ),
    gauge_def(
        HELD_OUT_SUCCESS,
        &[],
        "Held-out success at the last evaluation.",
    ),
    gauge_def(
        QUEUED_GROUPS,
        &[],
        "Finished rollout groups waiting for the trainer (async mode).",
    ),
    MetricDef {
        name: TIME_TO_FIRST_TOKEN,
        kind: MetricKind::Histogram,
        labels: &["backend"],
        help: "Time from a request's arrival at the engine to its first token, in seconds.",
    },
];

#[cfg(feature = "tch")]
/// Publishes the async queue's length once the trainer took its step's groups.
pub(crate) fn queued_groups(n: usize) {
    gauge!(QUEUED_GROUPS).set(n as f64);
}

#[cfg(feature = "tch")]
/// Records one request's time to first token in the tch engine.
pub(crate) fn first_token(elapsed: std::time::Duration) {
    metrics::histogram!(TIME_TO_FIRST_TOKEN, "backend" => "tch").record(elapsed.as_secs_f64());
}

#[cfg(feature = "tch")]
/// Publishes one step's record (its JSON form, as written to `metrics.jsonl`).
pub(crate) fn publish_step(record: &Value) {
    let field = |key: &str| record.get(key).and_then(Value::as_f64);
    counter!(STEPS).increment(1);
    for (name, key) in [
        (STEP, "step"),
        (WEIGHT_VERSION, "weight_version"),
        (KL, "kl"),
        (ENTROPY, "entropy"),
        (GRAD_NORM, "grad_norm"),
        (STALENESS, "staleness"),
        (MEAN_REWARD, "mean_reward"),
        (SUCCESS_RATE, "success_rate"),
        (HELD_OUT_SUCCESS, "held_out_success"),
    ] {
        if let Some(v) = field(key) {
            gauge!(name).set(v);
        }
    }
    for (term, key) in [("total", "loss"), ("pg", "pg_loss")] {
        if let Some(v) = field(key) {
            gauge!(LOSS, "term" => term).set(v);
        }
    }
    if let (Some(wait), Some(train)) = (field("rollout_wait_s"), field("train_s")) {
        if wait + train > 0.0 {
            gauge!(IDLE_RATIO).set(wait / (wait + train));
        }
    }
}

#[cfg(all(test, feature = "tch"))]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use serde_json::json;

    use super::*;

    /// Every gauge and counter a step's record publishes, as `(name{labels}, value)`.
    fn published(record: &Value) -> Vec<(String, f64)> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || publish_step(record));
        let mut out: Vec<(String, f64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let labels: Vec<String> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                let value = match value {
                    DebugValue::Counter(n) => n as f64,
                    DebugValue::Gauge(v) => v.into_inner(),
                    DebugValue::Histogram(v) => v.len() as f64,
                };
                (format!("{}{{{}}}", key.name(), labels.join(",")), value)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    #[test]
    fn a_term_the_step_did_not_compute_leaves_its_gauge_unset() {
        // No KL term, no held-out evaluation this step: no `kl` and no held-out gauge at all
        // (a 0 would read as "no divergence").
        let record = json!({"step": 3, "weight_version": 3, "loss": 0.5, "pg_loss": 0.25,
            "entropy": 1.5, "grad_norm": 2.0, "staleness": 1, "mean_reward": 0.75,
            "success_rate": 0.5, "rollout_wait_s": 3.0, "train_s": 1.0});
        let got = published(&record);
        let want = [
            ("uniagent_trainer_entropy{}", 1.5),
            ("uniagent_trainer_grad_norm{}", 2.0),
            ("uniagent_trainer_idle_ratio{}", 0.75),
            ("uniagent_trainer_loss{term=pg}", 0.25),
            ("uniagent_trainer_loss{term=total}", 0.5),
            ("uniagent_trainer_mean_reward{}", 0.75),
            ("uniagent_trainer_staleness{}", 1.0),
            ("uniagent_trainer_step{}", 3.0),
            ("uniagent_trainer_steps_total{}", 1.0),
            ("uniagent_trainer_success_rate{}", 0.5),
            ("uniagent_trainer_weight_version{}", 3.0),
        ];
        let mut want: Vec<(String, f64)> =
            want.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, want);
    }

    #[test]
    fn kl_and_held_out_success_are_published_when_computed() {
        let record = json!({"step": 1, "kl": 0.0, "held_out_success": 0.25});
        let got = published(&record);
        assert!(
            got.contains(&("uniagent_trainer_kl{}".to_owned(), 0.0)),
            "{got:?}"
        );
        assert!(
            got.contains(&("uniagent_trainer_held_out_success{}".to_owned(), 0.25)),
            "{got:?}"
        );
        // Nothing timed: no idle ratio.
        assert!(
            !got.iter().any(|(k, _)| k.starts_with(IDLE_RATIO)),
            "{got:?}"
        );
    }
}
