//! The OpenAI route at the HTTP level, over the real codec (Qwen2.5 tokenizer and template)
//! and a scripted generator: exact token chains, SSE, tools, format errors, rollback and new
//! chains, logprobs, stop strings and typed errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{sampled, serve, sse, Reply};
use serde_json::{json, Value};
use uniagent_gateway::GatewayConfig;

fn ls_tool() -> Value {
    json!({"type": "function", "function": {"name": "ls", "description": "List a directory.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}})
}

#[tokio::test]
async fn sampled_ids_are_reused_never_retokenized() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    // "Hello" sampled letter by letter: a re-tokenization would merge it into one token.
    let letters: Vec<u32> = "Hello"
        .chars()
        .map(|c| s.codec.encode(&c.to_string()).unwrap()[0])
        .chain([s.codec.eos_token_id()])
        .collect();
    assert_ne!(s.codec.encode("Hello").unwrap().len(), 5);
    s.script.push_ids(letters.clone());
    s.script.push_ids(s.turn("Fine."));
    let first = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let (status, r1) = s.chat("a", &first).await;
    assert_eq!(status, 200, "{r1}");
    assert_eq!(r1["choices"][0]["message"]["content"], "Hello");
    assert_eq!(r1["choices"][0]["finish_reason"], "stop");
    assert_eq!(r1["usage"]["completion_tokens"], 6);
    let second = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        r1["choices"][0]["message"].clone(),
        {"role": "user", "content": "how are you?"}]});
    let (status, r2) = s.chat("a", &second).await;
    assert_eq!(status, 200, "{r2}");
    assert_eq!(r2["choices"][0]["message"]["content"], "Fine.");

    let prompts = s.script.prompts();
    let mut expected = prompts[0].clone();
    expected.extend(&letters);
    // The glue and the new user turn, tokenized alone as the template renders them.
    expected.extend(
        s.codec
            .encode("\n<|im_start|>user\nhow are you?<|im_end|>\n<|im_start|>assistant\n")
            .unwrap(),
    );
    assert_eq!(prompts[1], expected);
    // The first prompt is the template's full render.
    let render = s
        .codec
        .encode("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    assert_eq!(prompts[0], render);

    let trajectories = s.end("a").await;
    assert_eq!(trajectories.len(), 1);
    let t = &trajectories[0];
    let mut all: Vec<u64> = letters.iter().map(|&i| i as u64).collect();
    all.extend(s.turn("Fine.").iter().map(|&i| i as u64));
    assert_eq!(sampled(t), all);
    assert_eq!(t["id"], "a:0");
    assert_eq!(t["task_id"], "a");
    assert_eq!(t["exit_reason"], "finished");
    assert_eq!(t["extra_fields"]["gateway"]["origin"], "first");
    let lps = t["response_logprobs"].as_array().unwrap();
    let mask = t["response_mask"].as_array().unwrap();
    assert!((lps[0].as_f64().unwrap() + 0.1).abs() < 1e-6);
    let versions = t["weight_versions"].as_array().unwrap();
    for ((m, lp), v) in mask.iter().zip(lps).zip(versions) {
        if m == 0 {
            assert_eq!(lp.as_f64(), Some(0.0));
            assert!(v.is_null());
        } else {
            assert!(lp.as_f64().unwrap() < 0.0);
            assert_eq!(v, 7);
        }
    }
    // The record's ids are exactly the generator's last prompt plus what it sampled.
    let mut ids: Vec<u64> = t["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    ids.extend(
        t["response_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap()),
    );
    let mut last: Vec<u64> = prompts[1].iter().map(|&i| i as u64).collect();
    last.extend(s.turn("Fine.").iter().map(|&i| i as u64));
    assert_eq!(ids, last);
    assert_eq!(t["messages"].as_array().unwrap().len(), 4);
    // An ended session is gone.
    assert!(s.end("a").await.is_empty());
}

#[tokio::test]
async fn streaming_sends_the_same_answer_as_chunks() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn("Streamed text."));
    let body = json!({"model": "m", "stream": true, "logprobs": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hi"}]});
    let (status, text) = s
        .post_raw("/sessions/s/v1/chat/completions", &body.to_string())
        .await;
    assert_eq!(status, 200, "{text}");
    let events = sse(&text);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "Streamed text.");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec!["stop"]);
    let lps: usize = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(lps, s.turn("Streamed text.").len());
    assert_eq!(
        chunks.last().unwrap()["usage"]["completion_tokens"],
        s.turn("Streamed text.").len()
    );
}

#[tokio::test]
async fn tool_calls_round_trip_in_one_chain() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn(
        "Let me look.\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": \"/\"}}\n</tool_call>",
    ));
    s.script.push_ids(s.turn("There are two files."));
    let mut messages = vec![json!({"role": "user", "content": "what is in /?"})];
    let body = |messages: &Vec<Value>| json!({"model": "m", "messages": messages, "tools": [ls_tool()], "tool_choice": "auto"});
    let (status, r1) = s.chat("t", &body(&messages)).await;
    assert_eq!(status, 200, "{r1}");
    let choice = &r1["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "ls");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"path": "/"}));
    messages.push(choice["message"].clone());
    messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "a.txt b.txt"}));
    let (status, r2) = s.chat("t", &body(&messages)).await;
    assert_eq!(status, 200, "{r2}");
    assert_eq!(
        r2["choices"][0]["message"]["content"],
        "There are two files."
    );
    let prompts = s.script.prompts();
    assert!(prompts[1].starts_with(&prompts[0]));
    let t = s.end("t").await;
    assert_eq!(t.len(), 1, "a tool result extends the chain");
    assert_eq!(t[0]["extra_fields"]["gateway"]["format_errors"], json!([]));
}

#[tokio::test]
async fn bad_tool_call_json_is_returned_as_text_and_flagged() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    let text = "<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": </tool_call>";
    s.script.push_ids(s.turn(text));
    let body = json!({"model": "m", "tools": [ls_tool()],
        "messages": [{"role": "user", "content": "list /"}]});
    let (status, r) = s.chat("f", &body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["choices"][0]["message"]["content"], text);
    assert!(r["choices"][0]["message"]["tool_calls"].is_null());
    assert!(r["uniagent"]["format_error"].is_string());
    let t = s.end("f").await;
    assert_eq!(t[0]["counts"]["format_errors"], 1);
    let errors = t[0]["extra_fields"]["gateway"]["format_errors"]
        .as_array()
        .unwrap();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["turn"], 0);
}

#[tokio::test]
async fn edits_roll_back_rewrites_and_tool_changes_start_chains() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    for text in ["One.", "Two.", "Two again.", "Three.", "Other.", "Tools."] {
        s.script.push_ids(s.turn(text));
    }
    let user = |t: &str| json!({"role": "user", "content": t});
    let asst = |t: &str| json!({"role": "assistant", "content": t});
    let chat = |m: Vec<Value>| json!({"model": "m", "messages": m});
    s.chat("e", &chat(vec![user("u1")])).await;
    s.chat("e", &chat(vec![user("u1"), asst("One."), user("u2")]))
        .await;
    // Regenerate the last turn: same prefix, last assistant dropped.
    let (_, r) = s
        .chat("e", &chat(vec![user("u1"), asst("One."), user("u2")]))
        .await;
    assert_eq!(r["uniagent"]["chain"], 0);
    // The harness edits the last assistant turn and continues.
    let (_, r) = s
        .chat(
            "e",
            &chat(vec![
                user("u1"),
                asst("One."),
                user("u2"),
                asst("Edited."),
                user("u3"),
            ]),
        )
        .await;
    assert_eq!(r["uniagent"]["chain"], 0);
    // Earlier history rewritten: a second chain.
    let (_, r) = s.chat("e", &chat(vec![user("other start")])).await;
    assert_eq!(r["uniagent"]["chain"], 1);
    // Same conversation as chain 0, other tools: a third chain.
    let body = json!({"model": "m", "tools": [ls_tool()], "messages": [user("u1"), asst("One."), user("u2"),
        asst("Edited."), user("u3"), asst("Three."), user("u4")]});
    let (_, r) = s.chat("e", &body).await;
    assert_eq!(r["uniagent"]["chain"], 2);

    let t = s.end("e").await;
    assert_eq!(t.len(), 3);
    let g = |i: usize, k: &str| t[i]["extra_fields"]["gateway"][k].clone();
    assert_eq!(g(0, "rollbacks"), 2);
    assert_eq!(g(1, "origin"), "history_rewritten");
    assert_eq!(g(2, "origin"), "tools_changed");
    // Chain 0 keeps exactly the turns that survived: "One." and "Three."; "Two." and
    // "Two again." were rolled back, "Edited." is context (mask 0).
    let mut want: Vec<u64> = s.turn("One.").iter().map(|&i| i as u64).collect();
    want.extend(s.turn("Three.").iter().map(|&i| i as u64));
    assert_eq!(sampled(&t[0]), want);
    let response: Vec<u32> = t[0]["response_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let text = s.codec.decode(&response, false).unwrap();
    assert!(text.contains("Edited.") && !text.contains("Two"), "{text}");
    assert_eq!(t[0]["messages"].as_array().unwrap().len(), 6);
    // The new chains start from a full render: nothing before their own turn is mask 1.
    let turn = |x: &str| s.turn(x).iter().map(|&i| i as u64).collect::<Vec<_>>();
    assert_eq!(sampled(&t[1]), turn("Other."));
    assert_eq!(sampled(&t[2]), turn("Tools."));
}

#[tokio::test]
async fn missing_logprobs_stay_missing() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push(Reply {
        ids: s.turn("No logprobs."),
        logprobs: None,
        fail: false,
    });
    let body =
        json!({"model": "m", "logprobs": true, "messages": [{"role": "user", "content": "hi"}]});
    let (status, r) = s.chat("l", &body).await;
    assert_eq!(status, 200, "{r}");
    assert!(r["choices"][0]["logprobs"].is_null());
    let t = s.end("l").await;
    assert!(t[0].get("response_logprobs").is_none(), "{}", t[0]);
    assert!(!sampled(&t[0]).is_empty());
}

#[tokio::test]
async fn stop_strings_and_max_tokens_end_the_answer() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn("alpha beta END gamma"));
    s.script.push_ids(s.turn("one two three four five"));
    let body =
        json!({"model": "m", "stop": ["END"], "messages": [{"role": "user", "content": "go"}]});
    let (_, r) = s.chat("x", &body).await;
    assert_eq!(r["choices"][0]["message"]["content"], "alpha beta ");
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    let kept = r["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    let ids = s.turn("alpha beta END gamma");
    assert!(s
        .codec
        .decode(&ids[..kept], false)
        .unwrap()
        .ends_with("END"));
    let body =
        json!({"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "count"}]});
    let (_, r) = s.chat("y", &body).await;
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    assert_eq!(r["usage"]["completion_tokens"], 2);
    assert_eq!(s.script.requests.lock().unwrap()[1].max_new_tokens, 2);
}

#[tokio::test]
async fn bad_requests_are_typed_errors_never_500() {
    let config = GatewayConfig {
        max_model_len: Some(40),
        ..GatewayConfig::default()
    };
    let s = serve("qwen2.5", config).await;
    let path = "/sessions/b/v1/chat/completions";
    for body in [
        "{not json",
        r#"{"model": "m"}"#,
        r#"{"model": "m", "messages": []}"#,
        r#"{"model": "m", "n": 2, "messages": [{"role": "user", "content": "hi"}]}"#,
        r#"{"model": "m", "messages": [{"role": "wizard", "content": "hi"}]}"#,
        r#"{"model": "m", "temperature": -1, "messages": [{"role": "user", "content": "hi"}]}"#,
        r#"{"model": "m", "tool_choice": {"type": "function", "function": {"name": "nope"}}, "messages": [{"role": "user", "content": "hi"}]}"#,
        r#"{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
    ] {
        let (status, text) = s.post_raw(path, body).await;
        assert_eq!(status, 400, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["error"]["message"].is_string(), "{text}");
    }
    // Over the context window: 400 context_length_exceeded, before the generator is called.
    let long = "word ".repeat(100);
    let (status, v) = s
        .chat(
            "b",
            &json!({"model": "m", "messages": [{"role": "user", "content": long}]}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert!(s.script.requests.lock().unwrap().is_empty());
    // A failing generator is a 502, and the session is unchanged.
    s.script.push(Reply {
        ids: vec![],
        logprobs: None,
        fail: true,
    });
    let (status, v) = s
        .chat(
            "b",
            &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(status, 502, "{v}");
    assert!(s.end("b").await.is_empty());
    let (status, v) = s
        .post("/sessions/b/reward", &json!({"score": "high"}))
        .await;
    assert_eq!(status, 400, "{v}");
}

#[tokio::test]
async fn reward_models_healthz_and_recording() {
    let dir = tempfile::tempdir().unwrap();
    let script = std::sync::Arc::new(common::Script::default());
    let gateway = uniagent_gateway::Gateway::new(
        common::codec("qwen2.5"),
        script.clone(),
        GatewayConfig::default(),
    )
    .with_recorder(uniagent_gateway::Recorder::create(dir.path()).unwrap());
    let gateway = std::sync::Arc::new(gateway);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(uniagent_gateway::serve(listener, gateway, async {
        let _ = rx.await;
    }));
    let client = reqwest::Client::new();
    assert_eq!(
        client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let models = common::http::json_body(client.get(format!("{base}/sessions/r/v1/models"))).await;
    assert_eq!(models["data"][0]["id"], "uniagent-policy");
    let codec = common::codec("qwen2.5");
    let mut ids = codec.encode("ok").unwrap();
    ids.push(codec.eos_token_id());
    script.push_ids(ids.clone());
    script.push_ids(ids);
    for session in ["r", "open"] {
        let r = client
            .post(format!("{base}/sessions/{session}/v1/chat/completions"))
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let r = client
        .post(format!("{base}/sessions/r/reward"))
        .json(&json!({"score": 0.5, "details": {"tests": "3/4"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ended = common::http::json_body(client.post(format!("{base}/sessions/r/end"))).await;
    assert_eq!(ended[0]["reward_score"], 0.5);
    assert_eq!(ended[0]["reward"]["details"]["tests"], "3/4");
    // Shutting down records the session still open.
    tx.send(()).unwrap();
    server.await.unwrap().unwrap();
    let text = std::fs::read_to_string(dir.path().join("trajectories.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0], ended[0]);
    assert_eq!(lines[1]["task_id"], "open");
    for line in &lines {
        let violations = uniagent_core::testing::trajectory_record_violations(line);
        assert!(violations.is_empty(), "{violations:?} in {line}");
    }
}

#[tokio::test]
async fn a_request_ending_with_the_sampled_turn_gets_a_new_turn_after_it() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn("First."));
    s.script.push_ids(s.turn("Second."));
    let mut messages = vec![json!({"role": "user", "content": "hi"})];
    let (_, r1) = s
        .chat("c", &json!({"model": "m", "messages": messages}))
        .await;
    messages.push(r1["choices"][0]["message"].clone());
    let (status, r2) = s
        .chat("c", &json!({"model": "m", "messages": messages}))
        .await;
    assert_eq!(status, 200, "{r2}");
    assert_eq!(r2["uniagent"]["chain"], 0);
    let prompts = s.script.prompts();
    let mut want = prompts[0].clone();
    want.extend(s.turn("First."));
    want.extend(s.codec.encode("\n<|im_start|>assistant\n").unwrap());
    assert_eq!(prompts[1], want);
    // A new conversation ending with an assistant turn has nothing to continue from.
    let (status, v) = s
        .chat(
            "c2",
            &json!({"model": "m", "messages": [{"role": "user", "content": "hi"},
                                               {"role": "assistant", "content": "pre"}]}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
}
