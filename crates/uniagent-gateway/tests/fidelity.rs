//! What the harness gets is what the policy sampled: content is returned untrimmed (leading
//! and trailing whitespace, as vLLM answers), on both APIs, streamed or not, and a harness that
//! echoes it back continues the same chain, token for token. Before, content was trimmed, so a
//! reply sampled as `" Clarke tus "` reached the client as `"Clarke tus"`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{serve, sse};
use serde_json::{json, Value};
use uniagent_gateway::GatewayConfig;

const SAMPLED: &str = "  Clarke tus_CON \n";

#[tokio::test]
async fn openai_content_is_the_sampled_text_and_its_echo_extends_the_chain() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn(SAMPLED));
    s.script.push_ids(s.turn(SAMPLED));
    s.script.push_ids(s.turn("next"));
    let mut messages = vec![json!({"role": "user", "content": "hi"})];
    let (status, r1) = s
        .chat("w", &json!({"model": "m", "messages": messages}))
        .await;
    assert_eq!(status, 200, "{r1}");
    assert_eq!(r1["choices"][0]["message"]["content"], SAMPLED);
    // Streamed: the deltas join to the same text.
    let (status, text) = s
        .post_raw(
            "/sessions/ws/v1/chat/completions",
            &json!({"model": "m", "stream": true, "messages": messages}).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let joined: String = sse(&text)
        .iter()
        .filter(|(_, d)| d != "[DONE]")
        .filter_map(|(_, d)| {
            serde_json::from_str::<Value>(d).unwrap()["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(joined, SAMPLED);
    // The harness echoes the answer: the same chain grows, and its tokens are the render.
    messages.push(r1["choices"][0]["message"].clone());
    messages.push(json!({"role": "user", "content": "more"}));
    let (status, r2) = s
        .chat("w", &json!({"model": "m", "messages": messages}))
        .await;
    assert_eq!(status, 200, "{r2}");
    assert_eq!(r2["uniagent"]["chain"], 0);
    let prompts = s.script.prompts();
    let mut want = prompts[0].clone();
    want.extend(s.turn(SAMPLED));
    assert_eq!(&prompts[2][..want.len()], &want[..]);
    let ended = s.end("w").await;
    assert_eq!(ended.len(), 1, "the echo started a new chain");
}

#[tokio::test]
async fn anthropic_text_is_the_sampled_text_and_its_echo_extends_the_chain() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn(SAMPLED));
    s.script.push_ids(s.turn("next"));
    let mut messages = vec![json!({"role": "user", "content": "hi"})];
    let (status, r1) = s
        .post(
            "/sessions/a/v1/messages",
            &json!({"model": "m", "max_tokens": 64, "messages": messages}),
        )
        .await;
    assert_eq!(status, 200, "{r1}");
    assert_eq!(r1["content"][0]["text"], SAMPLED);
    messages.push(json!({"role": "assistant", "content": r1["content"].clone()}));
    messages.push(json!({"role": "user", "content": "more"}));
    let (status, r2) = s
        .post(
            "/sessions/a/v1/messages",
            &json!({"model": "m", "max_tokens": 64, "messages": messages}),
        )
        .await;
    assert_eq!(status, 200, "{r2}");
    assert_eq!(s.end("a").await.len(), 1, "the echo started a new chain");
}

/// A turn cut at `max_tokens` has no end-of-turn token; when the harness goes on, the chain
/// closes it as the template does (mask 0), so the next prompt is the template's render of
/// the conversation, never a context the template cannot produce.
#[tokio::test]
async fn a_turn_cut_at_max_tokens_is_closed_before_the_next_turn() {
    for sampled in ["Hello there world", " Hello  there ", "x\n\n"] {
        let s = serve("qwen2.5", GatewayConfig::default()).await;
        let ids = s.codec.encode(sampled).unwrap();
        let cut = ids.len().min(2);
        s.script.push_ids(ids.clone());
        s.script.push_ids(s.turn("next"));
        let mut messages = vec![json!({"role": "user", "content": "hi"})];
        let (status, r1) = s
            .chat(
                "cut",
                &json!({"model": "m", "max_tokens": cut, "messages": messages}),
            )
            .await;
        assert_eq!(status, 200, "{r1}");
        assert_eq!(r1["choices"][0]["finish_reason"], "length");
        messages.push(r1["choices"][0]["message"].clone());
        messages.push(json!({"role": "user", "content": "go on"}));
        let (status, r2) = s
            .chat("cut", &json!({"model": "m", "messages": messages}))
            .await;
        assert_eq!(status, 200, "{r2}");
        let prompts = s.script.prompts();
        let mut want = prompts[0].clone();
        want.extend(&ids[..cut]);
        want.extend(
            s.codec
                .encode("<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n")
                .unwrap(),
        );
        assert_eq!(
            s.codec.decode(&prompts[1], false).unwrap(),
            s.codec.decode(&want, false).unwrap(),
            "{sampled:?}"
        );
        assert_eq!(s.end("cut").await.len(), 1, "{sampled:?}: a second chain");
    }
}
