#![doc = include_str!("../README.md")]

// The core at the root: the traits, messages, the loop (`agent`), the runner, rollouts, the
// codec, the parsers, configuration.
pub use uniagent_core::*;

/// Environments: the `Environment` trait, the registry, the built-in families, datasets
/// ([`uniagent_envs`]).
pub use uniagent_envs as envs;
/// Model backends over HTTP ([`uniagent_models`]).
pub use uniagent_models as models;
/// Rewards and grading ([`uniagent_rewards`]).
pub use uniagent_rewards as rewards;
/// Sandbox backends, the sandbox server's client and the pool ([`uniagent_sandboxes`]).
pub use uniagent_sandboxes as sandboxes;
/// The built-in tools ([`uniagent_tools`]).
pub use uniagent_tools as tools;
