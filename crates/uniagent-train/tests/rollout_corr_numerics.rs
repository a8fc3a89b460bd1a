//! Rollout-correction parity with the real verl 0.9.1: `tests/verl/rollout_corr_golden.py`
//! runs verl's `compute_rollout_correction_and_rejection_mask` (token TIS, sequence TIS, token
//! IcePop, sequence MIS, Geo-RS, the k1/k2/k3 and max filters, batch normalisation) on random
//! batches, and verl's vanilla PPO loss with those weights and that mask; our IS weights,
//! masks, metrics, loss values and gradients w.r.t. `log_prob` must match within 1e-5.
//!
//! Needs `UNIAGENT_TORCH_VENV` (`scripts/env/torch.sh`): set but missing fails, unset skips
//! with a printed reason.
#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use serde_json::Value;
use tch::{Kind, Tensor};
use uniagent_train::rl::*;

const TOL: f64 = 1e-5;

fn golden() -> Option<Value> {
    let python = common::torch_python()?;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/verl/rollout_corr_golden.py");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("golden.json");
    let run = Command::new(python).arg(script).arg(&out).output().unwrap();
    assert!(
        run.status.success(),
        "rollout_corr_golden.py failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let value: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(
        value["verl"], "0.9.1",
        "golden values must come from verl 0.9.1"
    );
    Some(value)
}

fn tensor(v: &Value, kind: Kind) -> Tensor {
    let rows: Vec<Vec<f64>> = serde_json::from_value(v.clone()).unwrap();
    let width = rows[0].len() as i64;
    let flat: Vec<f64> = rows.concat();
    Tensor::from_slice(&flat).view([-1, width]).to_kind(kind)
}

fn close_tensor(ours: &Tensor, theirs: &Value, what: &str) {
    let theirs = tensor(theirs, Kind::Double);
    let ours = ours.to_kind(Kind::Double);
    assert_eq!(ours.size(), theirs.size(), "{what}: shape");
    let diff = (&ours - &theirs).abs();
    let tol = theirs.abs().clamp_min(1.0) * TOL;
    let bad = diff.gt_tensor(&tol).sum(Kind::Int64).int64_value(&[]);
    assert_eq!(bad, 0, "{what}: ours {ours} vs verl {theirs}");
}

fn close(ours: f64, theirs: f64, what: &str) {
    assert!(
        (ours - theirs).abs() <= TOL * theirs.abs().max(1.0),
        "{what}: ours {ours} vs verl {theirs}"
    );
}

/// The configurations of the golden script, in our types.
fn corrections() -> Vec<(&'static str, RolloutCorrection)> {
    let is = |level, upper, lower, batch_normalize| {
        Some(IsConfig {
            level,
            upper,
            lower,
            batch_normalize,
        })
    };
    let rs = |statistic, upper, lower| RsCriterion {
        statistic,
        upper,
        lower,
    };
    use RsStatistic as S;
    vec![
        ("token_tis", RolloutCorrection::token_tis(2.0)),
        ("seq_tis", RolloutCorrection::seq_tis(2.0)),
        (
            "token_icepop",
            RolloutCorrection {
                is: is(IsLevel::Token, 2.0, Some(0.5), false),
                rs: vec![],
            },
        ),
        (
            "token_tis_batch_norm",
            RolloutCorrection {
                is: is(IsLevel::Token, 2.0, None, true),
                rs: vec![],
            },
        ),
        (
            "seq_tis_batch_norm",
            RolloutCorrection {
                is: is(IsLevel::Sequence, 3.0, None, true),
                rs: vec![],
            },
        ),
        ("seq_mis", RolloutCorrection::seq_mis(2.0, 0.5, 2.0)),
        ("geo_rs", RolloutCorrection::geo_rs(0.8, 1.25)),
        (
            "geo_rs_token_tis",
            RolloutCorrection {
                rs: vec![rs(S::SeqMeanK1, 1.3, None)],
                ..RolloutCorrection::token_tis(2.0)
            },
        ),
        (
            "token_k1_k2",
            RolloutCorrection {
                is: None,
                rs: vec![rs(S::TokenK1, 1.5, Some(0.6)), rs(S::TokenK2, 0.2, None)],
            },
        ),
        (
            "token_k3",
            RolloutCorrection {
                is: None,
                rs: vec![rs(S::TokenK3, 0.1, None)],
            },
        ),
        (
            "seq_sum_k2_k3",
            RolloutCorrection {
                is: None,
                rs: vec![rs(S::SeqSumK2, 0.8, None), rs(S::SeqSumK3, 0.8, None)],
            },
        ),
        (
            "seq_mean_k2_k3",
            RolloutCorrection {
                is: None,
                rs: vec![rs(S::SeqMeanK2, 0.3, None), rs(S::SeqMeanK3, 0.3, None)],
            },
        ),
        (
            "seq_max_k2_k3",
            RolloutCorrection {
                is: None,
                rs: vec![rs(S::SeqMaxK2, 0.3, None), rs(S::SeqMaxK3, 0.3, None)],
            },
        ),
    ]
}

#[test]
fn rollout_correction_matches_verl() {
    let Some(golden) = golden() else { return };
    let mut compared = 0;
    for case in golden["cases"].as_array().unwrap() {
        let seed = &case["seed"];
        let mask = tensor(&case["response_mask"], Kind::Int64);
        let old = tensor(&case["old_log_prob"], Kind::Float);
        let rollout = tensor(&case["rollout_log_prob"], Kind::Float);
        let adv = tensor(&case["advantages"], Kind::Float);
        for (name, correction) in corrections() {
            let want = &case["results"][name];
            let what = format!("seed {seed} {name}");
            let (weights, new_mask, metrics) =
                rollout_correction(&old, &rollout, &mask, &correction).unwrap();
            match (&weights, want["weights"].is_null()) {
                (Some(w), false) => close_tensor(w, &want["weights"], &format!("{what} weights")),
                (None, true) => {}
                _ => panic!("{what}: weights present on one side only"),
            }
            close_tensor(&new_mask, &want["mask"], &format!("{what} mask"));
            let m = &want["metrics"];
            let ours = [
                ("is_mean", metrics.is_mean),
                ("is_max", metrics.is_max),
                ("is_fraction_high", metrics.is_fraction_high),
                ("is_fraction_low", metrics.is_fraction_low),
                ("rs_masked_fraction", metrics.rs_masked_fraction),
                ("rs_seq_masked_fraction", metrics.rs_seq_masked_fraction),
            ];
            for (key, value) in ours {
                if let Some(theirs) = m[key].as_f64() {
                    close(value, theirs, &format!("{what} {key}"));
                }
            }
            // The decoupled PPO loss with the weights and the rejected mask.
            if want["loss"].is_null() {
                continue;
            }
            let logp = tensor(&case["log_prob"], Kind::Float).set_requires_grad(true);
            let info = GlobalBatchInfo::for_mini_batch(&new_mask).unwrap();
            let inputs = LossInputs::new(&old, &logp, &adv, &new_mask).weighted(weights.as_ref());
            let out = policy_loss(
                PolicyLossMode::Vanilla,
                inputs,
                &ClipConfig::default(),
                LossAggMode::TokenMean,
                &info,
            )
            .unwrap();
            out.loss.backward();
            close(
                out.loss.double_value(&[]),
                want["loss"].as_f64().unwrap(),
                &format!("{what} loss"),
            );
            close_tensor(
                &logp.grad(),
                &want["grad_log_prob"],
                &format!("{what} grad"),
            );
            compared += 1;
        }
    }
    assert!(compared >= 40, "too few losses compared: {compared}");
}

#[test]
fn bad_thresholds_are_typed_errors() {
    let mask = Tensor::from_slice(&[1i64, 1]).view([1, 2]);
    let lp = Tensor::from_slice(&[-1.0f32, -1.0]).view([1, 2]);
    for bad in [
        RolloutCorrection::token_tis(0.0),
        RolloutCorrection::token_tis(f64::NAN),
        RolloutCorrection::geo_rs(2.0, 1.0),
        RolloutCorrection {
            is: Some(IsConfig {
                level: IsLevel::Token,
                upper: 1.0,
                lower: Some(2.0),
                batch_normalize: false,
            }),
            rs: vec![],
        },
    ] {
        let err = rollout_correction(&lp, &lp, &mask, &bad).unwrap_err();
        assert!(matches!(err, RlError::InvalidConfig(_)), "{bad:?}: {err:?}");
    }
    let wrong = Tensor::from_slice(&[-1.0f32]).view([1, 1]);
    assert!(rollout_correction(&lp, &wrong, &mask, &RolloutCorrection::token_tis(2.0)).is_err());
}

#[test]
fn on_policy_batches_are_left_alone() {
    // Behaviour == proximal: every weight is 1, nothing is rejected, whatever the filter.
    let mask = Tensor::from_slice(&[1i64, 1, 0, 1, 1, 1]).view([2, 3]);
    let lp = Tensor::from_slice(&[-0.5f32, -1.0, -2.0, -0.1, -3.0, -0.7]).view([2, 3]);
    for (_, c) in corrections() {
        let (w, m, metrics) = rollout_correction(&lp, &lp, &mask, &c).unwrap();
        if let Some(w) = w {
            let expected = mask.to_kind(Kind::Float);
            assert!(w.allclose(&expected, 1e-6, 1e-6, false), "{c:?}: {w}");
        }
        assert!(m.equal(&mask), "{c:?}");
        assert_eq!(metrics.rs_masked_fraction, 0.0);
    }
}
