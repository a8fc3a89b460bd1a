//! The relay multiplexer's frame codec: frames round-trip whatever the chunking, and bad input
//! (truncated, oversized, unknown, malformed) is a typed error, never a panic.

#![cfg(any(feature = "docker", feature = "server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by panicking

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use uniagent_sandboxes::mux::{decode_all, Decoder, Frame, FrameError, HEADER_LEN, MAX_PAYLOAD};

fn frame() -> impl Strategy<Value = Frame> {
    let id = any::<u32>();
    prop_oneof![
        id.prop_map(|id| Frame::Open { id }),
        (id, proptest::collection::vec(any::<u8>(), 0..2048)).prop_map(|(id, bytes)| {
            Frame::Data {
                id,
                bytes: Bytes::from(bytes),
            }
        }),
        id.prop_map(|id| Frame::Fin { id }),
        id.prop_map(|id| Frame::Reset { id }),
        (id, 1..=u32::MAX).prop_map(|(id, bytes)| Frame::Credit { id, bytes }),
    ]
}

fn encode(frames: &[Frame]) -> BytesMut {
    let mut out = BytesMut::new();
    for frame in frames {
        frame.encode(&mut out);
    }
    out
}

fn header(kind: u8, id: u32, len: u32) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_u8(kind);
    out.put_u32(id);
    out.put_u32(len);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frames_round_trip_in_any_chunking(
        frames in proptest::collection::vec(frame(), 0..24),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..16),
    ) {
        let bytes = encode(&frames);
        prop_assert_eq!(decode_all(&bytes).unwrap(), frames.clone());
        // The same bytes pushed in arbitrary pieces decode to the same frames.
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        cuts.push(bytes.len());
        cuts.sort_unstable();
        let mut decoder = Decoder::new();
        let (mut decoded, mut start) = (Vec::new(), 0);
        for cut in cuts {
            decoder.push(&bytes[start..cut]);
            start = cut;
            while let Some(frame) = decoder.next_frame().unwrap() {
                decoded.push(frame);
            }
        }
        decoder.finish().unwrap();
        prop_assert_eq!(decoded, frames);
    }

    #[test]
    fn a_stream_that_ends_inside_a_frame_is_truncated(
        frames in proptest::collection::vec(frame(), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = encode(&frames);
        let last = frames.last().unwrap().to_bytes().len();
        // Somewhere inside the last frame (at least one byte of it, not all).
        let keep = bytes.len() - last + 1 + cut.index(last - 1);
        match decode_all(&bytes[..keep]) {
            Err(FrameError::Truncated { have, need }) => {
                prop_assert!(have < need, "{have} of {need}");
                prop_assert!(need <= HEADER_LEN + MAX_PAYLOAD);
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }

    #[test]
    fn arbitrary_bytes_decode_or_fail_typed(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        // Either frames or an error; never a panic, never a frame beyond the limit.
        if let Ok(frames) = decode_all(&bytes) {
            for frame in frames {
                if let Frame::Data { bytes, .. } = frame {
                    prop_assert!(bytes.len() <= MAX_PAYLOAD);
                }
            }
        }
    }
}

#[test]
fn an_oversized_frame_is_refused_from_its_header() {
    let too_long = u32::try_from(MAX_PAYLOAD + 1).unwrap();
    let mut decoder = Decoder::new();
    // Only the header arrived: the decoder does not wait for (or buffer) 64 KiB + 1 bytes.
    decoder.push(&header(2, 7, too_long));
    assert_eq!(
        decoder.next_frame(),
        Err(FrameError::Oversized { len: too_long })
    );
    assert_eq!(
        decode_all(&header(2, 7, u32::MAX)),
        Err(FrameError::Oversized { len: u32::MAX })
    );
    // The limit itself is fine.
    let mut full = header(2, 7, u32::try_from(MAX_PAYLOAD).unwrap());
    full.put_bytes(0xab, MAX_PAYLOAD);
    let frames = decode_all(&full).unwrap();
    assert!(matches!(&frames[..], [Frame::Data { id: 7, bytes }] if bytes.len() == MAX_PAYLOAD));
}

#[test]
fn unknown_and_malformed_frames_are_typed_errors() {
    for kind in [0u8, 6, 7, 0x80, 0xff] {
        assert_eq!(
            decode_all(&header(kind, 1, 0)),
            Err(FrameError::UnknownKind { kind })
        );
    }
    // OPEN, FIN and RESET carry nothing; CREDIT exactly a u32.
    for (kind, len) in [(1u8, 1u32), (3, 4), (4, 9), (5, 0), (5, 3), (5, 8)] {
        assert_eq!(
            decode_all(&header(kind, 1, len)),
            Err(FrameError::BadLength { kind, len })
        );
    }
    let mut zero = header(5, 9, 4);
    zero.put_u32(0);
    assert_eq!(decode_all(&zero), Err(FrameError::ZeroCredit { id: 9 }));
    // A lone partial header is truncated too.
    assert_eq!(
        decode_all(&[2, 0, 0]),
        Err(FrameError::Truncated {
            have: 3,
            need: HEADER_LEN
        })
    );
    // Errors are protocol errors for the rest of the crate.
    let error: uniagent_core::Error = FrameError::UnknownKind { kind: 9 }.into();
    assert_eq!(error.kind(), uniagent_core::ErrorKind::Protocol);
}

#[test]
fn the_layout_is_the_documented_one() {
    let bytes = Frame::Data {
        id: 0x0102_0304,
        bytes: Bytes::from_static(b"hi"),
    }
    .to_bytes();
    assert_eq!(&bytes[..], &[2, 1, 2, 3, 4, 0, 0, 0, 2, b'h', b'i']);
    let credit = Frame::Credit { id: 5, bytes: 256 }.to_bytes();
    assert_eq!(&credit[..], &[5, 0, 0, 0, 5, 0, 0, 0, 4, 0, 0, 1, 0]);
    assert_eq!(
        &Frame::Fin { id: 1 }.to_bytes()[..],
        &[3, 0, 0, 0, 1, 0, 0, 0, 0]
    );
}
