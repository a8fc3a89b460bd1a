//! The cassette format: round trips, versions and kinds.

use serde_json::json;
use uniagent_core::cassette::{Step, CASSETTE_VERSION};
use uniagent_core::{FinishReason, GenerateOutput, GenerateRequest, SamplingParams};

use super::*;
use crate::exchange::SseEvent;

fn cassette() -> GatewayCassette {
    let request =
        GenerateRequest::new(vec![1, 2, 3], SamplingParams::greedy(), 8).with_session_id("s");
    GatewayCassette {
        cassette: CASSETTE_VERSION,
        kind: GATEWAY_KIND.into(),
        id: "s".into(),
        uniagent_version: "0".into(),
        generator: "script".into(),
        config: GatewayConfig::default(),
        tool_parser: Some(ToolCallFormat::Hermes),
        exchanges: vec![
            Exchange {
                route: Route::Messages,
                body: r#"{"model": "m", "stream": true, "messages": []}"#.into(),
                placement: Some(Placed {
                    chain: 0,
                    action: Action::New,
                    origin: Some(ChainOrigin::First),
                }),
                generation: Some(Step::Generate {
                    request,
                    output: GenerateOutput {
                        token_ids: vec![4, 5],
                        logprobs: Some(vec![-0.1, -0.25]),
                        finish_reason: FinishReason::Stop,
                        weight_version: Some(3),
                    },
                }),
                status: 200,
                reply: ReplyBody::Events(vec![SseEvent {
                    event: Some("message_stop".into()),
                    data: r#"{"type":"message_stop"}"#.into(),
                }]),
                stamp: Some(Stamp {
                    id: "msg-s-0".into(),
                    created: 1,
                }),
            },
            Exchange {
                route: Route::ChatCompletions,
                body: "{not json".into(),
                placement: None,
                generation: None,
                status: 400,
                reply: ReplyBody::Json(json!({"error": {"message": "no"}})),
                stamp: None,
            },
        ],
        reward: None,
        trajectories: vec![json!({"id": "s:0"})],
        context: json!({"codec_dir": "/m"}),
    }
}

#[test]
fn cassettes_round_trip_through_one_json_line() {
    let c = cassette();
    let line = serde_json::to_string(&c).unwrap();
    assert!(!line.contains('\n'));
    assert_eq!(GatewayCassette::from_json(&line).unwrap(), c);
    assert_eq!(c.generations(), 1);
    let v: Value = serde_json::from_str(&line).unwrap();
    assert!(is_gateway_cassette(&v));
    assert_eq!(v["exchanges"][0]["placement"]["action"], "new");
    assert_eq!(v["exchanges"][0]["route"], "messages");
}

#[test]
fn other_versions_kinds_and_fields_are_invalid() {
    let v = serde_json::to_value(cassette()).unwrap();
    let mut other = v.clone();
    other["cassette"] = json!(2);
    let err = GatewayCassette::from_value(other).unwrap_err();
    assert!(err.to_string().contains("version 2"), "{err}");
    let mut other = v.clone();
    other["kind"] = json!("loop");
    let err = GatewayCassette::from_value(other).unwrap_err();
    assert!(err.to_string().contains("not a gateway cassette"), "{err}");
    let mut other = v;
    other["surprise"] = json!(1);
    let err = GatewayCassette::from_value(other).unwrap_err();
    assert!(err.to_string().contains("surprise"), "{err}");
    assert!(GatewayCassette::from_json("{").is_err());
}

#[test]
fn placements_read_as_words() {
    let p = Placed {
        chain: 2,
        action: Action::New,
        origin: Some(ChainOrigin::ToolsChanged),
    };
    assert_eq!(p.to_string(), "start chain 2 (tools_changed)");
    let p = Placed {
        chain: 0,
        action: Action::Rollback,
        origin: None,
    };
    assert_eq!(p.to_string(), "roll back chain 0");
}

#[test]
fn the_written_line_reads_back_and_a_wrong_envelope_is_not_written() {
    let c = cassette();
    let line = c.to_line().unwrap();
    assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
    assert!(line.ends_with(b"\n"));
    let text = std::str::from_utf8(&line).unwrap();
    assert_eq!(GatewayCassette::from_json(text).unwrap(), c);
    let mut newer = c.clone();
    newer.cassette = 2;
    let err = newer.to_line().unwrap_err();
    assert!(matches!(err, GatewayError::Recording { .. }), "{err}");
    assert!(err.to_string().contains("version 2"), "{err}");
    let mut odd = c;
    odd.kind = "loop".into();
    assert!(odd.to_line().is_err());
}

/// The first gateway cassettes held each body as a JSON value: it reads as its compact text,
/// the bytes their replay sent; today's lines hold the text.
#[test]
fn a_body_recorded_as_a_json_value_reads_as_its_compact_text() {
    let mut v = serde_json::to_value(cassette()).unwrap();
    v["exchanges"][0]["body"] = json!({"model": "m", "stream": true, "messages": []});
    let read = GatewayCassette::from_value(v).unwrap();
    assert_eq!(
        read.exchanges[0].body,
        r#"{"model":"m","stream":true,"messages":[]}"#
    );
    assert_eq!(read.exchanges[1].body, "{not json");
    let written = serde_json::to_value(&read).unwrap();
    assert!(written["exchanges"][0]["body"].is_string());
}
