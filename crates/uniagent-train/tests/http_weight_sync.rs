//! The HTTP weight-sync path end to end, against a real server process: no SGLang or vLLM can
//! run here (they need CUDA builds), so the server is `uniagent-sglang-tch`, SGLang's native
//! API over the tch engine, which really loads every checkpoint from disk and generates with
//! it. Rollouts go through `uniagent_models::SglangGenerator`, weights through
//! `HttpWeightSync`.

#![cfg(all(feature = "tch", feature = "http-sync", feature = "sglang-server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers

mod word_family;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use uniagent_core::{Error, GenerateOutput, GenerateRequest, SamplingParams, TokenGenerator};
use uniagent_models::{HttpModelConfig, SglangGenerator};
use uniagent_train::generate::generate_batch;
use uniagent_train::model::Qwen2ForCausalLM;
use uniagent_train::pipeline::{
    HttpSyncConfig, HttpWeightSync, Pipeline, PipelineConfig, ServerFlavour, TaskSource, WeightSync,
};
use uniagent_train::scratch::{scratch_model, TinyModel};

/// The server as a child process, killed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    /// Starts `uniagent-sglang-tch` on `model_dir`, port 0; waits for its address line.
    fn start(model_dir: &Path, processed_logprobs: bool) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_uniagent-sglang-tch"));
        command
            .arg("--model-path")
            .arg(model_dir)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if processed_logprobs {
            command.arg("--processed-logprobs");
        }
        let mut child = command.spawn().expect("starting uniagent-sglang-tch");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Self { child, url }
    }

    fn generator(&self) -> SglangGenerator {
        SglangGenerator::new(&HttpModelConfig::new(vec![self.url.clone()], "tiny")).unwrap()
    }

    fn sync(&self, staging: &Path, eos: Option<u32>) -> HttpWeightSync {
        let mut config = HttpSyncConfig::new(
            vec![self.url.clone()],
            ServerFlavour::Sglang,
            staging.to_path_buf(),
        );
        config.eos_token_id = eos;
        HttpWeightSync::new(config).unwrap()
    }

    async fn get(&self, path: &str) -> Value {
        reqwest::get(format!("{}{path}", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn version(&self) -> String {
        self.get("/get_weight_version").await["weight_version"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn greedy(prompt: Vec<u32>, max_new_tokens: usize) -> GenerateRequest {
    GenerateRequest::new(prompt, SamplingParams::greedy(), max_new_tokens)
}

/// What `policy` itself generates for `request`, in process.
fn local(policy: &Qwen2ForCausalLM, request: &GenerateRequest) -> GenerateOutput {
    generate_batch(policy, std::slice::from_ref(request), None)
        .unwrap()
        .remove(0)
}

/// The `weight_versions` of the sampled tokens of the trajectories of `phase` at `step`.
fn versions_of(out: &Path, phase: &str, step: u64) -> Vec<u64> {
    std::fs::read_to_string(out.join("trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|t| t["phase"] == phase && t["step"] == step)
        .flat_map(|t| t["weight_versions"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_u64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_trains_through_an_sglang_server_and_its_weights_arrive() {
    tokenizers::utils::parallelism::set_parallelism(false);
    let dir = tempfile::tempdir().unwrap();
    let (codec, policy) = word_family::codec_and_policy(3);
    let initial = dir.path().join("initial");
    policy.save_pretrained(&initial).unwrap();
    let yaml = "seed: 3\nsft:\n  steps: 40\n  batch_size: 12\n  lr: 0.003\n\
                rl:\n  steps: 2\n  tasks_per_step: 3\n  group_size: 4\n  lr: 0.0005\n  eval_every: 0\n";
    let config = PipelineConfig::from_yaml_str(yaml).unwrap();
    let server = Server::start(&initial, !config.rl.correction.is_disabled());
    let probe = greedy(
        codec
            .encode("<|im_start|>user\nRepeat the word coral.<|im_end|>\n<|im_start|>assistant\n")
            .unwrap(),
        24,
    );
    let before = local(&policy, &probe);
    let sync = Arc::new(server.sync(&dir.path().join("staging"), Some(codec.eos_token_id())));
    let out = dir.path().join("run");
    let mut pipeline = Pipeline::with_generation(
        policy,
        word_family::spec(codec.clone()),
        config,
        &out,
        Arc::new(server.generator()),
        sync.clone(),
    )
    .unwrap();
    assert!(pipeline.engine().is_none());

    // SFT stages the weights; the held-out evaluation commits them: version 1.
    let demos = pipeline
        .demonstrations(
            word_family::demonstrator(codec.clone(), 12),
            word_family::tasks("sft", 12),
        )
        .await
        .unwrap();
    let rows: Vec<_> = demos.into_iter().map(|t| t.output).collect();
    pipeline.sft(&rows).unwrap();
    assert_eq!(server.version().await, "0", "staged, not committed yet");
    let held_out = word_family::tasks("eval", 6);
    pipeline.evaluate(&held_out, 0).await.unwrap();
    assert_eq!((sync.version(), server.version().await.as_str()), (1, "1"));
    let versions = versions_of(&out, "eval", 0);
    assert!(
        !versions.is_empty() && versions.iter().all(|v| *v == 1),
        "{versions:?}"
    );

    // Two synchronous RL steps: each samples with the previous sync's version and syncs.
    let rl = pipeline
        .rl(TaskSource::new(word_family::tasks("rl", 30), 5), &[])
        .await
        .unwrap();
    assert_eq!(
        server.version().await,
        "3",
        "1 after SFT plus one per RL step"
    );
    assert_eq!(sync.version(), 3);
    for (step, s) in (1u64..).zip(&rl.steps) {
        let versions = versions_of(&out, "rl", step);
        assert!(
            !versions.is_empty() && versions.iter().all(|v| *v == step),
            "step {step}: {versions:?}"
        );
        assert_eq!(s.weight_version, step + 1);
        assert_eq!(s.staleness, 0, "{s:?}");
        assert!(
            s.grad_norm.is_some_and(|g| g > 0.0),
            "RL changed nothing to sync: {s:?}"
        );
        // The server sampled with exactly the trainer's weights.
        assert!((s.importance_ratio.unwrap() - 1.0).abs() < 1e-3, "{s:?}");
    }

    // The server now generates what the trained policy generates, and not what it did before.
    let trained = local(pipeline.policy().unwrap(), &probe);
    assert_ne!(
        trained.token_ids, before.token_ids,
        "training changed nothing"
    );
    let served = server.generator().generate(probe.clone()).await.unwrap();
    assert_eq!(served.token_ids, trained.token_ids);
    assert_eq!(served.weight_version, Some(3));
    let (served_lps, trained_lps) = (served.logprobs.unwrap(), trained.logprobs.unwrap());
    for (a, b) in served_lps.iter().zip(&trained_lps) {
        assert!(
            (a - b).abs() < 1e-4,
            "{:?} vs {:?}",
            served_lps,
            trained_lps
        );
    }
    // Only the committed checkpoint is kept.
    let kept: Vec<_> = std::fs::read_dir(dir.path().join("staging"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(kept, vec!["v00000003".to_owned()]);
}

/// A tiny policy over 64 ids.
fn tiny(seed: i64) -> Qwen2ForCausalLM {
    scratch_model(&TinyModel::default(), 64, seed).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_while_paused_waits_and_gets_the_reloaded_weights() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (tiny(1), tiny(2));
    old.save_pretrained(&dir.path().join("initial")).unwrap();
    let server = Server::start(&dir.path().join("initial"), false);
    let sync = server.sync(&dir.path().join("staging"), None);
    let request = greedy(vec![5, 9, 17, 33], 12);
    assert_ne!(
        local(&old, &request).token_ids,
        local(&new, &request).token_ids
    );
    sync.stage(&new).unwrap();

    // Paused as the trainer pauses before a reload: the request waits...
    let paused = server
        .post("/pause_generation", serde_json::json!({"mode": "retract"}))
        .await;
    assert!(paused.status().is_success());
    let generator = Arc::new(server.generator());
    let waiting = tokio::spawn({
        let (generator, request) = (generator.clone(), request.clone());
        async move { generator.generate(request).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "a request ran while generation was paused"
    );

    // ...through the reload (which pauses again and resumes), then runs on the new weights.
    assert_eq!(sync.commit().await.unwrap(), 1);
    let out = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the waiting request never finished")
        .unwrap()
        .unwrap();
    assert_eq!(out.weight_version, Some(1));
    assert_eq!(out.token_ids, local(&new, &request).token_ids);
    assert_eq!(sync.server_version(&server.url).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reload_is_a_typed_error_and_generation_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (tiny(1), tiny(2));
    old.save_pretrained(&dir.path().join("initial")).unwrap();
    let server = Server::start(&dir.path().join("initial"), false);
    let sync = server.sync(&dir.path().join("staging"), None);

    // A checkpoint the server cannot load: its weights file is cut short.
    sync.stage(&new).unwrap();
    let weights = sync.checkpoint_dir(1).join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let err = sync.commit().await.unwrap_err();
    match &err {
        Error::Model {
            backend,
            message,
            retryable,
            ..
        } => {
            assert_eq!(backend, "sglang");
            assert!(!retryable, "{err}");
            assert!(message.contains("could not reload"), "{message}");
            assert!(
                message.contains("Failed to update weights"),
                "server's message: {message}"
            );
        }
        other => panic!("expected a model error, got {other:?}"),
    }
    assert_eq!((sync.version(), server.version().await.as_str()), (0, "0"));

    // Generation was resumed: a request runs at once, on the old weights.
    let request = greedy(vec![5, 9, 17, 33], 12);
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        server.generator().generate(request.clone()),
    )
    .await
    .expect("generation stayed paused after the failed reload")
    .unwrap();
    assert_eq!(out.token_ids, local(&old, &request).token_ids);
    assert_eq!(out.weight_version, Some(0));

    // A good checkpoint afterwards goes through.
    sync.stage(&new).unwrap();
    assert_eq!(sync.commit().await.unwrap(), 1);
    assert_eq!(server.version().await, "1");
}
