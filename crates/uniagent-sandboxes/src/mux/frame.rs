//! The frames of the relay multiplexer and their codec: [`Frame::encode`] and the incremental
//! [`Decoder`], which never panics and rejects bad input with a typed [`FrameError`].

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bytes of a frame's header: kind (1), connection id (4), payload length (4).
pub const HEADER_LEN: usize = 9;
/// The largest payload of one frame (a `DATA` chunk).
pub const MAX_PAYLOAD: usize = 64 << 10;

const KIND_OPEN: u8 = 1;
const KIND_DATA: u8 = 2;
const KIND_FIN: u8 = 3;
const KIND_RESET: u8 = 4;
const KIND_CREDIT: u8 = 5;

/// One frame of the multiplexed stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// The host opened connection `id` (host to container only).
    Open {
        /// Connection id, unique within one multiplexed stream.
        id: u32,
    },
    /// Bytes of connection `id`, within the window the receiver granted.
    Data {
        /// Connection id.
        id: u32,
        /// At most [`MAX_PAYLOAD`] bytes.
        bytes: Bytes,
    },
    /// The sender will send no more bytes on `id` (a half-close: the other direction goes on).
    Fin {
        /// Connection id.
        id: u32,
    },
    /// Connection `id` is aborted in both directions.
    Reset {
        /// Connection id.
        id: u32,
    },
    /// The receiver consumed `bytes` more bytes of `id`: the sender may send that many more.
    Credit {
        /// Connection id.
        id: u32,
        /// Bytes granted, at least 1.
        bytes: u32,
    },
}

impl Frame {
    /// The connection the frame belongs to.
    pub fn id(&self) -> u32 {
        match self {
            Self::Open { id }
            | Self::Data { id, .. }
            | Self::Fin { id }
            | Self::Reset { id }
            | Self::Credit { id, .. } => *id,
        }
    }

    /// Appends the encoded frame to `out`. A `Data` payload longer than [`MAX_PAYLOAD`] is a
    /// bug of the caller: it is encoded anyway, and the peer's decoder rejects it.
    pub fn encode(&self, out: &mut BytesMut) {
        let (kind, id, payload): (u8, u32, &[u8]) = match self {
            Self::Open { id } => (KIND_OPEN, *id, &[]),
            Self::Data { id, bytes } => (KIND_DATA, *id, bytes),
            Self::Fin { id } => (KIND_FIN, *id, &[]),
            Self::Reset { id } => (KIND_RESET, *id, &[]),
            Self::Credit { id, bytes } => {
                out.reserve(HEADER_LEN + 4);
                out.put_u8(KIND_CREDIT);
                out.put_u32(*id);
                out.put_u32(4);
                out.put_u32(*bytes);
                return;
            }
        };
        out.reserve(HEADER_LEN + payload.len());
        out.put_u8(kind);
        out.put_u32(id);
        // Lengths above u32::MAX cannot be built from a `Bytes` the caller bounded; saturate.
        out.put_u32(u32::try_from(payload.len()).unwrap_or(u32::MAX));
        out.put_slice(payload);
    }

    /// The frame as a fresh buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        out.freeze()
    }
}

/// Why a stream of frames is malformed. After any of these the stream cannot be resynchronised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A payload length above [`MAX_PAYLOAD`].
    Oversized {
        /// The length the header announced.
        len: u32,
    },
    /// A kind byte no frame has.
    UnknownKind {
        /// The byte.
        kind: u8,
    },
    /// A payload length that the kind does not allow (`OPEN`, `FIN`, `RESET`: 0; `CREDIT`: 4).
    BadLength {
        /// The kind byte.
        kind: u8,
        /// The length the header announced.
        len: u32,
    },
    /// A `CREDIT` of zero bytes.
    ZeroCredit {
        /// Connection id.
        id: u32,
    },
    /// The stream ended inside a frame.
    Truncated {
        /// Bytes of the unfinished frame that arrived.
        have: usize,
        /// Bytes the frame needs (the header's, while the header itself is incomplete).
        need: usize,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Oversized { len } => {
                write!(f, "a frame of {len} payload bytes (at most {MAX_PAYLOAD})")
            }
            Self::UnknownKind { kind } => write!(f, "unknown frame kind {kind}"),
            Self::BadLength { kind, len } => {
                write!(f, "a frame of kind {kind} cannot carry {len} bytes")
            }
            Self::ZeroCredit { id } => write!(f, "a credit of 0 bytes on connection {id}"),
            Self::Truncated { have, need } => {
                write!(
                    f,
                    "the stream ended inside a frame ({have} of {need} bytes)"
                )
            }
        }
    }
}

impl std::error::Error for FrameError {}

impl From<FrameError> for uniagent_core::Error {
    fn from(error: FrameError) -> Self {
        uniagent_core::Error::Protocol {
            message: format!("relay multiplexer: {error}"),
        }
    }
}

/// An incremental decoder: [`Decoder::push`] bytes as they arrive, take frames with
/// [`Decoder::next_frame`], and call [`Decoder::finish`] at the end of the stream. It buffers at
/// most one frame ([`HEADER_LEN`] + [`MAX_PAYLOAD`] bytes) plus what the last push added.
#[derive(Debug, Default)]
pub struct Decoder {
    buffer: BytesMut,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The header at the front of the buffer, checked: `Ok(None)` while it is incomplete.
    fn header(&self) -> Result<Option<(u8, u32, u32)>, FrameError> {
        let Some(head) = self.buffer.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let kind = head[0];
        let id = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let len = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
        let allowed = match kind {
            KIND_DATA if len as usize > MAX_PAYLOAD => return Err(FrameError::Oversized { len }),
            KIND_DATA => true,
            KIND_OPEN | KIND_FIN | KIND_RESET => len == 0,
            KIND_CREDIT => len == 4,
            _ => return Err(FrameError::UnknownKind { kind }),
        };
        if !allowed {
            return Err(FrameError::BadLength { kind, len });
        }
        Ok(Some((kind, id, len)))
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed, or why the stream is bad
    /// (checked as soon as the header is in, before waiting for the payload).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some((kind, id, len)) = self.header()? else {
            return Ok(None);
        };
        let total = HEADER_LEN + len as usize;
        if self.buffer.len() < total {
            return Ok(None);
        }
        let mut frame = self.buffer.split_to(total);
        frame.advance(HEADER_LEN);
        Ok(Some(match kind {
            KIND_OPEN => Frame::Open { id },
            KIND_DATA => Frame::Data {
                id,
                bytes: frame.freeze(),
            },
            KIND_FIN => Frame::Fin { id },
            KIND_RESET => Frame::Reset { id },
            _ => {
                let bytes = frame.get_u32();
                if bytes == 0 {
                    return Err(FrameError::ZeroCredit { id });
                }
                Frame::Credit { id, bytes }
            }
        }))
    }

    /// At the end of the stream, once [`Decoder::next_frame`] returned `Ok(None)`: `Ok` when the
    /// stream ended between frames, else [`FrameError::Truncated`] (or the error of a bad header
    /// among the leftovers).
    pub fn finish(&self) -> Result<(), FrameError> {
        let have = self.buffer.len();
        if have == 0 {
            return Ok(());
        }
        let need = match self.header()? {
            Some((_, _, len)) => HEADER_LEN + len as usize,
            None => HEADER_LEN,
        };
        Err(FrameError::Truncated { have, need })
    }
}

/// Decodes a whole buffer: every frame in it, or the first error (a buffer that ends inside a
/// frame is [`FrameError::Truncated`]).
pub fn decode_all(bytes: &[u8]) -> Result<Vec<Frame>, FrameError> {
    let mut decoder = Decoder::new();
    decoder.push(bytes);
    let mut frames = Vec::new();
    while let Some(frame) = decoder.next_frame()? {
        frames.push(frame);
    }
    decoder.finish()?;
    Ok(frames)
}
