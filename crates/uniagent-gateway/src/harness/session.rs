//! One harness session: a work directory, the harness process, the reward, the chains.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use uniagent_core::agent::{ExitReason, Trajectory};
use uniagent_core::{Error as CoreError, Result as CoreResult, RewardOutcome, Task};

use super::config::{HarnessConfig, HarnessReward};
use super::process::{self, Ended, Launch};
use crate::gateway::Gateway;
use crate::server::parse_reward;

/// Bytes of a log kept in a trajectory's `error`.
const LOG_TAIL: usize = 2000;

/// What every session of a phase shares.
#[derive(Debug)]
pub(super) struct Context {
    pub config: HarnessConfig,
    pub gateway: Arc<Gateway>,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

/// Why a session has no usable reward, when it has none.
enum RewardState {
    /// Posted by the harness or printed by the reward command.
    Given,
    /// The reward command failed: trained with 0 (`reward_error`).
    Failed(String),
    /// Nobody gave one: an infrastructure failure (`internal_error`, dropped).
    Missing(String),
}

/// Runs session `<task id>:<sample>`; `Err` only when the harness or reward command cannot be
/// started at all (a configuration error that would fail every session alike).
pub(super) async fn run(ctx: &Context, task: &Task, sample: u32) -> CoreResult<Vec<Trajectory>> {
    let started = Instant::now();
    let id = format!("{}:{sample}", task.id);
    let work = match tempfile::Builder::new()
        .prefix("uniagent-harness-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(e) => {
            return Ok(vec![failed(
                task,
                sample,
                format!("creating the work directory: {e}"),
            )])
        }
    };
    let task_file = work.path().join("task.json");
    let task_json = serde_json::to_vec_pretty(task).unwrap_or_default();
    if let Err(e) = std::fs::write(&task_file, task_json) {
        return Ok(vec![failed(
            task,
            sample,
            format!("writing the task file: {e}"),
        )]);
    }
    let env = environment(ctx, &id, &task_file, work.path());
    let cwd = ctx.config.cwd.as_deref().unwrap_or(work.path());
    let harness_log = work.path().join("harness.log");
    let ended = process::run(Launch {
        argv: &ctx.config.command,
        cwd,
        env: &env,
        stdout: work.path().join("harness.out"),
        log: harness_log.clone(),
        timeout: ctx.config.timeout,
    })
    .await
    .map_err(|e| {
        CoreError::invalid_input(format!(
            "harness: cannot start `{}`: {e}",
            ctx.config.command.join(" ")
        ))
    })?;
    let timed_out = matches!(ended, Ended::TimedOut);
    let status = match &ended {
        Ended::Exited(s) => s.to_string(),
        Ended::TimedOut => format!("killed after {:?}", ctx.config.timeout),
    };
    let reward = match (&ctx.config.reward, timed_out) {
        (_, true) => RewardState::Given,
        (HarnessReward::Route, false) => RewardState::Missing(format!(
            "the harness posted no reward ({status}): {}",
            process::tail(&harness_log, LOG_TAIL)
        )),
        (HarnessReward::Command(argv), false) => {
            reward_command(ctx, &id, argv, cwd, &env, work.path(), &status).await?
        }
    };
    let posted = ctx.gateway.session_reward(&id).await;
    let records = ctx
        .gateway
        .end(&id)
        .await
        .map_err(|e| CoreError::internal(format!("harness session `{id}`: {e}")))?;
    let mut out = Vec::with_capacity(records.len().max(1));
    for (chain, record) in records.into_iter().enumerate() {
        out.push(chain_trajectory(task, sample, chain, record));
    }
    if out.is_empty() {
        // The harness never asked the model: nothing to train on, but the outcome counts.
        let mut t = Trajectory::empty(
            &task.id,
            sample,
            task.messages.clone(),
            ExitReason::Finished,
            None,
        );
        t.output.reward_score = posted.as_ref().map(|r| r.score);
        t.reward = posted.clone();
        out.push(t);
    }
    let verdict = match (timed_out, posted.is_some(), reward) {
        (true, _, _) => Some((
            ExitReason::WallClockTimeout,
            format!(
                "the harness ran past {:?}: {}",
                ctx.config.timeout,
                process::tail(&harness_log, LOG_TAIL)
            ),
        )),
        (false, _, RewardState::Failed(why)) => Some((ExitReason::RewardError, why)),
        (false, false, RewardState::Missing(why)) => Some((ExitReason::InternalError, why)),
        (false, true, _) | (false, false, RewardState::Given) => None,
    };
    let wall = started.elapsed().as_secs_f64();
    for t in &mut out {
        t.timings.total = wall;
        if let Some((reason, why)) = &verdict {
            let masked = t.masked;
            t.set_exit(*reason, masked);
            t.error = Some(why.clone());
        }
    }
    Ok(out)
}

/// The harness's environment (see [`HarnessConfig`]).
fn environment(ctx: &Context, id: &str, task_file: &Path, work: &Path) -> Vec<(String, String)> {
    let session = format!("{}/sessions/{}", ctx.base, path_segment(id));
    let mut env = vec![
        ("OPENAI_BASE_URL".to_owned(), format!("{session}/v1")),
        ("ANTHROPIC_BASE_URL".to_owned(), session.clone()),
        ("OPENAI_API_KEY".to_owned(), "uniagent".to_owned()),
        ("ANTHROPIC_API_KEY".to_owned(), "uniagent".to_owned()),
        ("UNIAGENT_GATEWAY".to_owned(), session),
        ("UNIAGENT_SESSION".to_owned(), id.to_owned()),
        (
            "UNIAGENT_MODEL".to_owned(),
            ctx.gateway.config().model_name.clone(),
        ),
        (
            "UNIAGENT_TASK".to_owned(),
            task_file.to_string_lossy().into_owned(),
        ),
        (
            "UNIAGENT_WORKDIR".to_owned(),
            work.to_string_lossy().into_owned(),
        ),
    ];
    env.extend(ctx.config.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Runs the reward command and records what it prints on the session.
async fn reward_command(
    ctx: &Context,
    id: &str,
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    work: &Path,
    harness_status: &str,
) -> CoreResult<RewardState> {
    let mut env = env.to_vec();
    env.push(("UNIAGENT_HARNESS_STATUS".into(), harness_status.into()));
    let (stdout, log) = (work.join("reward.out"), work.join("reward.log"));
    let ended = process::run(Launch {
        argv,
        cwd,
        env: &env,
        stdout: stdout.clone(),
        log: log.clone(),
        timeout: ctx.config.timeout,
    })
    .await
    .map_err(|e| {
        CoreError::invalid_input(format!(
            "harness: cannot start the reward command `{}`: {e}",
            argv.join(" ")
        ))
    })?;
    let fail = |what: String| {
        Ok(RewardState::Failed(format!(
            "the reward command {what}: {}",
            process::tail(&log, LOG_TAIL)
        )))
    };
    match ended {
        Ended::TimedOut => return fail(format!("ran past {:?}", ctx.config.timeout)),
        Ended::Exited(s) if !s.success() => return fail(format!("failed ({s})")),
        Ended::Exited(_) => {}
    }
    let printed = std::fs::read_to_string(&stdout).unwrap_or_default();
    let Some(line) = printed.lines().rev().find(|l| !l.trim().is_empty()) else {
        return fail("printed nothing".into());
    };
    let outcome = match parse_reward_line(line.trim()) {
        Ok(outcome) => outcome,
        Err(e) => return fail(format!("printed `{}`, not a reward ({e})", line.trim())),
    };
    match ctx.gateway.reward(id, outcome).await {
        Ok(()) => Ok(RewardState::Given),
        Err(e) => fail(format!("gave an unusable reward: {e}")),
    }
}

/// A reward line: the `reward` route's JSON body, or a bare number (success when > 0).
fn parse_reward_line(line: &str) -> Result<RewardOutcome, String> {
    if let Ok(score) = line.parse::<f64>() {
        return Ok(RewardOutcome {
            score,
            success: score > 0.0,
            details: Default::default(),
        });
    }
    parse_reward(line.as_bytes()).map_err(|e| e.to_string())
}

/// A chain record as the trajectory of task `task`, sample `sample` (chain 0 keeps the
/// rollout id `<task>:<sample>`, later chains get `<task>:<sample>.<chain>`).
fn chain_trajectory(task: &Task, sample: u32, chain: usize, record: Value) -> Trajectory {
    match serde_json::from_value::<Trajectory>(record) {
        Ok(mut t) => {
            t.task_id = task.id.clone();
            t.sample = sample;
            t.id = match chain {
                0 => format!("{}:{sample}", task.id),
                k => format!("{}:{sample}.{k}", task.id),
            };
            t
        }
        Err(e) => failed(task, sample, format!("reading chain {chain} back: {e}")),
    }
}

/// An infrastructure failure before anything was sampled (dropped from training).
fn failed(task: &Task, sample: u32, why: String) -> Trajectory {
    let mut t = Trajectory::empty(
        &task.id,
        sample,
        task.messages.clone(),
        ExitReason::InternalError,
        Some(why),
    );
    t.output
        .extra_fields
        .insert("harness".into(), json!({"failed": true}));
    t
}

/// `s` as one URL path segment (unreserved characters and `:` kept, the rest
/// percent-encoded; the gateway's router decodes it back).
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_become_one_path_segment() {
        assert_eq!(path_segment("file-0001:3"), "file-0001:3");
        assert_eq!(path_segment("a/b c%"), "a%2Fb%20c%25");
        assert_eq!(path_segment("é"), "%C3%A9");
    }

    #[test]
    fn reward_lines_are_numbers_or_route_bodies() {
        assert_eq!(parse_reward_line("1").unwrap().score, 1.0);
        assert!(!parse_reward_line("0.0").unwrap().success);
        let r = parse_reward_line(r#"{"score": 0.5, "success": false}"#).unwrap();
        assert_eq!((r.score, r.success), (0.5, false));
        assert!(parse_reward_line("solved").is_err());
        assert!(parse_reward_line(r#"{"score": 1, "extra": 2}"#).is_err());
    }
}
