//! `uniagent oracle --harbor DIR... [--concurrency N] [--out FILE] [--limit N]`: runs each
//! Harbor task's `solution/solve.sh` in a fresh sandbox of its image instead of an agent, then
//! its verifier, as Harbor's oracle does; a task whose oracle does not score 1 is reported as
//! broken (exit 1).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use futures::StreamExt;
use serde_json::{json, Value};
use uniagent_core::{Deployment, RewardContext, Task};
use uniagent_rewards::harbor::{run_solution, HarborTask, HARBOR_DIR_FIELD};

use crate::dataset::load_harbor_tasks;
use crate::env::{Environment, HarborEnvironment};
use crate::error::{CliError, Result};

/// Arguments of `oracle`.
#[derive(Debug, Args)]
pub struct OracleArgs {
    /// Harbor task directories, or directories of them.
    #[arg(long, required = true, num_args = 1..)]
    pub harbor: Vec<PathBuf>,
    /// Tasks checked at once (each holds a sandbox).
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Check only the first N tasks.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Also write the results as a JSON array to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `oracle`.
pub(super) fn main(args: OracleArgs) -> Result<()> {
    if args.concurrency == 0 {
        return Err(CliError::preflight("--concurrency must be at least 1"));
    }
    let tasks = load_harbor_tasks(&args.harbor, None, None, args.limit)?;
    let environment = HarborEnvironment::default();
    let rt = super::runtime()?;
    let results: Vec<Value> = rt.block_on(async {
        environment.preflight(&tasks).await?;
        let parts = environment.parts()?;
        let (Some(sandboxes), Some(reward)) = (parts.sandboxes, parts.reward) else {
            return Err(CliError::runtime(
                "the harbor environment has no sandbox or reward",
            ));
        };
        let checks = tasks.iter().map(|task| {
            let (sandboxes, reward) = (Arc::clone(&sandboxes), Arc::clone(&reward));
            async move {
                let outcome = check(task, sandboxes.as_ref(), reward.as_ref()).await;
                let line = match &outcome {
                    Ok(r) if r["score"] == json!(1.0) => format!("ok {}", task.id),
                    Ok(r) => format!("broken {}: scored {}", task.id, r["score"]),
                    Err(e) => format!("broken {}: {e}", task.id),
                };
                println!("{line}");
                match outcome {
                    Ok(mut r) => {
                        r["task"] = json!(task.id);
                        r
                    }
                    Err(e) => json!({"task": task.id, "error": e}),
                }
            }
        });
        Ok(futures::stream::iter(checks)
            .buffered(args.concurrency)
            .collect()
            .await)
    })?;
    if let Some(out) = &args.out {
        let text = serde_json::to_string_pretty(&results)
            .map_err(|e| CliError::runtime(format!("encoding the results: {e}")))?;
        std::fs::write(out, text)
            .map_err(|e| CliError::runtime(format!("writing {}: {e}", out.display())))?;
    }
    let broken = results
        .iter()
        .filter(|r| r.get("score") != Some(&json!(1.0)))
        .count();
    if broken > 0 {
        return Err(CliError::runtime(format!(
            "{broken} of {} tasks are broken: their oracle does not score 1",
            results.len()
        )));
    }
    Ok(())
}

/// One task: a fresh sandbox, the solution, the verifier; `{score, rewards, oracle}`.
async fn check(
    task: &Task,
    sandboxes: &dyn uniagent_core::runner::SandboxFactory,
    reward: &dyn uniagent_core::RewardSpec,
) -> std::result::Result<Value, String> {
    let dir = task.metadata[HARBOR_DIR_FIELD]
        .as_str()
        .map(PathBuf::from)
        .ok_or("no task directory")?;
    let harbor = HarborTask::load(&dir).map_err(|e| e.to_string())?;
    let sandbox: Arc<dyn Deployment> =
        Arc::from(sandboxes.create(task).map_err(|e| e.to_string())?);
    sandbox
        .start()
        .await
        .map_err(|e| format!("starting the sandbox: {e}"))?;
    let outcome = async {
        let solved = run_solution(&sandbox, &harbor)
            .await
            .map_err(|e| e.to_string())?;
        let ctx = RewardContext {
            task,
            messages: &[],
            signal: None,
            deployment: Some(&sandbox),
        };
        let scored = reward.score(&ctx).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(json!({
            "score": scored.score,
            "rewards": scored.details.get("rewards"),
            "oracle": {"exit_code": solved.exit_code, "timed_out": solved.timed_out,
                       "output": solved.output},
        }))
    }
    .await;
    if let Err(e) = sandbox.stop().await {
        eprintln!("warning: stopping the sandbox of {}: {e}", task.id);
    }
    outcome
}
