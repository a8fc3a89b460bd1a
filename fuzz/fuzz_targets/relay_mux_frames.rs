//! Fuzzes the relay multiplexer's frame decoder (`uniagent_sandboxes::mux`), which reads what the
//! process inside a sandbox writes: any bytes, in any chunking, decode to frames or a typed
//! error, never a panic; decoded frames re-encode to exactly the bytes they came from.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_sandboxes::mux::{decode_all, Decoder, MAX_PAYLOAD};

fuzz_target!(|data: &[u8]| {
    // The first byte picks a chunk size, so the incremental path sees splits everywhere.
    let Some((&step, bytes)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    let whole = decode_all(bytes);
    let mut decoder = Decoder::new();
    let mut frames = Vec::new();
    let mut error = None;
    'chunks: for chunk in bytes.chunks(step) {
        decoder.push(chunk);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break 'chunks;
                }
            }
        }
    }
    let chunked = match error {
        Some(e) => Err(e),
        None => decoder.finish().map(|()| frames),
    };
    // Chunking changes nothing.
    assert_eq!(whole, chunked);
    if let Ok(frames) = whole {
        let mut again = bytes::BytesMut::new();
        for frame in &frames {
            if let uniagent_sandboxes::mux::Frame::Data { bytes, .. } = frame {
                assert!(bytes.len() <= MAX_PAYLOAD);
            }
            frame.encode(&mut again);
        }
        assert_eq!(&again[..], bytes);
    }
});
