//! The generation engine on the tiny-qwen2 fixture.
#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a panic fails the test

mod common;

use std::sync::Arc;

use tch::{Kind, Tensor};
use uniagent_core::{FinishReason, GenerateRequest, SamplingParams, TokenGenerator};
use uniagent_train::generate::{
    generate_batch, score_token, DecodeBatch, EngineConfig, LogprobKind, TchEngine,
};

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

/// Sends a request of `budget` sampled tokens (seed `seed`) and returns once it is being
/// decoded.
async fn start_long(
    engine: &Arc<TchEngine>,
    seed: u64,
    budget: usize,
) -> tokio::task::JoinHandle<uniagent_core::Result<uniagent_core::GenerateOutput>> {
    let long = GenerateRequest::new(vec![9707, 1879], sampled(seed), budget);
    let caller = tokio::spawn({
        let engine = Arc::clone(engine);
        async move { engine.generate(long).await }
    });
    while engine.tokens_sampled() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    caller
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
        let caller = start_long(&engine, 1, budget).await;
        // Decoding has started: drop its caller.
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

/// Compares every output of a batch run with the same request decoded alone.
fn assert_as_alone(
    model: &uniagent_train::model::Qwen2ForCausalLM,
    requests: &[GenerateRequest],
    outputs: &[(usize, uniagent_core::GenerateOutput)],
) {
    assert_eq!(outputs.len(), requests.len());
    for (i, out) in outputs {
        let alone = generate_batch(model, std::slice::from_ref(&requests[*i]), None)
            .unwrap()
            .remove(0);
        assert_eq!(out.token_ids, alone.token_ids, "request {i}");
        assert_eq!(out.finish_reason, alone.finish_reason, "request {i}");
        for (a, b) in out
            .logprobs
            .as_ref()
            .unwrap()
            .iter()
            .zip(alone.logprobs.as_ref().unwrap())
        {
            assert!(
                (a - b).abs() < 1e-4,
                "request {i}: logprob {a} (joined) vs {b} (alone)"
            );
        }
    }
}

/// Requests that join a running batch between steps (continuous batching) decode exactly as
/// they would alone, whether their prompt is shorter than the running rows' cache (they are
/// padded) or longer (the running rows are); when the long rows leave, the padding they
/// needed is dropped.
#[test]
fn rows_joining_a_running_batch_decode_as_they_would_alone() {
    let model = common::tiny_model();
    let long_prompt: Vec<u32> = chat_prompt()
        .into_iter()
        .chain([9707, 1879, 13, 11])
        .collect();
    let requests = vec![
        GenerateRequest::new(vec![9707, 1879], SamplingParams::greedy(), 12),
        GenerateRequest::new(chat_prompt(), sampled(7), 6),
        GenerateRequest::new(vec![151644, 872, 198], sampled(8), 20),
        GenerateRequest::new(long_prompt.clone(), SamplingParams::greedy(), 4),
        GenerateRequest::new(vec![9707], sampled(9), 3),
    ];
    let mut batch = DecodeBatch::new(LogprobKind::Raw);
    let admit = |batch: &mut DecodeBatch<usize>, i: usize| {
        batch
            .admit(&model, vec![(i, requests[i].clone())], None, &|_| false)
            .unwrap()
    };
    let mut done = admit(&mut batch, 0);
    for _ in 0..3 {
        done.extend(batch.step(&model, &|_| false).unwrap());
    }
    // A prompt longer than the running cache: the running row is padded.
    assert!(batch.width() < chat_prompt().len());
    done.extend(admit(&mut batch, 1));
    assert_eq!(batch.width(), chat_prompt().len());
    done.extend(batch.step(&model, &|_| false).unwrap());
    // A prompt shorter than the running cache: it is padded.
    done.extend(admit(&mut batch, 2));
    done.extend(batch.step(&model, &|_| false).unwrap());
    done.extend(admit(&mut batch, 3));
    let widest = batch.width();
    assert!(widest >= long_prompt.len());
    done.extend(admit(&mut batch, 4));
    assert_eq!(batch.len(), 5);
    while batch.len() > 1 {
        done.extend(batch.step(&model, &|_| false).unwrap());
    }
    // Only the short-prompt row 2 is left: the long rows' padding is gone.
    assert_eq!(batch.len(), 1);
    assert!(
        batch.width() < widest - chat_prompt().len() + 20,
        "width {} after the long rows left (widest {widest})",
        batch.width()
    );
    while !batch.is_empty() {
        done.extend(batch.step(&model, &|_| false).unwrap());
    }
    done.sort_by_key(|(i, _)| *i);
    assert_as_alone(&model, &requests, &done);
    let expected: u64 = done.iter().map(|(_, o)| o.token_ids.len() as u64).sum();
    assert_eq!(batch.tokens_sampled(), expected);
}

/// With batch-invariant logprobs on, a request's logprobs are the same bits whatever it was
/// decoded beside (alone, or joining a running batch of longer and shorter prompts), for both
/// kinds, and they are the scores of one lone forward pass over its sequence.
#[test]
fn batch_invariant_logprobs_do_not_depend_on_the_company() {
    let model = common::tiny_model();
    let target = GenerateRequest::new(vec![151644, 872, 198, 9707], sampled(21), 10);
    let company = [
        GenerateRequest::new(chat_prompt(), sampled(22), 14),
        GenerateRequest::new(vec![9707], SamplingParams::greedy(), 5),
    ];
    for kind in [LogprobKind::Raw, LogprobKind::Processed] {
        let decode = |others: &[GenerateRequest]| {
            let mut batch = DecodeBatch::new(kind).batch_invariant_logprobs(true);
            let mut done = Vec::new();
            for (i, other) in others.iter().enumerate() {
                let tagged = vec![(i + 1, other.clone())];
                done.extend(batch.admit(&model, tagged, None, &|_| false).unwrap());
                done.extend(batch.step(&model, &|_| false).unwrap());
            }
            let tagged = vec![(0, target.clone())];
            done.extend(batch.admit(&model, tagged, None, &|_| false).unwrap());
            while !batch.is_empty() {
                done.extend(batch.step(&model, &|_| false).unwrap());
            }
            done.into_iter().find(|(i, _)| *i == 0).unwrap().1
        };
        let alone = decode(&[]);
        let beside = decode(&company);
        assert_eq!(alone.token_ids, beside.token_ids, "{kind:?}");
        let bits = |o: &uniagent_core::GenerateOutput| {
            o.logprobs
                .as_ref()
                .unwrap()
                .iter()
                .map(|l| l.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&alone), bits(&beside), "{kind:?}");

        // The scores of a lone pass over the prompt and every token but the last.
        let tokens = &alone.token_ids;
        let ids: Vec<i64> = target
            .prompt_ids
            .iter()
            .chain(&tokens[..tokens.len() - 1])
            .map(|&t| i64::from(t))
            .collect();
        // (The response is shorter than one rescoring chunk: one projection of its positions.)
        let first = (target.prompt_ids.len() - 1) as i64;
        let logits = tch::no_grad(|| {
            let input = Tensor::from_slice(&ids).unsqueeze(0);
            let hidden = model.hidden_states(&input, None, None, None).unwrap();
            model.logits(&hidden.narrow(1, first, tokens.len() as i64))
        })
        .get(0)
        .to_kind(Kind::Float);
        for (k, &token) in tokens.iter().enumerate() {
            let row = logits.get(k as i64);
            let row = Vec::<f32>::try_from(row.contiguous()).unwrap();
            let scored = score_token(&row, &target.sampling, token).unwrap();
            let want = match kind {
                LogprobKind::Raw => scored.logprob,
                LogprobKind::Processed => scored.processed_logprob,
            };
            assert_eq!(
                alone.logprobs.as_ref().unwrap()[k].to_bits(),
                want.to_bits(),
                "{kind:?}, token {k}"
            );
        }
    }
}

/// A short request sent while a long one is being decoded is answered after its own tokens,
/// not after the long one's (step-level admission). Counted in sampled tokens, not in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_request_is_answered_while_a_long_one_runs() {
    tokio::time::timeout(std::time::Duration::from_secs(300), async {
        let engine = Arc::new(TchEngine::new(
            common::tiny_model(),
            EngineConfig::default(),
        ));
        let budget = 400;
        let caller = start_long(&engine, 1, budget).await;
        let short = GenerateRequest::new(vec![9707, 1879, 13], SamplingParams::greedy(), 3);
        let out = engine.generate(short.clone()).await.unwrap();
        let sampled_then = engine.tokens_sampled();
        assert!(
            !caller.is_finished() && sampled_then < budget as u64,
            "the short request waited for the long one ({sampled_then} tokens sampled)"
        );
        let alone = generate_batch(&common::tiny_model(), &[short], Some(0))
            .unwrap()
            .remove(0);
        assert_eq!(out.token_ids, alone.token_ids);
        assert_eq!(out.weight_version, Some(0));
        let long = caller.await.unwrap().unwrap();
        assert_eq!(long.token_ids.len(), budget);
    })
    .await
    .unwrap();
}

/// A weight update waits for the running requests, holds back the queued ones, and every
/// output reports the one version it was decoded with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_update_waits_for_running_rows_and_holds_back_new_ones() {
    tokio::time::timeout(std::time::Duration::from_secs(300), async {
        let engine = Arc::new(TchEngine::new(
            common::tiny_model(),
            EngineConfig::default(),
        ));
        let budget = 400;
        let caller = start_long(&engine, 3, budget).await;
        let source = common::tiny_model();
        let update = tokio::task::spawn_blocking({
            let engine = Arc::clone(&engine);
            move || engine.update_weights(&source)
        });
        while engine.updates_waiting() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        // Queued behind the update: admitted with the new weights.
        let after = engine
            .generate(GenerateRequest::new(
                vec![9707],
                SamplingParams::greedy(),
                2,
            ))
            .await
            .unwrap();
        assert_eq!(update.await.unwrap().unwrap(), 1);
        let long = caller.await.unwrap().unwrap();
        assert_eq!(
            (long.token_ids.len(), long.weight_version),
            (budget, Some(0))
        );
        assert_eq!(after.weight_version, Some(1));
    })
    .await
    .unwrap();
}
