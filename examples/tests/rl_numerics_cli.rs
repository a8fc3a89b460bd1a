//! The `rl_numerics` binary: input from a file and from stdin, the exact output schema of
//! `docs/cli.md` (section `rl_numerics`), hand-computed values, and typed failures on bad
//! batches.
#![cfg(feature = "tch")]
// Helpers outside #[test] functions unwrap too: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::{json, Value};
use uniagent_core::testing::output_with_stdin;

const BIN: &str = env!("CARGO_BIN_EXE_rl_numerics");

/// Two rows of one prompt, scores 1 and 0, log_prob = old_log_prob (ratio 1 everywhere).
fn batch() -> Value {
    json!({
        "uid": ["p", "p"],
        "scores": [1.0, 0.0],
        "response_mask": [[1, 1], [1, 0]],
        "old_log_prob": [[-1.0, -2.0], [-0.5, 0.0]],
        "log_prob": [[-1.0, -2.0], [-0.5, 0.0]],
        "ref_log_prob": [[-2.0, -2.0], [-0.5, -1.0]],
        "config": {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0}
    })
}

fn run_stdin(input: &str) -> std::process::Output {
    output_with_stdin(&mut Command::new(BIN), input.as_bytes()).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

#[test]
fn file_and_stdin_give_the_same_report_with_the_documented_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("batch.json");
    std::fs::write(&path, batch().to_string()).unwrap();
    let from_file = Command::new(BIN).arg(&path).output().unwrap();
    assert!(
        from_file.status.success(),
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );
    let from_stdin = run_stdin(&batch().to_string());
    assert!(from_stdin.status.success());
    assert_eq!(from_file.stdout, from_stdin.stdout);

    let report: Value = serde_json::from_slice(&from_file.stdout).unwrap();
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    let mut top = keys(&report);
    top.sort();
    assert_eq!(top, ["advantages", "kl", "policy_loss"]);
    let mut adv = keys(&report["advantages"]);
    adv.sort();
    assert_eq!(
        adv,
        [
            "grpo",
            "grpo_no_std",
            "reinforce_plus_plus_baseline",
            "rloo"
        ]
    );
    let mut modes = keys(&report["policy_loss"]);
    modes.sort();
    assert_eq!(modes, ["cispo", "gspo", "vanilla"]);
    for mode in ["vanilla", "gspo", "cispo"] {
        let mut aggs = keys(&report["policy_loss"][mode]);
        aggs.sort();
        assert_eq!(
            aggs,
            [
                "seq-mean-token-mean",
                "seq-mean-token-sum",
                "seq-mean-token-sum-norm",
                "token-mean",
                "token-sum"
            ]
        );
    }
    let mut kl = keys(&report["kl"]);
    kl.sort();
    assert_eq!(kl, ["abs", "k1", "k2", "k3"]);

    // GRPO: μ = 0.5, σ = std([1, 0]) = 1/√2, A = ±0.5/(σ + 1e-6); 0 at the mask-0 token.
    let a = 0.5 / (std::f64::consts::FRAC_1_SQRT_2 + 1e-6);
    let grpo = &report["advantages"]["grpo"];
    assert!((f(&grpo[0][0]) - a).abs() < 1e-6 && (f(&grpo[0][1]) - a).abs() < 1e-6);
    assert!((f(&grpo[1][0]) + a).abs() < 1e-6);
    assert_eq!(f(&grpo[1][1]), 0.0);
    // RLOO: 2/(2−1)·(score − μ) = ±1.
    assert_eq!(f(&report["advantages"]["rloo"][0][0]), 1.0);
    assert_eq!(f(&report["advantages"]["rloo"][1][0]), -1.0);
    // Ratio 1: the vanilla loss is −A per token; token-mean over 3 tokens = −a/3.
    let tm = &report["policy_loss"]["vanilla"]["token-mean"];
    assert!((f(&tm["loss"]) + a / 3.0).abs() < 1e-6);
    assert!((f(&tm["grad_log_prob"][0][0]) + a / 3.0).abs() < 1e-6);
    assert_eq!(f(&tm["grad_log_prob"][1][1]), 0.0);
    // k1 = logp − ref (unmasked), k2 = ½ k1².
    assert_eq!(f(&report["kl"]["k1"][0][0]), 1.0);
    assert_eq!(f(&report["kl"]["k1"][1][1]), 1.0);
    assert_eq!(f(&report["kl"]["k2"][0][0]), 0.5);
}

#[test]
fn bad_batches_fail_with_a_message_and_status_2() {
    let mut ragged = batch();
    ragged["log_prob"] = json!([[-1.0], [-0.5, 0.0]]);
    let mut bad_c = batch();
    bad_c["config"]["clip_ratio_c"] = json!(0.5);
    let mut bad_mask = batch();
    bad_mask["response_mask"] = json!([[1, 2], [1, 0]]);
    let mut unknown = batch();
    unknown["extra"] = json!(1);
    for (input, needle) in [
        (ragged.to_string(), "log_prob"),
        (bad_c.to_string(), "clip_ratio_c"),
        (bad_mask.to_string(), "response_mask"),
        (unknown.to_string(), "extra"),
        ("not json".to_owned(), "invalid batch JSON"),
    ] {
        let out = run_stdin(&input);
        assert_eq!(out.status.code(), Some(2), "{input}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{err}");
        assert!(out.stdout.is_empty());
    }
}
