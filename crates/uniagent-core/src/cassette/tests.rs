//! Round trips of the format and the comparison of token records.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::model::FinishReason;
use crate::sampling::SamplingParams;
use crate::tool::{EpisodeSignal, ToolStatus};

fn output_strategy() -> impl Strategy<Value = ToolOutput> {
    (
        ".{0,40}",
        prop_oneof![
            Just(ToolStatus::Success),
            Just(ToolStatus::Failed),
            Just(ToolStatus::TimedOut)
        ],
        proptest::option::of("[a-z0-9]{0,8}"),
    )
        .prop_map(|(content, status, answer)| ToolOutput {
            content,
            status,
            signal: answer.map(|answer| EpisodeSignal::Finish { answer }),
            metadata: Default::default(),
        })
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let generate = (
        proptest::collection::vec(any::<u32>(), 1..20),
        proptest::collection::vec((any::<u32>(), -20.0f32..=0.0), 0..20),
        proptest::option::of(any::<u64>()),
        any::<u64>(),
    )
        .prop_map(|(prompt, sampled, version, seed)| Step::Generate {
            request: GenerateRequest::new(
                prompt,
                SamplingParams {
                    seed: Some(seed),
                    ..SamplingParams::greedy()
                },
                64,
            )
            .with_stop_token_ids(vec![7])
            .with_session_id("t:0"),
            output: GenerateOutput {
                token_ids: sampled.iter().map(|(i, _)| *i).collect(),
                logprobs: Some(sampled.iter().map(|(_, l)| *l).collect()),
                finish_reason: FinishReason::Stop,
                weight_version: version,
            },
        });
    let tool = (
        0u32..8,
        "[a-z_]{1,10}",
        ".{0,20}",
        prop_oneof![
            output_strategy().prop_map(|output| ToolOutcome::Output { output }),
            ".{0,20}".prop_map(|message| ToolOutcome::Error {
                kind: ErrorKind::Timeout,
                message
            }),
            Just(ToolOutcome::Abandoned),
        ],
    )
        .prop_map(|(turn, name, text, outcome)| Step::Tool {
            turn,
            name,
            call_id: format!("call_{turn}"),
            arguments: json!({"text": text}),
            outcome,
        });
    let failed = ".{0,20}".prop_map(|message| Step::GenerateError {
        request: GenerateRequest::new(vec![1, 2], SamplingParams::greedy(), 8),
        kind: ErrorKind::Unavailable,
        message,
    });
    prop_oneof![generate, tool, failed]
}

fn cassette(steps: Vec<Step>) -> Cassette {
    let t = Trajectory::empty("t", 0, vec![], ExitReason::Finished, None);
    Cassette {
        cassette: CASSETTE_VERSION,
        id: "t:0".into(),
        uniagent_version: "0".into(),
        generator: "scripted".into(),
        task: Task::new("t", vec![crate::Message::user("hi")]),
        sample: 0,
        tools: vec![],
        loop_config: LoopConfig::default(),
        steps,
        trajectory: RecordedTrajectory::of(&t),
        context: json!({"config": {"model": {"type": "vllm"}}}),
    }
}

proptest! {
    #[test]
    fn cassettes_round_trip_through_one_json_line(steps in proptest::collection::vec(step_strategy(), 0..8)) {
        let c = cassette(steps);
        let line = serde_json::to_string(&c).unwrap();
        prop_assert!(!line.contains('\n'));
        let back = Cassette::from_json(&line).unwrap();
        prop_assert_eq!(back, c);
    }

    #[cfg(feature = "test-utils")]
    #[test]
    fn written_lines_fit_the_schema(steps in proptest::collection::vec(step_strategy(), 0..8)) {
        let line = cassette(steps).to_line().unwrap();
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        let violations = crate::testing::cassette_violations(&value);
        prop_assert!(violations.is_empty(), "{:#?}", violations);
    }
}

/// The schema is not vacuous: a gateway line, another version and a wrong step are refused.
#[cfg(feature = "test-utils")]
#[test]
fn the_schema_refuses_what_readers_refuse() {
    use crate::testing::cassette_violations;
    let line: serde_json::Value =
        serde_json::from_slice(&cassette(vec![]).to_line().unwrap()).unwrap();
    assert_eq!(cassette_violations(&line), Vec::<String>::new());
    type Mutation = fn(&mut serde_json::Value);
    let mutations: [(&str, Mutation); 4] = [
        ("another version", |v| v["cassette"] = json!(2)),
        ("a loop body marked gateway", |v| {
            v["kind"] = json!("gateway")
        }),
        ("a generation without its request", |v| {
            v["steps"] = json!([{"step": "generate"}]);
        }),
        ("a mask entry of 2", |v| {
            v["trajectory"]["response_mask"] = json!([2])
        }),
    ];
    for (what, mutate) in mutations {
        let mut v = line.clone();
        mutate(&mut v);
        assert!(!cassette_violations(&v).is_empty(), "{what} accepted");
    }
}

#[test]
fn other_versions_and_garbage_are_invalid_input() {
    let mut v = serde_json::to_value(cassette(vec![])).unwrap();
    v["cassette"] = json!(2);
    let err = Cassette::from_value(v.clone()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("version 2"), "{err}");
    v["cassette"] = json!(1);
    v["surprise"] = json!(true);
    assert!(Cassette::from_value(v)
        .unwrap_err()
        .to_string()
        .contains("surprise"));
    assert_eq!(
        Cassette::from_json("{").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        Cassette::from_json("[]").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn token_records_compare_field_by_field() {
    let mut a = cassette(vec![]).trajectory;
    a.prompt_ids = vec![1, 2, 3];
    a.response_ids = vec![4, 5];
    a.response_mask = vec![1, 0];
    a.response_logprobs = Some(vec![-0.5, 0.0]);
    assert_eq!(a.compare(&a), None);
    let mut b = a.clone();
    b.response_ids[1] = 9;
    assert_eq!(
        a.compare(&b),
        Some(Divergence::Trajectory {
            field: "response_ids".into(),
            position: 1,
            expected: "5".into(),
            got: "9".into()
        })
    );
    let mut b = a.clone();
    b.response_logprobs = Some(vec![-0.5, -0.1]);
    assert!(
        matches!(a.compare(&b), Some(Divergence::Trajectory { field, position: 1, .. }) if field == "response_logprobs")
    );
    let mut b = a.clone();
    b.exit_reason = ExitReason::MaxTurns;
    assert!(matches!(a.compare(&b), Some(Divergence::ExitReason { .. })));
    a.exit_reason = ExitReason::RewardError;
    assert_eq!(a.compare(&b), None, "a replay computes no reward");
}

#[test]
fn quotes_are_cut_at_200_characters() {
    let long = "é".repeat(300);
    let cut = truncate_text(&long);
    assert_eq!(cut.chars().count(), 201);
    assert!(cut.ends_with('…'));
    assert_eq!(truncate_text("short"), "short");
}

#[test]
fn the_fuzz_seed_is_a_valid_cassette() {
    // Kept valid as the format evolves, so that the fuzz target starts from a real cassette.
    let seed = include_str!("../../../../fuzz/seeds/cassette_parsing/two-turns");
    let c = Cassette::from_json(seed).unwrap();
    assert_eq!(c.steps.len(), 3);
    assert_eq!(c.generations().count(), 1);
    assert!(matches!(
        c.steps[2],
        Step::GenerateError {
            kind: ErrorKind::Unavailable,
            ..
        }
    ));
}
