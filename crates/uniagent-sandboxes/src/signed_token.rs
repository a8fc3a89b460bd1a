//! Per-sandbox signed tokens ([decision 0008](../../../docs/decisions/0008-k8s-sandboxes.md),
//! "The auth token"): a worker holds an Ed25519 private key and mints one token per sandbox; the
//! sandbox server holds only public keys and accepts a token for its own name.
//!
//! A token is `v1.<payload>.<signature>`: `payload` is the base64url (no padding) of the JSON
//! object `{"aud":NAME,"exp":UNIX_SECONDS,"kid":KEY_ID}`, `signature` the base64url (no padding)
//! of the Ed25519 signature of the ASCII text `v1.<payload>`. The server reads its public keys
//! from a key file: one `KEY_ID BASE64_PUBLIC_KEY` per line, `#` comments. Both formats are
//! written down in [docs/formats.md](../../../docs/formats.md#signed-sandbox-tokens).
//!
//! ```
//! use uniagent_sandboxes::signed_token::{Minter, PublicKeys, TokenError, Verifier};
//!
//! // The worker: a private key (32 seed bytes; `Minter::from_seed_base64` reads its text form).
//! let minter = Minter::from_seed([7; 32]);
//! // What the sandbox's key file holds (a ConfigMap in Kubernetes).
//! let key_file = format!("# rotated monthly\nk1 {}\n", minter.public_key_base64());
//!
//! // The server of sandbox `ua-run-0123`: its keys and its own name.
//! let verifier = Verifier::new("ua-run-0123", PublicKeys::parse(&key_file)?);
//! let token = minter.mint("ua-run-0123", 4_102_444_800, "k1"); // expires in 2100
//! assert_eq!(verifier.verify(&token)?.aud, "ua-run-0123");
//!
//! // A token for another sandbox opens only that one.
//! let other = minter.mint("ua-run-4567", 4_102_444_800, "k1");
//! assert!(matches!(verifier.verify(&other), Err(TokenError::WrongAudience { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

/// The version prefix of every token this module mints and accepts.
pub const VERSION: &str = "v1";

/// Longest token [`Verifier::verify`] looks at, in bytes; longer ones are refused unread.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// Longest key id, in bytes.
pub const MAX_KID_BYTES: usize = 64;

/// The signed claims of a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// The sandbox the token opens (the server's own name).
    pub aud: String,
    /// Expiry, in seconds since the Unix epoch: the token is refused from this second on.
    pub exp: u64,
    /// The id of the key that signed it (a line of the server's key file).
    pub kid: String,
}

/// Why a token was refused. The `Display` text names what failed; it never contains the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Longer than [`MAX_TOKEN_BYTES`].
    #[error("token too long: {len} bytes (at most {MAX_TOKEN_BYTES})")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Not three `.`-separated parts.
    #[error("malformed token: expected `v1.<payload>.<signature>`")]
    Format,
    /// The first part is not [`VERSION`].
    #[error("unsupported token version (expected `{VERSION}`)")]
    Version,
    /// A part is not canonical base64url without padding.
    #[error("malformed token: the {part} is not base64url")]
    Base64 {
        /// `payload` or `signature`.
        part: &'static str,
    },
    /// The payload is not the claims object.
    #[error("malformed token payload: {reason}")]
    Payload {
        /// What the JSON decoder said.
        reason: String,
    },
    /// The signature is not 64 bytes.
    #[error("malformed token: the signature has {len} bytes, not 64")]
    SignatureLength {
        /// Its length in bytes.
        len: usize,
    },
    /// No key with this id is known.
    #[error("unknown key id {kid:?}")]
    UnknownKey {
        /// The token's key id.
        kid: String,
    },
    /// The signature does not verify with the named key.
    #[error("invalid signature for key {kid:?}")]
    Signature {
        /// The token's key id.
        kid: String,
    },
    /// The token is for another sandbox.
    #[error("token is for {aud:?}, not for {expected:?}")]
    WrongAudience {
        /// The token's audience.
        aud: String,
        /// This server's name.
        expected: String,
    },
    /// The token's expiry has passed.
    #[error("token expired at {exp} (now {now})")]
    Expired {
        /// The token's expiry (Unix seconds).
        exp: u64,
        /// The verifier's clock (Unix seconds).
        now: u64,
    },
}

/// Why a key file (or a private key's text) was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line is not `KEY_ID BASE64_PUBLIC_KEY`.
    #[error("{}line {line}: {reason}", origin_prefix(origin.as_deref()))]
    Line {
        /// The file, when the text came from one.
        origin: Option<PathBuf>,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Two lines have the same key id.
    #[error("{}line {line}: duplicate key id {kid:?}", origin_prefix(origin.as_deref()))]
    DuplicateKid {
        /// The file, when the text came from one.
        origin: Option<PathBuf>,
        /// The line number of the second one, from 1.
        line: usize,
        /// The key id.
        kid: String,
    },
    /// No key at all: such a server would refuse every request.
    #[error("{}no public key (expected lines `KEY_ID BASE64_PUBLIC_KEY`)", origin_prefix(origin.as_deref()))]
    Empty {
        /// The file, when the text came from one.
        origin: Option<PathBuf>,
    },
    /// A private key is not the base64 of 32 bytes.
    #[error("invalid private key: {reason}")]
    PrivateKey {
        /// What is wrong with it.
        reason: String,
    },
}

fn origin_prefix(origin: Option<&Path>) -> String {
    origin.map_or_else(String::new, |p| format!("{}: ", p.display()))
}

/// Whether `kid` may name a key: 1 to [`MAX_KID_BYTES`] bytes of ASCII letters, digits, `.`,
/// `_` and `-`.
pub fn valid_kid(kid: &str) -> bool {
    !kid.is_empty()
        && kid.len() <= MAX_KID_BYTES
        && kid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Decodes 32 key bytes written as base64 or base64url, with or without padding.
fn key_bytes(text: &str) -> Result<[u8; 32], String> {
    let url: String = text
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect();
    let bytes = URL_SAFE_NO_PAD
        .decode(url.as_bytes())
        .map_err(|e| format!("not base64: {e}"))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| format!("{} bytes, an Ed25519 key has 32", bytes.len()))
}

/// Mints tokens with one Ed25519 private key (the worker's side).
///
/// Its `Debug` output shows the public key only.
pub struct Minter {
    key: SigningKey,
}

impl fmt::Debug for Minter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Minter")
            .field("public_key", &self.public_key_base64())
            .finish_non_exhaustive()
    }
}

impl Minter {
    /// The key whose 32-byte seed (RFC 8032's private key) is `seed`.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// The key whose seed is written as base64 or base64url (padding optional; surrounding
    /// whitespace ignored).
    pub fn from_seed_base64(text: &str) -> Result<Self, KeyFileError> {
        let seed = key_bytes(text.trim()).map_err(|reason| KeyFileError::PrivateKey { reason })?;
        Ok(Self::from_seed(seed))
    }

    /// The public key, base64url without padding: the second field of a key file line.
    pub fn public_key_base64(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.key.verifying_key().as_bytes())
    }

    /// The token for sandbox `aud`, valid until `exp_unix` (seconds since the epoch), naming
    /// key `kid`. A server accepts it only if its key file has this public key under `kid`
    /// (which must pass [`valid_kid`]).
    pub fn mint(&self, aud: &str, exp_unix: u64, kid: &str) -> String {
        #[derive(Serialize)]
        struct Borrowed<'a> {
            aud: &'a str,
            exp: u64,
            kid: &'a str,
        }
        // Serializing three plain fields cannot fail; an empty payload would only be refused.
        let json = serde_json::to_vec(&Borrowed {
            aud,
            exp: exp_unix,
            kid,
        })
        .unwrap_or_default();
        let mut token = format!("{VERSION}.{}", URL_SAFE_NO_PAD.encode(json));
        let signature = self.key.sign(token.as_bytes());
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(signature.to_bytes()));
        token
    }
}

/// The public keys a server accepts, by key id.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PublicKeys {
    keys: BTreeMap<String, VerifyingKey>,
}

impl fmt::Debug for PublicKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.keys.keys()).finish()
    }
}

impl PublicKeys {
    /// Parses a key file: one `KEY_ID BASE64_PUBLIC_KEY` per line (fields separated by spaces
    /// or tabs; the key in base64 or base64url, padding optional), blank lines and lines
    /// starting with `#` ignored. At least one key; key ids unique and [`valid_kid`]; weak
    /// (small-order) keys refused.
    pub fn parse(text: &str) -> Result<Self, KeyFileError> {
        Self::parse_from(text, None)
    }

    /// Reads and parses the key file at `path` (see [`PublicKeys::parse`]).
    pub fn read(path: &Path) -> Result<Self, KeyFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse_from(&text, Some(path))
    }

    fn parse_from(text: &str, origin: Option<&Path>) -> Result<Self, KeyFileError> {
        let line_error = |line: usize, reason: String| KeyFileError::Line {
            origin: origin.map(Path::to_path_buf),
            line,
            reason,
        };
        let mut keys = BTreeMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.trim();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            let mut fields = content.split_ascii_whitespace();
            let (Some(kid), Some(key), None) = (fields.next(), fields.next(), fields.next()) else {
                return Err(line_error(
                    line,
                    "expected two fields, `KEY_ID BASE64_PUBLIC_KEY`".to_owned(),
                ));
            };
            if !valid_kid(kid) {
                return Err(line_error(
                    line,
                    format!("invalid key id {kid:?} (1 to {MAX_KID_BYTES} of A-Z a-z 0-9 . _ -)"),
                ));
            }
            let bytes = key_bytes(key).map_err(|reason| line_error(line, reason))?;
            let key = VerifyingKey::from_bytes(&bytes)
                .map_err(|_| line_error(line, "not an Ed25519 public key".to_owned()))?;
            if key.is_weak() {
                return Err(line_error(
                    line,
                    "a weak (small-order) public key".to_owned(),
                ));
            }
            if keys.insert(kid.to_owned(), key).is_some() {
                return Err(KeyFileError::DuplicateKid {
                    origin: origin.map(Path::to_path_buf),
                    line,
                    kid: kid.to_owned(),
                });
            }
        }
        if keys.is_empty() {
            return Err(KeyFileError::Empty {
                origin: origin.map(Path::to_path_buf),
            });
        }
        Ok(Self { keys })
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key ids, sorted.
    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }
}

/// The last token accepted, and its claims.
struct Accepted {
    token: String,
    claims: Claims,
}

/// Checks tokens for one sandbox (the server's side): known key id, valid signature, `aud`
/// equal to the server's own name, `exp` in the future.
///
/// The last accepted token is kept: a repeat costs one constant-time string compare and an
/// expiry check.
pub struct Verifier {
    audience: String,
    keys: PublicKeys,
    last: Mutex<Option<Accepted>>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("audience", &self.audience)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// Seconds since the Unix epoch; a clock before the epoch reads as the end of time, so that
/// every token counts as expired.
fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(u64::MAX, |d| d.as_secs())
}

impl Verifier {
    /// A verifier for the server named `audience` that trusts `keys`.
    pub fn new(audience: impl Into<String>, keys: PublicKeys) -> Self {
        Self {
            audience: audience.into(),
            keys,
            last: Mutex::new(None),
        }
    }

    /// The server's own name, which tokens must name as `aud`.
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// The trusted keys.
    pub fn keys(&self) -> &PublicKeys {
        &self.keys
    }

    /// Checks `token` against the system clock.
    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        self.verify_at(token, now_unix())
    }

    /// Checks `token` as if the time were `now_unix` (seconds since the epoch).
    pub fn verify_at(&self, token: &str, now_unix: u64) -> Result<Claims, TokenError> {
        {
            let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(accepted) = last.as_ref() {
                if bool::from(token.as_bytes().ct_eq(accepted.token.as_bytes())) {
                    return self.unexpired(accepted.claims.clone(), now_unix);
                }
            }
        }
        let claims = self.check(token, now_unix)?;
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(Accepted {
            token: token.to_owned(),
            claims: claims.clone(),
        });
        Ok(claims)
    }

    fn unexpired(&self, claims: Claims, now: u64) -> Result<Claims, TokenError> {
        if claims.exp > now {
            Ok(claims)
        } else {
            Err(TokenError::Expired {
                exp: claims.exp,
                now,
            })
        }
    }

    /// The full check, without the cache.
    fn check(&self, token: &str, now: u64) -> Result<Claims, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::TooLong { len: token.len() });
        }
        let (signed, signature) = token.rsplit_once('.').ok_or(TokenError::Format)?;
        let (version, payload) = signed.split_once('.').ok_or(TokenError::Format)?;
        if payload.contains('.') {
            return Err(TokenError::Format);
        }
        if version != VERSION {
            return Err(TokenError::Version);
        }
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Base64 { part: "payload" })?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Base64 { part: "signature" })?;
        let signature = <[u8; 64]>::try_from(signature.as_slice()).map_err(|_| {
            TokenError::SignatureLength {
                len: signature.len(),
            }
        })?;
        let claims: Claims = serde_json::from_slice(&payload).map_err(|e| TokenError::Payload {
            reason: e.to_string(),
        })?;
        let key = self
            .keys
            .keys
            .get(&claims.kid)
            .ok_or_else(|| TokenError::UnknownKey {
                kid: claims.kid.clone(),
            })?;
        key.verify_strict(signed.as_bytes(), &Signature::from_bytes(&signature))
            .map_err(|_| TokenError::Signature {
                kid: claims.kid.clone(),
            })?;
        if claims.aud != self.audience {
            return Err(TokenError::WrongAudience {
                aud: claims.aud,
                expected: self.audience.clone(),
            });
        }
        self.unexpired(claims, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NAME: &str = "ua-run-0123456789ab";
    const LATER: u64 = 2_000_000_000;
    const NOW: u64 = 1_900_000_000;

    fn minter(seed: u8) -> Minter {
        Minter::from_seed([seed; 32])
    }

    fn verifier() -> Verifier {
        let text = format!(
            "# keys\n\nk1 {}\n  k2\t{}  \n",
            minter(1).public_key_base64(),
            minter(2).public_key_base64()
        );
        Verifier::new(NAME, PublicKeys::parse(&text).unwrap())
    }

    #[test]
    fn a_minted_token_verifies_and_names_its_claims() {
        let v = verifier();
        for (seed, kid) in [(1, "k1"), (2, "k2")] {
            let token = minter(seed).mint(NAME, LATER, kid);
            assert!(token.starts_with("v1."));
            let claims = v.verify_at(&token, NOW).unwrap();
            assert_eq!(
                claims,
                Claims {
                    aud: NAME.into(),
                    exp: LATER,
                    kid: kid.into()
                }
            );
        }
    }

    #[test]
    fn the_payload_is_the_documented_json() {
        let token = minter(1).mint(NAME, LATER, "k1");
        let payload = token.split('.').nth(1).unwrap();
        let json = URL_SAFE_NO_PAD.decode(payload).unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            format!(r#"{{"aud":"{NAME}","exp":{LATER},"kid":"k1"}}"#)
        );
    }

    #[test]
    fn each_failed_check_is_named() {
        let v = verifier();
        let m = minter(1);
        assert_eq!(
            v.verify_at(&m.mint("ua-other", LATER, "k1"), NOW),
            Err(TokenError::WrongAudience {
                aud: "ua-other".into(),
                expected: NAME.into()
            })
        );
        assert_eq!(
            v.verify_at(&m.mint(NAME, NOW, "k1"), NOW),
            Err(TokenError::Expired { exp: NOW, now: NOW })
        );
        assert_eq!(
            v.verify_at(&m.mint(NAME, LATER, "k3"), NOW),
            Err(TokenError::UnknownKey { kid: "k3".into() })
        );
        // Signed by key 1 but claiming key 2.
        assert_eq!(
            v.verify_at(&m.mint(NAME, LATER, "k2"), NOW),
            Err(TokenError::Signature { kid: "k2".into() })
        );
        // Signed by a key nobody trusts, under a trusted id.
        assert_eq!(
            v.verify_at(&minter(9).mint(NAME, LATER, "k1"), NOW),
            Err(TokenError::Signature { kid: "k1".into() })
        );
        assert_eq!(v.verify_at("", NOW), Err(TokenError::Format));
        assert_eq!(v.verify_at("garbage", NOW), Err(TokenError::Format));
        assert_eq!(v.verify_at("v1.a.b.c", NOW), Err(TokenError::Format));
        let good = m.mint(NAME, LATER, "k1");
        assert_eq!(
            v.verify_at(&good.replacen("v1.", "v2.", 1), NOW),
            Err(TokenError::Version)
        );
        let (signed, _) = good.rsplit_once('.').unwrap();
        assert_eq!(
            v.verify_at(&format!("{signed}.AAAA"), NOW),
            Err(TokenError::SignatureLength { len: 3 })
        );
        assert_eq!(
            v.verify_at(&format!("{signed}.!!"), NOW),
            Err(TokenError::Base64 { part: "signature" })
        );
        assert_eq!(
            v.verify_at(&format!("v1.{}.x", "A".repeat(MAX_TOKEN_BYTES)), NOW),
            Err(TokenError::TooLong {
                len: MAX_TOKEN_BYTES + 5
            })
        );
        // A well-signed payload that is not the claims object.
        let other_json = |json: &str| {
            let signed = format!("v1.{}", URL_SAFE_NO_PAD.encode(json));
            let sig = m.key.sign(signed.as_bytes());
            format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.to_bytes()))
        };
        for json in [
            "[]",
            r#"{"aud":"x","exp":-1,"kid":"k1"}"#,
            r#"{"aud":"x","exp":1.5,"kid":"k1"}"#,
            r#"{"aud":"x","kid":"k1"}"#,
            r#"{"aud":"x","exp":1,"kid":"k1","admin":true}"#,
        ] {
            assert!(
                matches!(
                    v.verify_at(&other_json(json), NOW),
                    Err(TokenError::Payload { .. })
                ),
                "{json}"
            );
        }
        // The error text never repeats the token.
        let e = v.verify_at(&good, LATER).unwrap_err().to_string();
        assert!(!e.contains(&good[3..20]), "{e}");
    }

    /// A token and key made by another Ed25519 implementation (Python's `cryptography`
    /// package, seed `[3; 32]`): the format is not private to this crate.
    #[test]
    fn tokens_match_an_independent_implementation() {
        const PUBLIC: &str = "7UkoxijRwsbq6QM4kFmVYSlZJzpcY_k2NsFGFKyHN9E";
        const TOKEN: &str = "v1.eyJhdWQiOiJ1YS1pbnRlcm9wIiwiZXhwIjo0MTAyNDQ0ODAwLCJraWQiOiJweSJ9.zUSuIakMcGQd1rmmjzgevLbESwYi84hu_NgfKtp24enspxukVSN72RAnDgn-rrr_N78SAxieYrQZwQNaCfDgBA";
        let minter = Minter::from_seed([3; 32]);
        assert_eq!(minter.public_key_base64(), PUBLIC);
        assert_eq!(minter.mint("ua-interop", 4_102_444_800, "py"), TOKEN);
        let v = Verifier::new(
            "ua-interop",
            PublicKeys::parse(&format!("py {PUBLIC}")).unwrap(),
        );
        assert_eq!(v.verify_at(TOKEN, NOW).unwrap().kid, "py");
    }

    #[test]
    fn a_cached_token_still_expires() {
        let v = verifier();
        let token = minter(1).mint(NAME, LATER, "k1");
        assert!(v.verify_at(&token, NOW).is_ok());
        assert!(v.verify_at(&token, LATER - 1).is_ok());
        assert_eq!(
            v.verify_at(&token, LATER),
            Err(TokenError::Expired {
                exp: LATER,
                now: LATER
            })
        );
        // A refused token does not replace the cached one.
        assert!(v.verify_at("garbage", NOW).is_err());
        assert!(v.verify_at(&token, NOW).is_ok());
    }

    #[test]
    fn key_files_are_checked_line_by_line() {
        let k = minter(1).public_key_base64();
        let line = |text: &str| match PublicKeys::parse(text) {
            Err(KeyFileError::Line { line, reason, .. }) => (line, reason),
            other => panic!("{other:?}"),
        };
        assert!(matches!(
            PublicKeys::parse("# only a comment\n\n"),
            Err(KeyFileError::Empty { origin: None })
        ));
        assert_eq!(line("k1\n").0, 1);
        assert_eq!(line(&format!("# c\nk1 {k} extra\n")).0, 2);
        assert!(line(&format!("k/1 {k}\n")).1.contains("invalid key id"));
        assert!(line(&format!("{} {k}\n", "k".repeat(65)))
            .1
            .contains("invalid key id"));
        assert!(line("k1 AAAA\n").1.contains("3 bytes"));
        assert!(line("k1 !!!!\n").1.contains("not base64"));
        // The identity point: small order.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert!(line(&format!("k1 {}\n", URL_SAFE_NO_PAD.encode(identity)))
            .1
            .contains("weak"));
        assert!(matches!(
            PublicKeys::parse(&format!("k1 {k}\nk1 {k}\n")),
            Err(KeyFileError::DuplicateKid { line: 2, .. })
        ));
        // Standard base64 with padding is the same key.
        let bytes = URL_SAFE_NO_PAD.decode(&k).unwrap();
        let standard = base64::engine::general_purpose::STANDARD.encode(bytes);
        assert_eq!(
            PublicKeys::parse(&format!("k1 {standard}\n")).unwrap(),
            PublicKeys::parse(&format!("k1 {k}\n")).unwrap()
        );
        assert_eq!(
            PublicKeys::parse(&format!("b {k}\na {k}\n"))
                .unwrap()
                .kids()
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    #[test]
    fn key_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let missing = PublicKeys::read(&path).unwrap_err().to_string();
        assert!(missing.contains("keys"), "{missing}");
        std::fs::write(&path, "k1 nope\n").unwrap();
        let bad = PublicKeys::read(&path).unwrap_err().to_string();
        assert!(
            bad.starts_with(&format!("{}: line 1: ", path.display())),
            "{bad}"
        );
    }

    #[test]
    fn private_keys_read_as_base64_and_debug_shows_no_secret() {
        let seed = [42u8; 32];
        let text = base64::engine::general_purpose::STANDARD.encode(seed);
        let m = Minter::from_seed_base64(&format!("  {text}\n")).unwrap();
        assert_eq!(
            m.public_key_base64(),
            Minter::from_seed(seed).public_key_base64()
        );
        assert!(!format!("{m:?}").contains(&text));
        assert!(!format!("{m:?}").contains(&URL_SAFE_NO_PAD.encode(seed)));
        assert!(matches!(
            Minter::from_seed_base64("AAAA"),
            Err(KeyFileError::PrivateKey { .. })
        ));
    }

    proptest! {
        #[test]
        fn round_trip(aud in "\\PC{0,40}", exp in any::<u64>(), kid_index in 0usize..2) {
            let kid = ["k1", "k2"][kid_index];
            let v = Verifier::new(aud.clone(), verifier().keys().clone());
            let token = minter(kid_index as u8 + 1).mint(&aud, exp, kid);
            let now = exp.saturating_sub(1);
            if exp > 0 {
                prop_assert_eq!(
                    v.verify_at(&token, now),
                    Ok(Claims { aud: aud.clone(), exp, kid: kid.to_owned() })
                );
            }
            prop_assert!(v.verify_at(&token, exp).is_err());
        }

        #[test]
        fn any_changed_byte_is_refused(
            aud in "[a-z0-9-]{1,30}",
            position in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let v = Verifier::new(aud.clone(), verifier().keys().clone());
            let token = minter(1).mint(&aud, LATER, "k1");
            let mut bytes = token.clone().into_bytes();
            let i = position.index(bytes.len());
            bytes[i] ^= flip;
            let mutated = String::from_utf8_lossy(&bytes).into_owned();
            prop_assert!(v.verify_at(&mutated, NOW).is_err(), "byte {} of {}", i, token);
            // The valid one still passes, and the mutated one is refused after it is cached.
            prop_assert!(v.verify_at(&token, NOW).is_ok());
            prop_assert!(v.verify_at(&mutated, NOW).is_err());
        }

        #[test]
        fn any_input_is_a_value_or_an_error(input in "\\PC{0,300}", bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let v = verifier();
            let _ = v.verify_at(&input, NOW);
            let _ = v.verify_at(&format!("v1.{input}"), NOW);
            let _ = v.verify_at(&String::from_utf8_lossy(&bytes), NOW);
            let _ = PublicKeys::parse(&input);
        }
    }
}
