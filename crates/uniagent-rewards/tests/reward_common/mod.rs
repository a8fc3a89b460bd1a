//! Shared helpers of the tests that score rewards on real sandboxes: the built sandbox server,
//! and scoring an episode that ended with `submit`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use uniagent_core::{
    Deployment, DeploymentExt, EpisodeSignal, RewardContext, RewardOutcome, RewardSpec, Task,
};

/// The built `uniagent-sandbox` server of the host backend, or `None` (with the reason printed)
/// when it is not built and the suite does not require it.
pub fn server_binary() -> Option<PathBuf> {
    match uniagent_sandboxes::host::find_server_binary(None) {
        Ok(path) => Some(path),
        // `cargo test --workspace` builds the server next to this test; `-p` alone may not.
        Err(e) if std::env::var_os("UNIAGENT_SWEREX_VENV").is_none() => {
            eprintln!("SKIPPED: {e} (build it with `cargo build -p uniagent-sandboxes --features server --bin uniagent-sandbox`)");
            None
        }
        Err(e) => {
            panic!("scripts/test builds the whole workspace, so the server must be there: {e}")
        }
    }
}

/// Runs `script` in `d` (30 s at most), which must exit 0, and returns its stdout.
pub async fn sh(d: &Arc<dyn Deployment>, script: &str) -> String {
    let out = d.sh(script, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        out.exit_code,
        Some(0),
        "{script}: {} {}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// `reward`'s score for `task` after an episode that ended with `submit` in the agent's sandbox
/// `agent`.
pub async fn score_submission(
    reward: &dyn RewardSpec,
    task: &Task,
    agent: &Arc<dyn Deployment>,
) -> uniagent_core::Result<RewardOutcome> {
    let signal = EpisodeSignal::Submit {
        patch: String::new(),
    };
    let ctx = RewardContext {
        task,
        messages: &[],
        signal: Some(&signal),
        deployment: Some(agent),
    };
    reward.score(&ctx).await
}
