//! Fuzzes cassette parsing (`uniagent replay` reads one cassette per line): any input is a
//! cassette or a typed invalid-input error, never a panic; a parsed cassette re-encodes to
//! one JSON line that parses back to the same cassette.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_core::cassette::Cassette;
use uniagent_core::ErrorKind;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match Cassette::from_json(&text) {
        Ok(cassette) => {
            let line = serde_json::to_string(&cassette).expect("a cassette encodes");
            assert!(!line.contains('\n'));
            let back = Cassette::from_json(&line).expect("a re-encoded cassette parses");
            // Logprobs may be NaN only if the input said so, which JSON cannot: equality holds.
            assert_eq!(back, cassette);
        }
        Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}"),
    }
});
