//! Handing rollouts to other trainers (feature `parquet`): [`verl`] writes trajectories as a
//! Parquet file with verl's `AgentLoopOutput` columns, for runs that outgrow one machine and
//! train with verl on Ray while rollouts keep running through uniagent's loop, sandboxes and
//! rewards; [`read_jsonl`] reads the `trajectories.jsonl` that `uniagent run`, `uniagent
//! train` and the pipeline write.

mod columns;
mod jsonl;
pub mod verl;

pub use jsonl::{read_jsonl, JsonlLine, JsonlLines};
