//! The generation engine on the tiny-qwen2 fixture.
#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a panic fails the test

mod common;

use std::sync::Arc;

use tch::{Kind, Tensor};
use uniagent_core::{FinishReason, GenerateRequest, SamplingParams, TokenGenerator};
use uniagent_train::generate::{generate_batch, EngineConfig, TchEngine};

fn chat_prompt() -> Vec<u32> {
    common::ids_of(&common::reference()["sequences"][0]["input_ids"])
        .into_iter()
        .map(|i| i as u32)
        .collect()
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        top_k: Some(50),
        seed: Some(seed),
        ..SamplingParams::default()
    }
}

#[test]
fn greedy_reproduces_transformers_generate() {
    let model = common::tiny_model();
    let want: Vec<u32> =
        common::ids_of(&common::reference()["sequences"][0]["greedy_new_tokens_8"])
            .into_iter()
            .map(|i| i as u32)
            .collect();
    let out = generate_batch(
        &model,
        &[GenerateRequest::new(
            chat_prompt(),
            SamplingParams::greedy(),
            8,
        )],
        Some(3),
    )
    .unwrap();
    assert_eq!(out[0].token_ids, want);
    assert_eq!(out[0].finish_reason, FinishReason::Length);
    assert_eq!(out[0].weight_version, Some(3));
}

#[test]
fn logprobs_are_those_of_the_unmodified_distribution() {
    let model = common::tiny_model();
    let prompt = chat_prompt();
    let out = generate_batch(
        &model,
        &[GenerateRequest::new(prompt.clone(), sampled(5), 12)],
        None,
    )
    .unwrap();
    let out = &out[0];
    assert_eq!(out.token_ids.len(), 12);
    let all: Vec<i64> = prompt
        .iter()
        .chain(&out.token_ids)
        .map(|&t| i64::from(t))
        .collect();
    let logits =
        tch::no_grad(|| model.forward(&Tensor::from_slice(&all).unsqueeze(0), None, None, None))
            .unwrap();
    let logprobs = logits.get(0).log_softmax(-1, Kind::Float);
    for (k, (&token, &lp)) in out
        .token_ids
        .iter()
        .zip(out.logprobs.as_ref().unwrap())
        .enumerate()
    {
        let want = logprobs.double_value(&[(prompt.len() + k - 1) as i64, i64::from(token)]);
        assert!(
            (f64::from(lp) - want).abs() < 1e-4,
            "token {k}: engine {lp}, recomputed {want}"
        );
    }
}

#[test]
fn batched_generation_equals_one_at_a_time() {
    let model = common::tiny_model();
    let prompts: Vec<Vec<u32>> = vec![
        chat_prompt(),
        vec![9707, 1879, 13],
        vec![151644, 872, 198, 9707, 11, 1246, 525],
    ];
    let requests: Vec<GenerateRequest> = prompts
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            [
                GenerateRequest::new(p.clone(), SamplingParams::greedy(), 6 + i),
                GenerateRequest::new(p.clone(), sampled(100 + i as u64), 9),
            ]
        })
        .collect();
    let together = generate_batch(&model, &requests, None).unwrap();
    for (request, batched) in requests.iter().zip(&together) {
        let alone = generate_batch(&model, std::slice::from_ref(request), None)
            .unwrap()
            .remove(0);
        assert_eq!(
            batched.token_ids, alone.token_ids,
            "prompt {:?}",
            request.prompt_ids
        );
        let (batched_lps, alone_lps) = (
            batched.logprobs.as_ref().unwrap(),
            alone.logprobs.as_ref().unwrap(),
        );
        assert_eq!(batched_lps.len(), alone_lps.len());
        for (a, b) in batched_lps.iter().zip(alone_lps) {
            assert!((a - b).abs() < 1e-5, "logprob {a} (batched) vs {b} (alone)");
        }
    }
}

#[test]
fn seeded_sampling_is_reproducible() {
    let model = common::tiny_model();
    let request = GenerateRequest::new(chat_prompt(), sampled(42), 16);
    let a = generate_batch(&model, std::slice::from_ref(&request), None).unwrap();
    let b = generate_batch(&model, std::slice::from_ref(&request), None).unwrap();
    assert_eq!(a, b);
    let other = GenerateRequest {
        sampling: sampled(43),
        ..request
    };
    let c = generate_batch(&model, &[other], None).unwrap();
    assert_ne!(
        a[0].token_ids, c[0].token_ids,
        "different seeds should (almost surely) differ over 16 tokens"
    );
}

#[test]
fn stop_ids_and_zero_budget() {
    let model = common::tiny_model();
    let greedy = generate_batch(
        &model,
        &[GenerateRequest::new(
            chat_prompt(),
            SamplingParams::greedy(),
            8,
        )],
        None,
    )
    .unwrap();
    let stop = greedy[0].token_ids[2];
    let first = greedy[0].token_ids.iter().position(|&t| t == stop).unwrap();
    let request = GenerateRequest::new(chat_prompt(), SamplingParams::greedy(), 8)
        .with_stop_token_ids(vec![stop]);
    let zero = GenerateRequest::new(chat_prompt(), SamplingParams::greedy(), 0);
    let out = generate_batch(&model, &[request, zero], None).unwrap();
    assert_eq!(out[0].token_ids, greedy[0].token_ids[..=first].to_vec());
    assert_eq!(out[0].finish_reason, FinishReason::Stop);
    assert!(out[1].token_ids.is_empty() && out[1].logprobs.as_ref().is_some_and(Vec::is_empty));
    assert_eq!(out[1].finish_reason, FinishReason::Length);
}

#[test]
fn bad_requests_are_typed_errors() {
    let model = common::tiny_model();
    let empty = GenerateRequest::new(vec![], SamplingParams::greedy(), 4);
    assert!(generate_batch(&model, &[empty], None).is_err());
    let oov = GenerateRequest::new(vec![151_936], SamplingParams::greedy(), 4);
    assert!(generate_batch(&model, &[oov], None).is_err());
    let bad_p = GenerateRequest::new(
        vec![1],
        SamplingParams {
            top_p: 0.0,
            ..SamplingParams::default()
        },
        4,
    );
    assert!(generate_batch(&model, &[bad_p], None).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_batches_concurrent_calls_and_tracks_weight_versions() {
    let engine = Arc::new(TchEngine::new(
        common::tiny_model(),
        EngineConfig {
            max_batch_size: 8,
            ..EngineConfig::default()
        },
    ));
    assert_eq!(engine.name(), "tch");
    let reference = common::tiny_model();
    let requests: Vec<GenerateRequest> = (0..8u64)
        .map(|i| {
            GenerateRequest::new(vec![9707, 1879, 13 + i as u32], sampled(i), 5 + i as usize)
                .with_session_id(format!("s{i}"))
        })
        .collect();
    let handles: Vec<_> = requests
        .iter()
        .cloned()
        .map(|r| {
            let engine = Arc::clone(&engine);
            tokio::spawn(async move { engine.generate(r).await })
        })
        .collect();
    for (request, handle) in requests.iter().zip(handles) {
        let out = handle.await.unwrap().unwrap();
        let alone = generate_batch(&reference, std::slice::from_ref(request), Some(0))
            .unwrap()
            .remove(0);
        assert_eq!(out.token_ids, alone.token_ids);
        assert_eq!(out.weight_version, Some(0));
    }
    let bad = engine
        .generate(GenerateRequest::new(vec![], SamplingParams::greedy(), 2))
        .await;
    assert!(bad.is_err());
    assert_eq!(engine.update_weights(&reference).unwrap(), 1);
    let out = engine.generate(requests[0].clone()).await.unwrap();
    assert_eq!(out.weight_version, Some(1));
}

/// A request whose caller goes away (a client that disconnected) leaves the running batch
/// after the next step: the engine does not decode its whole budget before serving the
/// requests queued behind it. Counted in sampled tokens, not in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_caller_is_gone_stops_decoding() {
    tokio::time::timeout(std::time::Duration::from_secs(300), async {
        let engine = Arc::new(TchEngine::new(
            common::tiny_model(),
            EngineConfig::default(),
        ));
        let budget = 400;
        let long = GenerateRequest::new(vec![9707, 1879], sampled(1), budget);
        let caller = tokio::spawn({
            let engine = Arc::clone(&engine);
            async move { engine.generate(long).await }
        });
        // Wait until the long request is being decoded, then drop its caller.
        while engine.tokens_sampled() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        caller.abort();
        let _ = caller.await;
        let after = engine
            .generate(GenerateRequest::new(
                vec![9707, 1879],
                SamplingParams::greedy(),
                2,
            ))
            .await
            .unwrap();
        assert_eq!(after.token_ids.len(), 2);
        let sampled = engine.tokens_sampled();
        assert!(
            sampled < budget as u64,
            "{sampled} tokens sampled: the abandoned request ran on"
        );
    })
    .await
    .unwrap();
}
