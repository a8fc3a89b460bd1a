//! The relay multiplexer: many TCP connections over one byte stream, the stdin and stdout of a
//! single long-lived `docker exec` of `uniagent-sandbox --relay-mux 127.0.0.1:PORT`. The docker
//! backend reaches the server of a `network: none` container through it (see
//! `docker/relay.rs`), at the cost of one exec per stream instead of one per connection.
//!
//! # Frames
//! Every frame is a 9-byte header and a payload; integers are big-endian.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | kind |
//! | 1 | 4 | connection id (chosen by the host, never reused on one stream) |
//! | 5 | 4 | payload length |
//! | 9 | length | payload |
//!
//! | kind | name | payload | meaning |
//! |---|---|---|---|
//! | 1 | `OPEN` | none | host to container: connect `id` to the server |
//! | 2 | `DATA` | 0 to 65536 bytes | bytes of `id`, within the sender's credit |
//! | 3 | `FIN` | none | the sender sends nothing more on `id` (half-close) |
//! | 4 | `RESET` | none | `id` is aborted both ways; later frames of `id` are ignored |
//! | 5 | `CREDIT` | u32, at least 1 | the receiver consumed that many bytes of `id` |
//!
//! A connection ends once a `FIN` went each way (then both ends forget it), or with a `RESET`.
//! Each end may have at most [`WINDOW`] bytes of one connection in flight: it starts with that
//! credit and regains it through `CREDIT` frames as the receiver writes the bytes to its
//! socket; `DATA` beyond it, `DATA` after `FIN`, or credit beyond it resets the connection.
//! A stalled client thus holds at most [`WINDOW`] bytes per direction and blocks no other
//! connection. A bad header (unknown kind, payload over [`MAX_PAYLOAD`] or of the wrong length
//! for its kind, zero credit) ends the whole stream, which fails every connection on it; so
//! does the end of the stream. Both ends come from the same build (the server binary is copied
//! into the container), so there is no version negotiation.

pub mod frame;
pub mod session;

mod container;

pub use container::serve;
#[cfg(feature = "server")]
pub use container::serve_stdio;
pub use frame::{decode_all, Decoder, Frame, FrameError, HEADER_LEN, MAX_PAYLOAD};
pub use session::{incoming, Conn, Incoming, Outgoing, Role, Session, WINDOW};
