//! Parity with R2E-Gym's log parser (`parse_log_pytest` and `decolor_dict_keys` of
//! `r2egym.repo_analysis.execution_log_parser`) on hand-written logs in its format and on the
//! real pytest logs of the swebench goldens, as written and after the cleaning R2E-Gym's
//! runtime applies. Expected values were computed by R2E-Gym's own code
//! (tests/golden/r2e/generate.py); this test needs no Python.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::path::PathBuf;

use serde_json::Value;
use uniagent_rewards::r2e::{clean_output, compare, parse_log, R2eStatusMap, SummaryReading};

fn golden_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn as_map(v: &Value) -> R2eStatusMap {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn the_parser_answers_what_r2e_gym_answers() {
    let text = std::fs::read_to_string(golden_root().join("r2e/expected.json")).unwrap();
    let golden: Value = serde_json::from_str(&text).unwrap();
    let cases = golden.as_object().unwrap();
    assert!(cases.len() >= 10, "{} cases", cases.len());
    for (name, want) in cases {
        let bytes = std::fs::read(golden_root().join(name)).unwrap();
        let log = String::from_utf8_lossy(&bytes);
        let raw = parse_log(&log, SummaryReading::Faithful);
        assert_eq!(raw.statuses, as_map(&want["raw"]), "{name} (raw)");
        let cleaned = clean_output(&log);
        let faithful = parse_log(&cleaned, SummaryReading::Faithful);
        assert_eq!(
            faithful.statuses,
            as_map(&want["cleaned"]),
            "{name} (cleaned)"
        );
        // R2E-Gym compares a map with itself as equal: the golden map is a valid expectation.
        assert!(
            compare(&faithful.statuses, &as_map(&want["cleaned"])).matches,
            "{name}"
        );
        // With one summary and no conflicting lines the strict reading agrees.
        let strict = parse_log(&cleaned, SummaryReading::Strict);
        if cleaned.matches("short test summary info").count() <= 1 && strict.conflicting.is_empty()
        {
            assert_eq!(strict.statuses, faithful.statuses, "{name} (strict)");
        }
    }
    // The spoofed log: R2E-Gym reads the fake summary; the strict reading keeps the failure.
    let spoofed =
        std::fs::read_to_string(golden_root().join("r2e/logs/spoofed_summaries.log")).unwrap();
    let want = &cases["r2e/logs/spoofed_summaries.log"]["cleaned"];
    assert_eq!(want["test_bad"], "PASSED");
    let strict = parse_log(&spoofed, SummaryReading::Strict);
    assert_eq!(strict.statuses["test_bad"], "FAILED");
    assert_eq!(strict.conflicting, ["test_bad"]);
}
