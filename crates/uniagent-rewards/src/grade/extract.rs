//! Taking the agent's work out of its sandbox as a patch, and nothing else.

use std::sync::Arc;
use std::time::Duration;

use uniagent_core::Deployment;

use crate::error::{tail, RewardError};
use crate::sandbox::{run, shell_quote, Run};

/// Environment that keeps git from reading anything the agent could have planted outside the
/// repository: no system or global config, no replace objects, no prompts.
pub(crate) const GIT_ENV: &str = "export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \
GIT_NO_REPLACE_OBJECTS=1 GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0 GIT_ATTR_NOSYSTEM=1";

/// git with hooks, fsmonitor, external diff and line-ending conversion off.
pub(crate) const GIT: &str = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false \
-c core.autocrlf=false -c diff.external= -c core.pager=cat";

/// The agent's changes to `repo` since `base_commit`, as a binary-safe `git diff` (new,
/// deleted and binary files included; ignored files excluded, as `git add -A` would).
///
/// Only the repository's object store is read: the diff runs in a throwaway git directory
/// (borrowing the objects through `alternates`) with its own empty index and config, so the
/// agent's `.git/config` (filters, aliases, external diff), hooks, replace refs and index play
/// no part. The bytes come back base64-encoded, so non-UTF-8 content survives.
pub async fn extract_patch(
    deployment: &Arc<dyn Deployment>,
    repo: &str,
    base_commit: &str,
) -> Result<Vec<u8>, RewardError> {
    extract_patch_excluding(deployment, repo, base_commit, &[]).await
}

/// [`extract_patch`] leaving out `exclude` (paths relative to the repository, with all they
/// hold): an R2E-Gym image keeps its untracked virtualenv and test harness in the repository,
/// and they are no part of the agent's work.
pub async fn extract_patch_excluding(
    deployment: &Arc<dyn Deployment>,
    repo: &str,
    base_commit: &str,
    exclude: &[&str],
) -> Result<Vec<u8>, RewardError> {
    let pathspec: String = exclude
        .iter()
        .map(|p| format!(" {}", shell_quote(&format!(":(top,exclude,literal){p}"))))
        .collect();
    let script = format!(
        r#"set -e
{GIT_ENV}
repo={repo}
[ -d "$repo/.git/objects" ] || {{ echo "no git object store at $repo/.git" >&2; exit 3; }}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export HOME="$t" XDG_CONFIG_HOME="$t"
git init -q --bare "$t/g"
echo "$repo/.git/objects" > "$t/g/objects/info/alternates"
export GIT_DIR="$t/g" GIT_WORK_TREE="$repo" GIT_INDEX_FILE="$t/index"
cd "$repo"
{GIT} read-tree {base}
{GIT} add -A -- .{pathspec}
{GIT} diff --cached --binary --full-index --no-color --no-ext-diff --no-textconv {base} > "$t/patch"
base64 < "$t/patch" | tr -d '\n'
"#,
        repo = shell_quote(repo),
        base = shell_quote(base_commit),
        pathspec = pathspec,
    );
    match run(deployment, &script, None, Duration::from_secs(300)).await? {
        Run::Finished(r) if r.exit_code == Some(0) => {
            decode_base64(r.stdout.trim()).ok_or_else(|| RewardError::SetupFailed {
                step: "extracting the patch".into(),
                exit_code: Some(0),
                output: "the diff did not come back as base64".into(),
            })
        }
        Run::Finished(r) => Err(RewardError::SetupFailed {
            step: "extracting the patch".into(),
            exit_code: r.exit_code,
            output: tail(&r.stdout, 2000),
        }),
        Run::TimedOut => Err(RewardError::SetupFailed {
            step: "extracting the patch".into(),
            exit_code: None,
            output: "timed out after 300 s".into(),
        }),
    }
}

/// Standard base64 (with `=` padding) to bytes; `None` on anything else.
pub(crate) fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || chunk[..4 - pad].contains(&b'=') {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * pad as u32;
        let three = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&three[..3 - pad]);
    }
    Some(out)
}

/// Bytes to standard base64 with padding.
pub(crate) fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| n << 8 | b as u32) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn base64_round_trips(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let text = encode_base64(&bytes);
            prop_assert_eq!(decode_base64(&text), Some(bytes));
        }
    }

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(
            encode_base64(b"any carnal pleas"),
            "YW55IGNhcm5hbCBwbGVhcw=="
        );
        assert_eq!(
            decode_base64("YW55IGNhcm5hbCBwbGVhc3U="),
            Some(b"any carnal pleasu".to_vec())
        );
        assert_eq!(decode_base64("YW5"), None);
        assert_eq!(decode_base64("Y=55"), None);
    }
}
