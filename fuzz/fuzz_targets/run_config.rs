//! Fuzzes the `uniagent` config reader: a document (YAML, TOML or JSON, by the file's
//! extension) plus `--set` overrides, decoded into the run config and its environment. No input
//! may panic; every refusal is a typed bad-input error (exit code 2) whose message is one line.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_cli::config::{ConfigDoc, RunConfig};
use uniagent_envs::EnvironmentRegistry;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The first byte picks the format; NUL-separated parts after the document are overrides.
    let ext = ["yaml", "toml", "json"][usize::from(data.first().copied().unwrap_or(0) % 3)];
    let mut parts = text.get(1..).unwrap_or_default().split('\0');
    let doc_text = parts.next().unwrap_or_default();
    let overrides: Vec<String> = parts.take(4).map(str::to_owned).collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(format!("run.{ext}"));
    std::fs::write(&path, doc_text).expect("write");
    let checked = |e: uniagent_cli::CliError| {
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    };
    let doc = match ConfigDoc::load(&path, &overrides) {
        Ok(doc) => doc,
        Err(e) => return checked(e),
    };
    match RunConfig::from_doc(&doc) {
        Ok(_) => {
            if let Err(e) = EnvironmentRegistry::builtin().build(&doc) {
                checked(e);
            }
        }
        Err(e) => checked(e),
    }
});
