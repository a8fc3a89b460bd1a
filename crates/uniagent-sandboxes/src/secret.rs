//! Secrets: random tokens from the operating system's CSPRNG (their redaction in `Debug` output is
//! `uniagent_core::config::redacted`).

use uniagent_core::{Error, Result};

/// `bytes` random bytes from the kernel's CSPRNG (`/dev/urandom`), as lowercase hex.
///
/// ```
/// let a = uniagent_sandboxes::secret::random_hex(16).unwrap();
/// assert_eq!(a.len(), 32);
/// assert_ne!(a, uniagent_sandboxes::secret::random_hex(16).unwrap());
/// ```
pub fn random_hex(bytes: usize) -> Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::io("reading /dev/urandom", e))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}
