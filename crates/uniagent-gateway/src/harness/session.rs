//! One harness session: a work directory, the harness process, the reward, the chains.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
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
    // Opened before the harness starts: a reward it posts without asking the model is kept.
    if let Err(e) = ctx.gateway.open(&id) {
        return Ok(vec![failed(task, sample, format!("harness session: {e}"))]);
    }
    let (work, task_file) = match work_dir(task) {
        Ok(prepared) => prepared,
        Err(why) => return Ok(vec![failed(task, sample, why)]),
    };
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
    let reward = match (&ctx.config.reward, &ended) {
        (_, Ended::TimedOut) => RewardState::Given,
        (HarnessReward::Route, Ended::Exited(status)) => RewardState::Missing(format!(
            "the harness posted no reward ({status}): {}",
            process::tail(&harness_log, LOG_TAIL)
        )),
        (HarnessReward::Command(argv), Ended::Exited(status)) => {
            let status = status.to_string();
            reward_command(ctx, &id, argv, cwd, &env, work.path(), &status).await?
        }
    };
    let posted = ctx.gateway.session_reward(&id).await;
    let records = ctx
        .gateway
        .end(&id)
        .await
        .map_err(|e| CoreError::internal(format!("harness session `{id}`: {e}")))?;
    let mut out: Vec<Trajectory> = records
        .into_iter()
        .enumerate()
        .map(|(chain, record)| chain_trajectory(task, sample, chain, record))
        .collect();
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
    let verdict = match ended {
        Ended::TimedOut => Some((
            ExitReason::WallClockTimeout,
            format!(
                "the harness ran past {:?}: {}",
                ctx.config.timeout,
                process::tail(&harness_log, LOG_TAIL)
            ),
        )),
        Ended::Exited(_) => verdict(reward, posted.is_some()),
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

/// A fresh work directory holding the task as `task.json`; `Err` says why there is none.
fn work_dir(task: &Task) -> Result<(tempfile::TempDir, PathBuf), String> {
    let work = tempfile::Builder::new()
        .prefix("uniagent-harness-")
        .tempdir()
        .map_err(|e| format!("creating the work directory: {e}"))?;
    let task_file = work.path().join("task.json");
    let task_json = serde_json::to_vec_pretty(task).unwrap_or_default();
    std::fs::write(&task_file, task_json).map_err(|e| format!("writing the task file: {e}"))?;
    Ok((work, task_file))
}

/// How a session that ran to its end is judged: `None` keeps its chains' own exit reasons;
/// a failed reward command is a `reward_error` (trained with 0), a missing reward an
/// `internal_error` (dropped). A posted reward wins over a missing one.
fn verdict(reward: RewardState, posted: bool) -> Option<(ExitReason, String)> {
    match reward {
        RewardState::Failed(why) => Some((ExitReason::RewardError, why)),
        RewardState::Missing(why) if !posted => Some((ExitReason::InternalError, why)),
        RewardState::Missing(_) | RewardState::Given => None,
    }
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

/// What a session id keeps in its URL path segment: unreserved characters and `:`; the
/// gateway's router decodes the rest back.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':');

/// `s` as one URL path segment.
fn path_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
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
    fn a_posted_reward_wins_over_a_missing_one_but_not_over_a_failed_command() {
        let missing = || RewardState::Missing("no reward".into());
        assert_eq!(verdict(missing(), true), None);
        assert_eq!(
            verdict(missing(), false),
            Some((ExitReason::InternalError, "no reward".into()))
        );
        assert_eq!(verdict(RewardState::Given, false), None);
        let failed = verdict(RewardState::Failed("exit 1".into()), true);
        assert_eq!(failed, Some((ExitReason::RewardError, "exit 1".into())));
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
