//! `codec`: render a conversation with a model's chat template, or rebuild it turn by turn the
//! way a rollout does, and print the tokens as JSON.
//!
//! ```text
//! codec render      --model-dir DIR --input conv.json   # {"text": "...", "ids": [...]}
//! codec incremental --model-dir DIR --input conv.json   # {"ids": [...], "mask": [...], "append_only": bool}
//! ```
//!
//! `conv.json` is `{"messages": [...], "tools": [...], "add_generation_prompt": bool,
//! "template_kwargs": {...}}` (`-` reads stdin). Where `transformers` would raise, `codec`
//! prints the error to stderr and exits with status 1.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::{json, Map, Value};
use uniagent_core::codec::{ChatInput, Codec};
use uniagent_core::Error;

#[derive(Parser)]
#[command(
    name = "codec",
    about = "Chat-template rendering and incremental tokenization"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Full render: the template text and its token ids.
    Render(Args),
    /// Turn-by-turn rebuild: ids, mask (1 = sampled) and whether the template is append-only.
    Incremental(Args),
}

#[derive(clap::Args)]
struct Args {
    /// Hugging Face model directory (tokenizer.json, tokenizer_config.json, ...).
    #[arg(long)]
    model_dir: PathBuf,
    /// The conversation as JSON (`-` for stdin).
    #[arg(long)]
    input: PathBuf,
}

fn bad(message: &str) -> Box<Error> {
    Box::new(Error::invalid_input(message))
}

fn read_input(path: &PathBuf) -> Result<ChatInput, Box<Error>> {
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| Error::invalid_input(format!("reading stdin: {e}")))?;
        s
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| Error::invalid_input(format!("reading {}: {e}", path.display())))?
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Error::invalid_input(format!("input is not JSON: {e}")))?;
    let Value::Object(mut obj) = value else {
        return Err(bad("input must be a JSON object"));
    };
    let messages = match obj.remove("messages") {
        Some(Value::Array(m)) if m.iter().all(Value::is_object) => m,
        _ => return Err(bad("`messages` must be a list of objects")),
    };
    let tools = match obj.remove("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => t,
        Some(_) => return Err(bad("`tools` must be a list")),
    };
    let add_generation_prompt = match obj.remove("add_generation_prompt") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err(bad("`add_generation_prompt` must be a boolean")),
    };
    let template_kwargs = match obj.remove("template_kwargs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(k)) => k,
        Some(_) => return Err(bad("`template_kwargs` must be an object")),
    };
    Ok(ChatInput {
        messages,
        tools,
        add_generation_prompt,
        template_kwargs,
    })
}

fn run(cli: Cli) -> Result<Value, Box<Error>> {
    match cli.command {
        Command::Render(args) => {
            let codec = Codec::from_dir(&args.model_dir)?;
            let input = read_input(&args.input)?;
            let text = codec.render(&input)?;
            let ids = codec.encode(&text)?;
            Ok(json!({"text": text, "ids": ids}))
        }
        Command::Incremental(args) => {
            let codec = Codec::from_dir(&args.model_dir)?;
            let input = read_input(&args.input)?;
            let replay = codec.replay(&input)?;
            Ok(json!({"ids": replay.ids, "mask": replay.mask, "append_only": replay.append_only}))
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(out) => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            match writeln!(stdout, "{out}").and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("codec: writing the result: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("codec: {e}");
            ExitCode::FAILURE
        }
    }
}
