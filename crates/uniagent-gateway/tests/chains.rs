//! Chain invariants: a non-append-only template (Qwen3 dropping earlier reasoning) starts a
//! new chain from the full render, and random request sequences (append, edit, regenerate,
//! history rewrite, tool changes) keep every chain's mask-1 tokens equal to what was sampled,
//! in order.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, OnceLock};

use common::{codec, Script};
use proptest::prelude::*;
use serde_json::json;
use uniagent_core::codec::{messages_to_json, ChatInput};
use uniagent_core::{Message, Role, ToolSpec};
use uniagent_gateway::{Gateway, GatewayConfig, TurnRequest};

fn ids_of(v: &serde_json::Value, key: &str) -> Vec<u32> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn mask1(t: &serde_json::Value) -> Vec<u32> {
    let ids = ids_of(t, "response_ids");
    let mask = ids_of(t, "response_mask");
    ids.into_iter()
        .zip(mask)
        .filter(|(_, m)| *m == 1)
        .map(|(i, _)| i)
        .collect()
}

#[tokio::test]
async fn dropped_reasoning_starts_a_new_chain_from_the_full_render() {
    let script = Arc::new(Script::default());
    let gateway = Gateway::new(codec("qwen3"), script.clone(), GatewayConfig::default());
    let c = codec("qwen3");
    let turn = |text: &str| {
        let mut ids = c.encode(text).unwrap();
        ids.push(c.eos_token_id());
        ids
    };
    script.push_ids(turn("<think>\nLook it up.\n</think>\n\nParis."));
    script.push_ids(turn("<think>\nEasy.\n</think>\n\nBerlin."));
    let mut messages = vec![Message::user("Capital of France?")];
    let a1 = gateway
        .complete("q", TurnRequest::new(messages.clone()))
        .await
        .unwrap();
    assert_eq!(a1.message.content.as_deref(), Some("Paris."));
    assert_eq!(a1.message.reasoning_content.as_deref(), Some("Look it up."));
    messages.push(a1.message.clone());
    messages.push(Message::user("And Germany?"));
    let a2 = gateway
        .complete("q", TurnRequest::new(messages.clone()))
        .await
        .unwrap();
    assert_eq!(
        a2.chain, 1,
        "Qwen3 drops the first turn's reasoning: a new chain"
    );
    let chains = gateway.chains("q").await.unwrap();
    let t = gateway.end("q").await.unwrap();
    assert_eq!(t[1]["extra_fields"]["gateway"]["origin"], "not_append_only");
    assert_eq!(t[0]["extra_fields"]["gateway"]["append_only"], true);
    // The new chain's prompt is what the template renders for the request, exactly.
    let render = c
        .render_ids(&ChatInput {
            messages: messages_to_json(&messages).unwrap(),
            add_generation_prompt: true,
            ..ChatInput::default()
        })
        .unwrap();
    assert_eq!(ids_of(&t[1], "prompt_ids"), render);
    assert_eq!(script.prompts()[1], render);
    assert_eq!(
        mask1(&t[0]),
        turn("<think>\nLook it up.\n</think>\n\nParis.")
    );
    assert_eq!(mask1(&t[1]), turn("<think>\nEasy.\n</think>\n\nBerlin."));
    assert_eq!(chains[0].messages().len(), 2);
    // Both chains are append-only: sources recorded, no re-render.
    for chain in &t {
        assert!(chain.get("rerender_ids").is_none());
        assert_eq!(chain["token_sources"][0][0], "prompt");
    }
}

/// A sampled tokenization the tokenizer would not produce makes the chain not append-only:
/// its record carries the template's full render of its messages, which differs from the
/// stream exactly there.
#[tokio::test]
async fn a_non_canonical_turn_is_recorded_with_its_full_render() {
    let script = Arc::new(Script::default());
    let gateway = Gateway::new(codec("qwen2.5"), script.clone(), GatewayConfig::default());
    let c = codec("qwen2.5");
    // "Paris." split as "P" + "aris.": not what the tokenizer makes of the text.
    let mut ids = c.encode("P").unwrap();
    ids.extend(c.encode("aris.").unwrap());
    ids.push(c.eos_token_id());
    assert_ne!(ids[..ids.len() - 1], c.encode("Paris.").unwrap()[..]);
    script.push_ids(ids.clone());
    let messages = vec![Message::user("Capital of France?")];
    let a = gateway
        .complete("n", TurnRequest::new(messages.clone()))
        .await
        .unwrap();
    assert_eq!(a.message.content.as_deref(), Some("Paris."));
    let t = gateway.end("n").await.unwrap();
    assert_eq!(t[0]["extra_fields"]["gateway"]["append_only"], false);
    let mut full = messages;
    full.push(a.message);
    let mut render = c
        .render_ids(&ChatInput {
            messages: messages_to_json(&full).unwrap(),
            ..ChatInput::default()
        })
        .unwrap();
    let end = render
        .iter()
        .rposition(|id| *id == c.eos_token_id())
        .unwrap();
    render.truncate(end + 1);
    assert_eq!(ids_of(&t[0], "rerender_ids"), render);
    let mut stream = ids_of(&t[0], "prompt_ids");
    stream.extend(ids_of(&t[0], "response_ids"));
    // Same prompt, same end of turn; only the turn's tokenization differs.
    assert!(render.starts_with(&ids_of(&t[0], "prompt_ids")));
    assert_ne!(stream, render);
    assert_eq!(stream.last(), render.last());
    assert_eq!(mask1(&t[0]), ids);
    let sampled: u64 = t[0]["token_sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r[0] == "sampled")
        .map(|r| r[1].as_u64().unwrap())
        .sum();
    assert_eq!(sampled as usize, ids.len());
}

/// Answers from a script, or never (while `hang` is set): a request whose future is dropped
/// mid-generation, as when the harness disconnects.
#[derive(Debug)]
struct Hanging {
    script: Arc<Script>,
    hang: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl uniagent_core::TokenGenerator for Hanging {
    fn name(&self) -> &str {
        "hanging"
    }
    async fn generate(
        &self,
        request: uniagent_core::GenerateRequest,
    ) -> uniagent_core::Result<uniagent_core::GenerateOutput> {
        if self.hang.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.script.generate(request).await
    }
}

/// Chains are extended in place: a request that fails after its messages were appended (the
/// generator errs) or is dropped while the generator runs must leave its chain exactly as it
/// was, and the next request continues from there.
#[tokio::test]
async fn failed_and_dropped_requests_leave_the_chain_as_it_was() {
    let script = Arc::new(Script::default());
    let generator = Arc::new(Hanging {
        script: script.clone(),
        hang: false.into(),
    });
    let gateway = Gateway::new(
        codec("qwen2.5"),
        generator.clone(),
        GatewayConfig::default(),
    );
    let c = codec("qwen2.5");
    let turn = |text: &str| {
        let mut ids = c.encode(text).unwrap();
        ids.push(c.eos_token_id());
        ids
    };
    script.push_ids(turn("One."));
    let mut messages = vec![Message::user("Count.")];
    let a = gateway
        .complete("f", TurnRequest::new(messages.clone()))
        .await
        .unwrap();
    messages.push(a.message);
    let before = gateway.chains("f").await.unwrap()[0].cache().clone();

    // The generator fails after the chain took the new message.
    script.push(common::Reply {
        ids: vec![],
        logprobs: None,
        fail: true,
    });
    let mut failing = messages.clone();
    failing.push(Message::user("Go on (fails)."));
    assert!(gateway
        .complete("f", TurnRequest::new(failing))
        .await
        .is_err());
    assert_eq!(gateway.chains("f").await.unwrap()[0].cache(), &before);

    // The request's future is dropped while the generator runs.
    generator
        .hang
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let mut dropped = messages.clone();
    dropped.push(Message::user("Go on (dropped)."));
    let pending = gateway.complete("f", TurnRequest::new(dropped));
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(100), pending)
            .await
            .is_err()
    );
    generator
        .hang
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let chains = gateway.chains("f").await.unwrap();
    assert_eq!(chains.len(), 1);
    assert_eq!(chains[0].cache(), &before);

    // The next request extends the chain from where it was.
    script.push_ids(turn("Two."));
    messages.push(Message::user("Go on."));
    let b = gateway
        .complete("f", TurnRequest::new(messages.clone()))
        .await
        .unwrap();
    assert_eq!(b.chain, 0);
    let t = gateway.end("f").await.unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(mask1(&t[0]), [turn("One."), turn("Two.")].concat());
    let rendered = c
        .render_ids(&ChatInput {
            messages: messages_to_json(&messages).unwrap(),
            add_generation_prompt: true,
            ..ChatInput::default()
        })
        .unwrap();
    // The chain's prompt for the second turn is the template's render of the conversation.
    let prompts = script.prompts();
    assert_eq!(prompts.last().unwrap(), &rendered);
}

#[derive(Debug, Clone)]
enum Op {
    /// Continue chain `c % n` with a user (or tool) message.
    Append(usize, bool),
    /// Replace chain `c`'s last assistant message and continue.
    Edit(usize),
    /// Ask again for chain `c`'s last turn.
    Regenerate(usize),
    /// A conversation with a new first message.
    Rewrite,
    /// Chain `c`'s conversation with the other tool list.
    ToggleTools(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<usize>(), any::<bool>()).prop_map(|(c, t)| Op::Append(c, t)),
        2 => any::<usize>().prop_map(Op::Edit),
        2 => any::<usize>().prop_map(Op::Regenerate),
        1 => Just(Op::Rewrite),
        1 => any::<usize>().prop_map(Op::ToggleTools),
    ]
}

struct Fixture {
    gateway: Gateway,
    script: Arc<Script>,
    runtime: tokio::runtime::Runtime,
    vocab: Vec<u32>,
    eos: u32,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let script = Arc::new(Script::default());
        let c = codec("qwen2.5");
        // Word pieces to sample from, including splits a re-tokenization would merge.
        let vocab: Vec<u32> = [
            "Hel", "lo", " wor", "ld", "!", " the", " a", "1", "\n", " x",
        ]
        .iter()
        .map(|w| c.encode(w).unwrap()[0])
        .collect();
        let config = GatewayConfig {
            tool_parser: None,
            ..GatewayConfig::default()
        };
        Fixture {
            gateway: Gateway::new(codec("qwen2.5"), script.clone(), config),
            eos: c.eos_token_id(),
            script,
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap(),
            vocab,
        }
    })
}

fn tools(on: bool) -> Vec<ToolSpec> {
    if on {
        vec![ToolSpec::function(
            "echo",
            "Echo.",
            json!({"type": "object"}),
        )]
    } else {
        vec![]
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 32, ..ProptestConfig::default() })]

    #[test]
    fn every_chain_holds_exactly_its_sampled_turns_in_order(
        ops in prop::collection::vec(op(), 1..9),
        replies in prop::collection::vec(prop::collection::vec(0usize..10, 1..6), 9),
    ) {
        let f = fixture();
        f.script.clear();
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let session = format!("p{}", CASE.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
        // Per chain: (client messages, tools on, sampled replies kept).
        let mut model: Vec<(Vec<Message>, bool, Vec<Vec<u32>>)> = Vec::new();
        let first = TurnRequest::new(vec![Message::user("start")]);
        let mut requests = vec![(first, None::<usize>, false)];
        requests.extend(ops.iter().map(|_| (TurnRequest::new(vec![]), None, false)));
        for (step, op) in std::iter::once(None).chain(ops.iter().map(Some)).enumerate() {
            let (mut req, mut target, mut rollback) = requests[step].clone();
            let _ = &mut rollback;
            if let Some(op) = op {
                let n = model.len();
                match op {
                    Op::Append(c, tool) => {
                        let (m, t, _) = &model[c % n];
                        let mut m = m.clone();
                        let last = m.last().unwrap();
                        let extra = if *tool && last.role == Role::Assistant {
                            Message::tool("call", format!("out{step}"))
                        } else {
                            Message::user(format!("u{step}"))
                        };
                        m.push(extra);
                        req = TurnRequest { tools: tools(*t), ..TurnRequest::new(m) };
                        target = Some(c % n);
                    }
                    Op::Edit(c) => {
                        let (m, t, _) = &model[c % n];
                        let mut m = m.clone();
                        m.pop();
                        m.push(Message::assistant(format!("edited {step}")));
                        m.push(Message::user(format!("after edit {step}")));
                        req = TurnRequest { tools: tools(*t), ..TurnRequest::new(m) };
                        target = Some(c % n);
                        rollback = true;
                    }
                    Op::Regenerate(c) => {
                        let (m, t, _) = &model[c % n];
                        let mut m = m.clone();
                        m.pop();
                        req = TurnRequest { tools: tools(*t), ..TurnRequest::new(m) };
                        target = Some(c % n);
                        rollback = true;
                    }
                    Op::Rewrite => {
                        req = TurnRequest::new(vec![Message::user(format!("fresh {step}"))]);
                    }
                    Op::ToggleTools(c) => {
                        let (m, t, _) = &model[c % n];
                        let mut m = m.clone();
                        m.push(Message::user(format!("tools {step}")));
                        req = TurnRequest { tools: tools(!*t), ..TurnRequest::new(m) };
                    }
                }
            }
            let mut ids: Vec<u32> = replies[step].iter().map(|&i| f.vocab[i]).collect();
            ids.push(f.eos);
            f.script.push_ids(ids.clone());
            let tools_on = !req.tools.is_empty();
            let before: Vec<u32> = f.runtime.block_on(f.gateway.chains(&session))
                .unwrap_or_default().iter().map(|c| c.rollbacks()).collect();
            let answer = f.runtime.block_on(f.gateway.complete(&session, req.clone())).unwrap();
            let mut client = req.messages.clone();
            client.push(answer.message.clone());
            if answer.chain == model.len() {
                prop_assert!(target.is_none() || model.is_empty() || op.is_none(),
                    "{op:?} started a new chain");
                model.push((client, tools_on, vec![ids]));
            } else {
                if let Some(t) = target {
                    prop_assert_eq!(answer.chain, t, "{:?} went to another chain", op);
                }
                let after = f.runtime.block_on(f.gateway.chains(&session)).unwrap();
                let rolled = after[answer.chain].rollbacks() > before[answer.chain];
                if target.is_some() {
                    prop_assert_eq!(rolled, rollback, "{:?}", op);
                }
                let entry = &mut model[answer.chain];
                if rolled {
                    entry.2.pop();
                }
                entry.0 = client;
                entry.2.push(ids);
            }
        }
        let trajectories = f.runtime.block_on(f.gateway.end(&session)).unwrap();
        prop_assert_eq!(trajectories.len(), model.len());
        for (t, (_, _, kept)) in trajectories.iter().zip(&model) {
            prop_assert_eq!(mask1(t), kept.concat());
            let lps = t["response_logprobs"].as_array().unwrap();
            let mask = ids_of(t, "response_mask");
            prop_assert!(lps.iter().zip(&mask).all(|(lp, m)| (*m == 1) == (lp.as_f64().unwrap() < 0.0)));
        }
    }
}
