//! The on-disk formats this crate owns, one module each: the file name, the version, the
//! JSON Schema (in `schemas/` of this crate), the one function writers build a line with, and
//! the reader, which accepts every earlier version.

pub mod cassettes;
mod jsonl;
pub mod trajectories;
