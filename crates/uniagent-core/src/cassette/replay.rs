//! Replaying a [`Cassette`]: the same loop and codec over a generator and tools that answer
//! from the recorded steps, in order, stopping at the first [`Divergence`].

use std::sync::Arc;

use super::divergence::Divergence;
use super::tape::{replay_tool, ReplayGenerator, Tape};
use super::{Cassette, RecordedTrajectory};
use crate::agent::{CancellationToken, TokenChatModel, Trajectory};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::rollout::LengthLimits;
use crate::runner::{RolloutParts, RunnerConfig, SandboxFactory};
use crate::telemetry::RunLabels;
use crate::tool::Tool;

/// Where the tool observations of a replay come from.
#[derive(Clone)]
pub enum ToolMode {
    /// The recorded observations: no sandbox, no tool runs.
    Recorded,
    /// The real tools, run in a fresh sandbox per rollout; each result is compared with the
    /// recorded one (content, status and signal) and the first difference is a
    /// [`Divergence::Observation`].
    Live {
        /// The tools, as the recording run built them.
        tools: Vec<Arc<dyn Tool>>,
        /// The sandbox of each rollout (setup included), if the tools need one.
        sandboxes: Option<Arc<dyn SandboxFactory>>,
    },
}

impl std::fmt::Debug for ToolMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Recorded => f.write_str("Recorded"),
            Self::Live { tools, sandboxes } => f
                .debug_struct("Live")
                .field("tools", &tools.len())
                .field("sandboxes", &sandboxes.is_some())
                .finish(),
        }
    }
}

/// What a replay needs besides the cassette: the codec and length limits of the recording
/// model, and where observations come from.
#[derive(Debug, Clone)]
pub struct ReplaySetup {
    /// The recording model's codec (chat template, tokenizer, tool-call parser).
    pub codec: Arc<Codec>,
    /// The recording model's length limits.
    pub limits: LengthLimits,
    /// Recorded or live tools.
    pub tools: ToolMode,
}

/// The result of replaying one cassette.
#[derive(Debug, Clone)]
pub struct ReplayOutcome {
    /// The rebuilt trajectory.
    pub trajectory: Trajectory,
    /// The first divergence; `None` when the replay is identical token for token.
    pub divergence: Option<Divergence>,
}

/// Replays `cassette`: runs its task once through the loop (the cassette's loop configuration,
/// `setup`'s codec) with a generator answering the recorded outputs — each keyed by the exact
/// prompt ids — and the tools of `setup`, then compares the rebuilt token record with the
/// recorded one. The reward is not computed. `Err` is for a setup that cannot run (invalid
/// loop configuration, duplicate tool names); every difference is a [`Divergence`].
pub async fn replay(cassette: &Cassette, setup: ReplaySetup) -> Result<ReplayOutcome> {
    let tape = Arc::new(Tape::new(&cassette.steps));
    let generator = ReplayGenerator {
        name: cassette.generator.clone(),
        tape: Arc::clone(&tape),
    };
    let (tools, sandboxes): (Vec<Arc<dyn Tool>>, _) = match setup.tools {
        ToolMode::Recorded => (
            cassette
                .tools
                .iter()
                .map(|spec| replay_tool(spec.clone(), None, &tape))
                .collect(),
            None,
        ),
        ToolMode::Live { tools, sandboxes } => (
            tools
                .into_iter()
                .map(|t| replay_tool(t.spec(), Some(t), &tape))
                .collect(),
            sandboxes,
        ),
    };
    let model = TokenChatModel::new(Arc::new(generator), setup.codec, setup.limits);
    let parts = RolloutParts {
        tools,
        reward: None,
        sandboxes,
    };
    let agent = parts.agent(Arc::new(model), cassette.loop_config.clone())?;
    let runner = parts.runner(agent, RunnerConfig::default(), RunLabels::default())?;
    let mut out: Vec<Trajectory> = Vec::new();
    runner
        .run(
            vec![cassette.task.clone()],
            &CancellationToken::new(),
            &mut out,
        )
        .await?;
    let trajectory = out.pop().ok_or_else(|| Error::Internal {
        message: "the replay runner returned no trajectory".into(),
    })?;
    let divergence = tape.divergence().or_else(|| {
        cassette
            .trajectory
            .compare(&RecordedTrajectory::of(&trajectory))
    });
    let divergence = divergence.or_else(|| tape.leftover());
    Ok(ReplayOutcome {
        trajectory,
        divergence,
    })
}
