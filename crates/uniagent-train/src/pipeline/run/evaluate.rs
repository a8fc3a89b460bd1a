//! Demonstrations, SFT before RL, and held-out evaluations.

use std::sync::Arc;

use uniagent_core::agent::Trajectory;
use uniagent_core::runner::{RolloutPhase, RolloutSource};
use uniagent_core::{AgentLoopOutput, Error, Result, Task, TokenGenerator};

use crate::pipeline::tasks::TaskSource;

use super::Pipeline;

/// Held-out success and mean reward of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Evaluation {
    /// Share of episodes the reward calls solved.
    pub success: f64,
    /// Mean reward (missing = 0).
    pub reward: f64,
}

impl Pipeline {
    /// Runs `tasks` once each with `demonstrator` (e.g. a [`crate::pipeline::Demonstrator`]) through
    /// the real loop; fails unless every one succeeds. Returns them for [`Self::sft`].
    pub async fn demonstrations(
        &mut self,
        demonstrator: Arc<dyn TokenGenerator>,
        tasks: Vec<Task>,
    ) -> Result<Vec<Trajectory>> {
        let ts = self
            .spec
            .run(
                demonstrator,
                RolloutPhase::greedy(tasks, self.config.max_concurrent_rollouts),
            )
            .await?;
        self.records.trajectories("demonstration", 0, &ts)?;
        let failed: Vec<String> = ts
            .iter()
            .filter(|t| !t.is_success())
            .map(|t| format!("{} ({})", t.id, t.exit_reason))
            .collect();
        if !failed.is_empty() {
            return Err(Error::invalid_input(format!(
                "{} of {} demonstrations fail: {}",
                failed.len(),
                ts.len(),
                failed.join(", ")
            )));
        }
        Ok(ts)
    }

    /// Greedy rollouts of `tasks` with the engine's current weights (recorded as phase
    /// `eval` at `step`).
    pub async fn evaluate(&mut self, tasks: &[Task], step: usize) -> Result<Evaluation> {
        let e = self.evaluate_as("eval", tasks, step).await?;
        tracing::info!(
            step,
            success = e.success,
            reward = e.reward,
            "held-out evaluation"
        );
        Ok(e)
    }

    /// Greedy rollouts of `tasks`, recorded as phase `phase` at `step`.
    pub(in crate::pipeline) async fn evaluate_as(
        &mut self,
        phase: &str,
        tasks: &[Task],
        step: usize,
    ) -> Result<Evaluation> {
        self.commit_pending().await?;
        let ts = self
            .spec
            .run(
                self.generator.clone(),
                RolloutPhase::greedy(tasks.to_vec(), self.config.max_concurrent_rollouts),
            )
            .await?;
        self.records.trajectories(phase, step, &ts)?;
        let n = ts.len().max(1) as f64;
        Ok(Evaluation {
            success: ts.iter().filter(|t| t.is_success()).count() as f64 / n,
            reward: ts
                .iter()
                .map(|t| t.output.reward_score.unwrap_or(0.0))
                .sum::<f64>()
                / n,
        })
    }

    /// Demonstrations and SFT (when there are SFT tasks and steps), then the held-out
    /// evaluation before RL.
    pub(super) async fn sft_and_evaluate(
        &mut self,
        demonstrator: Arc<dyn TokenGenerator>,
        sft_tasks: Vec<Task>,
        source: &TaskSource,
        held_out: &[Task],
    ) -> Result<Evaluation> {
        if !sft_tasks.is_empty() && self.config.sft.steps > 0 {
            // Probed on tasks SFT does not train on (a policy solves the demonstrated ones from
            // memory long before it generalizes) and that are not held out: the RL tasks that
            // were not demonstrated.
            let demonstrated: std::collections::HashSet<&str> =
                sft_tasks.iter().map(|t| t.id.as_str()).collect();
            let probe: Vec<Task> = source
                .tasks()
                .iter()
                .filter(|t| !demonstrated.contains(t.id.as_str()))
                .cloned()
                .collect();
            let demos = self.demonstrations(demonstrator, sft_tasks).await?;
            let rows: Vec<AgentLoopOutput> = demos.into_iter().map(|t| t.output).collect();
            self.sft_to_target(&rows, &probe).await?;
        }
        self.evaluate(held_out, 0).await
    }
}
