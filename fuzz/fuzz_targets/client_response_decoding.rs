//! Fuzzes the client's decoding of server answers (`uniagent_sandboxes::client::decode_response`):
//! any status and body must give a value or a typed error, never a panic, and only HTTP 200 may
//! decode to a value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_core::sandbox::{
    BashObservation, CommandResponse, CreateSessionResponse, IsAliveResponse, ReadFileResponse,
};
use uniagent_sandboxes::client::decode_response;

fuzz_target!(|data: &[u8]| {
    let (status, body) = match data {
        [a, b, rest @ ..] => (100 + u16::from_le_bytes([*a, *b]) % 500, rest),
        _ => return,
    };
    // Bias towards the statuses the decoder branches on.
    let status = match status % 8 {
        0 => 200,
        1 => 511,
        2 => 422,
        _ => status,
    };
    let results = [
        decode_response::<BashObservation>("fuzz", status, body).is_ok(),
        decode_response::<CommandResponse>("fuzz", status, body).is_ok(),
        decode_response::<IsAliveResponse>("fuzz", status, body).is_ok(),
        decode_response::<CreateSessionResponse>("fuzz", status, body).is_ok(),
        decode_response::<ReadFileResponse>("fuzz", status, body).is_ok(),
        decode_response::<serde_json::Value>("fuzz", status, body).is_ok(),
    ];
    if status != 200 {
        assert!(
            results.iter().all(|ok| !ok),
            "HTTP {status} decoded to a value"
        );
    }
});
