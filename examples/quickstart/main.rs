//! `quickstart`: run, train, run better — the closed loop on CPU, needing nothing but the
//! repository.
//!
//! Generates a file-lookup task family, trains a byte-level BPE tokenizer and a tiny
//! Qwen2-architecture policy from scratch (or loads `--model-dir`), warm-starts it by SFT on
//! demonstrations that ran through the real loop in real host sandboxes, then improves it with
//! GRPO (or GSPO) on its own rollouts, and reports held-out success before and after RL.
//!
//! ```sh
//! scripts/quickstart --quick                      # installs libtorch, builds, runs
//! quickstart [--quick] [--config FILE.toml] [--out DIR] [--loss grpo|gspo] [--mode sync|async] [--model-dir DIR]
//! ```
//!
//! Output in `--out` (default `quickstart-out/`): `trajectories.jsonl`, `metrics.csv`,
//! `metrics.json`, `config.toml`, `learning_curve.png` (held-out success per evaluation in red,
//! each RL step's rollout success in blue) and `policy/`, the trained policy as a Hugging Face
//! directory that `--model-dir` loads back; the summary JSON on stdout, progress on stderr.
//!
//! A seed gives the same numbers in `--mode sync` (tokenizer trained on one thread, a fixed
//! number of torch threads, seeded initialisation and per-request sampling seeds).

mod config;
mod pipeline;
mod rollout;
mod task;
mod train;

use std::path::PathBuf;
use std::process::ExitCode;

use config::QuickstartConfig;

/// Command-line arguments.
#[derive(Debug, Default)]
struct Args {
    quick: bool,
    config: Option<PathBuf>,
    out: Option<PathBuf>,
    loss: Option<String>,
    mode: Option<String>,
    model_dir: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--quick" => args.quick = true,
            "--config" => args.config = Some(value("--config")?.into()),
            "--out" => args.out = Some(value("--out")?.into()),
            "--loss" => args.loss = Some(value("--loss")?),
            "--mode" => args.mode = Some(value("--mode")?),
            "--model-dir" => args.model_dir = Some(value("--model-dir")?.into()),
            other => {
                return Err(format!(
                    "unknown argument `{other}` (use --quick, --config FILE, --out DIR, --loss grpo|gspo, --mode sync|async, --model-dir DIR)"
                ))
            }
        }
    }
    Ok(args)
}

fn load_config(args: &Args) -> Result<QuickstartConfig, String> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => QuickstartConfig::default(),
    };
    if args.quick {
        config = config.quick();
    }
    if let Some(mode) = &args.mode {
        config.mode = mode.clone();
    }
    if let Some(loss) = &args.loss {
        config.loss = loss.clone();
    }
    Ok(config)
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|args| {
        let config = load_config(&args)?;
        let out = args.out.clone().unwrap_or_else(|| "quickstart-out".into());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("starting the runtime: {e}"))?;
        runtime
            .block_on(train::run(&config, &out, args.model_dir.as_deref()))
            .map_err(|e| e.to_string())
    });
    match result {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("quickstart: {message}");
            ExitCode::from(2)
        }
    }
}
