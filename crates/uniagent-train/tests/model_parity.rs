//! Our Qwen2 forward pass against transformers' outputs on the tiny-qwen2 fixture.
#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a panic fails the test

mod common;

use tch::{Kind, Tensor};

const TOL: f64 = 1e-4;

fn max_abs_diff(ours: &[f64], theirs: &[f64]) -> f64 {
    assert_eq!(ours.len(), theirs.len());
    ours.iter()
        .zip(theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

#[test]
fn logits_match_transformers_within_1e4() {
    let model = common::tiny_model();
    let reference = common::reference();
    for seq in reference["sequences"].as_array().unwrap() {
        let name = seq["name"].as_str().unwrap();
        let ids = common::ids_of(&seq["input_ids"]);
        let t = ids.len() as i64;
        let input = Tensor::from_slice(&ids).unsqueeze(0);
        let logits = tch::no_grad(|| model.forward(&input, None, None, None))
            .unwrap()
            .squeeze_dim(0);
        assert_eq!(logits.size(), [t, 151_936]);
        let selected_ids = Tensor::from_slice(&common::ids_of(&seq["logits_selected_ids"]));
        let logsumexp = logits.logsumexp([-1], false);
        let argmax = logits.argmax(-1, false);
        let logprobs = logits.log_softmax(-1, Kind::Float);
        for pos in 0..t {
            let row = logits.get(pos);
            let first16: Vec<f64> =
                Vec::try_from(row.narrow(0, 0, 16).to_kind(Kind::Double)).unwrap();
            let d = max_abs_diff(
                &first16,
                &common::floats_of(&seq["logits_first16"][pos as usize]),
            );
            assert!(d < TOL, "{name}[{pos}] logits_first16 differ by {d}");
            let sel: Vec<f64> =
                Vec::try_from(row.index_select(0, &selected_ids).to_kind(Kind::Double)).unwrap();
            let d = max_abs_diff(
                &sel,
                &common::floats_of(&seq["logits_selected"][pos as usize]),
            );
            assert!(d < TOL, "{name}[{pos}] logits_selected differ by {d}");
            let lse = logsumexp.double_value(&[pos]);
            let want = seq["logsumexp"][pos as usize].as_f64().unwrap();
            assert!(
                (lse - want).abs() < TOL,
                "{name}[{pos}] logsumexp {lse} vs {want}"
            );
            assert_eq!(
                argmax.int64_value(&[pos]),
                seq["argmax"][pos as usize].as_i64().unwrap(),
                "{name}[{pos}] argmax"
            );
            if pos + 1 < t {
                let lp = logprobs.double_value(&[pos, ids[pos as usize + 1]]);
                let want = seq["next_token_logprobs"][pos as usize].as_f64().unwrap();
                assert!(
                    (lp - want).abs() < TOL,
                    "{name}[{pos}] next-token logprob {lp} vs {want}"
                );
            }
        }
    }
}

#[test]
fn kv_cache_matches_full_forward() {
    let model = common::tiny_model();
    let reference = common::reference();
    let ids = common::ids_of(&reference["sequences"][0]["input_ids"]);
    let full =
        tch::no_grad(|| model.forward(&Tensor::from_slice(&ids).unsqueeze(0), None, None, None))
            .unwrap();
    // Prefill 10 tokens, then one at a time.
    let mut cache = model.new_cache();
    let mut pieces = vec![tch::no_grad(|| {
        model.forward(
            &Tensor::from_slice(&ids[..10]).unsqueeze(0),
            None,
            None,
            Some(&mut cache),
        )
    })
    .unwrap()];
    for &id in &ids[10..] {
        pieces.push(
            tch::no_grad(|| {
                model.forward(
                    &Tensor::from_slice(&[id]).unsqueeze(0),
                    None,
                    None,
                    Some(&mut cache),
                )
            })
            .unwrap(),
        );
    }
    assert_eq!(cache.len(), ids.len());
    let incremental = Tensor::cat(&pieces, 1);
    let d = (&full - &incremental).abs().max().double_value(&[]);
    assert!(
        d < 1e-5,
        "KV-cache logits differ from the full forward by {d}"
    );
}

#[test]
fn left_padded_batch_matches_single_rows() {
    let model = common::tiny_model();
    let a: Vec<i64> = vec![9707, 1879, 13, 358, 1079];
    let b: Vec<i64> = vec![151644, 872, 198];
    let pad = 151_643i64;
    let rows = [[a.clone()].concat(), [vec![pad, pad], b.clone()].concat()];
    let input = Tensor::stack(
        &[Tensor::from_slice(&rows[0]), Tensor::from_slice(&rows[1])],
        0,
    );
    let mask = Tensor::from_slice2(&[[1i64, 1, 1, 1, 1], [0, 0, 1, 1, 1]]);
    let positions = Tensor::from_slice2(&[[0i64, 1, 2, 3, 4], [0, 0, 0, 1, 2]]);
    let batched =
        tch::no_grad(|| model.forward(&input, Some(&positions), Some(&mask), None)).unwrap();
    let single_a =
        tch::no_grad(|| model.forward(&Tensor::from_slice(&a).unsqueeze(0), None, None, None))
            .unwrap();
    let single_b =
        tch::no_grad(|| model.forward(&Tensor::from_slice(&b).unsqueeze(0), None, None, None))
            .unwrap();
    let da = (batched.get(0) - single_a.get(0))
        .abs()
        .max()
        .double_value(&[]);
    let db = (batched.get(1).narrow(0, 2, 3) - single_b.get(0))
        .abs()
        .max()
        .double_value(&[]);
    assert!(
        da < 1e-5 && db < 1e-5,
        "batched rows differ from single rows: {da}, {db}"
    );
}

#[test]
fn bad_inputs_are_typed_errors() {
    let model = common::tiny_model();
    let too_big = Tensor::from_slice(&[151_936i64]).unsqueeze(0);
    assert!(model.forward(&too_big, None, None, None).is_err());
    let negative = Tensor::from_slice(&[-1i64]).unsqueeze(0);
    assert!(model.forward(&negative, None, None, None).is_err());
    let flat = Tensor::from_slice(&[1i64, 2]);
    assert!(model.forward(&flat, None, None, None).is_err());
    let ids = Tensor::from_slice(&[1i64, 2]).unsqueeze(0);
    let bad_mask = Tensor::from_slice(&[1i64]).unsqueeze(0);
    assert!(model.forward(&ids, None, Some(&bad_mask), None).is_err());
    let missing = std::env::temp_dir().join("uniagent-no-such-model");
    assert!(uniagent_train::model::Qwen2ForCausalLM::load(
        &missing,
        tch::Device::Cpu,
        uniagent_train::model::ModelDtype::F32
    )
    .is_err());
}

#[test]
fn bf16_forward_is_close_to_f32() {
    let mut model = common::tiny_model();
    let ids = Tensor::from_slice(&[9707i64, 1879, 13]).unsqueeze(0);
    let f32_logits = tch::no_grad(|| model.forward(&ids, None, None, None)).unwrap();
    model.set_dtype(uniagent_train::model::ModelDtype::Bf16);
    let bf16_logits = tch::no_grad(|| model.forward(&ids, None, None, None)).unwrap();
    assert_eq!(bf16_logits.kind(), Kind::BFloat16);
    let d = (f32_logits - bf16_logits.to_kind(Kind::Float))
        .abs()
        .max()
        .double_value(&[]);
    assert!(
        d < 0.25 && d > 0.0,
        "bf16 logits should be close to but not bit-equal with f32: {d}"
    );
}

#[test]
fn sharded_and_untied_checkpoints_load() {
    let model = common::tiny_model();
    let dir = tempfile::tempdir().unwrap();
    // Shard the fixture in two files, with an untied lm_head equal to the embeddings.
    let mut names: Vec<(String, Tensor)> = model.var_store().variables().into_iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let embed = model.var_store().variables()["model.embed_tokens.weight"].copy();
    names.push(("lm_head.weight".to_string(), embed));
    let (first, second) = names.split_at(names.len() / 2);
    Tensor::write_safetensors(first, dir.path().join("model-00001-of-00002.safetensors")).unwrap();
    Tensor::write_safetensors(second, dir.path().join("model-00002-of-00002.safetensors")).unwrap();
    let weight_map: serde_json::Map<String, serde_json::Value> = first
        .iter()
        .map(|(n, _)| (n.clone(), "model-00001-of-00002.safetensors".into()))
        .chain(
            second
                .iter()
                .map(|(n, _)| (n.clone(), "model-00002-of-00002.safetensors".into())),
        )
        .collect();
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::tiny_dir().join("config.json")).unwrap(),
    )
    .unwrap();
    config["tie_word_embeddings"] = false.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();

    let dtype = uniagent_train::model::ModelDtype::F32;
    let untied =
        uniagent_train::model::Qwen2ForCausalLM::load(dir.path(), tch::Device::Cpu, dtype).unwrap();
    assert!(untied
        .var_store()
        .variables()
        .contains_key("lm_head.weight"));
    let ids = Tensor::from_slice(&[9707i64, 1879, 13]).unsqueeze(0);
    let a = tch::no_grad(|| model.forward(&ids, None, None, None)).unwrap();
    let b = tch::no_grad(|| untied.forward(&ids, None, None, None)).unwrap();
    assert_eq!((a - b).abs().max().double_value(&[]), 0.0);

    // A shard that lacks a tensor is a typed error naming it.
    std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
    Tensor::write_safetensors(
        &second[1..],
        dir.path().join("model-00002-of-00002.safetensors"),
    )
    .unwrap();
    let err = uniagent_train::model::Qwen2ForCausalLM::load(dir.path(), tch::Device::Cpu, dtype)
        .unwrap_err();
    assert!(err.to_string().contains(&second[0].0), "{err}");
}

/// SDPA attention and the eager reference (the default) agree on whole sequences, a left-padded
/// batch and the cached decoding steps after it (the other tests check SDPA against
/// transformers; this one keeps the eager path honest too).
#[test]
fn sdpa_and_eager_attention_agree() {
    use uniagent_train::model::AttentionImpl;
    let mut model = common::tiny_model();
    assert_eq!(model.attention(), AttentionImpl::Eager);
    let reference = common::reference();
    let pad = 151_643i64;
    let rows = [
        vec![9707i64, 1879, 13, 358, 1079, 264],
        vec![pad, pad, pad, 151_644, 872, 198],
    ];
    let input = Tensor::stack(
        &[Tensor::from_slice(&rows[0]), Tensor::from_slice(&rows[1])],
        0,
    );
    let mask = Tensor::from_slice2(&[[1i64; 6], [0, 0, 0, 1, 1, 1]]);
    let positions = Tensor::from_slice2(&[[0i64, 1, 2, 3, 4, 5], [0, 0, 0, 0, 1, 2]]);
    let mut run = |attention: AttentionImpl| -> Vec<Tensor> {
        model.set_attention(attention);
        let mut out = Vec::new();
        for seq in reference["sequences"].as_array().unwrap() {
            let ids = Tensor::from_slice(&common::ids_of(&seq["input_ids"])).unsqueeze(0);
            out.push(tch::no_grad(|| model.forward(&ids, None, None, None)).unwrap());
        }
        // Padded prefill, then two cached steps: only the real positions are compared.
        let mut cache = model.new_cache();
        let prefill =
            tch::no_grad(|| model.forward(&input, Some(&positions), Some(&mask), Some(&mut cache)))
                .unwrap();
        out.push(prefill.get(0));
        out.push(prefill.get(1).narrow(0, 3, 3));
        let mut step_mask = mask.shallow_clone();
        for (step, next) in [[13i64, 42], [7, 99]].iter().enumerate() {
            step_mask = Tensor::cat(
                &[
                    step_mask,
                    Tensor::ones([2, 1], (Kind::Int64, tch::Device::Cpu)),
                ],
                1,
            );
            let pos = Tensor::from_slice2(&[[6 + step as i64], [3 + step as i64]]);
            let ids = Tensor::from_slice(next).unsqueeze(1);
            out.push(
                tch::no_grad(|| {
                    model.forward(&ids, Some(&pos), Some(&step_mask), Some(&mut cache))
                })
                .unwrap(),
            );
        }
        out
    };
    let eager = run(AttentionImpl::Eager);
    let sdpa = run(AttentionImpl::Sdpa);
    for (i, (e, s)) in eager.iter().zip(&sdpa).enumerate() {
        let d = (e - s).abs().max().double_value(&[]);
        assert!(d < 1e-5, "output {i}: eager and sdpa differ by {d}");
    }
}
