//! The internals the fuzz targets in `fuzz/fuzz_targets/` drive directly, without a server or a
//! socket in between: request decoding and validation, `/execute`, multipart and zip handling,
//! and the pty output pipeline of bash sessions.
//!
//! Not a stable API: these items are private to their modules for every other user, and may
//! change with the code they fuzz. The public API of the server is [`crate::server`].

// Listed in `server::fuzzing`, which can name the server's private modules.
pub use crate::server::fuzzing::*;
