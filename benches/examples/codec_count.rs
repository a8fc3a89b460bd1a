//! Instruction counting for the codec's append and tokenizer, under callgrind (wall-clock is
//! too noisy on a loaded machine). One mode per run; collection only inside the measured
//! function, so set-up is not counted:
//!
//! ```text
//! cargo build --release -p uniagent-benches --example codec_count
//! valgrind --tool=callgrind --toggle-collect='*codec_count*measure*' \
//!     target/release/examples/codec_count append|native|tokenizers
//! ```
//!
//! `codec_count load` loads the codec only (time it, or count with
//! `--toggle-collect='*Codec*from_dir*'`).
//!
//! The total divided by the printed count is the cost of one append / one tokenization of
//! the appended text.

use std::hint::black_box;
use std::path::PathBuf;

use serde_json::json;
use uniagent_core::codec::Codec;
use uniagent_core::{LengthLimits, Message, RolloutCache, ToolSpec};

const N: usize = 100;

fn codec() -> Codec {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/uniagent-core/tests/fixtures/tokenizers/qwen3");
    Codec::from_dir(dir).unwrap_or_else(|e| panic!("loading the Qwen3 fixture: {e}"))
}

fn observation(turn: usize) -> Message {
    Message::tool(
        "call_0",
        format!("total 12\n-rw-r--r-- 1 root root 42 file_{turn}.py\nexit code: 0"),
    )
}

fn start(codec: &Codec) -> RolloutCache {
    let tool = ToolSpec::function(
        "bash",
        "Run a command.",
        json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    );
    let messages = vec![
        Message::system("You are a coding agent."),
        Message::user("Fix the failing test."),
    ];
    codec
        .start(
            "count",
            messages,
            vec![tool],
            Default::default(),
            LengthLimits::default(),
        )
        .unwrap_or_else(|e| panic!("start: {e}"))
}

fn sampled(codec: &Codec, cache: &mut RolloutCache, turn: usize) {
    let text = format!(
        "<think>\nLook at file {turn}.\n</think>\n\n<tool_call>\n{{\"name\": \"bash\", \"arguments\": {{\"command\": \"cat file_{turn}.py\"}}}}\n</tool_call><|im_end|>"
    );
    let ids = codec.encode(&text).unwrap_or_else(|e| panic!("{e}"));
    codec
        .append_sampled(cache, &ids, &vec![-0.5; ids.len()], Some(0))
        .unwrap_or_else(|e| panic!("{e}"));
}

#[inline(never)]
fn measure_append(codec: &Codec, cache: &mut RolloutCache, turn: usize) {
    codec
        .append_messages(cache, black_box(&[observation(turn)]))
        .unwrap_or_else(|e| panic!("{e}"));
}

#[inline(never)]
fn measure_native(codec: &Codec, text: &str) -> usize {
    let (ids, offsets) = codec
        .encode_with_offsets(black_box(text))
        .unwrap_or_else(|e| panic!("{e}"));
    ids.len() + offsets.len()
}

#[inline(never)]
fn measure_tokenizers(codec: &Codec, text: &str) -> usize {
    let enc = codec
        .tokenizer()
        .encode(black_box(text), false)
        .unwrap_or_else(|e| panic!("{e}"));
    enc.get_ids().len() + enc.get_offsets().len()
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let started = std::time::Instant::now();
    let codec = codec();
    if mode == "load" {
        println!("load: {:?}", started.elapsed());
        return;
    }
    let mut cache = start(&codec);
    // The appended text of one observation, as the tokenizer sees it.
    sampled(&codec, &mut cache, 0);
    let before = cache.tokens().map_or(0, |t| t.all_ids().len());
    codec
        .append_messages(&mut cache, &[observation(0)])
        .unwrap_or_else(|e| panic!("{e}"));
    let appended = cache
        .tokens()
        .map(|t| t.all_ids()[before..].to_vec())
        .unwrap_or_default();
    let delta = codec
        .decode(&appended, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut sink = 0;
    for turn in 1..=N {
        match mode.as_str() {
            "append" => {
                sampled(&codec, &mut cache, turn);
                measure_append(&codec, &mut cache, turn);
            }
            "native" => sink += measure_native(&codec, &delta),
            "tokenizers" => sink += measure_tokenizers(&codec, &delta),
            _ => panic!("mode: append | native | tokenizers"),
        }
    }
    println!(
        "{mode}: {N} calls (native encoder: {}; {} bytes of delta; {sink})",
        codec.native_encoder(),
        delta.len()
    );
}
