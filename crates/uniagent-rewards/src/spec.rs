//! The one [`RewardSpec`](uniagent_core::RewardSpec) implementation of the rewards whose
//! work is an inherent `outcome` returning [`RewardError`](crate::RewardError).

/// Implements `RewardSpec` for `$reward` under `$name`: `score` is `outcome`, with the
/// reward's typed error turned into the core error that names the reward.
macro_rules! forward_reward_spec {
    ($reward:ty, $name:literal) => {
        #[async_trait::async_trait]
        impl uniagent_core::RewardSpec for $reward {
            fn name(&self) -> &str {
                $name
            }

            async fn score(
                &self,
                ctx: &uniagent_core::RewardContext<'_>,
            ) -> uniagent_core::Result<uniagent_core::RewardOutcome> {
                self.outcome(ctx).await.map_err(|e| e.into_core($name))
            }
        }
    };
}

pub(crate) use forward_reward_spec;
