//! Tamper-proof grading of SWE-style tasks: only the agent's diff leaves its sandbox; the tests
//! run in a fresh sandbox of the task image, with the dataset's own test patch, and are read
//! with the `swebench` package's rules ([`crate::swebench`]).
//!
//! - [`extract_patch`]: the agent's `git diff` against `base_commit`, binary-safe, computed
//!   without the agent's git config, hooks, filters, replace objects or index.
//! - [`grade_patch`]: one patch in one fresh sandbox → [`InstanceGrade`] (resolved,
//!   unresolved, empty patch, or an infrastructure [`InfraError`] kept apart from test
//!   failures).
//! - [`grade_predictions`]: a predictions file against a dataset, concurrently, with
//!   per-instance logs, resume and the harness's report ([`GradeReport`]).
//! - [`FreshSandboxTests`]: the same as a [`RewardSpec`](uniagent_core::RewardSpec) for
//!   training, scoring the rollout's sandbox by its diff alone.
//! - [`R2eInSandbox`]: R2E-Gym's reward run in the agent's own sandbox (cheap opt-in).

mod extract;
mod fresh;
mod instance;
mod r2e_in_sandbox;
mod report;
mod reward;
mod test_config;

pub use extract::{extract_patch, extract_patch_excluding};
pub use fresh::{
    grade_patch, head_and_tail, GradeOptions, InfraError, InstanceGrade, R2eReport, Verdict,
};
pub use instance::{load_dataset, load_predictions, Prediction, SweInstance, TaskFormat};
pub use r2e_in_sandbox::R2eInSandbox;
pub use report::{grade_predictions, sandbox_task, GradeReport, GradeRun};
pub use reward::FreshSandboxTests;
