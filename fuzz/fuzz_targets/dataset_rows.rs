//! Fuzzes dataset reading: a JSONL file read row by row, each row mapped by every layout
//! (plain, SWE-bench, SWE-rebench, R2E-Gym, search-QA). No input may panic; a bad row is a
//! typed error naming the file and row, a mapped row has a non-empty id.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_envs::dataset::{read_rows, Layout};

const LAYOUTS: [Layout; 5] = [
    Layout::Plain,
    Layout::SweBench,
    Layout::SweRebench,
    Layout::R2eGym,
    Layout::SearchQa,
];

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tasks.jsonl");
    std::fs::write(&path, data).expect("write");
    let rows = match read_rows(&path, Some(64)) {
        Ok(rows) => rows,
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "{e}");
            return;
        }
    };
    for (number, fields) in rows {
        for layout in LAYOUTS {
            if let Ok(mapped) = layout.map(number, fields.clone()) {
                assert!(
                    !mapped.id.is_empty(),
                    "{layout:?} mapped row {number} to an empty id"
                );
            }
        }
    }
});
