//! The library side of `uniagent run`: config + dataset + environment + model → Runner →
//! output directory. [`prepare`] does everything that can fail on bad input without starting
//! anything; [`execute`] checks prerequisites (endpoint, images) and runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use uniagent_core::agent::{CancellationToken, ExitReason, LoopConfig};
use uniagent_core::cassette::Recorder;
use uniagent_core::layer::With;
use uniagent_core::runner::{ProgressEvent, Runner, RunnerConfig};
use uniagent_core::telemetry::RunLabels;
use uniagent_core::{ChatModel, Task};

use crate::config::{ConfigDoc, RunConfig};
use crate::dataset::load_tasks;
use crate::env::{check_tasks, Environment, EnvironmentRegistry, RolloutParts};
use crate::error::{CliError, Result};
use crate::model::VersionLog;
use crate::output::{CassetteRun, OutputDir, RunSummary, TrajectoryFile};
use crate::progress::Progress;

/// Command-line settings that override the config.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// `--set KEY=VALUE` overrides, in order.
    pub overrides: Vec<String>,
    /// `--out DIR`.
    pub out: Option<PathBuf>,
    /// `--limit N`: only the first N tasks.
    pub limit: Option<usize>,
    /// `--concurrency N`: rollouts (and sandbox starts) at once.
    pub concurrency: Option<usize>,
    /// Draw progress bars on stderr.
    pub progress: bool,
}

/// A validated run: config, environment, tasks. Nothing has started.
#[derive(Debug)]
pub struct Prepared {
    /// The document (file plus overrides).
    pub doc: ConfigDoc,
    /// The decoded configuration.
    pub config: RunConfig,
    /// The environment.
    pub environment: Box<dyn Environment>,
    /// The tasks, checked against the environment.
    pub tasks: Vec<Task>,
    /// The output directory.
    pub out: PathBuf,
}

impl Prepared {
    /// The loop configuration with the environment's adjustments.
    pub fn loop_config(&self) -> LoopConfig {
        let mut config = self.config.loop_config.clone();
        self.environment.configure_loop(&mut config);
        config
    }

    /// The pieces a rollout needs (for the training pipeline): tools, reward, sandbox
    /// factory, loop and runner configuration.
    pub fn rollout_parts(&self) -> Result<(RolloutParts, LoopConfig, RunnerConfig)> {
        Ok((
            self.environment.parts()?,
            self.loop_config(),
            self.config.runner.clone(),
        ))
    }
}

/// Reads and checks the config, the environment and the dataset (exit 2 on any problem).
pub fn prepare(
    config: &Path,
    options: &RunOptions,
    registry: &EnvironmentRegistry,
) -> Result<Prepared> {
    let (doc, run, environment) = configure(config, options, registry)?;
    let limit = options.limit.or(run.tasks.limit);
    let Some(tasks) = config_tasks(&doc, &run, environment.as_ref(), limit)? else {
        return Err(doc.error_at(
            &["tasks".into()],
            "set `path` (a dataset file) or `generate` (tasks made by the environment)",
        ));
    };
    if tasks.is_empty() {
        return Err(doc.error_at(&["tasks".into()], "there are no tasks to run"));
    }
    let out = options
        .out
        .clone()
        .or_else(|| run.output.dir.clone())
        .unwrap_or_else(|| {
            let stem = config
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "run".into());
            PathBuf::from("runs").join(stem)
        });
    Ok(Prepared {
        doc,
        config: run,
        environment,
        tasks,
        out,
    })
}

/// Reads and checks the config (with `options`' overrides and concurrency) and builds the
/// environment it names; reads no tasks.
pub(crate) fn configure(
    config: &Path,
    options: &RunOptions,
    registry: &EnvironmentRegistry,
) -> Result<(ConfigDoc, RunConfig, Box<dyn Environment>)> {
    let doc = ConfigDoc::load(config, &options.overrides)?;
    let mut run = RunConfig::from_doc(&doc)?;
    if let Some(n) = options.concurrency {
        if n == 0 {
            return Err(CliError::config("--concurrency", "", "must be at least 1"));
        }
        run.runner.max_concurrent_rollouts = n;
        run.runner.max_concurrent_sandbox_starts = run.runner.max_concurrent_sandbox_starts.min(n);
        run.runner.max_concurrent_model_calls = run.runner.max_concurrent_model_calls.max(n);
    }
    if run.output.cassettes && run.model.backend() == "openai" {
        return Err(doc.error_at(
            &["output".into(), "cassettes".into()],
            "cassettes record token ids: use a token-level model (vllm, sglang or tch), not `openai`",
        ));
    }
    let environment = registry.build(&doc)?;
    Ok((doc, run, environment))
}

/// The tasks of the config's `tasks:` section (a dataset file, or tasks the environment
/// generates), at most `limit`, checked against the environment; `None` when the section names
/// neither.
pub(crate) fn config_tasks(
    doc: &ConfigDoc,
    run: &RunConfig,
    environment: &dyn Environment,
    limit: Option<usize>,
) -> Result<Option<Vec<Task>>> {
    let from_files = run.tasks.path.is_some() || run.tasks.harbor.is_some();
    let tasks = match (from_files, &run.tasks.generate) {
        (true, _) => load_tasks(&run.tasks, limit)?,
        (false, Some(spec)) => {
            let mut tasks = environment
                .generate_tasks(spec)
                .map_err(|m| doc.error_at(&["tasks".into(), "generate".into()], m))?;
            if let Some(n) = limit {
                tasks.truncate(n);
            }
            tasks
        }
        (false, None) => return Ok(None),
    };
    check_tasks(environment, &tasks)?;
    Ok(Some(tasks))
}

/// Which rollouts still have to run.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan {
    /// Tasks none of whose samples finished: run with every sample.
    pub(crate) full: Vec<Task>,
    /// Tasks with some samples finished: the missing sample indices.
    pub(crate) partial: Vec<(Task, Vec<u32>)>,
    /// Rollouts already finished.
    pub(crate) done: usize,
}

impl Plan {
    /// The plan for `tasks` × `samples` given the finished pairs.
    pub(crate) fn new(tasks: &[Task], samples: u32, finished: &BTreeSet<(String, u32)>) -> Self {
        let mut plan = Plan::default();
        for task in tasks {
            let missing: Vec<u32> = (0..samples)
                .filter(|s| !finished.contains(&(task.id.clone(), *s)))
                .collect();
            plan.done += (samples as usize) - missing.len();
            if missing.len() == samples as usize {
                plan.full.push(task.clone());
            } else if !missing.is_empty() {
                plan.partial.push((task.clone(), missing));
            }
        }
        plan
    }

    /// Rollouts to run.
    pub(crate) fn remaining(&self, samples: u32) -> usize {
        self.full.len() * samples as usize
            + self.partial.iter().map(|(_, m)| m.len()).sum::<usize>()
    }
}

/// Runs a prepared run into its output directory. `model` replaces the config's model (tests,
/// benches); otherwise the config's is built and its endpoints checked first. Cancelling
/// `cancel` stops cleanly: finished rollouts are kept, every sandbox is stopped, and the run
/// ends with [`CliError::Interrupted`].
pub async fn execute(
    prepared: &Prepared,
    model: Option<Arc<dyn ChatModel>>,
    cancel: &CancellationToken,
    options: &RunOptions,
) -> Result<RunSummary> {
    let started = Instant::now();
    let recorder = prepared.config.output.cassettes.then(Recorder::new);
    let (model, versions): (Arc<dyn ChatModel>, Option<Arc<VersionLog>>) = match model {
        Some(_) if recorder.is_some() => {
            return Err(prepared.doc.error_at(
                &["output".into(), "cassettes".into()],
                "cassettes record the config's model; this run was given another one",
            ))
        }
        Some(m) => (m, None),
        None => {
            let built = prepared.config.model.build_recording(recorder.as_ref())?;
            prepared.config.model.check_reachable().await?;
            built
        }
    };
    prepared.environment.preflight(&prepared.tasks).await?;

    let out = OutputDir::create(&prepared.out)?;
    out.write_config(prepared.doc.value())?;
    let samples = prepared.config.runner.samples_per_task;
    let finished = out.finished()?;
    let plan = Plan::new(&prepared.tasks, samples, &finished);
    let remaining = plan.remaining(samples);

    let mut parts = prepared.environment.parts()?;
    if let Some(recorder) = &recorder {
        parts.tools = parts.tools.into_iter().map(|t| t.with(recorder)).collect();
    }
    let agent = parts
        .agent(Arc::clone(&model), prepared.loop_config())
        .map_err(|e| prepared.doc.error_at(&["loop".into()], e))?;

    let progress = Progress::new(remaining as u64, plan.done as u64, options.progress);
    let mut sink = out.sink(model.capabilities().token_level, versions)?;
    for (task, missing) in &plan.partial {
        sink.remap_samples(&task.id, missing.clone());
    }
    let hook = progress.clone();
    sink.on_write(move |line| hook.finished(line));
    if let Some(recorder) = recorder {
        sink.record_cassettes(
            &out,
            CassetteRun {
                recorder,
                tasks: prepared.tasks.clone(),
                tools: agent.tool_specs().to_vec(),
                loop_config: agent.config().clone(),
                generator: model.name().to_owned(),
                context: cassette_context(prepared)?,
            },
        )?;
    }

    let mut batches: Vec<(Vec<Task>, u32)> = Vec::new();
    if !plan.full.is_empty() {
        batches.push((plan.full.clone(), samples));
    }
    if !plan.partial.is_empty() {
        let copies = plan
            .partial
            .iter()
            .flat_map(|(t, m)| std::iter::repeat_n(t.clone(), m.len()))
            .collect();
        batches.push((copies, 1));
    }
    let errors: Arc<Mutex<BTreeMap<ExitReason, u64>>> = Arc::default();
    for (tasks, samples_per_task) in batches {
        if cancel.is_cancelled() {
            break;
        }
        let runner_config = RunnerConfig {
            samples_per_task,
            ..prepared.config.runner.clone()
        };
        let labels = RunLabels::new(prepared.environment.name(), "run");
        let mut runner = parts
            .runner(agent.clone(), runner_config, labels)
            .map_err(|e| prepared.doc.error_at(&["runner".into()], e))?;
        let p = progress.clone();
        let errs = Arc::clone(&errors);
        runner = runner.with_progress(move |event| {
            if let ProgressEvent::Started { .. } = event {
                p.started();
            }
            if let ProgressEvent::Finished { exit_reason, .. } = event {
                if let Ok(mut e) = errs.lock() {
                    *e.entry(*exit_reason).or_default() += 1;
                }
            }
        });
        run_batch(&runner, tasks, cancel, &mut sink).await?;
    }
    progress.done();
    let summary = out.write_summary(prepared.tasks.len(), started.elapsed().as_secs_f64())?;
    if cancel.is_cancelled() {
        return Err(CliError::Interrupted(format!(
            "{} rollouts finished and kept in {}; rerun the same command to resume",
            summary.rollouts,
            out.trajectories().display()
        )));
    }
    Ok(summary)
}

/// What `uniagent replay` rebuilds a run from: the effective configuration and the file it
/// came from (relative paths in it are resolved against that file's directory).
fn cassette_context(prepared: &Prepared) -> Result<serde_json::Value> {
    let file = std::path::absolute(prepared.doc.file()).map_err(|e| {
        CliError::runtime(format!("resolving {}: {e}", prepared.doc.file().display()))
    })?;
    Ok(serde_json::json!({
        "config": prepared.doc.value(),
        "config_file": file,
    }))
}

async fn run_batch(
    runner: &Runner,
    tasks: Vec<Task>,
    cancel: &CancellationToken,
    sink: &mut TrajectoryFile,
) -> Result<()> {
    runner
        .run(tasks, cancel, sink)
        .await
        .map(|_| ())
        .map_err(|e| CliError::runtime(format!("writing results: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_runs_exactly_the_missing_pairs() {
        let tasks: Vec<Task> = ["a", "b", "c"]
            .iter()
            .map(|id| Task::new(*id, vec![]))
            .collect();
        let finished: BTreeSet<(String, u32)> = [
            ("a".to_owned(), 0),
            ("a".to_owned(), 1),
            ("b".to_owned(), 1),
        ]
        .into_iter()
        .collect();
        let plan = Plan::new(&tasks, 2, &finished);
        assert_eq!(plan.done, 3);
        assert_eq!(plan.full.len(), 1);
        assert_eq!(plan.full[0].id, "c");
        assert_eq!(plan.partial.len(), 1);
        assert_eq!(plan.partial[0].1, vec![0]);
        assert_eq!(plan.remaining(2), 3);
    }
}
