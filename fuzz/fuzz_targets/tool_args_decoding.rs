//! Fuzzes the decoding of tool arguments (uniagent-tools' toolbox): the toolbox command line,
//! the base64 payload and the JSON arguments object. No input may panic; a payload that
//! decodes as JSON must decode identically through base64; a decoded `view_range` is a pair.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_tools::toolbox::args::{decode_base64, encode_base64, parse_command_line, EditorArgs};

fuzz_target!(|data: &[u8]| {
    let direct = EditorArgs::from_json(data);
    let via_base64 = EditorArgs::from_base64(&encode_base64(data));
    assert_eq!(direct, via_base64);
    assert_eq!(
        decode_base64(&encode_base64(data)).ok().as_deref(),
        Some(data)
    );
    let text = String::from_utf8_lossy(data);
    let _ = EditorArgs::from_base64(&text);
    let argv: Vec<&str> = text.split('\0').collect();
    let _ = parse_command_line(&argv);
});
