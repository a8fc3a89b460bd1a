//! [`R2eInSandbox`]: R2E-Gym's reward as R2E-Gym computes it, in the agent's own sandbox.

use std::time::Duration;

use serde_json::json;
use uniagent_core::{RewardContext, RewardOutcome};

use super::instance::{task_row, SweInstance, TaskFormat};
use crate::error::RewardError;
use crate::r2e::{self, SummaryReading};
use crate::sandbox::{run, sandbox, shell_quote, timed_out, Run};

/// Runs an R2E-Gym task's hidden tests in the sandbox the agent used (its `run_tests.sh`, from
/// the repository or `/root`, with `r2e_tests` linked in from `/r2e_tests` or
/// `/root/r2e_tests` when missing) and compares the parsed map with `expected_output_json`
/// ([`crate::r2e`]). Cheap (no second sandbox), and as open to tampering as R2E-Gym's own
/// runtime: the agent controls that sandbox. Use [`FreshSandboxTests`](super::FreshSandboxTests)
/// where the agent may be adversarial.
#[derive(Debug, Clone)]
pub struct R2eInSandbox {
    /// How long the tests may run (past it the task scores 0).
    pub timeout: Duration,
    /// How the summary is read (default: [`SummaryReading::Strict`]).
    pub reading: SummaryReading,
}

impl Default for R2eInSandbox {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(300),
            reading: SummaryReading::Strict,
        }
    }
}

/// The shell that runs the hidden tests where R2E-Gym's runtime would find them.
const RUN_HIDDEN_TESTS: &str = r#"if [ ! -e r2e_tests ]; then
    if [ -d /r2e_tests ]; then ln -s /r2e_tests r2e_tests; elif [ -d /root/r2e_tests ]; then ln -s /root/r2e_tests r2e_tests; fi
fi
if [ -f /root/run_tests.sh ]; then exec bash /root/run_tests.sh; fi
if [ -f run_tests.sh ]; then exec bash run_tests.sh; fi
echo "no run_tests.sh" >&2; exit 127"#;

impl R2eInSandbox {
    async fn outcome(
        &self,
        ctx: &RewardContext<'_>,
    ) -> std::result::Result<RewardOutcome, RewardError> {
        let row = task_row(ctx.task);
        let instance = SweInstance::from_json(&row)?;
        let TaskFormat::R2eGym { expected } = &instance.format else {
            return Err(RewardError::BadMetadata {
                field: "expected_output_json".into(),
                message: "missing: not an R2E-Gym task".into(),
            });
        };
        let agent = sandbox(ctx)?;
        let script = format!(
            "cd {} && {RUN_HIDDEN_TESTS}",
            shell_quote(&instance.repo_dir)
        );
        let response = match run(agent, &script, None, self.timeout).await? {
            Run::Finished(r) => r,
            Run::TimedOut => return Ok(timed_out(self.timeout)),
        };
        let output = r2e::clean_output(&response.stdout);
        let parse = r2e::parse_log(&output, self.reading);
        if !parse.has_summary {
            return Err(RewardError::SetupFailed {
                step: "running the hidden tests".into(),
                exit_code: response.exit_code,
                output: crate::error::tail(&output, 2000),
            });
        }
        let comparison = r2e::compare(&parse.statuses, expected);
        Ok(RewardOutcome::binary(comparison.matches)
            .with_detail("statuses", json!(parse.statuses))
            .with_detail("comparison", json!(comparison))
            .with_detail("conflicting", json!(parse.conflicting))
            .with_detail("log_tail", json!(crate::error::tail(&output, 4000))))
    }
}

crate::spec::forward_reward_spec!(R2eInSandbox, "r2e_in_sandbox");
