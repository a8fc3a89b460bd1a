//! The HTTP model backends against a local server that speaks the real wire formats (vLLM's
//! `/v1/completions`, SGLang's `/generate`, OpenAI chat completions), asserting on what the
//! client sends as well as on what it makes of the answers.

// Test helpers may unwrap (a panic fails the test); core's `Error` is large by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use uniagent_core::agent::{AgentInteraction, ExitReason, LoopConfig, RolloutControl};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::testing::RecordingTool;
use uniagent_core::{
    ChatModel, EpisodeSignal, Error, FinishReason, GenerateRequest, Message, RetryConfig,
    SamplingParams, Task, TokenGenerator, ToolOutput, ToolSpec,
};
use uniagent_models::{
    HttpModelConfig, OpenAiChatModel, OpenAiConfig, SglangGenerator, VllmGenerator,
};

/// One canned answer: status, body, and how long to wait before sending it.
#[derive(Clone)]
struct Canned {
    status: u16,
    body: Value,
    delay: Duration,
}

fn ok(body: Value) -> Canned {
    Canned {
        status: 200,
        body,
        delay: Duration::ZERO,
    }
}

#[derive(Clone, Debug)]
struct Seen {
    path: String,
    auth: Option<String>,
    body: Value,
}

#[derive(Clone, Default)]
struct Server {
    replies: Arc<Mutex<VecDeque<Canned>>>,
    /// Used when `replies` is empty.
    fallback: Arc<Mutex<Option<Canned>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn handle(
    State(s): State<Server>,
    uri: OriginalUri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    s.seen.lock().unwrap().push(Seen {
        path: uri.path().to_owned(),
        auth,
        body,
    });
    let canned = s
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .or_else(|| s.fallback.lock().unwrap().clone());
    let Some(c) = canned else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "no canned reply").into_response();
    };
    tokio::time::sleep(c.delay).await;
    (StatusCode::from_u16(c.status).unwrap(), Json(c.body)).into_response()
}

/// Starts a server answering with `replies` in order; returns its base URL.
async fn serve(replies: Vec<Canned>) -> (String, Server) {
    let server = Server {
        replies: Arc::new(Mutex::new(replies.into())),
        ..Server::default()
    };
    let app = Router::new()
        .route("/v1/completions", post(handle))
        .route("/generate", post(handle))
        .route("/v1/chat/completions", post(handle))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), server)
}

fn fast_retry() -> RetryConfig {
    RetryConfig {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(1),
        jitter: 0.0,
        ..RetryConfig::default()
    }
}

fn config(endpoints: Vec<String>) -> HttpModelConfig {
    HttpModelConfig {
        retry: fast_retry(),
        ..HttpModelConfig::new(endpoints, "Qwen/Qwen3-8B")
    }
}

/// A vLLM `/v1/completions` response as vLLM 0.10 sends it with `logprobs: 1` and
/// `return_tokens_as_token_ids: true`.
fn vllm_response(ids: &[u32], lps: &[f64], finish: &str) -> Value {
    json!({
        "id": "cmpl-5b1c0a7e9f2d4c38",
        "object": "text_completion",
        "created": 1764400000,
        "model": "Qwen/Qwen3-8B",
        "choices": [{
            "index": 0,
            "text": "Hello!<|im_end|>",
            "logprobs": {
                "text_offset": (0..ids.len()).collect::<Vec<_>>(),
                "token_logprobs": lps,
                "tokens": ids.iter().map(|i| format!("token_id:{i}")).collect::<Vec<_>>(),
                "top_logprobs": ids.iter().zip(lps).map(|(i, lp)| json!({format!("token_id:{i}"): lp})).collect::<Vec<_>>(),
            },
            "finish_reason": finish,
            "stop_reason": if finish == "stop" { json!(ids.last()) } else { Value::Null },
            "prompt_logprobs": null
        }],
        "usage": {"prompt_tokens": 5, "total_tokens": 5 + ids.len(), "completion_tokens": ids.len(), "prompt_tokens_details": null},
        "kv_transfer_params": null
    })
}

/// An SGLang `/generate` response with `return_logprob: true`.
fn sglang_response(ids: &[u32], lps: &[f64], finish: Value, weight_version: &str) -> Value {
    json!({
        "text": "Hello!<|im_end|>",
        "output_ids": ids,
        "meta_info": {
            "id": "0f7c3e1d2b9a4e8c",
            "finish_reason": finish,
            "prompt_tokens": 5,
            "weight_version": weight_version,
            "completion_tokens": ids.len(),
            "cached_tokens": 0,
            "output_token_logprobs": ids.iter().zip(lps).map(|(i, lp)| json!([lp, i, null])).collect::<Vec<_>>(),
            "e2e_latency": 0.0421
        }
    })
}

fn request(session: &str) -> GenerateRequest {
    let sampling = SamplingParams {
        temperature: 0.7,
        top_p: 0.9,
        top_k: Some(20),
        seed: Some(7),
        ..SamplingParams::default()
    };
    GenerateRequest::new(vec![151644, 872, 198, 9707, 151645], sampling, 64)
        .with_stop_token_ids(vec![151645])
        .with_session_id(session)
}

#[tokio::test]
async fn vllm_sends_token_ids_and_reads_exact_tokens_back() {
    let (url, server) = serve(vec![ok(vllm_response(
        &[9707, 0, 151645],
        &[-0.0123, -0.5, -0.001],
        "stop",
    ))])
    .await;
    let generator = VllmGenerator::new(&config(vec![url])).unwrap();
    let out = generator.generate(request("traj-1")).await.unwrap();
    assert_eq!(out.token_ids, vec![9707, 0, 151645]);
    assert_eq!(out.logprobs, Some(vec![-0.0123f32, -0.5, -0.001]));
    assert_eq!(out.finish_reason, FinishReason::Stop);
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/completions");
    let b = &seen[0].body;
    assert_eq!(b["prompt"], json!([151644, 872, 198, 9707, 151645]));
    assert_eq!(b["model"], "Qwen/Qwen3-8B");
    assert_eq!(
        (
            b["max_tokens"].as_u64(),
            b["top_k"].as_i64(),
            b["seed"].as_u64()
        ),
        (Some(64), Some(20), Some(7))
    );
    assert_eq!(b["logprobs"], 1);
    assert_eq!(b["return_tokens_as_token_ids"], true);
    assert_eq!(b["stop_token_ids"], json!([151645]));
    assert_eq!(b["skip_special_tokens"], false);
    assert_eq!(b["temperature"], 0.7);
}

#[tokio::test]
async fn vllm_rejects_text_tokens_and_mismatched_lengths() {
    let mut text_tokens = vllm_response(&[9707], &[-0.1], "length");
    text_tokens["choices"][0]["logprobs"]["tokens"] = json!(["Hello"]);
    let mut short = vllm_response(&[9707, 11], &[-0.1, -0.2], "length");
    short["choices"][0]["logprobs"]["token_logprobs"] = json!([-0.1]);
    let (url, _server) = serve(vec![ok(text_tokens), ok(short)]).await;
    let generator = VllmGenerator::new(&config(vec![url])).unwrap();
    let e = generator.generate(request("a")).await.unwrap_err();
    assert!(
        matches!(e, Error::Protocol { .. }) && e.to_string().contains("token_id"),
        "{e}"
    );
    let e = generator.generate(request("a")).await.unwrap_err();
    assert!(e.to_string().contains("2 tokens but 1 logprobs"), "{e}");
}

#[tokio::test]
async fn sglang_sends_input_ids_and_reads_logprob_triples() {
    let finish = json!({"type": "length", "length": 2});
    let (url, server) = serve(vec![ok(sglang_response(
        &[9707, 11],
        &[-0.25, -1.5],
        finish,
        "3",
    ))])
    .await;
    let generator = SglangGenerator::new(&config(vec![url])).unwrap();
    let out = generator.generate(request("traj-1")).await.unwrap();
    assert_eq!(
        (out.token_ids, out.logprobs),
        (vec![9707, 11], Some(vec![-0.25f32, -1.5]))
    );
    assert_eq!(
        (out.finish_reason, out.weight_version),
        (FinishReason::Length, Some(3))
    );
    let b = &server.seen()[0].body;
    assert_eq!(server.seen()[0].path, "/generate");
    assert_eq!(b["input_ids"], json!([151644, 872, 198, 9707, 151645]));
    assert_eq!(b["return_logprob"], true);
    let sp = &b["sampling_params"];
    assert_eq!(
        (sp["max_new_tokens"].as_u64(), sp["top_k"].as_i64()),
        (Some(64), Some(20))
    );
    assert_eq!(sp["stop_token_ids"], json!([151645]));
    assert_eq!(
        (
            sp["skip_special_tokens"].as_bool(),
            sp["no_stop_trim"].as_bool()
        ),
        (Some(false), Some(true))
    );
    assert_eq!(sp["sampling_seed"], 7);
}

#[tokio::test]
async fn retryable_failures_are_retried_and_client_errors_are_not() {
    let unavailable = Canned {
        status: 503,
        body: json!({"error": "overloaded"}),
        delay: Duration::ZERO,
    };
    let good = ok(sglang_response(
        &[1],
        &[-0.1],
        json!({"type": "stop", "matched": 1}),
        "default",
    ));
    let (url, server) = serve(vec![unavailable.clone(), unavailable, good]).await;
    let generator = SglangGenerator::new(&config(vec![url])).unwrap();
    let out = generator.generate(request("s")).await.unwrap();
    assert_eq!((out.token_ids, out.weight_version), (vec![1], None));
    assert_eq!(server.seen().len(), 3);

    let bad = Canned {
        status: 400,
        body: json!({"error": "prompt too long"}),
        delay: Duration::ZERO,
    };
    let (url, server) = serve(vec![bad]).await;
    let generator = VllmGenerator::new(&config(vec![url])).unwrap();
    let e = generator.generate(request("s")).await.unwrap_err();
    assert!(!e.is_retryable() && e.to_string().contains("400"), "{e}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_request_past_its_timeout_fails_without_a_retry() {
    let slow = Canned {
        delay: Duration::from_secs(5),
        ..ok(vllm_response(&[1], &[-0.1], "stop"))
    };
    let (url, server) = serve(vec![slow]).await;
    let cfg = HttpModelConfig {
        timeout: Duration::from_millis(200),
        ..config(vec![url])
    };
    let e = VllmGenerator::new(&cfg)
        .unwrap()
        .generate(request("s"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn sessions_stick_to_one_server_and_load_spreads_across_servers() {
    let reply = Canned {
        delay: Duration::from_millis(50),
        ..ok(vllm_response(&[1], &[-0.1], "stop"))
    };
    let (a, sa) = serve(vec![]).await;
    let (b, sb) = serve(vec![]).await;
    *sa.fallback.lock().unwrap() = Some(reply.clone());
    *sb.fallback.lock().unwrap() = Some(reply);
    let generator = Arc::new(VllmGenerator::new(&config(vec![a, b])).unwrap());
    for _ in 0..4 {
        generator.generate(request("sticky")).await.unwrap();
    }
    let (na, nb) = (sa.seen().len(), sb.seen().len());
    assert!(
        (na, nb) == (4, 0) || (na, nb) == (0, 4),
        "one trajectory, one server: {na} / {nb}"
    );
    // Eight concurrent trajectories spread over both servers by outstanding requests.
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let g = generator.clone();
            tokio::spawn(async move { g.generate(request(&format!("t{i}"))).await.unwrap() })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!((sa.seen().len() - na, sb.seen().len() - nb), (4, 4));
}

#[tokio::test]
async fn a_failed_sticky_server_is_left_on_retry() {
    let (a, sa) = serve(vec![]).await;
    let (b, sb) = serve(vec![]).await;
    *sa.fallback.lock().unwrap() = Some(Canned {
        status: 502,
        body: json!({}),
        delay: Duration::ZERO,
    });
    *sb.fallback.lock().unwrap() = Some(ok(vllm_response(&[5], &[-0.1], "stop")));
    let generator = VllmGenerator::new(&config(vec![a, b])).unwrap();
    for i in 0..4 {
        let out = generator.generate(request(&format!("t{i}"))).await.unwrap();
        assert_eq!(out.token_ids, vec![5]);
    }
    assert!(sa.seen().len() <= 4 && sb.seen().len() == 4);
}

fn chat_response(message: Value, finish: &str) -> Value {
    json!({
        "id": "chatcmpl-9a8b7c",
        "object": "chat.completion",
        "created": 1764400000,
        "model": "Qwen/Qwen3-8B",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish, "stop_reason": null}],
        "usage": {"prompt_tokens": 120, "total_tokens": 140, "completion_tokens": 20},
        "prompt_logprobs": null
    })
}

fn finish_tool() -> RecordingTool {
    RecordingTool::new("finish", |a| {
        let answer = a["answer"].as_str().unwrap_or_default().to_owned();
        Ok(ToolOutput::success("ok").with_signal(EpisodeSignal::Finish { answer }))
    })
}

#[tokio::test]
async fn openai_model_drives_the_loop_with_structured_and_text_tool_calls() {
    let first = chat_response(
        json!({"role": "assistant", "content": null, "reasoning_content": null, "tool_calls": [{
            "id": "chatcmpl-tool-1", "type": "function",
            "function": {"name": "echo", "arguments": "{\"text\": \"hi\"}"}}]}),
        "tool_calls",
    );
    let second = chat_response(
        json!({"role": "assistant", "content": "Done.\n<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"answer\": \"42\"}}\n</tool_call>", "tool_calls": []}),
        "stop",
    );
    let (url, server) = serve(vec![ok(first), ok(second)]).await;
    std::env::set_var("UNIAGENT_TEST_OPENAI_KEY", "sk-test-123");
    let cfg = OpenAiConfig {
        http: HttpModelConfig {
            api_key_env: Some("UNIAGENT_TEST_OPENAI_KEY".into()),
            ..config(vec![format!("{url}/v1")])
        },
        text_tool_parser: Some(ToolCallFormat::Hermes),
        extra_body: serde_json::Map::from_iter([(
            "chat_template_kwargs".to_owned(),
            json!({"enable_thinking": false}),
        )]),
    };
    let model = OpenAiChatModel::new(&cfg).unwrap();
    let echo = RecordingTool::with_spec(
        ToolSpec::function(
            "echo",
            "Echo text.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        ),
        |a| Ok(ToolOutput::success(a["text"].as_str().unwrap_or_default())),
    );
    let loop_cfg = LoopConfig {
        sampling: SamplingParams {
            temperature: 0.6,
            top_k: Some(20),
            max_tokens: Some(512),
            ..SamplingParams::default()
        },
        ..LoopConfig::default()
    };
    let agent = AgentInteraction::new(
        Arc::new(model),
        vec![Arc::new(echo.clone()), Arc::new(finish_tool())],
        loop_cfg,
    )
    .unwrap();
    let task = Arc::new(Task::new(
        "q",
        vec![Message::user("say hi, then answer 42")],
    ));
    let t = agent.run(task, 0, None, &RolloutControl::default()).await;
    assert_eq!(t.exit_reason, ExitReason::Finished, "{:?}", t.error);
    assert_eq!(echo.calls()[0].args, json!({"text": "hi"}));
    assert_eq!(
        t.signal,
        Some(EpisodeSignal::Finish {
            answer: "42".into()
        })
    );
    assert_eq!(t.counts.sampled_tokens, 40);

    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].auth.as_deref(), Some("Bearer sk-test-123"));
    let b0 = &seen[0].body;
    assert_eq!(
        (b0["model"].as_str(), b0["temperature"].as_f64()),
        (Some("Qwen/Qwen3-8B"), Some(0.6))
    );
    assert_eq!(
        (b0["top_k"].as_u64(), b0["max_completion_tokens"].as_u64()),
        (Some(20), Some(512))
    );
    assert_eq!(
        b0["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    assert_eq!(b0["tools"].as_array().unwrap().len(), 2);
    assert_eq!(
        b0["messages"],
        json!([{"role": "user", "content": "say hi, then answer 42"}])
    );
    // The second request carries the assistant call and the tool result answering its id,
    // with arguments as a JSON string, as the API requires.
    let msgs = seen[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    let args = msgs[1]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(args).unwrap(),
        json!({"text": "hi"})
    );
    assert_eq!(
        (msgs[2]["role"].as_str(), msgs[2]["tool_call_id"].as_str()),
        (Some("tool"), Some("chatcmpl-tool-1"))
    );
    assert_eq!(msgs[2]["content"], "hi");
}

#[tokio::test]
async fn malformed_text_tool_call_is_a_format_error_not_a_failure() {
    let bad = chat_response(
        json!({"role": "assistant", "content": "<tool_call>{\"name\": \"finish\""}),
        "stop",
    );
    let (url, _server) = serve(vec![ok(bad)]).await;
    let cfg = OpenAiConfig {
        http: config(vec![format!("{url}/v1")]),
        text_tool_parser: Some(ToolCallFormat::Hermes),
        extra_body: serde_json::Map::new(),
    };
    let model = OpenAiChatModel::new(&cfg).unwrap();
    let mut cache = model
        .start("x", vec![Message::user("go")], vec![finish_tool_spec()])
        .await
        .unwrap();
    let turn = model
        .query(&mut cache, &SamplingParams::default())
        .await
        .unwrap();
    assert!(turn.message.tool_calls.is_empty());
    assert!(turn.format_error.unwrap().starts_with("Unclosed tool call"));
    assert_eq!(cache.messages().len(), 2);
}

fn finish_tool_spec() -> ToolSpec {
    use uniagent_core::Tool;
    finish_tool().spec()
}
