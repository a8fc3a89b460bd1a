//! Fuzzes the test-log parser of uniagent-rewards and the diff path reader: no input may panic;
//! every id found is non-empty and has no line break; every result `Auto` finds, one of the
//! single-format parsers finds too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_rewards::suite::{parse_test_log, patch_paths, LogFormat};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let auto = parse_test_log(&text, LogFormat::Auto);
    for id in auto.keys() {
        assert!(!id.is_empty() && !id.contains('\n'));
    }
    let pytest = parse_test_log(&text, LogFormat::Pytest);
    let unittest = parse_test_log(&text, LogFormat::Unittest);
    for id in auto.keys() {
        assert!(
            pytest.contains_key(id) || unittest.contains_key(id),
            "only Auto found {id:?}"
        );
    }
    for path in patch_paths(&text) {
        assert!(!path.is_empty() && path != "/dev/null");
    }
});
