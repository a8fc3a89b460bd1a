//! The codec against `transformers` on a corpus of real chat templates (see
//! `tests/data/codec_corpus/NOTICE`): renders, error agreement and the incremental token stream
//! (ids, mask, `append_only`) of seeded random conversations, compared with golden files
//! computed by `apply_chat_template` (`scripts/codec/gen_corpus.py`; no Python at run time).
//!
//! Prints a per-family table and fails on any mismatch. A template whose features the codec
//! declares unsupported (a typed error from loading it) must refuse every conversation; it is
//! counted in the table, never silently skipped.
#![cfg(feature = "codec")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns unwrap too

mod codec_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use codec_common::{input_of, tokenizer_dir};
use serde_json::Value;
use tokenizers::AddedToken;
use uniagent_core::codec::{ChatInput, ChatTemplate, Codec, UnsupportedTemplate};

/// Templates refused with an [`UnsupportedTemplate`] error: none of the corpus any more
/// (Functionary v3.1's `|safe` markup concatenation is emulated, see `codec/markup.rs`). A
/// template the codec newly refuses fails the test until it is listed here.
const KNOWN_UNSUPPORTED: [&str; 0] = [];

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/codec_corpus")
}

fn base_tokenizer() -> PathBuf {
    tokenizer_dir("qwen2.5").join("tokenizer.json")
}

/// The shared byte-level tokenizer with this template's special tokens added in the golden
/// file's order (what the generator did in Python).
fn codec_for(golden: &Value, source: String) -> uniagent_core::Result<Codec> {
    // Parsing the 4.7 MB tokenizer.json once and cloning it is far cheaper than 75 parses.
    static BASE: OnceLock<tokenizers::Tokenizer> = OnceLock::new();
    let mut tokenizer = BASE
        .get_or_init(|| tokenizers::Tokenizer::from_file(base_tokenizer()).unwrap())
        .clone();
    let specials: Vec<AddedToken> = golden["special_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| AddedToken::from(t.as_str().unwrap().to_owned(), true))
        .collect();
    tokenizer.add_special_tokens(specials).unwrap();
    let mut globals = BTreeMap::new();
    for key in ["bos_token", "eos_token"] {
        if let Some(t) = golden[key].as_str() {
            globals.insert(key.to_owned(), Value::String(t.to_owned()));
        }
    }
    let eos = golden["eos_token"].as_str().unwrap().to_owned();
    let template =
        ChatTemplate::new(source, globals)?.with_fixed_clock(golden["clock"].as_str().unwrap())?;
    Codec::new(tokenizer, template, eos, &[])
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[derive(Default, Clone)]
struct Tally {
    templates: usize,
    unsupported: usize,
    conversations: usize,
    renders: usize,
    render_bad: usize,
    raises: usize,
    error_bad: usize,
    incremental: usize,
    incremental_bad: usize,
    non_append_only: usize,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.templates += o.templates;
        self.unsupported += o.unsupported;
        self.conversations += o.conversations;
        self.renders += o.renders;
        self.render_bad += o.render_bad;
        self.raises += o.raises;
        self.error_bad += o.error_bad;
        self.incremental += o.incremental;
        self.incremental_bad += o.incremental_bad;
        self.non_append_only += o.non_append_only;
    }

    fn row(&self, name: &str) -> String {
        format!(
            "{name:<12} {:>4} {:>4} {:>6} {:>11} {:>11} {:>11} {:>8}",
            self.templates,
            self.unsupported,
            self.conversations,
            format!("{}/{}", self.render_bad, self.renders),
            format!("{}/{}", self.error_bad, self.raises),
            format!("{}/{}", self.incremental_bad, self.incremental),
            self.non_append_only,
        )
    }
}

/// Why the codec's replay differs from the golden stream, if it does.
fn incremental_diff(codec: &Codec, input: &ChatInput, want: &Value) -> Option<String> {
    let got = match codec.replay(input) {
        Ok(r) => r,
        Err(_) if want.is_null() => return None,
        Err(e) => return Some(format!("replay failed: {e}")),
    };
    if want.is_null() {
        return Some("replay succeeded where transformers raises".into());
    }
    let sampled: Vec<u32> = want["sampled"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(ids_of)
        .collect();
    let got_sampled: Vec<u32> = got
        .ids
        .iter()
        .zip(&got.mask)
        .filter(|(_, m)| **m == 1)
        .map(|(id, _)| *id)
        .collect();
    if got_sampled != sampled {
        return Some(format!(
            "mask-1 tokens differ: got {} tokens, want {}",
            got_sampled.len(),
            sampled.len()
        ));
    }
    let append_only = want["append_only"].as_bool().unwrap();
    if got.append_only != append_only {
        return Some(format!(
            "append_only: got {}, want {append_only}",
            got.append_only
        ));
    }
    if append_only {
        let ids = ids_of(&want["ids"]);
        if got.ids != ids {
            let at = got.ids.iter().zip(&ids).take_while(|(a, b)| a == b).count();
            return Some(format!(
                "ids differ at {at} (got {} ids, want {})",
                got.ids.len(),
                ids.len()
            ));
        }
        let mut mask = vec![0u8; ids.len()];
        for (start, span) in want["span_starts"]
            .as_array()
            .unwrap()
            .iter()
            .zip(want["sampled"].as_array().unwrap())
        {
            let s = start.as_u64().unwrap() as usize;
            mask[s..s + span.as_array().unwrap().len()].fill(1);
        }
        if got.mask != mask {
            return Some("mask positions differ".into());
        }
    }
    None
}

fn check_template(path: &Path, failures: &mut Vec<String>) -> (String, Tally) {
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let name = golden["template"].as_str().unwrap().to_owned();
    let family = golden["family"].as_str().unwrap().to_owned();
    let source =
        std::fs::read_to_string(corpus().join("templates").join(format!("{name}.jinja"))).unwrap();
    let cases = golden["cases"].as_array().unwrap();
    let mut t = Tally {
        templates: 1,
        conversations: cases.len(),
        ..Tally::default()
    };
    let codec = match codec_for(&golden, source) {
        Ok(c) => c,
        Err(e) => {
            // Only a typed refusal naming an unsupported feature is allowed; the template then
            // must not be used at all (no render, no mask).
            let typed = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<UnsupportedTemplate>())
                .is_some();
            if typed {
                // The documented refusals; any other would be a regression.
                assert!(
                    KNOWN_UNSUPPORTED.contains(&name.as_str()),
                    "{name} is newly refused: {e}"
                );
                println!("{name}: refused up front: {e}");
                t.unsupported = 1;
                return (family, t);
            }
            failures.push(format!("{name}: the codec refuses the template: {e}"));
            t.render_bad += cases.iter().filter(|c| c["render"].is_string()).count();
            t.incremental_bad += cases.len();
            return (family, t);
        }
    };
    for (i, case) in cases.iter().enumerate() {
        let input = input_of(case);
        let want_render = case["render"].as_str();
        if want_render.is_some() {
            t.renders += 1;
        } else {
            t.raises += 1;
        }
        let want_inc = &case["incremental"];
        t.incremental += 1;
        if want_inc["append_only"] == Value::Bool(false) {
            t.non_append_only += 1;
        }
        match (codec.render(&input), want_render) {
            (Ok(got), Some(want)) if got == want => {}
            (Ok(got), Some(want)) => {
                t.render_bad += 1;
                let at = got
                    .chars()
                    .zip(want.chars())
                    .take_while(|(a, b)| a == b)
                    .count();
                let near = |s: &str| {
                    s.chars()
                        .skip(at.saturating_sub(20))
                        .take(50)
                        .collect::<String>()
                };
                failures.push(format!(
                    "{name}#{i} render differs at char {at}: got {:?}, want {:?}",
                    near(&got),
                    near(want)
                ));
            }
            (Err(e), Some(_)) => {
                t.render_bad += 1;
                failures.push(format!(
                    "{name}#{i} render fails where transformers renders: {e}"
                ));
            }
            (Err(_), None) => {}
            (Ok(_), None) => {
                t.error_bad += 1;
                failures.push(format!(
                    "{name}#{i} renders where transformers raises {}",
                    case["render_error"]
                ));
            }
        }
        if let Some(why) = incremental_diff(&codec, &input, want_inc) {
            t.incremental_bad += 1;
            failures.push(format!("{name}#{i} incremental: {why}"));
        }
    }
    (family, t)
}

#[test]
fn corpus_matches_transformers() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus().join("golden"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 50,
        "the corpus has {} templates",
        paths.len()
    );
    // Templates are independent: check them on all cores.
    let results: Mutex<Vec<(String, Tally, Vec<String>)>> = Mutex::new(Vec::new());
    let next = Mutex::new(0usize);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    *n += 1;
                    *n - 1
                };
                let Some(path) = paths.get(i) else { break };
                let mut failures = Vec::new();
                let (family, t) = check_template(path, &mut failures);
                results.lock().unwrap().push((family, t, failures));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.2.first().cmp(&b.2.first()));
    let mut failures = Vec::new();
    let mut families: BTreeMap<String, Tally> = BTreeMap::new();
    for (family, t, f) in results {
        families.entry(family).or_default().add(&t);
        failures.extend(f);
    }
    failures.sort();
    let mut total = Tally::default();
    println!(
        "{:<12} {:>4} {:>4} {:>6} {:>11} {:>11} {:>11} {:>8}",
        "family", "tmpl", "unsup", "convs", "render bad", "errors bad", "incr bad", "non-a-o"
    );
    for (family, t) in &families {
        println!("{}", t.row(family));
        total.add(t);
    }
    println!("{}", total.row("TOTAL"));
    for f in failures.iter().take(200) {
        println!("{f}");
    }
    assert!(
        total.render_bad + total.error_bad + total.incremental_bad == 0,
        "{} mismatches (render {}, errors {}, incremental {}); {} templates refused as unsupported",
        failures.len(),
        total.render_bad,
        total.error_bad,
        total.incremental_bad,
        total.unsupported
    );
}
