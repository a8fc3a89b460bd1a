//! The harness's test command for sample (repo, version, test_patch) triples, as swebench
//! 4.1.0's own `make_eval_script_list_py` builds it (tests/golden/swebench_specs.json, by
//! scripts/swebench-specs/generate.py), against `uniagent_rewards::swebench::specs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::path::PathBuf;

use serde_json::Value;
use uniagent_rewards::swebench::specs::{source_package, test_command};

#[test]
fn test_commands_equal_the_packages() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/swebench_specs.json");
    let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(cases.len() >= 10);
    assert_eq!(source_package(), "swebench 4.1.0");
    for case in &cases {
        let (repo, version) = (
            case["repo"].as_str().unwrap(),
            case["version"].as_str().unwrap(),
        );
        let got = test_command(repo, version, case["test_patch"].as_str().unwrap());
        assert_eq!(
            got.as_deref(),
            Some(case["test_command"].as_str().unwrap()),
            "{repo} {version}"
        );
    }
}
