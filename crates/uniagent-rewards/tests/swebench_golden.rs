//! Parity with the `swebench` package (5.0.2): every Python parser of its registry on real
//! pytest/unittest logs and hand-written logs of each runner, and its log reading and grading
//! on harness-style logs. Expected values were computed by the package itself
//! (tests/golden/swebench/generate.py); this test needs no Python.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::path::PathBuf;

use serde_json::{json, Value};
use uniagent_rewards::swebench::{
    eval_log, grade_tests, parse_log_ordered, EvalType, Parser, StatusMap, TestGroups,
};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/swebench")
}

fn golden() -> Value {
    let text = std::fs::read_to_string(golden_dir().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn pairs(map: &StatusMap) -> Value {
    Value::Array(map.iter().map(|(id, s)| json!([id, s.as_str()])).collect())
}

#[test]
fn every_python_parser_of_the_registry_is_ported() {
    let golden = golden();
    let names: Vec<String> = golden["parsers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    let ours: Vec<String> = Parser::all().map(Parser::name).collect();
    assert_eq!(ours, names);
}

#[test]
fn parsers_match_the_package_on_every_golden_log() {
    let golden = golden();
    let mut checked = 0;
    for (rel, by_parser) in golden["logs"].as_object().unwrap() {
        let bytes = std::fs::read(golden_dir().join("logs").join(rel)).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        for (parser, expected) in by_parser.as_object().unwrap() {
            let ours = parse_log_ordered(parser, &text);
            match (expected.get("map"), ours) {
                (Some(map), Ok(ours)) => assert_eq!(&pairs(&ours), map, "{parser} on {rel}"),
                (None, Err(e)) => {
                    assert!(expected.get("raises").is_some(), "{parser} on {rel}: {e}");
                }
                (Some(_), Err(e)) => panic!("{parser} on {rel}: we fail ({e}), the package parses"),
                (None, Ok(ours)) => {
                    panic!("{parser} on {rel}: the package raises, we parse {ours:?}")
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 20 * 14, "only {checked} log/parser pairs");
}

#[test]
fn log_reading_and_grading_match_the_package() {
    let golden = golden();
    for case in golden["grading"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let parser: Parser = case["parser"].as_str().unwrap().parse().unwrap();
        let expected = &case["expected"];
        let eval = eval_log(parser, case["content"].as_str().unwrap()).unwrap();
        assert_eq!(
            Value::Bool(eval.is_valid()),
            expected["found"],
            "{name}: {:?}",
            eval.invalid
        );
        assert_eq!(pairs(&eval.status_map), expected["map"], "{name}");
        let groups: TestGroups = serde_json::from_value(case["groups"].clone()).unwrap();
        let eval_type: EvalType = serde_json::from_value(case["eval_type"].clone()).unwrap();
        let to_fail = case["calculate_to_fail"].as_bool().unwrap();
        let report = grade_tests(&eval.status_map, &groups, eval_type, to_fail);
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            expected["report"],
            "{name}"
        );
        assert_eq!(
            report.resolution().as_str(),
            expected["resolution"].as_str().unwrap(),
            "{name}"
        );
    }
}
