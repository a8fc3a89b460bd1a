//! Fuzzes the per-sandbox token parser and verifier (`uniagent_sandboxes::signed_token`), which read
//! the `X-API-Key` of every request a sandbox server gets with `--auth-public-key-file`, and
//! the key-file parser. No input may panic. A token is accepted only if it is exactly what the
//! worker's key mints for this sandbox (nothing else verifies: the encoding is canonical and
//! Ed25519 signatures are deterministic), unexpired, under a listed key id; a parsed key file
//! holds only valid key ids.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use uniagent_sandboxes::signed_token::{valid_kid, Minter, PublicKeys, Verifier};

const NAME: &str = "ua-fuzz-0123456789ab";
const NOW: u64 = 1_900_000_000;

fn minter() -> &'static Minter {
    static MINTER: OnceLock<Minter> = OnceLock::new();
    MINTER.get_or_init(|| Minter::from_seed([5; 32]))
}

fn verifier() -> &'static Verifier {
    static VERIFIER: OnceLock<Verifier> = OnceLock::new();
    VERIFIER.get_or_init(|| {
        let keys = PublicKeys::parse(&format!("k1 {}\n", minter().public_key_base64()))
            .expect("the fuzz key file parses");
        Verifier::new(NAME, keys)
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for token in [text.as_ref(), &format!("v1.{text}")] {
        if let Ok(claims) = verifier().verify_at(token, NOW) {
            assert_eq!(claims.aud, NAME);
            assert!(claims.exp > NOW);
            assert_eq!(claims.kid, "k1");
            assert_eq!(minter().mint(&claims.aud, claims.exp, &claims.kid), token);
        }
    }
    if let Ok(keys) = PublicKeys::parse(&text) {
        assert!(!keys.is_empty());
        assert!(keys.kids().all(valid_kid));
    }
    // A token minted from the input's fields round-trips, and one changed byte breaks it.
    if let Some((&flip_at, rest)) = data.split_first() {
        let aud = String::from_utf8_lossy(rest);
        let exp = NOW + 1 + u64::from(flip_at);
        let token = minter().mint(&aud, exp, "k1");
        let own = Verifier::new(aud.as_ref(), verifier().keys().clone());
        let claims = own.verify_at(&token, NOW).expect("a minted token verifies");
        assert_eq!((claims.aud.as_str(), claims.exp), (aud.as_ref(), exp));
        let mut bytes = token.into_bytes();
        let i = usize::from(flip_at) % bytes.len();
        bytes[i] ^= 0x01;
        let changed = String::from_utf8_lossy(&bytes);
        assert!(own.verify_at(&changed, NOW).is_err(), "byte {i} changed");
    }
});
