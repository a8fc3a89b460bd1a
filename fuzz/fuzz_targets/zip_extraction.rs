//! Fuzzes `/upload`'s zip extraction: any bytes, extracted under small budgets into a fresh
//! directory, must give `Ok` or a typed `ServerError`, never a panic or an abort (the zip crate
//! once allocated whatever a header declared), and must never write outside the target.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_sandboxes::fuzzing::extract;
use uniagent_sandboxes::server::UnzipLimits;

const LIMITS: UnzipLimits = UnzipLimits {
    max_entries: 64,
    max_total_bytes: 1 << 20,
    max_ratio: 1100,
};

fuzz_target!(|data: &[u8]| {
    let Ok(root) = tempfile::tempdir() else {
        return;
    };
    let archive = root.path().join("a.zip");
    let target = root.path().join("t");
    if std::fs::write(&archive, data).is_err() || std::fs::create_dir(&target).is_err() {
        return;
    }
    let _ = extract(&archive, &target, &LIMITS);
    // Only the archive and the target may exist next to each other.
    let mut names: Vec<_> = std::fs::read_dir(root.path())
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    names.sort();
    assert_eq!(names, ["a.zip", "t"], "extraction escaped its target");
});
