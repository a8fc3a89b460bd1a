//! `uniagent train` with a black-box harness as the rollout source (feature `tch`): the
//! shipped `examples/configs/harness-train.yaml`, made small, trains a from-scratch policy
//! whose every rollout — demonstrations, held-out evaluations, RL groups — is a run of
//! `examples/harness/file_agent.py`, an agent written against the official `openai` SDK,
//! through its own gateway session, scored by `grade.py`.
//!
//! Skips with a printed reason when `UNIAGENT_GATEWAY_VENV` (the SDK's venv) is unset; fails
//! when it is set and the venv is missing.

#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::{jsonl, repo_root, run_in, stderr};
use serde_json::Value;
use uniagent_core::codec::{messages_to_json, ChatInput, Codec};
use uniagent_core::Message;

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn an_unmodified_sdk_harness_is_trained_end_to_end_through_the_gateway() {
    let Some(python) = common::gateway_sdk_python() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let py = python.display().to_string();
    let command = format!("trainer.rollout.command=[{py}, file_agent.py]");
    let reward = format!("trainer.rollout.reward={{command: [{py}, grade.py]}}");
    let out_arg = out.path().display().to_string();
    let mut args = vec![
        "train",
        "examples/configs/harness-train.yaml",
        "--out",
        &out_arg,
    ];
    let sets = [
        command.as_str(),
        reward.as_str(),
        "tasks.generate.count=80",
        "trainer.split={sft_tasks: 48, eval_tasks: 16}",
        "runner.samples_per_task=4",
        "trainer.sft.target=null",
        "trainer.rl.steps=4",
        "trainer.rl.tasks_per_step=4",
        "trainer.rl.eval_every=2",
    ];
    for set in &sets {
        args.extend(["--set", set]);
    }
    let o = run_in(&repo_root(), &args);
    assert_eq!(o.status.code(), Some(0), "train failed: {}", stderr(&o));
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    eprintln!("summary: {summary}");

    let records = jsonl(&out.path().join("trajectories.jsonl"));
    let mut by_phase: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for r in &records {
        by_phase
            .entry(r["phase"].as_str().unwrap().to_owned())
            .or_default()
            .push(r);
    }
    // Every rollout went through a gateway session of the harness.
    for r in &records {
        let session = r["extra_fields"]["gateway"]["session"].as_str();
        assert!(session.is_some(), "not a harness chain: {}", r["id"]);
        assert!(session.unwrap().starts_with(r["task_id"].as_str().unwrap()));
    }

    // Demonstrations: the harness's own conversation, re-rendered in full by the template,
    // is exactly the chain's prompt + response (the demonstrator's text is canonical); the
    // reward came from grade.py.
    let codec = Codec::from_dir(out.path().join("policy")).unwrap();
    let demos = &by_phase["demonstration"];
    assert_eq!(demos.len(), 48, "one chain per demonstrated task");
    for d in demos {
        let mut all = ids(&d["prompt_ids"]);
        all.extend(ids(&d["response_ids"]));
        assert_eq!(d["extra_fields"]["gateway"]["append_only"], true);
        let messages: Vec<Message> = serde_json::from_value(d["messages"].clone()).unwrap();
        let mut render = codec
            .render_ids(&ChatInput {
                messages: messages_to_json(&messages).unwrap(),
                ..ChatInput::default()
            })
            .unwrap();
        // The render ends with the template's text after the last end of turn.
        let end = render
            .iter()
            .rposition(|id| *id == codec.eos_token_id())
            .unwrap();
        render.truncate(end + 1);
        let render: Vec<u64> = render.into_iter().map(u64::from).collect();
        assert_eq!(all, render, "{} drifted from a full render", d["id"]);
        assert_eq!(d["reward"]["success"], true, "{}", d["id"]);
        assert!(
            d["reward"]["details"]["answer"].is_string(),
            "{}",
            d["reward"]
        );
        // The harness called execute_bash, got its output back, then finished.
        assert_eq!(d["num_turns"].as_u64(), Some(4), "{}", d["messages"]);
    }

    // RL: 4 steps x 4 tasks x 4 samples, sampled tokens with the engine's logprobs.
    let rl = &by_phase["rl"];
    assert!(rl.len() >= 64, "{} RL chains", rl.len());
    let mut sampled_total = 0;
    for r in rl {
        let mask = ids(&r["response_mask"]);
        let sampled = mask.iter().filter(|m| **m == 1).count();
        assert_eq!(
            sampled as u64,
            r["counts"]["sampled_tokens"].as_u64().unwrap()
        );
        sampled_total += sampled;
        if sampled > 0 {
            let lps = r["response_logprobs"].as_array().expect("engine logprobs");
            assert_eq!(lps.len(), mask.len());
        }
        assert!(
            r["reward"]["score"].is_f64(),
            "RL chain without reward: {r}"
        );
    }
    assert!(sampled_total > 0);
    let metrics = jsonl(&out.path().join("metrics.jsonl"));
    assert_eq!(metrics.len(), 4);
    assert!(metrics
        .iter()
        .all(|m| m["loss"].as_f64().is_some_and(f64::is_finite)));
    // Held out: evaluated before RL, at step 2 and at step 4, greedily through the harness.
    assert_eq!(by_phase["eval"].len(), 48);
    assert!(out.path().join("policy/model.safetensors").exists());
}
