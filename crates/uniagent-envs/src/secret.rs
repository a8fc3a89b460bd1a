//! Secrets: random tokens from the operating system's CSPRNG, and a wrapper that keeps them out
//! of `Debug` output and logs.

use uniagent_core::{Error, Result};

/// `bytes` random bytes from the kernel's CSPRNG (`/dev/urandom`), as lowercase hex.
///
/// ```
/// let a = uniagent_envs::secret::random_hex(16).unwrap();
/// assert_eq!(a.len(), 32);
/// assert_ne!(a, uniagent_envs::secret::random_hex(16).unwrap());
/// ```
pub fn random_hex(bytes: usize) -> Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::io("reading /dev/urandom", e))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// What `Debug` prints instead of a secret.
pub const REDACTED: &str = "<redacted>";

/// Formats an optional secret for `Debug`: whether it is set, never its value.
pub fn redacted(secret: Option<&str>) -> &'static str {
    match secret {
        Some(s) if !s.is_empty() => REDACTED,
        _ => "<none>",
    }
}
