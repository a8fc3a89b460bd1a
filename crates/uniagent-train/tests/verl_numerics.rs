//! Parity with the real verl 0.9.1: `tests/verl/golden.py` computes, with verl's own functions
//! in `.venv-torch`, advantages, policy losses (values and gradients w.r.t. `log_prob`), KL
//! estimators and entropy on random batches and edge cases; our functions must match within
//! 1e-5 (relative for values above 1).
//!
//! Needs `UNIAGENT_TORCH_VENV` (exported by `scripts/env/torch.sh`): when it is set and the venv
//! or verl is missing the tests fail; when it is unset (outside `scripts/test`) they skip with a
//! printed reason.
#![cfg(feature = "tch")]
// Helpers outside #[test] functions unwrap too: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use tch::{Kind, Tensor};
use uniagent_train::rl::*;

const TOL: f64 = 1e-5;

fn golden() -> Option<&'static Value> {
    static GOLDEN: OnceLock<Option<Value>> = OnceLock::new();
    GOLDEN.get_or_init(generate).as_ref()
}

fn generate() -> Option<Value> {
    let Some(venv) = std::env::var_os("UNIAGENT_TORCH_VENV") else {
        eprintln!("SKIP verl parity: UNIAGENT_TORCH_VENV is unset (source scripts/env/torch.sh)");
        return None;
    };
    let python = PathBuf::from(venv).join("bin/python");
    assert!(
        python.exists(),
        "UNIAGENT_TORCH_VENV is set but {} is missing: run scripts/setup/30-torch.sh",
        python.display()
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/verl/golden.py");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("golden.json");
    let status = Command::new(&python)
        .arg(&script)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "golden.py failed (is verl 0.9.1 installed in the venv?):\n{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let value: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(
        value["verl"], "0.9.1",
        "golden values must come from verl 0.9.1"
    );
    Some(value)
}

fn cases() -> Vec<&'static Value> {
    match golden() {
        Some(g) => g["cases"].as_array().unwrap().iter().collect(),
        None => Vec::new(),
    }
}

fn close(ours: f64, theirs: f64, what: &str) {
    let tol = TOL * theirs.abs().max(1.0);
    assert!(
        (ours - theirs).abs() <= tol || (ours.is_nan() && theirs.is_nan()),
        "{what}: ours {ours} vs verl {theirs}"
    );
}

fn close_rows(ours: &[Vec<f32>], theirs: &Value, what: &str) {
    let theirs = theirs.as_array().unwrap();
    assert_eq!(ours.len(), theirs.len(), "{what}: row count");
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        let b = b.as_array().unwrap();
        assert_eq!(a.len(), b.len(), "{what}: width of row {i}");
        for (j, (x, y)) in a.iter().zip(b).enumerate() {
            close(
                f64::from(*x),
                y.as_f64().unwrap(),
                &format!("{what}[{i}][{j}]"),
            );
        }
    }
}

fn close_tensor(ours: &Tensor, theirs: &Value, what: &str) {
    let flat: Vec<f64> = Vec::try_from(ours.detach().to_kind(Kind::Double).flatten(0, -1)).unwrap();
    let mut expected = Vec::new();
    flatten(theirs, &mut expected);
    assert_eq!(flat.len(), expected.len(), "{what}: element count");
    for (k, (x, y)) in flat.iter().zip(&expected).enumerate() {
        close(*x, *y, &format!("{what}[flat {k}]"));
    }
}

fn flatten(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Array(items) => items.iter().for_each(|x| flatten(x, out)),
        other => out.push(other.as_f64().unwrap()),
    }
}

fn tensor(v: &Value) -> Tensor {
    let rows = v.as_array().unwrap();
    let t = rows[0].as_array().unwrap().len() as i64;
    let mut flat = Vec::new();
    flatten(v, &mut flat);
    let flat: Vec<f32> = flat.into_iter().map(|x| x as f32).collect();
    Tensor::from_slice(&flat).view([rows.len() as i64, t])
}

fn batch(case: &Value) -> RlBatch {
    let mut fields = serde_json::Map::new();
    for key in [
        "uid",
        "scores",
        "response_mask",
        "old_log_prob",
        "log_prob",
        "ref_log_prob",
        "config",
    ] {
        fields.insert(key.to_owned(), case[key].clone());
    }
    serde_json::from_value(Value::Object(fields)).unwrap()
}

fn clip_of(case: &Value) -> ClipConfig {
    let c = &case["config"];
    ClipConfig {
        clip_ratio_low: c["clip_ratio_low"].as_f64().unwrap(),
        clip_ratio_high: c["clip_ratio_high"].as_f64().unwrap(),
        clip_ratio_c: c["clip_ratio_c"].as_f64().unwrap(),
    }
}

#[test]
fn rl_numerics_report_matches_verl() {
    let cases = cases();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let report = rl_report(&batch(case)).unwrap();
        let verl = &case["verl"]["report"];
        for (est, rows) in &report.advantages {
            close_rows(
                rows,
                &verl["advantages"][est],
                &format!("{name} advantages.{est}"),
            );
        }
        assert_eq!(report.advantages.len(), 4);
        for (mode, per_agg) in &report.policy_loss {
            assert_eq!(per_agg.len(), 5);
            for (agg, out) in per_agg {
                let v = &verl["policy_loss"][mode][agg];
                let what = format!("{name} {mode}/{agg}");
                close(
                    f64::from(out.loss),
                    v["loss"].as_f64().unwrap(),
                    &format!("{what} loss"),
                );
                close_rows(
                    &out.grad_log_prob,
                    &v["grad_log_prob"],
                    &format!("{what} grad"),
                );
            }
        }
        assert_eq!(report.policy_loss.len(), 3);
        for (est, rows) in &report.kl {
            close_rows(rows, &verl["kl"][est], &format!("{name} kl.{est}"));
        }
        assert_eq!(report.kl.len(), 4);
    }
}

/// Losses under verl's standalone `agg_loss` fallbacks (no global batch info), and the metrics.
#[test]
fn policy_losses_local_aggregation_and_metrics_match_verl() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let mask = tensor(&case["response_mask"]).to_kind(Kind::Int64);
        let old = tensor(&case["old_log_prob"]);
        let adv = tensor(&case["verl"]["report"]["advantages"]["grpo"]);
        let clip = clip_of(case);
        let global = GlobalBatchInfo::for_mini_batch(&mask).unwrap();
        for mode in PolicyLossMode::ALL {
            for agg in LossAggMode::ALL {
                for (info, key) in [
                    (GlobalBatchInfo::LOCAL, "policy_loss_local"),
                    (global, "report"),
                ] {
                    let logp = tensor(&case["log_prob"]).set_requires_grad(true);
                    let inputs = LossInputs::new(&old, &logp, &adv, &mask);
                    let out = policy_loss(mode, inputs, &clip, agg, &info).unwrap();
                    out.loss.backward();
                    let v = if key == "report" {
                        &case["verl"]["report"]["policy_loss"][mode.as_str()][agg.as_str()]
                    } else {
                        &case["verl"][key][mode.as_str()][agg.as_str()]
                    };
                    let what = format!("{name} {key} {mode}/{agg}");
                    close(
                        out.loss.double_value(&[]),
                        v["loss"].as_f64().unwrap(),
                        &what,
                    );
                    close_tensor(&logp.grad(), &v["grad_log_prob"], &format!("{what} grad"));
                    if key == "policy_loss_local" {
                        let m = &v["metrics"];
                        close(
                            out.pg_clipfrac,
                            m["actor/pg_clipfrac"].as_f64().unwrap(),
                            &what,
                        );
                        close(out.ppo_kl, m["actor/ppo_kl"].as_f64().unwrap(), &what);
                        let lower = m["actor/pg_clipfrac_lower"].as_f64().unwrap();
                        close(out.pg_clipfrac_lower, lower, &what);
                    }
                }
            }
        }
    }
}

#[test]
fn reinforce_plus_plus_and_gae_match_verl() {
    let Some(g) = golden() else { return };
    let gamma = g["gamma"].as_f64().unwrap();
    let lam = g["lam"].as_f64().unwrap();
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let mask = tensor(&case["response_mask"]).to_kind(Kind::Int64);
        let scores: Vec<f32> = case["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_f64().unwrap() as f32)
            .collect();
        let rewards = token_level_rewards(&Tensor::from_slice(&scores), &mask).unwrap();
        let (adv, ret) = reinforce_plus_plus_advantages(&rewards, &mask, gamma).unwrap();
        let v = &case["verl"]["reinforce_plus_plus"];
        close_tensor(
            &adv,
            &v["advantages"],
            &format!("{name} reinforce++ advantages"),
        );
        close_tensor(&ret, &v["returns"], &format!("{name} reinforce++ returns"));
        let values = tensor(&case["values"]);
        let (adv, ret) = gae_advantages(&rewards, &values, &mask, gamma, lam).unwrap();
        let v = &case["verl"]["gae"];
        close_tensor(&adv, &v["advantages"], &format!("{name} gae advantages"));
        close_tensor(&ret, &v["returns"], &format!("{name} gae returns"));
    }
}

#[test]
fn kl_estimators_values_and_gradients_match_verl() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let reference = tensor(&case["ref_log_prob"]);
        let grads = case["verl"]["kl_grads"].as_object().unwrap();
        assert_eq!(grads.len(), 11);
        for (est, v) in grads {
            let estimator: KlEstimator = est.parse().unwrap();
            let logp = tensor(&case["log_prob"]).set_requires_grad(true);
            let value = kl_penalty(&logp, &reference, estimator).unwrap();
            value.sum(Kind::Float).backward();
            close_tensor(&value, &v["value"], &format!("{name} kl {est} value"));
            close_tensor(&logp.grad(), &v["grad"], &format!("{name} kl {est} grad"));
        }
    }
}

#[test]
fn entropy_value_and_gradient_match_verl() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let mut flat = Vec::new();
        flatten(&case["logits"], &mut flat);
        let rows = case["logits"].as_array().unwrap();
        let t = rows[0].as_array().unwrap().len() as i64;
        let b = rows.len() as i64;
        let v = (flat.len() as i64) / (b * t);
        let flat: Vec<f32> = flat.into_iter().map(|x| x as f32).collect();
        let logits = Tensor::from_slice(&flat)
            .view([b, t, v])
            .set_requires_grad(true);
        let weights = tensor(&case["entropy_weights"]);
        let h = entropy_from_logits(&logits).unwrap();
        (&h * &weights).sum(Kind::Float).backward();
        close_tensor(
            &h,
            &case["verl"]["entropy"]["value"],
            &format!("{name} entropy"),
        );
        close_tensor(
            &logits.grad(),
            &case["verl"]["entropy"]["grad_logits"],
            &format!("{name} entropy grad"),
        );
    }
}

/// verl's documented edge cases of GRPO are reproduced by the shape of our batches: a constant
/// group gives 0, a singleton gives score/(1+1e-6).
#[test]
fn edge_cases_behave_as_verl_documents() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let report = rl_report(&batch(case)).unwrap();
        if name == "identical-scores" {
            for est in ["grpo", "grpo_no_std", "rloo"] {
                assert!(
                    report.advantages[est].iter().flatten().all(|x| *x == 0.0),
                    "{est}"
                );
            }
        }
        if name == "singletons" {
            let scores = case["scores"].as_array().unwrap();
            for (row, s) in report.advantages["grpo"].iter().zip(scores) {
                let expected = (s.as_f64().unwrap() as f32) / (1.0f32 + 1e-6);
                assert!(row.iter().all(|x| *x == 0.0 || (x - expected).abs() < 1e-6));
            }
        }
    }
}
