//! [`WeightSync`]: how the trainer's weights reach the generation side.

use async_trait::async_trait;
use uniagent_core::Result;

use crate::generate::TchEngine;
use crate::model::Qwen2ForCausalLM;

/// Moves the trained policy to whatever generates the rollouts, in two steps so that no
/// borrow of the policy is held across an await: [`stage`](Self::stage) takes the weights (a
/// copy in memory, or a Hugging Face checkpoint on disk for an inference server), then
/// [`commit`](Self::commit) makes the generator use them (an HTTP server's reload endpoint,
/// with generation paused around it) and returns the weight version its tokens now carry.
///
/// The in-process [`TchEngine`] copies the parameters at `stage`, between decoding batches
/// (rollouts in flight continue with the new weights); its `commit` only reports the version.
#[async_trait]
pub trait WeightSync: Send + Sync {
    /// A short name for logs.
    fn name(&self) -> &str;

    /// The version the generator currently reports.
    fn version(&self) -> u64;

    /// Takes `policy`'s weights.
    fn stage(&self, policy: &Qwen2ForCausalLM) -> Result<()>;

    /// Makes the generator use the staged weights; returns the new version.
    async fn commit(&self) -> Result<u64>;
}

#[async_trait]
impl WeightSync for TchEngine {
    fn name(&self) -> &str {
        "tch-engine"
    }

    fn version(&self) -> u64 {
        self.weight_version()
    }

    fn stage(&self, policy: &Qwen2ForCausalLM) -> Result<()> {
        self.update_weights(policy).map(|_| ())
    }

    async fn commit(&self) -> Result<u64> {
        Ok(self.weight_version())
    }
}
