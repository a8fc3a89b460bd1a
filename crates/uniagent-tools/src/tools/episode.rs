//! `finish` and `submit`: the tools that end an episode.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::sandbox::Command;
use uniagent_core::{EpisodeSignal, Result, Tool, ToolContext, ToolOutput, ToolSpec};

/// Ends the episode with an answer (question answering, search QA).
#[derive(Debug, Clone, Copy, Default)]
pub struct Finish;

#[async_trait]
impl Tool for Finish {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "finish",
            "Give your final answer and end the task. Call this once, when you are confident; nothing can be done \
             after it. Put only the answer itself in `answer`, as short as the question allows.",
            json!({
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "The final answer."}},
                "required": ["answer"]
            }),
        )
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput> {
        let answer = match args.get("answer") {
            Some(Value::String(s)) => s.clone(),
            // A number or boolean is still an answer; keep its JSON spelling.
            Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
            _ => {
                return Ok(ToolOutput::failed(
                    "finish needs a string parameter `answer`.",
                ))
            }
        };
        Ok(ToolOutput::success(answer.clone()).with_signal(EpisodeSignal::Finish { answer }))
    }
}

/// Ends the episode by submitting the work: the diff of the repository's work tree (untracked
/// files included, `.gitignore`d ones not) against the task's base commit.
///
/// The repository is [`Submit::repo_dir`], else the task's metadata `repo_dir`, else
/// `/testbed`; the base is [`Submit::base_commit`], else metadata `base_commit`, else `HEAD`.
/// The diff is computed with a throw-away git index, so the agent's own index is untouched.
#[derive(Debug, Clone, Default)]
pub struct Submit {
    /// The repository in the sandbox.
    pub repo_dir: Option<String>,
    /// The commit the patch is taken against.
    pub base_commit: Option<String>,
    /// How long `git` may take (default: the tool call's timeout).
    pub timeout: Option<Duration>,
}

/// The script computing the patch: `$1` repository, `$2` base commit.
const DIFF_SCRIPT: &str = r#"set -e
cd "$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export GIT_INDEX_FILE="$tmp/index"
git read-tree "$2"
git add -A
git -c core.quotepath=off diff --cached --binary --no-color --no-ext-diff "$2""#;

impl Submit {
    fn setting(
        &self,
        configured: &Option<String>,
        ctx: &ToolContext,
        key: &str,
        default: &str,
    ) -> String {
        configured
            .clone()
            .or_else(|| {
                ctx.task
                    .metadata
                    .get(key)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| default.to_owned())
    }
}

#[async_trait]
impl Tool for Submit {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "submit",
            "Submit your changes to the repository and end the task. Everything you changed in the work tree, new \
             files included, is submitted as a patch. Call this once, when you are done and have checked your \
             work; nothing can be done after it.",
            json!({"type": "object", "properties": {}, "required": []}),
        )
    }

    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        let deployment = ctx.require_deployment("submit")?;
        let repo = self.setting(&self.repo_dir, ctx, "repo_dir", "/testbed");
        let base = self.setting(&self.base_commit, ctx, "base_commit", "HEAD");
        let timeout = self.timeout.unwrap_or(ctx.timeout).as_secs_f64();
        let argv = ["sh", "-c", DIFF_SCRIPT, "sh", repo.as_str(), base.as_str()];
        let response = deployment
            .execute(Command::argv(argv, Some(timeout)))
            .await?;
        if response.exit_code != Some(0) {
            return Ok(ToolOutput::failed(format!(
                "Could not compute the diff of {repo} against {base} (exit code {:?}); nothing was submitted:\n{}",
                response.exit_code,
                response.stderr.trim_end()
            )));
        }
        let patch = response.stdout;
        let files = patch
            .lines()
            .filter(|l| l.starts_with("diff --git "))
            .count();
        let summary = if files == 0 {
            "<<<Finished>>>\nSubmitted: no changes against the base commit.".to_owned()
        } else {
            format!("<<<Finished>>>\nSubmitted a patch touching {files} file(s).")
        };
        Ok(ToolOutput::success(summary).with_signal(EpisodeSignal::Submit { patch }))
    }
}
