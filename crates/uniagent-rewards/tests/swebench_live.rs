//! Live differential check against the `swebench` package: thousands of generated logs, built
//! from the fragments its parsers key on, through every Python parser and through its log
//! reading and grading, compared answer by answer.
//!
//! Runs when `UNIAGENT_SWEBENCH_VENV` is set (scripts/env/swebench.sh; CI installs the venv with
//! scripts/setup/50-swebench.sh) and FAILS if the venv is missing then; skips, saying why, when
//! it is unset.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use uniagent_rewards::swebench::{eval_log, grade_tests, EvalType, Parser, StatusMap, TestGroups};

const FRAGMENTS: &[&str] = &[
    "PASSED",
    "FAILED",
    "SKIPPED",
    "ERROR",
    "XFAIL",
    "XPASS",
    "ok",
    "OK",
    "FAIL",
    "E",
    "F",
    "s",
    "tests/t.py::test_a",
    "tests/t.py::test_b",
    "t.py::x[/a/b/c.txt]",
    "t.py::y[a - b]",
    "t.py::z[//n/s]",
    "t.py::w[/a/*]",
    "t.py::q[a",
    "test_foo",
    "test_bar",
    "test_x (m.C)",
    "test_y (m.C.test_y)",
    "sympy/a.py:test_q",
    "MouseButton.LEFT",
    "MouseButton.RIGHT",
    " ",
    " ",
    " ",
    "  ",
    " - ",
    " ... ",
    " ...  ",
    "...",
    "\t",
    "\u{a0}",
    "\u{1f}",
    "\u{1c}",
    "\u{7}",
    "\x1b[32m",
    "\x1b[0m",
    "[1m",
    "[100%]",
    "[ 50%]",
    "[1]",
    "[2]",
    "[gw0]",
    "_____",
    " ____",
    ".py:",
    ":",
    "\r",
    "\r\n",
    "FAIL:",
    "ERROR:",
    "--version is equivalent to version",
    "Applying sites.0002_alter_domain_unique...test_no_migrations",
    "Testing against Django installed in",
    " silenced).",
    "Internal Server Error: /x/",
    "System check identified no issues (0 silenced)",
    "é",
    "[",
    "]",
    "(",
    ")",
    "3 passing",
    "Tests:  2",
    ">>>>> Test Exit Code: 1",
];

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

fn random_log(rng: &mut Rng) -> String {
    let mut log = String::new();
    for _ in 0..rng.below(12) + 1 {
        // A line is mostly `WORD id`, `id WORD` or `id ... word`, with noise around it.
        let mut line = String::new();
        for _ in 0..rng.below(6) + 1 {
            line.push_str(FRAGMENTS[rng.below(FRAGMENTS.len())]);
        }
        log.push_str(&line);
        log.push('\n');
    }
    log
}

fn oracle(venv: &str, requests: &[Value]) -> Vec<Value> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/swebench/oracle.py");
    let mut child = Command::new(PathBuf::from(venv).join("bin/python"))
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("UNIAGENT_SWEBENCH_VENV={venv} is set but its python does not start: {e}")
        });
    let input = serde_json::to_vec(requests).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(output.status.success(), "oracle failed");
    serde_json::from_slice(&output.stdout).unwrap()
}

fn pairs(map: &StatusMap) -> Value {
    Value::Array(map.iter().map(|(id, s)| json!([id, s.as_str()])).collect())
}

fn venv() -> Option<String> {
    let venv = std::env::var("UNIAGENT_SWEBENCH_VENV").ok();
    if venv.is_none() {
        eprintln!("skipped: UNIAGENT_SWEBENCH_VENV is unset (scripts/env/swebench.sh sets it)");
    }
    venv
}

#[test]
fn generated_logs_parse_as_the_package_parses_them() {
    let Some(venv) = venv() else { return };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let logs: Vec<String> = (0..300).map(|_| random_log(&mut rng)).collect();
    let mut requests = Vec::new();
    for log in &logs {
        for parser in Parser::all() {
            requests.push(json!({"op": "parse", "parser": parser.name(), "log": log}));
        }
    }
    let answers = oracle(&venv, &requests);
    assert_eq!(answers.len(), requests.len());
    for (request, expected) in requests.iter().zip(&answers) {
        let parser: Parser = request["parser"].as_str().unwrap().parse().unwrap();
        let log = request["log"].as_str().unwrap();
        match (parser.parse(log), expected.get("map")) {
            (Ok(ours), Some(map)) => assert_eq!(&pairs(&ours), map, "{parser} on {log:?}"),
            (Err(_), None) => {}
            (ours, _) => panic!("{parser} on {log:?}: we give {ours:?}, the package {expected}"),
        }
    }
}

#[test]
fn generated_harness_logs_grade_as_the_package_grades_them() {
    let Some(venv) = venv() else { return };
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let parsers = [
        Parser::Pytest,
        Parser::PytestV2,
        Parser::Django,
        Parser::Sympy,
        Parser::Requests,
    ];
    let ids = [
        "tests/t.py::test_a",
        "tests/t.py::test_b",
        "t.py::q[a",
        "t.py::y[a - b]",
        "test_foo",
        "test_x (m.C)",
    ];
    let mut requests = Vec::new();
    for i in 0..300 {
        let body = random_log(&mut rng);
        let mut content = format!(">>>>> Start Test Output\n{body}>>>>> End Test Output\n");
        if rng.below(2) == 0 {
            content.push_str(&format!(">>>>> Test Exit Code: {}\n", rng.below(3)));
        }
        if rng.below(8) == 0 {
            content = random_log(&mut rng) + &content;
        }
        let mut pick =
            |n: usize| -> Vec<&str> { (0..n).map(|_| ids[rng.below(ids.len())]).collect() };
        let groups = json!({
            "FAIL_TO_PASS": pick(2), "PASS_TO_PASS": pick(2), "FAIL_TO_FAIL": pick(1), "PASS_TO_FAIL": pick(1),
        });
        requests.push(json!({
            "op": "eval", "parser": parsers[i % parsers.len()].name(), "content": content, "groups": groups,
            "eval_type": if i % 7 == 0 { "fail_only" } else { "pass_and_fail" }, "calculate_to_fail": i % 3 == 0,
        }));
    }
    let answers = oracle(&venv, &requests);
    for (request, expected) in requests.iter().zip(&answers) {
        let parser: Parser = request["parser"].as_str().unwrap().parse().unwrap();
        let content = request["content"].as_str().unwrap();
        let Ok(eval) = eval_log(parser, content) else {
            assert!(
                expected.get("raises").is_some(),
                "{parser} on {content:?}: {expected}"
            );
            continue;
        };
        assert_eq!(
            Value::Bool(eval.is_valid()),
            expected["found"],
            "{parser} on {content:?}"
        );
        assert_eq!(
            pairs(&eval.status_map),
            expected["map"],
            "{parser} on {content:?}"
        );
        let groups: TestGroups = serde_json::from_value(request["groups"].clone()).unwrap();
        let eval_type: EvalType = serde_json::from_value(request["eval_type"].clone()).unwrap();
        let report = grade_tests(
            &eval.status_map,
            &groups,
            eval_type,
            request["calculate_to_fail"].as_bool().unwrap(),
        );
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            expected["report"],
            "{content:?}"
        );
        assert_eq!(
            report.resolution().as_str(),
            expected["resolution"].as_str().unwrap()
        );
    }
}
