#![allow(missing_docs)] // criterion_group! generates undocumented items
//! Decoding a long OpenAI-format conversation into typed messages, against decoding the same
//! bytes into untyped `serde_json::Value` (the baseline every Python stack pays at least).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::json;
use uniagent_core::Message;

fn conversation(turns: usize) -> String {
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful agent."})];
    for i in 0..turns {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{i}"), "type": "function",
            "function": {"name": "execute_bash", "arguments": format!("{{\"command\": \"cat file_{i}.txt\"}}")}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": "x".repeat(400)}));
    }
    serde_json::to_string(&messages).unwrap_or_default()
}

fn bench(c: &mut Criterion) {
    let text = conversation(200);
    let mut group = c.benchmark_group("decode_conversation_200_turns");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_function("baseline_serde_json_value", |b| {
        b.iter(|| {
            serde_json::from_str::<serde_json::Value>(&text).map(|v| v.as_array().map(Vec::len))
        })
    });
    group.bench_function("typed_messages", |b| {
        b.iter(|| serde_json::from_str::<Vec<Message>>(&text).map(|m| m.len()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
