//! Peak memory of a generation prefill, eager attention against SDPA.
//!
//! ```text
//! cargo run -p uniagent-train --features tch --release --example attention_memory -- \
//!     [--model DIR] [--tokens 8192,16384] [--rows 1] [--attention eager,sdpa] [--max-gib 12]
//! ```
//!
//! For every combination of attention, prompt length and batch rows, a child process (this
//! binary again, so that peaks never mix) loads the model (default: the tiny Qwen2 fixture of
//! the tests), resets its peak resident set (`/proc/self/clear_refs`), runs the tch engine's
//! prefill on prompts of that length (one token generated; with several rows, every other row
//! is half as long and left-padded, so the explicit-mask path runs too) and reports its
//! resident set before and its peak (`VmHWM` of `/proc/self/status`) during the prefill. The parent prints one table line per run and the SDPA/eager ratios. A child whose
//! resident set passes `--max-gib` is killed and reported as over that bound.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use uniagent_core::{GenerateRequest, SamplingParams};
use uniagent_train::generate::generate_batch;
use uniagent_train::model::{AttentionImpl, ModelDtype, Qwen2ForCausalLM};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const CHILD: &str = "--child";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(CHILD) {
        return child(&args[1..]);
    }
    parent(&args)
}

fn default_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen2")
}

/// `VmHWM` or `VmRSS` (KiB) of a `/proc/<pid>/status` file.
fn status_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Child: `--child ATTENTION TOKENS ROWS MODEL`; prints `baseline_kib peak_kib seconds`
/// (the resident set once the model is loaded, and its peak during the prefill).
fn child(args: &[String]) -> Result<()> {
    let [attention, tokens, rows, model] = args else {
        return Err("usage: --child ATTENTION TOKENS ROWS MODEL".into());
    };
    let attention: AttentionImpl = attention.parse()?;
    let tokens: usize = tokens.parse()?;
    let rows: usize = rows.parse()?;
    let mut policy = Qwen2ForCausalLM::load(
        Path::new(model),
        uniagent_train::tch::Device::Cpu,
        ModelDtype::F32,
    )?;
    policy.set_attention(attention);
    let vocab = policy.config().vocab_size;
    let requests: Vec<GenerateRequest> = (0..rows)
        .map(|row| {
            let len = if row % 2 == 0 { tokens } else { tokens / 2 };
            let prompt = (0..len)
                .map(|i| ((i * 7919 + row * 104_729) % (vocab - 1000)) as u32)
                .collect();
            GenerateRequest::new(prompt, SamplingParams::greedy(), 1)
        })
        .collect();
    // Writing 5 to clear_refs resets the peak to the current resident set: what follows is
    // the prefill's peak, not the model loading's.
    std::fs::write("/proc/self/clear_refs", "5")?;
    let baseline = status_kib("/proc/self/status", "VmRSS:").ok_or("no VmRSS")?;
    let start = Instant::now();
    let outputs = generate_batch(&policy, &requests, None)?;
    let seconds = start.elapsed().as_secs_f64();
    let peak = status_kib("/proc/self/status", "VmHWM:").ok_or("no VmHWM")?;
    if outputs.len() != rows {
        return Err("missing outputs".into());
    }
    println!("{baseline} {peak} {seconds:.2}");
    Ok(())
}

struct Options {
    model: PathBuf,
    tokens: Vec<usize>,
    rows: Vec<usize>,
    attention: Vec<AttentionImpl>,
    max_kib: u64,
}

fn list<T: std::str::FromStr>(text: &str) -> Result<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    text.split(',')
        .map(|s| s.parse().map_err(|e: T::Err| e.to_string().into()))
        .collect()
}

fn options(args: &[String]) -> Result<Options> {
    let mut options = Options {
        model: default_model(),
        tokens: vec![8192, 16384],
        rows: vec![1],
        attention: vec![AttentionImpl::Eager, AttentionImpl::Sdpa],
        max_kib: 12 << 20,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--model" => options.model = PathBuf::from(value),
            "--tokens" => options.tokens = list(value)?,
            "--rows" => options.rows = list(value)?,
            "--attention" => options.attention = list(value)?,
            "--max-gib" => options.max_kib = value.parse::<u64>()? << 20,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    Ok(options)
}

/// One measurement: `Some((baseline, peak, seconds))`, `None` when killed over the bound.
type Measurement = Option<(u64, u64, f64)>;

fn run_child(
    options: &Options,
    attention: &str,
    tokens: usize,
    rows: usize,
) -> Result<Measurement> {
    let mut child = Command::new(std::env::current_exe()?)
        .args([CHILD, attention, &tokens.to_string(), &rows.to_string()])
        .arg(&options.model)
        .stdout(Stdio::piped())
        .spawn()?;
    let status_path = format!("/proc/{}/status", child.id());
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if status_kib(&status_path, "VmRSS:").is_some_and(|rss| rss > options.max_kib) {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    match fields.as_slice() {
        [baseline, peak, seconds] => Ok(Some((baseline.parse()?, peak.parse()?, seconds.parse()?))),
        _ => Err(format!(
            "{attention} {tokens}x{rows}: child failed (`{}`)",
            line.trim()
        )
        .into()),
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn parent(args: &[String]) -> Result<()> {
    let options = options(args)?;
    println!("model: {}", options.model.display());
    println!("| attention | tokens | rows | peak RSS (MiB) | prefill increment (MiB) | seconds |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut results = Vec::new();
    for &rows in &options.rows {
        for &tokens in &options.tokens {
            for &attention in &options.attention {
                let name = match attention {
                    AttentionImpl::Eager => "eager",
                    AttentionImpl::Sdpa => "sdpa",
                };
                let measured = run_child(&options, name, tokens, rows)?;
                match measured {
                    Some((baseline, peak, seconds)) => println!(
                        "| {name} | {tokens} | {rows} | {:.0} | {:.0} | {seconds:.2} |",
                        mib(peak),
                        mib(peak.saturating_sub(baseline))
                    ),
                    None => println!(
                        "| {name} | {tokens} | {rows} | > {:.0} (killed) | | |",
                        mib(options.max_kib)
                    ),
                }
                results.push((rows, tokens, attention, measured));
            }
        }
    }
    println!();
    for &(rows, tokens, attention, measured) in &results {
        if attention != AttentionImpl::Sdpa {
            continue;
        }
        let eager = results.iter().find_map(|&(r, t, a, m)| {
            (r == rows && t == tokens && a == AttentionImpl::Eager).then_some(m)
        });
        match (measured, eager) {
            (Some((sb, sp, _)), Some(Some((eb, ep, _)))) => println!(
                "{tokens} tokens x {rows}: sdpa/eager peak {:.3}, prefill increment {:.3}",
                sp as f64 / ep as f64,
                sp.saturating_sub(sb) as f64 / ep.saturating_sub(eb).max(1) as f64
            ),
            (Some((_, sp, _)), Some(None)) => println!(
                "{tokens} tokens x {rows}: sdpa/eager peak < {:.3} (eager killed)",
                sp as f64 / options.max_kib as f64
            ),
            _ => {}
        }
    }
    Ok(())
}
