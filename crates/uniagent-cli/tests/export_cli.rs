//! `uniagent export --format verl`: trajectories.jsonl of run/train outputs to one Parquet
//! file (read back here with the parquet crate), phase filtering, the summary on stdout, and
//! exit 2 with one error line (and no output file) for bad input.
#![cfg(feature = "parquet")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::{error_line, run_in, stderr};
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::{json, Value};
use uniagent_core::agent::{ExitReason, Trajectory};
use uniagent_core::Message;

/// A finished trajectory line with token data, tagged as `uniagent train` tags them (`phase`
/// `None`: as `uniagent run` writes it).
fn line(
    task: &str,
    sample: u32,
    exit: ExitReason,
    logprobs: bool,
    phase: Option<(&str, u64)>,
) -> String {
    let mut t = Trajectory::empty(task, sample, vec![Message::user("q")], exit, None);
    t.set_exit(exit, false);
    t.output.prompt_ids = vec![1, 2, 3];
    t.output.response_ids = vec![4, 5];
    t.output.response_mask = vec![1, 1];
    t.output.response_logprobs = logprobs.then(|| vec![-0.5, -0.25]);
    t.output.reward_score = Some(1.0);
    let mut v = serde_json::to_value(&t).unwrap();
    if let Some((phase, step)) = phase {
        v["phase"] = json!(phase);
        v["step"] = json!(step);
    }
    v.to_string()
}

fn rows(path: &Path) -> Vec<Value> {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| r.unwrap().to_json_value())
        .collect()
}

/// `uniagent export --format verl --out OUT ARGS...` in `dir`, which must succeed.
fn export_ok(dir: &Path, out: &str, args: &[&str]) -> Output {
    let out = run_in(
        dir,
        &[&["export", "--format", "verl", "--out", out], args].concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    out
}

#[test]
fn exports_the_rl_phase_of_a_train_output() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let lines = [
        line(
            "a",
            0,
            ExitReason::Finished,
            true,
            Some(("demonstration", 0)),
        ),
        line("a", 0, ExitReason::Finished, true, Some(("rl", 1))),
        line("a", 1, ExitReason::MaxTurns, true, Some(("rl", 1))),
        line("b", 0, ExitReason::ModelError, true, Some(("rl", 2))),
        String::new(),
        line("b", 1, ExitReason::Finished, true, Some(("rl", 2))),
        line("c", 0, ExitReason::Finished, true, Some(("eval", 2))),
    ];
    std::fs::write(run.join("trajectories.jsonl"), lines.join("\n")).unwrap();

    let out = export_ok(dir.path(), "rl.parquet", &["run", "--phase", "rl"]);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["rows"], 3);
    assert_eq!(summary["dropped"], 1, "the model error");
    assert_eq!(summary["max_prompt_len"], 3);
    assert_eq!(summary["max_response_len"], 2);
    assert_eq!(summary["out"], "rl.parquet");
    assert!(
        stderr(&out).contains("rollout.prompt_length >= 3"),
        "{}",
        stderr(&out)
    );

    let got = rows(&dir.path().join("rl.parquet"));
    let ids: Vec<_> = got
        .iter()
        .map(|r| (r["id"].clone(), r["step"].clone()))
        .collect();
    assert_eq!(
        ids,
        [
            (json!("a:0"), json!(1)),
            (json!("a:1"), json!(1)),
            (json!("b:1"), json!(2))
        ]
    );
    assert_eq!(got[0]["uid"], "a");
    assert_eq!(got[0]["response_logprobs"], json!([-0.5, -0.25]));
    assert_eq!(got[1]["reward_score"], json!(1.0));

    // Without --phase every line counts, and several inputs go into one file.
    std::fs::write(
        dir.path().join("more.jsonl"),
        line("d", 0, ExitReason::Finished, true, None),
    )
    .unwrap();
    export_ok(
        dir.path(),
        "all.parquet",
        &["run/trajectories.jsonl", "more.jsonl"],
    );
    let got = rows(&dir.path().join("all.parquet"));
    assert_eq!(got.len(), 6);
    assert_eq!(got[5]["step"], Value::Null);
}

/// Exit 2, one error line with all `needles`, and no output file.
fn assert_bad(dir: &Path, args: &[&str], needles: &[&str]) {
    let out = run_in(dir, args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    let line = error_line(&out);
    assert!(
        line.starts_with("error: ") && err.trim().lines().count() == 1,
        "{err}"
    );
    for n in needles {
        assert!(line.contains(n), "`{n}` not in: {line}");
    }
    assert!(!dir.join("out.parquet").exists() && !dir.join("out.parquet.partial").exists());
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = line("a", 0, ExitReason::Finished, true, None);
    std::fs::write(
        d.join("torn.jsonl"),
        format!("{good}\n{{\"id\": \"a:1\", \"task_"),
    )
    .unwrap();
    let export =
        |input: &'static str| ["export", "--format", "verl", "--out", "out.parquet", input];
    assert_bad(
        d,
        &export("torn.jsonl"),
        &["torn.jsonl:2", "not valid JSON"],
    );
    assert_bad(d, &export("missing.jsonl"), &["missing.jsonl"]);

    let mixed = [
        good.clone(),
        line("a", 1, ExitReason::Finished, false, None),
    ]
    .join("\n");
    std::fs::write(d.join("mixed.jsonl"), mixed).unwrap();
    assert_bad(
        d,
        &export("mixed.jsonl"),
        &[
            "mixed.jsonl:2",
            "row a:0 has response_logprobs and row a:1 has none",
        ],
    );
    export_ok(d, "ok.parquet", &["--allow-mixed-logprobs", "mixed.jsonl"]);
    assert_eq!(
        rows(&d.join("ok.parquet"))[1]["response_logprobs"],
        Value::Null
    );

    // An unknown format is bad usage.
    let out = run_in(
        d,
        &[
            "export",
            "--format",
            "csv",
            "--out",
            "out.parquet",
            "mixed.jsonl",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
}
