//! `quickstart`: run, train, run better — the closed loop on CPU, as a thin user of
//! `uniagent_train::pipeline`: a file-lookup task family (`task.rs`), a from-scratch tokenizer
//! and tiny Qwen2 policy (or `--model-dir`), SFT on demonstrations run through the real loop
//! in host sandboxes, then GRPO/GSPO, sync or fully async; held-out success before and after.
//!
//! ```sh
//! scripts/quickstart --quick     # installs libtorch, builds, runs
//! quickstart [--quick] [--config FILE.toml] [--out DIR] [--loss grpo|gspo] [--mode sync|async] [--model-dir DIR]
//! ```
//!
//! `--out` (default `quickstart-out/`) gets `trajectories.jsonl`, `metrics.jsonl`,
//! `summary.json`, `config.toml`, `learning_curve.png` and `policy/` (a Hugging Face folder
//! that `--model-dir` loads); the summary JSON goes to stdout. A seed gives the same numbers
//! in `--mode sync`.

mod task;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use task::{sandbox_for, CodeReward, FileQuestion};
use uniagent_core::agent::LoopConfig;
use uniagent_core::{Error, LengthLimits, Result, SamplingParams, Task};
use uniagent_envs::HostConfig;
use uniagent_tools::{ExecuteBash, Finish};
use uniagent_train::pipeline::PipelineConfig;
use uniagent_train::pipeline::{Demonstrator, LossName, Mode, Pipeline, RolloutSpec, TaskSource};
use uniagent_train::rl::RolloutCorrection;
use uniagent_train::scratch::{
    load_hf, save_tokenizer, scratch_codec, scratch_model, train_tokenizer, TinyModel,
};

/// Every knob in one TOML file (`--config`): the task family and the from-scratch policy
/// here, the training run in `[pipeline]` (the library's config).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuickstartConfig {
    /// Tasks with demonstrations for the SFT warm start.
    pub sft_tasks: usize,
    /// Held-out tasks evaluated (greedy).
    pub eval_tasks: usize,
    /// Files (names with codes) in each task's sandbox; one of them is asked about.
    pub files_per_task: usize,
    /// Tokens per assistant turn.
    pub max_turn_tokens: u32,
    /// Turns per episode.
    pub max_turns: u32,
    /// Tokenizer vocabulary size.
    pub vocab_size: usize,
    /// The from-scratch model.
    pub model: TinyModel,
    /// SFT, RL (sync or async), engine and seed.
    pub pipeline: PipelineConfig,
}

impl Default for QuickstartConfig {
    fn default() -> Self {
        Self {
            sft_tasks: 96,
            eval_tasks: 64,
            files_per_task: 3,
            max_turn_tokens: 48,
            max_turns: 3,
            vocab_size: 400,
            model: TinyModel::default(),
            pipeline: PipelineConfig::default(),
        }
    }
}

/// Command-line arguments.
#[derive(Debug, clap::Parser)]
struct Args {
    /// The CI-sized budget.
    #[arg(long)]
    quick: bool,
    /// A TOML config (`QuickstartConfig`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Output folder.
    #[arg(long, default_value = "quickstart-out")]
    out: PathBuf,
    /// `grpo`, `gspo` or `cispo`.
    #[arg(long, value_parser = name::<LossName>)]
    loss: Option<LossName>,
    /// `sync` or `async`.
    #[arg(long, value_parser = name::<Mode>)]
    mode: Option<Mode>,
    /// A Hugging Face Qwen2 folder instead of the from-scratch policy.
    #[arg(long)]
    model_dir: Option<PathBuf>,
}

/// A config enum from its name as written in config files.
fn name<T: serde::de::DeserializeOwned>(s: &str) -> std::result::Result<T, String> {
    serde_json::from_value(s.into()).map_err(|e| e.to_string())
}

fn load_config(args: &Args) -> Result<QuickstartConfig> {
    let mut config: QuickstartConfig = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            toml::from_str(&text)
                .map_err(|e| Error::invalid_input(format!("{}: {e}", path.display())))?
        }
        None => QuickstartConfig::default(),
    };
    if args.quick {
        // The CI budget: fewer RL steps, the same warm start and held-out tasks.
        (config.pipeline.rl.steps, config.pipeline.rl.eval_every) = (12, 6);
    }
    config.pipeline.rl.mode = args.mode.unwrap_or(config.pipeline.rl.mode);
    // Async samples come from older weights: correct for it unless the config says how.
    if config.pipeline.rl.mode == Mode::Async && config.pipeline.rl.correction.is_disabled() {
        config.pipeline.rl.correction = RolloutCorrection::token_tis(2.0);
    }
    config.pipeline.rl.loss = args.loss.unwrap_or(config.pipeline.rl.loss);
    Ok(config)
}

/// The text of a correct turn: read the asked file, then finish with the code it holds.
fn demonstration(task: &FileQuestion, turn: usize) -> Option<String> {
    let (name, args) = match turn {
        0 => (
            "execute_bash",
            format!("\"command\": \"cat data/{}.txt\"", task.target),
        ),
        1 => ("finish", format!("\"answer\": \"{}\"", task.answer())),
        _ => return None,
    };
    let call = format!("{{\"name\": \"{name}\", \"arguments\": {{{args}}}}}");
    Some(format!("<tool_call>\n{call}\n</tool_call>"))
}

async fn run(c: &QuickstartConfig, out: &Path, model_dir: Option<&Path>) -> Result<String> {
    std::fs::create_dir_all(out)
        .map_err(|e| Error::io("creating the output directory".to_owned(), e))?;
    let toml_text = toml::to_string(c).map_err(|e| Error::internal(e.to_string()))?;
    std::fs::write(out.join("config.toml"), toml_text)
        .map_err(|e| Error::io("writing config.toml".to_owned(), e))?;
    // One thread for tokenizer training (no rayon ordering effects): a seed, the same numbers.
    tokenizers::utils::parallelism::set_parallelism(false);
    let seed = c.pipeline.seed;
    let mut rng = fastrand::Rng::with_seed(seed);
    // `n` tasks `prefix-0..n` drawn from `rng`, and as the loop sees them.
    let tasks = |prefix: &str, n: usize, rng: &mut fastrand::Rng| -> Vec<FileQuestion> {
        let id = |i| format!("{prefix}-{i}");
        (0..n)
            .map(|i| FileQuestion::generate(id(i), c.files_per_task, rng))
            .collect()
    };
    let to_tasks =
        |v: &[FileQuestion]| -> Vec<Task> { v.iter().map(FileQuestion::to_task).collect() };
    let (codec, policy) = match model_dir {
        Some(dir) => load_hf(dir, uniagent_train::tch::Device::cuda_if_available())?,
        None => {
            let mut corpus = Vec::new();
            for t in tasks("corpus", 400, &mut rng) {
                let turns = [
                    ("user", t.question()),
                    ("assistant", demonstration(&t, 0).unwrap_or_default()),
                    ("tool", format!("{}\n", t.answer())),
                    ("assistant", demonstration(&t, 1).unwrap_or_default()),
                ];
                corpus.extend(
                    turns
                        .iter()
                        .map(|(role, text)| format!("<|im_start|>{role}\n{text}<|im_end|>\n")),
                );
            }
            let tokenizer = train_tokenizer(&corpus, c.vocab_size)?;
            save_tokenizer(&tokenizer, &out.join("policy"))?;
            let vocab = tokenizer.get_vocab_size(true);
            (
                scratch_codec(tokenizer)?,
                scratch_model(&c.model, vocab, seed as i64)?,
            )
        }
    };
    let codec = Arc::new(codec);
    let host = HostConfig::default();
    let spec = RolloutSpec {
        tools: vec![
            Arc::new(ExecuteBash {
                timeout: Duration::from_secs(10),
                ..ExecuteBash::default()
            }),
            Arc::new(Finish),
        ],
        reward: Arc::new(CodeReward),
        loop_config: LoopConfig {
            max_turns: c.max_turns,
            sampling: SamplingParams {
                max_tokens: Some(c.max_turn_tokens),
                ..SamplingParams::default()
            },
            limits: LengthLimits {
                max_model_len: Some(1000),
                ..LengthLimits::default()
            },
            format_error_budget: 1,
            ..LoopConfig::default()
        },
        sandboxes: Some(Arc::new(move |task: &Task| sandbox_for(task, host.clone()))),
        codec: codec.clone(),
        progress: None,
    };
    let eval_rng = &mut fastrand::Rng::with_seed(seed ^ 0x5eed_e7a1);
    let held_out = to_tasks(&tasks("eval", c.eval_tasks, eval_rng));
    let sft_tasks = tasks("sft", c.sft_tasks, &mut rng);
    // Enough RL tasks for every step, and for an async rollouter running ahead.
    let rl = &c.pipeline.rl;
    let rl_count = (rl.steps * rl.tasks_per_step * rl.r#async.require_batches).max(1) * 2 + 64;
    let rl_tasks = to_tasks(&tasks("rl", rl_count, &mut rng));
    let sft = to_tasks(&sft_tasks);
    let demonstrator = Arc::new(Demonstrator::new(codec, move |id, turn| {
        let i: usize = id.strip_prefix("sft-")?.parse().ok()?;
        demonstration(sft_tasks.get(i)?, turn)
    }));
    let mut pipeline = Pipeline::new(policy, spec, c.pipeline.clone(), out)?;
    let summary = pipeline
        .run(
            demonstrator,
            sft,
            TaskSource::new(rl_tasks, seed).in_order(),
            &held_out,
        )
        .await?;
    pipeline.export(&out.join("policy"), model_dir)?;
    serde_json::to_string(&summary).map_err(|e| Error::internal(e.to_string()))
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let result = load_config(&args).and_then(|config| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the runtime".to_owned(), e))?;
        runtime.block_on(run(&config, &args.out, args.model_dir.as_deref()))
    });
    match result {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::from(2)
        }
    }
}
