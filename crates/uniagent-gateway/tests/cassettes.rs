//! Gateway cassettes end to end: sessions on both routes (streamed and not, a tool call and
//! its result, a rollback, a rewritten history making a second chain, a rejected request, a
//! reward) are recorded through the HTTP server, each cassette replays identically through a
//! fresh gateway without the generator, and tampered cassettes (a sampled id, a request body,
//! a recorded trajectory) diverge where the tampering is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{codec, fixture, Script};
use serde_json::{json, Value};
use uniagent_core::cassette::Step;
use uniagent_core::testing::cassette_violations;
use uniagent_gateway::cassette::{
    replay, Action, GatewayCassette, GatewayDivergence, CASSETTES, GATEWAY_KIND,
};
use uniagent_gateway::{Gateway, GatewayConfig, Recorder};

fn ls_tool() -> Value {
    json!({"type": "function", "function": {"name": "ls", "description": "List a directory.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}})
}

fn turn(text: &str) -> Vec<u32> {
    let c = codec("qwen2.5");
    let mut ids = c.encode(text).unwrap();
    ids.push(c.eos_token_id());
    ids
}

async fn post(client: &reqwest::Client, url: String, body: &Value) -> (u16, String) {
    let r = client.post(url).json(body).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Records two sessions ("oa" on the OpenAI route, "an" on the Anthropic one) into `dir`;
/// returns what `end` gave for each.
async fn record(dir: &Path) -> (Vec<Value>, Vec<Value>) {
    let script = Arc::new(Script::default());
    let call = |path: &str| {
        format!("<tool_call>\n{{\"name\": \"ls\", \"arguments\": {{\"path\": \"{path}\"}}}}\n</tool_call>")
    };
    for text in [
        call("/srv").as_str(),
        "Empty.",
        "Three.",
        "Other.",
        call("/").as_str(),
        "Done.",
    ] {
        script.push_ids(turn(text));
    }
    let gateway = Gateway::new(codec("qwen2.5"), script.clone(), GatewayConfig::default())
        .with_cassettes(
            Recorder::open(dir, CASSETTES).unwrap(),
            json!({"codec_dir": fixture("qwen2.5")}),
        );
    let gateway = Arc::new(gateway);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = uniagent_gateway::router(Arc::clone(&gateway));
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let client = reqwest::Client::new();
    let chat = |s: &str| format!("{base}/sessions/{s}/v1/chat/completions");

    // OpenAI: a tool call (not streamed, with logprobs), its result (streamed), an edit of
    // the last answer (rollback), a rewritten history (new chain), a rejected request.
    let user = |t: &str| json!({"role": "user", "content": t});
    let tools = json!([ls_tool()]);
    let (status, r1) = post(
        &client,
        chat("oa"),
        &json!({"model": "m", "logprobs": true, "tools": tools, "messages": [user("what is in /srv?")]}),
    )
    .await;
    assert_eq!(status, 200, "{r1}");
    let r1: Value = serde_json::from_str(&r1).unwrap();
    let asked = r1["choices"][0]["message"].clone();
    assert_eq!(asked["tool_calls"][0]["function"]["name"], "ls");
    let mut history = vec![
        user("what is in /srv?"),
        asked.clone(),
        json!({"role": "tool", "tool_call_id": asked["tool_calls"][0]["id"], "content": "(empty)"}),
    ];
    let (status, r2) = post(
        &client,
        chat("oa"),
        &json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
                "tools": tools, "messages": history}),
    )
    .await;
    assert_eq!(status, 200, "{r2}");
    assert!(r2.contains("Empty.") && r2.contains("[DONE]"), "{r2}");
    history.push(json!({"role": "assistant", "content": "Edited: nothing there."}));
    history.push(user("and in /?"));
    let (status, r3) = post(
        &client,
        chat("oa"),
        &json!({"model": "m", "tools": tools, "messages": history}),
    )
    .await;
    assert_eq!(status, 200, "{r3}");
    let (status, r4) = post(
        &client,
        chat("oa"),
        &json!({"model": "m", "tools": tools, "messages": [user("start over")]}),
    )
    .await;
    assert_eq!(status, 200, "{r4}");
    let (status, _) = post(&client, chat("oa"), &json!({"model": "m", "messages": []})).await;
    assert_eq!(status, 400);
    let (status, _) = post(
        &client,
        format!("{base}/sessions/oa/reward"),
        &json!({"score": 1.0}),
    )
    .await;
    assert_eq!(status, 200);
    let (_, oa) = post(&client, format!("{base}/sessions/oa/end"), &Value::Null).await;

    // Anthropic: a tool_use (not streamed), its tool_result (streamed).
    let atools = json!([{"name": "ls", "description": "List a directory.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
    let messages = |m: &Vec<Value>, stream: bool| {
        json!({"model": "m", "max_tokens": 64,
        "system": "Be brief.", "tools": atools, "stream": stream, "messages": m})
    };
    let url = format!("{base}/sessions/an/v1/messages");
    let mut m = vec![json!({"role": "user", "content": "what is in /?"})];
    let (status, a1) = post(&client, url.clone(), &messages(&m, false)).await;
    assert_eq!(status, 200, "{a1}");
    let a1: Value = serde_json::from_str(&a1).unwrap();
    let block = a1["content"][0].clone();
    assert_eq!(block["type"], "tool_use");
    m.push(json!({"role": "assistant", "content": a1["content"]}));
    m.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": block["id"], "content": "bin etc"}]}));
    let (status, a2) = post(&client, url, &messages(&m, true)).await;
    assert_eq!(status, 200, "{a2}");
    assert!(a2.contains("message_stop"), "{a2}");
    let (_, an) = post(&client, format!("{base}/sessions/an/end"), &Value::Null).await;
    server.abort();
    (
        serde_json::from_str(&oa).unwrap(),
        serde_json::from_str(&an).unwrap(),
    )
}

/// The cassettes the gateway wrote, each line checked against the format's JSON Schema first.
fn read(dir: &Path) -> Vec<GatewayCassette> {
    std::fs::read_to_string(dir.join(CASSETTES))
        .unwrap()
        .lines()
        .map(|l| {
            let violations = cassette_violations(&serde_json::from_str(l).unwrap());
            assert!(violations.is_empty(), "{violations:#?}");
            GatewayCassette::from_json(l).unwrap()
        })
        .collect()
}

async fn replayed(c: &GatewayCassette) -> Option<GatewayDivergence> {
    replay(c, codec("qwen2.5")).await.unwrap().divergence
}

fn without_timings(t: &[Value]) -> Vec<Value> {
    t.iter()
        .map(|v| {
            let mut v = v.clone();
            v.as_object_mut().unwrap().remove("timings");
            v
        })
        .collect()
}

#[tokio::test]
async fn recorded_sessions_replay_identically_and_tampering_is_located() {
    let dir = tempfile::tempdir().unwrap();
    let (oa_ended, an_ended) = record(dir.path()).await;
    let cassettes = read(dir.path());
    assert_eq!(cassettes.len(), 2, "one cassette per ended session");
    let (oa, an) = (&cassettes[0], &cassettes[1]);
    assert_eq!((oa.id.as_str(), an.id.as_str()), ("oa", "an"));
    assert_eq!(oa.kind, GATEWAY_KIND);
    assert_eq!(oa.generator, "script");
    assert_eq!(oa.reward.as_ref().map(|r| r.score), Some(1.0));
    assert_eq!(oa.trajectories, oa_ended);
    assert_eq!(an.trajectories, an_ended);
    assert_eq!(oa.trajectories.len(), 2);
    // Placements as the gateway decided them; the rejected request has none.
    let placed: Vec<Option<(usize, Action)>> = oa
        .exchanges
        .iter()
        .map(|e| e.placement.as_ref().map(|p| (p.chain, p.action)))
        .collect();
    assert_eq!(
        placed,
        vec![
            Some((0, Action::New)),
            Some((0, Action::Extend)),
            Some((0, Action::Rollback)),
            Some((1, Action::New)),
            None
        ]
    );
    assert_eq!(oa.exchanges[4].status, 400);
    assert_eq!((oa.generations(), an.generations()), (4, 2));
    let Some(Step::Generate { request, output }) = &oa.exchanges[1].generation else {
        panic!("exchange 1 has a generation");
    };
    assert_eq!(request.session_id.as_deref(), Some("oa"));
    assert_eq!(output.token_ids, turn("Empty."));

    // Identical replays, without the scripted generator.
    for c in &cassettes {
        let outcome = replay(c, codec("qwen2.5")).await.unwrap();
        assert_eq!(outcome.divergence, None, "{}", c.id);
        assert_eq!(
            without_timings(&outcome.trajectories),
            without_timings(&c.trajectories)
        );
    }

    // A changed sampled id: the answer of that request differs (the streamed content).
    let mut t = oa.clone();
    let Some(Step::Generate { output, .. }) = &mut t.exchanges[1].generation else {
        unreachable!()
    };
    output.token_ids[0] = turn("Full.")[0];
    match replayed(&t).await {
        Some(GatewayDivergence::Answer { request: 1, at, .. }) => {
            assert!(at.contains("/data/choices/0/delta/content"), "{at}")
        }
        other => panic!("{other:?}"),
    }

    // A changed request body: the prompt of that request differs after the first request's
    // prompt and turn, at the tool result.
    let mut t = an.clone();
    let mut body: Value = serde_json::from_str(&t.exchanges[1].body).unwrap();
    body["messages"][2]["content"][0]["content"] = json!("usr var");
    t.exchanges[1].body = body.to_string();
    let first = match &an.exchanges[0].generation {
        Some(Step::Generate { request, output }) => {
            request.prompt_ids.len() + output.token_ids.len()
        }
        _ => unreachable!(),
    };
    match replayed(&t).await {
        Some(GatewayDivergence::Prompt {
            request: 1,
            position,
            ..
        }) => assert!(position > first, "{position} after {first}"),
        other => panic!("{other:?}"),
    }

    // A changed recorded trajectory: located in that chain's field.
    let mut t = oa.clone();
    let ids = t.trajectories[1]["response_ids"].as_array_mut().unwrap();
    ids[2] = json!(ids[2].as_u64().unwrap() + 1);
    assert_eq!(
        replayed(&t).await,
        Some(GatewayDivergence::Trajectory {
            chain: 1,
            at: "/response_ids/2".into(),
            expected: (oa.trajectories[1]["response_ids"][2].as_u64().unwrap() + 1).to_string(),
            got: oa.trajectories[1]["response_ids"][2].to_string(),
        })
    );

    // A recorded generation the replay does not make, and a placement recorded otherwise.
    let mut t = oa.clone();
    t.exchanges[4].generation = oa.exchanges[3].generation.clone();
    assert!(matches!(
        replayed(&t).await,
        Some(GatewayDivergence::Generation { request: 4, .. })
    ));
    let mut t = oa.clone();
    t.exchanges[2].placement.as_mut().unwrap().action = Action::Extend;
    let d = replayed(&t).await.unwrap();
    assert!(
        matches!(&d, GatewayDivergence::Placement { request: 2, expected, got }
            if expected == "extend chain 0" && got == "roll back chain 0"),
        "{d}"
    );
}

#[tokio::test]
async fn without_cassettes_nothing_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let script = Arc::new(Script::default());
    script.push_ids(turn("Hi."));
    let gateway = Gateway::new(codec("qwen2.5"), script, GatewayConfig::default())
        .with_recorder(Recorder::create(dir.path()).unwrap());
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let reply = gateway
        .exchange(
            "s",
            uniagent_gateway::Route::ChatCompletions,
            body.to_string().as_bytes(),
            None,
        )
        .await;
    assert_eq!(reply.status.as_u16(), 200);
    assert_eq!(gateway.end("s").await.unwrap().len(), 1);
    assert!(dir.path().join("trajectories.jsonl").exists());
    assert!(!dir.path().join(CASSETTES).exists());
}

/// The tiny Qwen2 model on CPU (tch engine), sampled at temperature 1 with seeds: its
/// cassettes (both routes, streamed and not, two turns) replay identically without the model.
#[cfg(feature = "tch")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_model_sessions_replay_without_the_model() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = tempfile::tempdir().unwrap();
    let weights = root.join("../uniagent-train/tests/fixtures/tiny-qwen2");
    for (from, name) in [
        (&weights, "config.json"),
        (&weights, "model.safetensors"),
        (&weights, "generation_config.json"),
        (&fixture("qwen2.5"), "tokenizer.json"),
        (&fixture("qwen2.5"), "tokenizer_config.json"),
        (&fixture("qwen2.5"), "chat_template.jinja"),
    ] {
        std::os::unix::fs::symlink(from.join(name), model.path().join(name)).unwrap();
    }
    let (model_codec, engine) = uniagent_gateway::load_model_dir(model.path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::new(model_codec, engine, GatewayConfig::default())
        .with_cassettes(Recorder::open(dir.path(), CASSETTES).unwrap(), Value::Null);
    let send = |route, body: Value| {
        let gateway = &gateway;
        async move {
            let reply = gateway
                .exchange("t", route, body.to_string().as_bytes(), None)
                .await;
            assert_eq!(reply.status.as_u16(), 200, "{:?}", reply.body);
            reply
        }
    };
    let user = |t: &str| json!({"role": "user", "content": t});
    let first = send(
        uniagent_gateway::Route::ChatCompletions,
        json!({"model": "m", "max_tokens": 6, "temperature": 1.0, "seed": 11, "logprobs": true,
               "messages": [user("hi")]}),
    )
    .await;
    let uniagent_gateway::ReplyBody::Json(first) = first.body else {
        panic!("a JSON answer")
    };
    send(
        uniagent_gateway::Route::ChatCompletions,
        json!({"model": "m", "max_tokens": 6, "temperature": 1.0, "seed": 12, "stream": true,
               "messages": [user("hi"), first["choices"][0]["message"], user("more")]}),
    )
    .await;
    send(
        uniagent_gateway::Route::Messages,
        json!({"model": "m", "max_tokens": 6, "temperature": 1.0, "stream": true,
               "messages": [user("another conversation")]}),
    )
    .await;
    let ended = gateway.end("t").await.unwrap();
    assert_eq!(ended.len(), 2);
    let cassettes = read(dir.path());
    assert_eq!(cassettes.len(), 1);
    assert_eq!(cassettes[0].generator, "tch");
    assert_eq!(cassettes[0].generations(), 3);
    // The codec of the model directory: its generation_config.json adds a stop id.
    let dir_codec = uniagent_core::codec::Codec::from_dir(model.path()).unwrap();
    let outcome = replay(&cassettes[0], dir_codec).await.unwrap();
    assert_eq!(outcome.divergence, None);
    // The tokenizer alone lacks that stop id: the first call already differs.
    assert!(matches!(
        replay(&cassettes[0], codec("qwen2.5")).await.unwrap().divergence,
        Some(GatewayDivergence::Generation { request: 0, ref at, .. }) if at.starts_with("/stop_token_ids")
    ));
    assert_eq!(
        without_timings(&outcome.trajectories),
        without_timings(&ended)
    );
}
