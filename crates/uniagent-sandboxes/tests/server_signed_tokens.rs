//! `uniagent-sandbox --auth-public-key-file` as a Kubernetes template starts it
//! (docs/decisions/0008-k8s-sandboxes.md, "The auth token"): the real binary accepts a token
//! minted for its own name by a listed key, and answers 401 to every other one.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command};
use std::time::{SystemTime, UNIX_EPOCH};

use uniagent_core::testing::spawn_with_first_line;
use uniagent_sandboxes::signed_token::Minter;

const BIN: &str = env!("CARGO_BIN_EXE_uniagent-sandbox");

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Two trusted keys (`k1`, `k2`) in a key file; the minters of both and of an untrusted one.
struct Keys {
    _dir: tempfile::TempDir,
    file: std::path::PathBuf,
    k1: Minter,
    k2: Minter,
    stranger: Minter,
}

fn keys() -> Keys {
    let (k1, k2, stranger) = (
        Minter::from_seed([11; 32]),
        Minter::from_seed([12; 32]),
        Minter::from_seed([13; 32]),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys");
    std::fs::write(
        &file,
        format!(
            "# the worker keys\nk1 {}\nk2 {}\n",
            k1.public_key_base64(),
            k2.public_key_base64()
        ),
    )
    .unwrap();
    Keys {
        _dir: dir,
        file,
        k1,
        k2,
        stranger,
    }
}

/// A server with `args` (and `name` in `UNIAGENT_SANDBOX_NAME`, if given); its URL.
fn start(key_file: &Path, args: &[&str], env_name: Option<&str>) -> (Child, String) {
    let mut command = Command::new(BIN);
    command
        .args(["--host", "127.0.0.1", "--port", "0", "--lifetime", "60"])
        .arg("--auth-public-key-file")
        .arg(key_file)
        .args(args)
        .env_remove("UNIAGENT_SANDBOX_TOKEN")
        .env_remove("UNIAGENT_SANDBOX_NAME");
    if let Some(name) = env_name {
        command.env("UNIAGENT_SANDBOX_NAME", name);
    }
    let (child, line) = spawn_with_first_line(&mut command);
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line:?}");
    (child, url)
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// `GET /is_alive` with `key` (none: no header): the status and the body.
async fn is_alive(url: &str, key: Option<&str>) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new().get(format!("{url}/is_alive"));
    if let Some(key) = key {
        request = request.header("X-API-Key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn accepts_only_tokens_for_its_own_name_by_a_listed_key() {
    let keys = keys();
    let name = "ua-run-0123456789ab";
    let (child, url) = start(&keys.file, &["--sandbox-name", name], Some("ua-ignored"));
    let later = now() + 600;
    runtime().block_on(async {
        let good = keys.k1.mint(name, later, "k1");
        let ok = serde_json::json!({"is_alive": true, "message": ""});
        assert_eq!(is_alive(&url, Some(&good)).await, (200, ok.clone()));
        // Again (the cached path), and a token of the second key.
        assert_eq!(is_alive(&url, Some(&good)).await, (200, ok.clone()));
        assert_eq!(
            is_alive(&url, Some(&keys.k2.mint(name, later, "k2"))).await,
            (200, ok.clone())
        );
        // The token drives a shell.
        let client = reqwest::Client::new();
        let post = |path: &str, body: serde_json::Value| {
            client
                .post(format!("{url}{path}"))
                .header("X-API-Key", good.clone())
                .json(&body)
                .send()
        };
        let created = post(
            "/create_session",
            serde_json::json!({"session_type": "bash"}),
        )
        .await
        .unwrap();
        assert_eq!(created.status(), 200);
        let out: serde_json::Value = post(
            "/run_in_session",
            serde_json::json!({"action_type": "bash", "command": "echo signed", "timeout": 5}),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(out["output"], "signed\n");

        let invalid = serde_json::json!({"detail": "Invalid API Key"});
        let refused = [
            ("another sandbox", keys.k1.mint("ua-run-other", later, "k1")),
            // The `--sandbox-name` wins over the environment.
            (
                "the environment's name",
                keys.k1.mint("ua-ignored", later, "k1"),
            ),
            ("expired", keys.k1.mint(name, now() - 1, "k1")),
            ("expiring now", keys.k1.mint(name, now(), "k1")),
            ("an unknown key", keys.stranger.mint(name, later, "k1")),
            ("an unknown key id", keys.stranger.mint(name, later, "k3")),
            ("the wrong listed key", keys.k2.mint(name, later, "k1")),
            ("garbage", "garbage".to_owned()),
            ("a v1-shaped garbage", "v1.e30.AAAA".to_owned()),
            (
                "the good token, truncated",
                good[..good.len() - 1].to_owned(),
            ),
            ("the good token, extended", format!("{good}A")),
            ("a public key", keys.k1.public_key_base64()),
        ];
        for (what, token) in refused {
            assert_eq!(
                is_alive(&url, Some(&token)).await,
                (401, invalid.clone()),
                "{what}"
            );
        }
        assert_eq!(
            is_alive(&url, None).await,
            (401, serde_json::json!({"detail": "Not authenticated"}))
        );
        // The cached token still works after the refusals.
        assert_eq!(is_alive(&url, Some(&good)).await, (200, ok));
    });
    stop(child);
}

#[test]
fn learns_its_name_from_the_environment() {
    let keys = keys();
    let (child, url) = start(&keys.file, &[], Some("ua-from-downward-api"));
    let later = now() + 600;
    runtime().block_on(async {
        let mine = keys.k1.mint("ua-from-downward-api", later, "k1");
        assert_eq!(is_alive(&url, Some(&mine)).await.0, 200);
        let other = keys.k1.mint("ua-run-0123456789ab", later, "k1");
        assert_eq!(is_alive(&url, Some(&other)).await.0, 401);
    });
    stop(child);
}

/// Runs the binary expecting it to refuse to start; its stderr.
fn refused_start(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = Command::new(BIN);
    command
        .args(["--host", "127.0.0.1", "--port", "0", "--lifetime", "5"])
        .args(args)
        .env_remove("UNIAGENT_SANDBOX_TOKEN")
        .env_remove("UNIAGENT_SANDBOX_NAME");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    assert!(!out.status.success(), "{args:?} started");
    assert!(out.stdout.is_empty(), "{args:?} announced a port");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn refuses_to_start_without_a_name_or_with_a_shared_token_or_bad_keys() {
    let keys = keys();
    let file = keys.file.to_str().unwrap();
    let key_file = ["--auth-public-key-file", file];
    let e = refused_start(&key_file, &[]);
    assert!(e.contains("UNIAGENT_SANDBOX_NAME"), "{e}");
    let e = refused_start(&key_file, &[("UNIAGENT_SANDBOX_NAME", "")]);
    assert!(e.contains("empty"), "{e}");
    let e = refused_start(
        &[&key_file[..], &["--sandbox-name", "x", "--auth-token", "T"]].concat(),
        &[],
    );
    assert!(e.contains("--auth-token"), "{e}");
    let e = refused_start(
        &[
            &key_file[..],
            &["--sandbox-name", "x", "--insecure-no-auth"],
        ]
        .concat(),
        &[],
    );
    assert!(e.contains("--insecure-no-auth"), "{e}");
    let e = refused_start(
        &[&key_file[..], &["--sandbox-name", "x"]].concat(),
        &[("UNIAGENT_SANDBOX_TOKEN", "T")],
    );
    assert!(e.contains("UNIAGENT_SANDBOX_TOKEN"), "{e}");
    let e = refused_start(&["--sandbox-name", "x", "--auth-token", "T"], &[]);
    assert!(e.contains("--auth-public-key-file"), "{e}");

    let bad = keys.file.with_file_name("bad-keys");
    std::fs::write(&bad, "# ok\nk1 not-a-key\n").unwrap();
    let e = refused_start(
        &[
            "--auth-public-key-file",
            bad.to_str().unwrap(),
            "--sandbox-name",
            "x",
        ],
        &[],
    );
    assert!(e.contains("bad-keys: line 2"), "{e}");
    let e = refused_start(
        &[
            "--auth-public-key-file",
            "/nonexistent/keys",
            "--sandbox-name",
            "x",
        ],
        &[],
    );
    assert!(e.contains("/nonexistent/keys"), "{e}");
}
