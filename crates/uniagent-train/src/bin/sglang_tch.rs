//! `uniagent-sglang-tch`: an SGLang-compatible HTTP server that generates with the tch engine
//! (`uniagent_train::generate::TchEngine` over a Qwen2 checkpoint), on CPU.
//!
//! It serves the part of SGLang's native API an RL trainer uses, with SGLang's request and
//! response shapes, so that `SglangGenerator` and `HttpWeightSync` can run (and be tested)
//! where SGLang itself cannot (no GPU):
//!
//! - `POST /generate`: `input_ids`, `sampling_params` (`max_new_tokens`, `temperature`,
//!   `top_p`, `top_k`, `stop_token_ids`, `sampling_seed`), `return_logprob`; answers
//!   `output_ids` and `meta_info` (`finish_reason`, `weight_version`,
//!   `output_token_logprobs` as `[logprob, id, null]`, token counts). Prompts as text are not
//!   supported (the server has no tokenizer).
//! - `POST /update_weights_from_disk`: `model_path` (a Hugging Face folder of the same
//!   architecture), `load_format` (`auto`/`safetensors` or absent), `weight_version` (an
//!   integer, as a string or a number; absent: the current one plus one). The weights are
//!   loaded and copied into the engine between decoding batches. Answers `success`, `message`,
//!   `num_paused_requests`, with HTTP 400 when the load fails.
//! - `POST /pause_generation` (`mode` `retract` or `in_place`; `abort` is refused: this
//!   engine cannot abort a running batch) and `POST /continue_generation`: while paused,
//!   `/generate` requests wait (a batch already decoding finishes).
//! - `GET /get_weight_version`, `GET /model_info`, `GET /health`, `GET /health_generate`.
//!
//! The first line on stdout is `listening on http://HOST:PORT` (`--port 0` picks a free port).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use serde_json::{json, Value};
use tokio::sync::watch;
use uniagent_core::{FinishReason, GenerateRequest, SamplingParams, TokenGenerator};
use uniagent_train::generate::{EngineConfig, LogprobKind, TchEngine};
use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};

/// Serves a Qwen2 checkpoint with SGLang's native API, generating with the tch engine.
#[derive(Debug, Parser)]
#[command(name = "uniagent-sglang-tch", version)]
struct Args {
    /// Hugging Face folder of the Qwen2 model to serve.
    #[arg(long)]
    model_path: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0: any free port).
    #[arg(long, default_value_t = 30000)]
    port: u16,
    /// Most requests decoded together.
    #[arg(long, default_value_t = 64)]
    max_batch: usize,
    /// Report logprobs of the sampling distribution (after temperature, top-p, top-k)
    /// instead of the model's raw distribution.
    #[arg(long)]
    processed_logprobs: bool,
    /// libtorch threads.
    #[arg(long, default_value_t = 1)]
    threads: i32,
}

struct Server {
    engine: TchEngine,
    model_path: PathBuf,
    /// `true` between `/pause_generation` and `/continue_generation`.
    paused: watch::Sender<bool>,
    /// Requests waiting for `/continue_generation`.
    waiting: AtomicUsize,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
}

type Shared = Arc<Server>;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let message = message.into();
    (
        status,
        Json(json!({"error": {"message": message, "code": status.as_u16()}})),
    )
        .into_response()
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("uniagent-sglang-tch: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uniagent-sglang-tch: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    tch::set_num_threads(args.threads);
    let model = Qwen2ForCausalLM::load(&args.model_path, tch::Device::Cpu, ModelDtype::F32)?;
    let engine = TchEngine::new(
        model,
        EngineConfig {
            max_batch_size: args.max_batch,
            logprobs: if args.processed_logprobs {
                LogprobKind::Processed
            } else {
                LogprobKind::Raw
            },
            ..EngineConfig::default()
        },
    );
    let server = Arc::new(Server {
        engine,
        model_path: args.model_path,
        paused: watch::channel(false).0,
        waiting: AtomicUsize::new(0),
        reloading: tokio::sync::Mutex::new(()),
    });
    let app = Router::new()
        .route("/generate", post(generate))
        .route("/update_weights_from_disk", post(update_weights_from_disk))
        .route("/pause_generation", post(pause_generation))
        .route("/continue_generation", post(continue_generation))
        .route("/get_weight_version", get(weight_version))
        .route("/model_info", get(model_info))
        .route("/health", get(health))
        .route("/health_generate", get(health))
        .with_state(server);
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
    let addr: SocketAddr = listener.local_addr()?;
    // The test harness and scripts read this line to find the port.
    println!("listening on http://{addr}");
    use std::io::Write as _;
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}

/// A `GenerateRequest` from SGLang's `/generate` body.
fn parse_generate(body: &Value) -> Result<GenerateRequest, String> {
    let ids = body["input_ids"]
        .as_array()
        .ok_or("this server takes prompts as `input_ids` only (one prompt, no text)")?;
    let prompt_ids = ids
        .iter()
        .map(|v| v.as_u64().and_then(|i| u32::try_from(i).ok()))
        .collect::<Option<Vec<u32>>>()
        .ok_or("`input_ids` must be token ids")?;
    let s = &body["sampling_params"];
    let number = |key: &str, default: f64| -> Result<f64, String> {
        match &s[key] {
            Value::Null => Ok(default),
            v => v
                .as_f64()
                .ok_or_else(|| format!("sampling_params.{key} must be a number")),
        }
    };
    let top_k = number("top_k", -1.0)?;
    let stop_token_ids = match &s["stop_token_ids"] {
        Value::Null => Vec::new(),
        Value::Array(a) => a
            .iter()
            .map(|v| v.as_u64().and_then(|i| u32::try_from(i).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or("sampling_params.stop_token_ids must be token ids")?,
        _ => return Err("sampling_params.stop_token_ids must be a list".into()),
    };
    let sampling = SamplingParams {
        temperature: number("temperature", 1.0)?,
        top_p: number("top_p", 1.0)?,
        top_k: (top_k > 0.0).then_some(top_k as u32),
        seed: s["sampling_seed"].as_u64(),
        ..SamplingParams::default()
    };
    let max_new_tokens = number("max_new_tokens", 128.0)?;
    if max_new_tokens.is_nan() || max_new_tokens < 0.0 {
        return Err("sampling_params.max_new_tokens must not be negative".into());
    }
    Ok(
        GenerateRequest::new(prompt_ids, sampling, max_new_tokens as usize)
            .with_stop_token_ids(stop_token_ids),
    )
}

async fn generate(State(server): State<Shared>, Json(body): Json<Value>) -> Response {
    let request = match parse_generate(&body) {
        Ok(r) => r,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let prompt_tokens = request.prompt_ids.len();
    let mut paused = server.paused.subscribe();
    if *paused.borrow() {
        server.waiting.fetch_add(1, Ordering::SeqCst);
        let resumed = paused.wait_for(|p| !*p).await.is_ok();
        server.waiting.fetch_sub(1, Ordering::SeqCst);
        if !resumed {
            return error(StatusCode::SERVICE_UNAVAILABLE, "server shutting down");
        }
    }
    let out = match server.engine.generate(request).await {
        Ok(out) => out,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let finish = match &out.finish_reason {
        FinishReason::Stop => json!({"type": "stop", "matched": out.token_ids.last()}),
        FinishReason::Length => json!({"type": "length", "length": out.token_ids.len()}),
        FinishReason::Abort => json!({"type": "abort"}),
        FinishReason::ToolCalls => json!({"type": "tool_calls"}),
        FinishReason::Other(o) => json!({"type": o}),
    };
    // The tch engine always reports logprobs; a missing list would fail the length check of
    // every SGLang client, so it is an error here rather than an empty list.
    let Some(lps) = out.logprobs.as_ref() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the engine returned no logprobs".to_owned(),
        );
    };
    let logprobs: Vec<Value> = lps
        .iter()
        .zip(&out.token_ids)
        .map(|(lp, id)| json!([lp, id, null]))
        .collect();
    let mut meta = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": out.token_ids.len(),
        "finish_reason": finish,
        "weight_version": out.weight_version.map(|v| v.to_string()),
    });
    if body["return_logprob"].as_bool() == Some(true) {
        meta["output_token_logprobs"] = Value::Array(logprobs);
    }
    Json(json!({"text": "", "output_ids": out.token_ids, "meta_info": meta})).into_response()
}

fn reload_answer(status: StatusCode, success: bool, message: String, paused: usize) -> Response {
    let body = json!({"success": success, "message": message, "num_paused_requests": paused});
    (status, Json(body)).into_response()
}

async fn update_weights_from_disk(
    State(server): State<Shared>,
    Json(body): Json<Value>,
) -> Response {
    let fail = |message: String| {
        let waiting = server.waiting.load(Ordering::SeqCst);
        reload_answer(StatusCode::BAD_REQUEST, false, message, waiting)
    };
    let Some(path) = body["model_path"].as_str().map(PathBuf::from) else {
        return fail("`model_path` (a string) is required".into());
    };
    match body["load_format"].as_str() {
        None | Some("auto" | "safetensors") => {}
        Some(other) => return fail(format!("load_format {other:?} is not supported")),
    }
    let version = match &body["weight_version"] {
        Value::Null => None,
        Value::String(s) => match s.parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => return fail(format!("weight_version {s:?} is not an integer")),
        },
        Value::Number(n) => match n.as_u64() {
            Some(v) => Some(v),
            None => return fail(format!("weight_version {n} is not an integer")),
        },
        other => return fail(format!("weight_version {other} is not an integer")),
    };
    let _one_at_a_time = server.reloading.lock().await;
    let worker = server.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let model = Qwen2ForCausalLM::load(&path, tch::Device::Cpu, ModelDtype::F32)?;
        let version = version.unwrap_or_else(|| worker.engine.weight_version() + 1);
        worker.engine.update_weights_to(&model, version)?;
        Ok::<_, uniagent_core::Error>((path, version))
    })
    .await;
    match loaded {
        Ok(Ok((path, version))) => {
            let waiting = server.waiting.load(Ordering::SeqCst);
            let message = format!(
                "Succeeded to update model weights from {}. Weight version updated to {version}.",
                path.display()
            );
            reload_answer(StatusCode::OK, true, message, waiting)
        }
        Ok(Err(e)) => fail(format!("Failed to update weights: {e}")),
        Err(e) => fail(format!(
            "Failed to update weights: the loader panicked: {e}"
        )),
    }
}

async fn pause_generation(State(server): State<Shared>, body: Option<Json<Value>>) -> Response {
    let mode = body
        .as_ref()
        .and_then(|Json(b)| b["mode"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "abort".into());
    if !matches!(mode.as_str(), "retract" | "in_place") {
        return error(
            StatusCode::BAD_REQUEST,
            format!("pause mode {mode:?} is not supported (retract, in_place)"),
        );
    }
    server.paused.send_replace(true);
    Json(json!({"message": "Generation paused successfully.", "status": "ok"})).into_response()
}

async fn continue_generation(State(server): State<Shared>) -> Response {
    server.paused.send_replace(false);
    Json(json!({"message": "Generation continued successfully.", "status": "ok"})).into_response()
}

async fn weight_version(State(server): State<Shared>) -> Response {
    Json(json!({"weight_version": server.engine.weight_version().to_string()})).into_response()
}

async fn model_info(State(server): State<Shared>) -> Response {
    Json(json!({
        "model_path": server.model_path,
        "is_generation": true,
        "weight_version": server.engine.weight_version().to_string(),
    }))
    .into_response()
}

async fn health() -> StatusCode {
    StatusCode::OK
}
