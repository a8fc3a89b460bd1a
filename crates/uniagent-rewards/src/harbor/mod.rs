//! Harbor tasks (the Terminal-Bench 2 format): a directory with `task.toml`, `instruction.md`,
//! `environment/Dockerfile`, `tests/test.sh` and optionally `solution/solve.sh`.
//!
//! [`HarborTask::load`] reads and checks one; [`HarborVerifier`] is its reward: `test.sh` run in
//! the agent's sandbox, or in a fresh one holding the agent's final working directory
//! ([`HarborVerifier::verify_separate`]), scored by `/logs/verifier/reward.json` or `reward.txt`
//! ([`rewards_from_files`]); [`run_solution`] runs its `solution/solve.sh` as Harbor's oracle.
//! What uniagent does not run (multi-step tasks, compose environments, Windows, a network
//! allowlist) is refused at load with a typed error.

mod config;
mod oracle;
mod reward_file;
mod task;
mod verifier;

pub use config::{
    resolve_env, AgentSection, EnvironmentSection, PackageInfo, SolutionSection, TaskConfig,
    VerifierMode, VerifierSection,
};
pub use oracle::{run_solution, OracleRun, DEFAULT_ORACLE_TIMEOUT, ORACLE_OUTPUT};
pub use reward_file::{
    primary_score, rewards_from_files, RewardFileError, REWARD_DIR, REWARD_JSON, REWARD_KEY,
    REWARD_TXT,
};
pub use task::{strip_canary, HarborTask, HarborTaskError, VerifierImage};
pub use verifier::{HarborVerifier, HARBOR_DIR_FIELD, TEST_OUTPUT};
