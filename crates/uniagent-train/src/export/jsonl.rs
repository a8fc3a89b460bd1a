//! Reading `trajectories.jsonl`: the reader of the format's owner,
//! [`uniagent_core::formats::trajectories`], under the names this module has always had.

pub use uniagent_core::formats::trajectories::{
    read as read_jsonl, RecordLine as JsonlLine, RecordLines as JsonlLines,
};
