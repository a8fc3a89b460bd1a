//! The Harbor verifier in a Docker sandbox (the sandbox base image): `tests/` replaces whatever
//! the agent left at `/tests`, stale reward files do not count, `reward.txt` and a multi-key
//! `reward.json` score, the verifier's variables reach `test.sh`, and a verifier that writes no
//! reward, a malformed one, or runs past its timeout is an error, never a score of 0.
//!
//! Skips (printing why) only when no Docker daemon answers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::sync::Arc;
use std::time::Duration;

use uniagent_core::{Deployment, DeploymentExt};
use uniagent_envs::docker::daemon_reachable;
use uniagent_envs::{DockerConfig, DockerDeployment};
use uniagent_rewards::harbor::{HarborTask, HarborVerifier};
use uniagent_rewards::RewardError;

/// A task whose verifier runs `test` (a bash body), with `toml` as its task.toml.
fn task(toml: &str, test: &str) -> (tempfile::TempDir, HarborTask) {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("task.toml", toml.to_owned()),
        (
            "instruction.md",
            "Write hello to /app/hello.txt.\n".to_owned(),
        ),
        (
            "environment/Dockerfile",
            "FROM uniagent-sandbox-base:latest\n".to_owned(),
        ),
        ("tests/test.sh", format!("#!/bin/bash\n{test}\n")),
        ("tests/data/expected.txt", "hello\n".to_owned()),
    ];
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let task = HarborTask::load(dir.path()).unwrap();
    (dir, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verifier_scores_by_its_reward_files_and_fails_loudly_without_one() {
    if let Err(e) = daemon_reachable().await {
        eprintln!("SKIPPED: no Docker daemon is reachable ({e})");
        return;
    }
    let body = async {
        let sandbox: Arc<dyn Deployment> = Arc::new(DockerDeployment::new(DockerConfig {
            image: "uniagent-sandbox-base:latest".into(),
            memory_bytes: Some(256 << 20),
            run_id: Some(format!("harbor-test-{}", std::process::id())),
            server_binary: uniagent_envs::host::find_server_binary(None).ok(),
            ..DockerConfig::default()
        }));
        sandbox.start().await.unwrap();
        // The agent's work, a stale reward of 1, and a planted /tests/test.sh.
        let planted = "mkdir -p /app /logs/verifier /tests && echo hello > /app/hello.txt \
            && echo 1 > /logs/verifier/reward.txt && printf 'echo 1 > /logs/verifier/reward.txt' > /tests/test.sh";
        sandbox.sh(planted, Duration::from_secs(30)).await.unwrap();
        let verifier = HarborVerifier::default();

        let compare = "if cmp -s /app/hello.txt /tests/data/expected.txt && [ \"$GREETING\" = hi-there ]; \
            then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi; echo checked; exit 3";
        let (_d, t) = task(
            "[verifier]\ntimeout_sec = 30.0\nenv = { GREETING = \"hi-${UNIAGENT_HARBOR_TEST_NOPE:-there}\" }\n",
            compare,
        );
        let outcome = verifier.verify(&sandbox, &t).await.unwrap();
        assert_eq!(outcome.score, 1.0, "{outcome:?}");
        assert!(outcome.success);
        assert_eq!(
            outcome.details["test_exit_code"], 3,
            "the exit code does not count"
        );
        assert!(outcome.details["output"]
            .as_str()
            .unwrap()
            .contains("checked"));
        // The planted test is gone.
        let tests = sandbox
            .sh("ls /tests", Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(tests.stdout, "data\ntest.sh\n");

        // Without the agent's work: 0, a real score.
        sandbox
            .sh("rm /app/hello.txt", Duration::from_secs(10))
            .await
            .unwrap();
        let outcome = verifier.verify(&sandbox, &t).await.unwrap();
        assert_eq!((outcome.score, outcome.success), (0.0, false));

        // Several keys: `reward` is the score, every key is kept.
        let (_d, t) = task(
            "",
            "echo '{\"reward\": 0.5, \"style\": 1}' > /logs/verifier/reward.json; echo 1 > /logs/verifier/reward.txt",
        );
        let outcome = verifier.verify(&sandbox, &t).await.unwrap();
        assert_eq!(outcome.score, 0.5);
        assert_eq!(outcome.details["rewards"]["style"], 1.0);
        // ... or the configured key.
        let by_style = HarborVerifier {
            primary: "style".into(),
            ..HarborVerifier::default()
        };
        assert_eq!(by_style.verify(&sandbox, &t).await.unwrap().score, 1.0);

        // No reward (the stale one was removed), a malformed one, a timeout: errors.
        for (toml, test, needle) in [
            ("", "echo nothing", "neither"),
            ("", "echo maybe > /logs/verifier/reward.txt", "not a number"),
            ("[verifier]\ntimeout_sec = 2.0\n", "sleep 30", "timeout_sec"),
        ] {
            let (_d, t) = task(toml, test);
            let err = verifier.verify(&sandbox, &t).await.unwrap_err();
            assert!(matches!(err, RewardError::VerifierFailed { .. }), "{err:?}");
            assert!(err.to_string().contains(needle), "{err}");
        }
        sandbox.stop().await.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(300), body)
        .await
        .expect("the verifier test finishes within 300 s");
}
