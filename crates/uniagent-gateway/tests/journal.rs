//! The journal of open sessions: a gateway dropped without ending its sessions (what a
//! SIGKILL or an OOM kill leaves) is followed by one on the same directory that writes those
//! sessions' trajectories exactly as `end` would have (token for token, masks, logprobs),
//! marked recovered; a torn last line loses only that turn; any other bad line is an error
//! naming its line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{codec, Reply, Script};
use proptest::prelude::*;
use serde_json::{json, Value};
use uniagent_core::{Message, RewardOutcome, ToolSpec};
use uniagent_gateway::journal::{Recovery, JOURNAL, RECOVERED_UNCLEAN_EXIT};
use uniagent_gateway::{Gateway, GatewayConfig, GatewayError, Recorder, TurnRequest, TRAJECTORIES};

fn reward(score: f64) -> RewardOutcome {
    RewardOutcome {
        score,
        ..RewardOutcome::binary(score > 0.5)
    }
}

/// A gateway recording into `dir` and journaling there, after recovering what it held.
fn gateway(dir: &Path, script: &Arc<Script>) -> Result<(Gateway, Recovery), GatewayError> {
    Gateway::new(codec("qwen2.5"), script.clone(), GatewayConfig::default())
        .with_recorder(Recorder::create(dir).unwrap())
        .with_journal(dir)
}

fn turn(text: &str) -> Vec<u32> {
    let c = codec("qwen2.5");
    let mut ids = c.encode(text).unwrap();
    ids.push(c.eos_token_id());
    ids
}

/// What `end` would return for `session` now: the same function over the same chains.
async fn as_ended(gateway: &Gateway, session: &str) -> Vec<Value> {
    let c = codec("qwen2.5");
    let reward = gateway.session_reward(session).await;
    gateway
        .chains(session)
        .await
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, chain)| chain.trajectory(&c, session, i as u32, reward.as_ref()))
        .collect()
}

fn marked(mut records: Vec<Value>) -> Vec<Value> {
    for r in &mut records {
        r["extra_fields"]["gateway"]["recovered"] = RECOVERED_UNCLEAN_EXIT.into();
    }
    records
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Token fields compared one by one first, for a readable failure; then the whole records.
fn assert_same_records(got: &[Value], want: &[Value]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        for key in uniagent_core::AgentLoopOutput::TOKEN_FIELDS
            .into_iter()
            .chain(["messages"])
        {
            assert_eq!(g.get(key), w.get(key), "{key} of {}", w["id"]);
        }
        assert_eq!(g, w);
    }
}

/// Drives session `s` through an extension, a regenerated turn (rollback), a rewritten
/// history (a new chain), a turn without logprobs, a malformed tool call and a reward.
async fn busy_session(gateway: &Gateway, script: &Script, s: &str) {
    let tools = vec![ToolSpec::function(
        "echo",
        "Echo.",
        json!({"type": "object"}),
    )];
    let req = |messages: Vec<Message>| TurnRequest {
        tools: tools.clone(),
        ..TurnRequest::new(messages)
    };
    script.push_ids(turn("One."));
    let mut m = vec![Message::user("Count.")];
    let a = gateway.complete(s, req(m.clone())).await.unwrap();
    m.push(a.message);
    m.push(Message::user("Go on."));
    script.push_ids(turn("<tool_call>\nnot json\n</tool_call>"));
    let a = gateway.complete(s, req(m.clone())).await.unwrap();
    assert!(a.format_error.is_some());
    // Ask for that turn again: a rollback of chain 0.
    script.push(Reply {
        ids: turn("Two."),
        logprobs: None,
        fail: false,
    });
    let a = gateway.complete(s, req(m.clone())).await.unwrap();
    assert_eq!(a.chain, 0);
    m.push(a.message);
    m.push(Message::user("And on."));
    script.push_ids(turn("Three."));
    gateway.complete(s, req(m.clone())).await.unwrap();
    // Another first message: a new chain.
    script.push_ids(turn("Fresh."));
    let a = gateway
        .complete(s, req(vec![Message::user("Start over.")]))
        .await
        .unwrap();
    assert_eq!(a.chain, 1);
    gateway.reward(s, reward(0.75)).await.unwrap();
}

#[tokio::test]
async fn a_killed_gateways_open_sessions_are_recovered_as_end_would_have_written_them() {
    let dir = tempfile::tempdir().unwrap();
    let script = Arc::new(Script::default());
    let (first, recovery) = gateway(dir.path(), &script).unwrap();
    assert!(recovery.sessions.is_empty());
    busy_session(&first, &script, "open").await;
    // An ended session is in trajectories.jsonl already: it is not recovered again.
    script.push_ids(turn("Done."));
    first
        .complete("ended", TurnRequest::new(vec![Message::user("Hi.")]))
        .await
        .unwrap();
    let ended = first.end("ended").await.unwrap();
    // A session with only a reward has no chain, so no record.
    first.open("idle").unwrap();
    first.reward("idle", reward(1.0)).await.unwrap();
    let want = marked(as_ended(&first, "open").await);
    assert_eq!(want.len(), 2);
    drop(first); // the kill: nothing ended, nothing flushed beyond the journal's lines

    let (second, recovery) = gateway(dir.path(), &script).unwrap();
    assert_eq!(recovery.sessions, ["open"]);
    assert!(!recovery.torn_tail);
    assert_same_records(&recovery.trajectories, &want);
    let written = lines(&dir.path().join(TRAJECTORIES));
    assert_same_records(&written[..1], &ended);
    assert_same_records(&written[1..], &want);
    assert_eq!(want[0]["reward"]["score"], 0.75);
    assert!(
        want[0].get("response_logprobs").is_none(),
        "a turn came without logprobs"
    );
    assert_eq!(want[0]["extra_fields"]["gateway"]["rollbacks"], 1);
    // The new gateway's journal starts empty: a second restart recovers nothing twice.
    drop(second);
    let (_third, recovery) = gateway(dir.path(), &script).unwrap();
    assert!(recovery.sessions.is_empty());
    assert_eq!(lines(&dir.path().join(TRAJECTORIES)).len(), 3);
}

#[tokio::test]
async fn a_torn_last_line_loses_only_the_turn_it_held() {
    let dir = tempfile::tempdir().unwrap();
    let script = Arc::new(Script::default());
    let (first, _) = gateway(dir.path(), &script).unwrap();
    script.push_ids(turn("One."));
    let mut m = vec![Message::user("Count.")];
    let a = first
        .complete("t", TurnRequest::new(m.clone()))
        .await
        .unwrap();
    let want = marked(as_ended(&first, "t").await);
    m.push(a.message);
    m.push(Message::user("Go on."));
    script.push_ids(turn("Two, a longer answer this time."));
    first.complete("t", TurnRequest::new(m)).await.unwrap();
    drop(first);
    // The kill came while the second turn's line was being written.
    let journal = dir.path().join(JOURNAL);
    let text = std::fs::read_to_string(&journal).unwrap();
    let last = text.trim_end().rfind('\n').unwrap() + 1;
    let torn = last + (text.len() - last) / 2;
    std::fs::write(&journal, &text[..torn]).unwrap();

    let (_second, recovery) = gateway(dir.path(), &script).unwrap();
    assert!(recovery.torn_tail);
    assert_eq!(recovery.sessions, ["t"]);
    assert_same_records(&recovery.trajectories, &want);
    assert_same_records(&lines(&dir.path().join(TRAJECTORIES)), &want);
}

#[tokio::test]
async fn a_bad_line_before_the_last_is_an_error_naming_it_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let script = Arc::new(Script::default());
    let (first, _) = gateway(dir.path(), &script).unwrap();
    for s in ["a", "b"] {
        script.push_ids(turn("One."));
        first
            .complete(s, TurnRequest::new(vec![Message::user("Count.")]))
            .await
            .unwrap();
    }
    drop(first);
    let journal = dir.path().join(JOURNAL);
    let text = std::fs::read_to_string(&journal).unwrap();
    let mut rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 3, "the start line and two turns");
    rows[1] = r#"{"event":"turn","session":"a"}"#;
    let corrupt = rows.join("\n") + "\n";
    std::fs::write(&journal, &corrupt).unwrap();
    let err = gateway(dir.path(), &script).unwrap_err();
    match &err {
        GatewayError::Journal { path, line, .. } => {
            assert_eq!(path, &journal);
            assert_eq!(*line, 2);
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("line 2"), "{err}");
    assert_eq!(std::fs::read_to_string(&journal).unwrap(), corrupt);
    assert!(lines(&dir.path().join(TRAJECTORIES)).is_empty());
    // Another version is refused too, naming line 1.
    std::fs::write(&journal, "{\"event\":\"start\",\"journal\":99}\n").unwrap();
    let err = gateway(dir.path(), &script).unwrap_err();
    assert!(
        matches!(err, GatewayError::Journal { line: 1, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn the_journal_is_emptied_when_the_last_open_session_ends() {
    let dir = tempfile::tempdir().unwrap();
    let script = Arc::new(Script::default());
    let (g, _) = gateway(dir.path(), &script).unwrap();
    let journal = dir.path().join(JOURNAL);
    let start = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(start, "{\"event\":\"start\",\"journal\":1}\n");
    for s in ["a", "b"] {
        script.push_ids(turn("One."));
        g.complete(s, TurnRequest::new(vec![Message::user("Count.")]))
            .await
            .unwrap();
    }
    g.end("a").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap().lines().count(),
        4
    );
    g.end("b").await.unwrap();
    assert_eq!(std::fs::read_to_string(&journal).unwrap(), start);
    // An ended session refuses a late reward instead of journaling it.
    assert!(matches!(
        g.reward("b", reward(1.0)).await,
        Err(GatewayError::SessionEnded { .. })
    ));
}

#[derive(Debug, Clone)]
enum Op {
    /// Continue chain `c % n` with a user message.
    Append(usize),
    /// Ask again for chain `c`'s last turn (a rollback).
    Regenerate(usize),
    /// Replace chain `c`'s last answer and continue (a rollback with an edit).
    Edit(usize),
    /// A conversation with a new first message (a new chain).
    Rewrite,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<usize>().prop_map(Op::Append),
        2 => any::<usize>().prop_map(Op::Regenerate),
        1 => any::<usize>().prop_map(Op::Edit),
        1 => Just(Op::Rewrite),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, max_shrink_iters: 16, ..ProptestConfig::default() })]

    /// Whatever a session did, the journal rebuilds each chain as `end` records it.
    #[test]
    fn recovery_equals_end_for_any_request_sequence(
        ops in prop::collection::vec(op(), 0..8),
        replies in prop::collection::vec(prop::collection::vec(0usize..6, 1..5), 9),
        score in proptest::option::of(-1.0f64..1.0),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let script = Arc::new(Script::default());
        let c = codec("qwen2.5");
        let vocab: Vec<u32> = ["Hel", "lo", " wor", "ld", "!", "\n"]
            .iter()
            .map(|w| c.encode(w).unwrap()[0])
            .collect();
        let (g, _) = gateway(dir.path(), &script).unwrap();
        // Per chain: the client's messages.
        let mut chains: Vec<Vec<Message>> = Vec::new();
        for (step, op) in std::iter::once(Op::Rewrite).chain(ops).enumerate() {
            let n = chains.len();
            let messages = match &op {
                Op::Append(i) => {
                    let mut m = chains[i % n].clone();
                    m.push(Message::user(format!("u{step}")));
                    m
                }
                Op::Regenerate(i) => {
                    let mut m = chains[i % n].clone();
                    m.pop();
                    m
                }
                Op::Edit(i) => {
                    let mut m = chains[i % n].clone();
                    m.pop();
                    m.push(Message::assistant(format!("edited {step}")));
                    m.push(Message::user(format!("after {step}")));
                    m
                }
                Op::Rewrite => vec![Message::user(format!("fresh {step}"))],
            };
            let mut ids: Vec<u32> = replies[step].iter().map(|&i| vocab[i]).collect();
            ids.push(c.eos_token_id());
            script.push_ids(ids);
            let a = runtime
                .block_on(g.complete("p", TurnRequest::new(messages.clone())))
                .unwrap();
            let mut kept = messages;
            kept.push(a.message);
            if a.chain == chains.len() {
                chains.push(kept);
            } else {
                chains[a.chain] = kept;
            }
        }
        if let Some(score) = score {
            runtime.block_on(g.reward("p", reward(score))).unwrap();
        }
        let want = marked(runtime.block_on(as_ended(&g, "p")));
        drop(g);
        let (_g, recovery) = gateway(dir.path(), &script).unwrap();
        prop_assert_eq!(&recovery.trajectories, &want);
    }
}
