//! The verl Parquet export (`export::verl`, feature `parquet`).
//!
//! - Round trip with the parquet crate's own reader: every column of every row, the skipped
//!   `Drop` rows, the rewards of the training policy, several row groups, snappy.
//! - The writer's refusals (mixed logprobs, dropped rows under `Refuse`, bad lengths, no token
//!   ids), each leaving no file behind.
//! - `tests/verl/parquet_dataproto.py` loads the files with pyarrow and runs verl 0.9.1's own
//!   `AgentLoopWorker._agent_loop_postprocess` / `_postprocess` and GRPO advantages on them;
//!   the batch must equal what the trajectories say. Needs `UNIAGENT_TORCH_VENV`
//!   (`scripts/env/torch.sh`): set but missing fails, unset skips with a printed reason.
#![cfg(feature = "parquet")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/venv.rs"]
mod venv;

use std::path::{Path, PathBuf};
use std::process::Command;

use parquet::basic::Compression;
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::{json, Value};
use uniagent_core::agent::{ExitReason, Trajectory};
use uniagent_core::{ErrorKind, Message};
use uniagent_train::export::verl::{
    DroppedRows, ExportSummary, MixedLogprobs, Pushed, VerlOptions, VerlRow, VerlWriter,
};

/// A trajectory with token data; `tools` tool calls were executed.
#[allow(clippy::too_many_arguments)]
fn traj(
    task: &str,
    sample: u32,
    exit: ExitReason,
    prompt: Vec<u32>,
    response: Vec<u32>,
    mask: Vec<u8>,
    logprobs: bool,
    reward: Option<f64>,
    tools: u32,
) -> Trajectory {
    let mut t = Trajectory::empty(task, sample, vec![Message::user("task")], exit, None);
    let n = response.len();
    t.output.prompt_ids = prompt;
    t.output.response_logprobs = logprobs.then(|| {
        (0..n)
            .map(|i| {
                if mask[i] == 1 {
                    -0.1 * (i as f32 + 1.0) - 0.013
                } else {
                    0.0
                }
            })
            .collect()
    });
    t.output.weight_versions = logprobs.then(|| {
        mask.iter()
            .enumerate()
            .map(|(i, &m)| (m == 1).then_some(3 + (i as u64) / 4))
            .collect()
    });
    t.output.response_ids = response;
    t.output.response_mask = mask;
    t.output.reward_score = reward;
    t.output.num_turns = 2 + 2 * tools;
    t.counts.tool_calls = tools;
    // The mask policy's decision, as the loop makes it (masks zero mask, logprobs, versions).
    t.set_exit(exit, exit.is_infrastructure());
    t
}

/// `beta:1`, in both sets: a finished three-token answer with reward 1.
fn beta_1() -> Trajectory {
    traj(
        "beta",
        1,
        ExitReason::Finished,
        vec![151644, 9707, 198],
        vec![70, 71, 151645],
        vec![1, 1, 1],
        true,
        Some(1.0),
        0,
    )
}

/// `gamma:0`, in both sets: submitted after one tool call, with this reward.
fn gamma_0(reward: Option<f64>) -> Trajectory {
    traj(
        "gamma",
        0,
        ExitReason::Submitted,
        vec![151644, 11, 12, 13],
        vec![80, 81],
        vec![1, 1],
        true,
        reward,
        1,
    )
}

/// The homogeneous set (all with logprobs): varied shapes, groups of 3, 2 and 1, two rows that
/// must be dropped. Each with the step it is pushed with, and whether it is expected in the
/// file with which reward.
fn homogeneous() -> Vec<(Trajectory, Option<u64>, Option<f64>)> {
    use ExitReason as E;
    vec![
        // Tool tokens (mask 0) in the middle of the response.
        (
            traj(
                "alpha",
                0,
                E::Finished,
                vec![151644, 872, 198, 17, 10],
                vec![40, 41, 151657, 99, 151658, 42, 151645],
                vec![1, 1, 0, 0, 0, 1, 1],
                true,
                Some(1.0),
                1,
            ),
            Some(7),
            Some(1.0),
        ),
        // The longest response.
        (
            traj(
                "alpha",
                1,
                E::MaxTurns,
                vec![151644, 872, 198, 17, 10],
                (300..313).collect(),
                vec![1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1],
                true,
                Some(0.0),
                3,
            ),
            Some(7),
            Some(0.0),
        ),
        // The agent may have killed its sandbox: trains with reward 0, masked.
        (
            traj(
                "alpha",
                2,
                E::SandboxError,
                vec![151644, 872, 198, 17, 10],
                vec![50, 51, 52, 53],
                vec![1, 1, 0, 1],
                true,
                Some(1.0),
                2,
            ),
            Some(7),
            Some(0.0),
        ),
        // The model backend failed: dropped.
        (
            traj(
                "alpha",
                3,
                E::ModelError,
                vec![151644, 872, 198, 17, 10],
                vec![60],
                vec![1],
                true,
                Some(1.0),
                0,
            ),
            Some(7),
            None,
        ),
        // An empty response, the longest prompt.
        (
            traj(
                "beta",
                0,
                E::ContextOverflow,
                (1000..1009).collect(),
                vec![],
                vec![],
                true,
                Some(0.25),
                0,
            ),
            None,
            Some(0.25),
        ),
        (beta_1(), None, Some(1.0)),
        // A sandbox that never started: dropped.
        (
            traj(
                "delta",
                0,
                E::SandboxError,
                vec![151644, 5],
                vec![],
                vec![],
                true,
                None,
                0,
            ),
            None,
            None,
        ),
        // No reward computed: trains at 0.
        (gamma_0(None), None, Some(0.0)),
    ]
}

/// Rows with and without logprobs (written with `MixedLogprobs::Allow`).
fn mixed() -> Vec<(Trajectory, Option<u64>, Option<f64>)> {
    use ExitReason as E;
    vec![
        (beta_1(), None, Some(1.0)),
        (
            traj(
                "eps",
                0,
                E::Finished,
                vec![151644, 20, 21],
                vec![90, 91, 92, 93],
                vec![1, 0, 1, 1],
                false,
                Some(0.5),
                1,
            ),
            None,
            Some(0.5),
        ),
        (gamma_0(Some(1.0)), None, Some(1.0)),
    ]
}

fn write(
    path: &Path,
    rows: &[(Trajectory, Option<u64>, Option<f64>)],
    options: VerlOptions,
) -> uniagent_core::Result<ExportSummary> {
    let mut writer = VerlWriter::create(path, options)?;
    for (t, step, expected) in rows {
        let pushed = writer.push(t, *step)?;
        assert_eq!(pushed == Pushed::Written, expected.is_some(), "{}", t.id);
    }
    writer.finish()
}

/// What the file must hold, straight from the trajectories.
fn expected_rows(rows: &[(Trajectory, Option<u64>, Option<f64>)]) -> Vec<Value> {
    rows.iter()
        .filter_map(|(t, step, reward)| {
            let o = &t.output;
            let reward = (*reward)?;
            Some(json!({
                "prompt_ids": o.prompt_ids,
                "response_ids": o.response_ids,
                "response_mask": o.response_mask,
                // f32 widened as the reader widens it.
                "response_logprobs": o.response_logprobs.as_ref().map(|l| l.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()),
                "reward_score": reward,
                "num_turns": o.num_turns,
                "uid": t.task_id,
                "id": t.id,
                "exit_reason": t.exit_reason.as_str(),
                "weight_versions": o.weight_versions,
                "step": step,
            }))
        })
        .collect()
}

/// The same rows with the trajectory's JSON, for the Python side.
fn expected_for_python(rows: &[(Trajectory, Option<u64>, Option<f64>)]) -> Vec<Value> {
    rows.iter()
        .filter_map(|(t, step, reward)| {
            let mut v = serde_json::to_value(t).unwrap();
            v["expected_reward"] = json!((*reward)?);
            v["expected_step"] = json!(step);
            Some(v)
        })
        .collect()
}

fn read_back(path: &Path) -> (Vec<Value>, SerializedFileReader<std::fs::File>) {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let rows = reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| r.unwrap().to_json_value())
        .collect();
    (rows, reader)
}

#[test]
fn round_trip_through_the_parquet_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollouts.parquet");
    let rows = homogeneous();
    let options = VerlOptions {
        // A few rows per row group: the levels must restart correctly at each group.
        row_group_tokens: 16,
        ..VerlOptions::default()
    };
    let summary = write(&path, &rows, options).unwrap();
    assert_eq!(
        summary,
        ExportSummary {
            rows: 6,
            dropped: 2,
            rows_with_logprobs: 6,
            max_prompt_len: 9,
            max_response_len: 13,
        }
    );
    assert!(!dir.path().join("rollouts.parquet.partial").exists());

    let (got, reader) = read_back(&path);
    assert_eq!(got, expected_rows(&rows));
    let meta = reader.metadata();
    assert!(
        meta.num_row_groups() > 2,
        "{} row groups",
        meta.num_row_groups()
    );
    for rg in meta.row_groups() {
        for col in rg.columns() {
            assert_eq!(
                col.compression(),
                Compression::SNAPPY,
                "{}",
                col.column_path()
            );
        }
    }
    let kv = meta.file_metadata().key_value_metadata().unwrap();
    assert!(kv
        .iter()
        .any(|k| k.key == "uniagent.verl_version" && k.value.as_deref() == Some("0.9.1")));
    // The masked reward-0 failure keeps its tokens with mask, logprobs and versions cleared.
    let masked = got.iter().find(|r| r["id"] == "alpha:2").unwrap();
    assert_eq!(masked["response_mask"], json!([0, 0, 0, 0]));
    assert_eq!(masked["response_logprobs"], json!([0.0, 0.0, 0.0, 0.0]));
    assert_eq!(masked["weight_versions"], json!([null, null, null, null]));
    assert_eq!(masked["reward_score"], json!(0.0));
}

#[test]
fn an_empty_export_is_a_valid_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.parquet");
    let summary = VerlWriter::create(&path, VerlOptions::default())
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(summary.rows, 0);
    let (rows, reader) = read_back(&path);
    assert!(rows.is_empty());
    assert_eq!(
        reader
            .metadata()
            .file_metadata()
            .schema_descr()
            .num_columns(),
        11
    );
}

#[test]
fn push_row_writes_what_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.parquet");
    let (t, _, _) = homogeneous().remove(0);
    let mut writer = VerlWriter::create(&path, VerlOptions::default()).unwrap();
    writer
        .push_row(VerlRow {
            uid: "group-1",
            id: "custom",
            exit_reason: "finished",
            output: &t.output,
            reward_score: None,
            step: Some(3),
        })
        .unwrap();
    assert_eq!(writer.finish().unwrap().rows, 1);
    let (got, _) = read_back(&path);
    assert_eq!(
        got[0]["reward_score"],
        Value::Null,
        "left to verl's reward workers"
    );
    assert_eq!(
        (&got[0]["uid"], &got[0]["step"]),
        (&json!("group-1"), &json!(3))
    );
    assert_eq!(got[0]["prompt_ids"], json!(t.output.prompt_ids));
}

#[test]
fn refusals_are_typed_and_leave_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.parquet");
    let partial = dir.path().join("out.parquet.partial");
    let refused = |rows: &[(Trajectory, Option<u64>, Option<f64>)], options, needle: &str| {
        let mut writer = VerlWriter::create(&path, options).unwrap();
        let err = rows
            .iter()
            .try_for_each(|(t, step, _)| writer.push(t, *step).map(drop))
            .unwrap_err();
        drop(writer);
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains(needle), "{err}");
        assert!(!path.exists() && !partial.exists());
    };

    // Mixed logprobs: refused by default, naming a row with and one without.
    refused(
        &mixed(),
        VerlOptions::default(),
        "row beta:1 has response_logprobs and row eps:0 has none",
    );
    // The same rows are written when mixing is allowed.
    let allowed = VerlOptions {
        mixed_logprobs: MixedLogprobs::Allow,
        ..VerlOptions::default()
    };
    let summary = write(&path, &mixed(), allowed).unwrap();
    assert_eq!((summary.rows, summary.rows_with_logprobs), (3, 2));
    let (got, _) = read_back(&path);
    assert_eq!(got, expected_rows(&mixed()));
    assert_eq!(got[1]["response_logprobs"], Value::Null, "null, not zeros");
    std::fs::remove_file(&path).unwrap();

    // Dropped rows under `Refuse`.
    let strict = VerlOptions {
        dropped: DroppedRows::Refuse,
        ..VerlOptions::default()
    };
    refused(&homogeneous(), strict, "alpha:3 ended with model_error");

    // A backend that is not token-level.
    let mut no_tokens = homogeneous().remove(0);
    no_tokens.0.output.prompt_ids.clear();
    refused(&[no_tokens], VerlOptions::default(), "has no token ids");

    // Lengths that disagree.
    let mut short = homogeneous().remove(0);
    short.0.output.response_mask.pop();
    refused(
        &[short],
        VerlOptions::default(),
        "response_mask has 6 entries for 7 response tokens",
    );
}

fn tokenizer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../uniagent-core/tests/fixtures/tokenizers/qwen2.5")
}

/// The pad token's id, from the fixture's own config (independently of transformers).
fn pad_token_id() -> u64 {
    let config: Value = serde_json::from_slice(
        &std::fs::read(tokenizer_dir().join("tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    let pad = config["pad_token"].as_str().unwrap();
    let (id, _) = config["added_tokens_decoder"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, t)| t["content"] == pad)
        .unwrap();
    id.parse().unwrap()
}

#[test]
fn verl_loads_the_export_into_the_right_dataproto() {
    let Some(python) = venv::torch_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let homogeneous_path = dir.path().join("homogeneous.parquet");
    let mixed_path = dir.path().join("mixed.parquet");
    let h = write(&homogeneous_path, &homogeneous(), VerlOptions::default()).unwrap();
    let allowed = VerlOptions {
        mixed_logprobs: MixedLogprobs::Allow,
        ..VerlOptions::default()
    };
    let m = write(&mixed_path, &mixed(), allowed).unwrap();
    // Room to pad on both sides of every row.
    let (plen, rlen) = (
        h.max_prompt_len.max(m.max_prompt_len) + 2,
        h.max_response_len.max(m.max_response_len) + 3,
    );
    let pad = pad_token_id();
    let expected = json!({
        "pad_token_id": pad,
        "prompt_length": plen,
        "response_length": rlen,
        "homogeneous": expected_for_python(&homogeneous()),
        "mixed": expected_for_python(&mixed()),
    });
    let expected_path = dir.path().join("expected.json");
    std::fs::write(&expected_path, expected.to_string()).unwrap();
    let out = dir.path().join("report.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/verl/parquet_dataproto.py");
    let run = Command::new(python)
        .arg(script)
        .args([&homogeneous_path, &mixed_path, &expected_path])
        .arg(tokenizer_dir())
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "parquet_dataproto.py failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    eprintln!("{report}");
    assert_eq!(report["verl"], "0.9.1", "must be verl 0.9.1's code");
    assert_eq!(
        report["pad_token_id"], pad,
        "verl's tokenizer pads with the config's pad token"
    );

    // pyarrow reads verl's types.
    let schema = &report["schema"];
    for list in [
        "prompt_ids",
        "response_ids",
        "response_mask",
        "weight_versions",
    ] {
        assert_eq!(schema[list], "list<element: int64>", "{list}");
    }
    assert_eq!(schema["response_logprobs"], "list<element: float>");
    assert_eq!(schema["reward_score"], "double");
    assert_eq!(schema["num_turns"], "int64");
    assert_eq!(schema["step"], "int64");
    for s in ["uid", "id", "exit_reason"] {
        assert_eq!(schema[s], "string", "{s}");
    }
    assert_eq!(
        report["ids"],
        json!(["alpha:0", "alpha:1", "alpha:2", "beta:0", "beta:1", "gamma:0"]),
        "dropped rows left out, order kept"
    );
    for (section, checks) in [
        ("columns", &report["columns"]),
        ("homogeneous", &report["homogeneous"]),
        ("mixed_columns", &report["mixed_columns"]),
    ] {
        for (key, verdict) in checks.as_object().unwrap() {
            assert_eq!(verdict, "ok", "{section}.{key}");
        }
    }
    assert_eq!(report["uid"], "ok");
    assert_eq!(report["num_turns"], json!([4, 8, 6, 2, 2, 4]));

    // The DataProto verl builds: every tensor, with its shape and dtype.
    assert_eq!(
        report["batch_keys"],
        json!([
            "attention_mask",
            "input_ids",
            "position_ids",
            "prompts",
            "response_mask",
            "responses",
            "rm_scores",
            "rollout_log_probs"
        ])
    );
    let (b, p, r) = (6, plen, rlen);
    assert_eq!(report["shapes"]["prompts"], json!([b, p]));
    assert_eq!(report["shapes"]["responses"], json!([b, r]));
    assert_eq!(report["shapes"]["input_ids"], json!([b, p + r]));
    assert_eq!(report["shapes"]["position_ids"], json!([b, p + r]));
    assert_eq!(report["shapes"]["rollout_log_probs"], json!([b, r]));
    assert_eq!(report["dtypes"]["rollout_log_probs"], "torch.float32");
    assert_eq!(report["dtypes"]["responses"], "torch.int64");
    // Spot check of the first row, written out here: left-padded prompt, right-padded
    // response, positions counting real tokens only.
    let first = &report["first_row"];
    let mut prompts = vec![pad; p - 5];
    prompts.extend([151644, 872, 198, 17, 10]);
    assert_eq!(first["prompts"], json!(prompts));
    let mut responses: Vec<u64> = vec![40, 41, 151657, 99, 151658, 42, 151645];
    responses.resize(r, pad);
    assert_eq!(first["responses"], json!(responses));
    let positions: Vec<usize> = (0..p + r)
        .map(|i| i.saturating_sub(p - 5).min(5 + 7 - 1))
        .collect();
    assert_eq!(first["position_ids"], json!(positions));

    // GRPO groups by uid: alpha (3 rows), beta (2), gamma (1).
    assert_eq!(report["grpo"]["groups"], 3);
    assert!(report["grpo"]["max_abs_error"].as_f64().unwrap() < 1e-5);

    // Mixed rows: verl decides from the first row of a batch.
    let first_without = report["mixed_first_without"].as_object().unwrap();
    assert_eq!(
        first_without["has_rollout_log_probs"], false,
        "logprobs of the other rows are dropped"
    );
    for (key, verdict) in first_without
        .iter()
        .filter(|(k, _)| *k != "has_rollout_log_probs")
    {
        assert_eq!(verdict, "ok", "mixed_first_without.{key}");
    }
    assert_eq!(
        report["mixed_first_with"], "TypeError",
        "a later row without logprobs breaks the batch"
    );
}
