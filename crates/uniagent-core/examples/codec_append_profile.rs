//! A release harness for counting the instructions of `Codec::append_messages` under
//! callgrind (and timing it): the bench's Qwen3 conversation (one tool, tool-calling turns), 100 appends.
//!
//! ```text
//! cargo build --release -p uniagent-core --example codec_append_profile
//! valgrind --tool=callgrind --toggle-collect='*Codec*append_messages*' \
//!     target/release/examples/codec_append_profile
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use uniagent_core::codec::Codec;
use uniagent_core::{LengthLimits, Message, Result, ToolSpec};

fn main() -> Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers/qwen3");
    let codec = Codec::from_dir(dir)?;
    let tool = ToolSpec::function(
        "bash",
        "Run a command.",
        json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    );
    let messages = vec![
        Message::system("You are a coding agent."),
        Message::user("Fix the failing test."),
    ];
    let mut cache = codec.start(
        "profile",
        messages,
        vec![tool],
        Default::default(),
        LengthLimits::default(),
    )?;
    let appends: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let mut timed = Duration::ZERO;
    for turn in 0..appends {
        let text = format!(
            "<think>\nLook at file {turn}.\n</think>\n\n<tool_call>\n{{\"name\": \"bash\", \"arguments\": {{\"command\": \"cat file_{turn}.py\"}}}}\n</tool_call><|im_end|>"
        );
        let ids = codec.encode(&text)?;
        codec.append_sampled(&mut cache, &ids, &vec![-0.5; ids.len()], Some(0))?;
        let obs = Message::tool(
            "call_0",
            format!("total 12\n-rw-r--r-- 1 root root 42 file_{turn}.py\nexit code: 0"),
        );
        let start = Instant::now();
        codec.append_messages(&mut cache, &[obs])?;
        timed += start.elapsed();
    }
    let len = cache.tokens().map_or(0, |t| t.all_ids().len());
    let mean = timed.as_secs_f64() * 1e6 / appends.max(1) as f64;
    println!("{appends} appends, {len} tokens, {mean:.1} µs per append");
    Ok(())
}
