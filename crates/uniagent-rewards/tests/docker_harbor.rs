//! The Harbor verifier in a Docker sandbox (the sandbox base image): `tests/` replaces whatever
//! the agent left at `/tests`, stale reward files do not count, `reward.txt` and a multi-key
//! `reward.json` score, the verifier's variables reach `test.sh`, and a verifier that writes no
//! reward, a malformed one, or runs past its timeout is an error, never a score of 0.
//!
//! The separate verifier runs in a fresh sandbox holding exactly the agent's final working
//! directory, with `tests/` there only.
//!
//! Skips (printing why) only when no Docker daemon answers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::sync::Arc;
use std::time::Duration;

use uniagent_core::{Deployment, DeploymentExt};
use uniagent_rewards::harbor::{HarborTask, HarborVerifier, VerifierMode};
use uniagent_rewards::RewardError;
use uniagent_sandboxes::docker::daemon_reachable;
use uniagent_sandboxes::{DockerConfig, DockerDeployment};

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
            server_binary: uniagent_sandboxes::host::find_server_binary(None).ok(),
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

fn base_sandbox(tag: &str) -> Arc<dyn Deployment> {
    Arc::new(DockerDeployment::new(DockerConfig {
        image: "uniagent-sandbox-base:latest".into(),
        memory_bytes: Some(256 << 20),
        run_id: Some(format!("harbor-{tag}-{}", std::process::id())),
        server_binary: uniagent_sandboxes::host::find_server_binary(None).ok(),
        ..DockerConfig::default()
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_separate_verifier_sees_the_agents_final_workdir_and_the_agent_never_sees_tests() {
    if let Err(e) = daemon_reachable().await {
        eprintln!("SKIPPED: no Docker daemon is reachable ({e})");
        return;
    }
    let body = async {
        let (agent, fresh) = (base_sandbox("agent"), base_sandbox("verifier"));
        let (a, f) = tokio::join!(agent.start(), fresh.start());
        a.unwrap();
        f.unwrap();
        // The agent's work: a file written, one with a space and binary bytes, one deleted that
        // the image (here: the fresh sandbox) holds.
        let work = "mkdir -p '/app/sub dir' && echo hello > /app/hello.txt \
            && head -c 300000 /dev/urandom > '/app/sub dir/blob' && sha256sum '/app/sub dir/blob' | cut -c1-64 > /tmp/blob.sum";
        let done = agent.sh(work, Duration::from_secs(30)).await.unwrap();
        assert_eq!(done.exit_code, Some(0), "{done:?}");
        let sum = agent
            .sh("cat /tmp/blob.sum", Duration::from_secs(10))
            .await
            .unwrap()
            .stdout;
        fresh
            .sh(
                "mkdir -p /app && echo stale > /app/deleted-by-agent.txt",
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        let check = "ok=1; cmp -s /app/hello.txt /tests/data/expected.txt || ok=0; \
            [ ! -e /app/deleted-by-agent.txt ] || ok=0; \
            [ \"$(sha256sum '/app/sub dir/blob' | cut -c1-64)\" = \"$BLOB_SUM\" ] || ok=0; \
            [ \"$(pwd)\" = /app ] || ok=0; echo $ok > /logs/verifier/reward.txt";
        let toml = format!(
            "[verifier]\nenvironment_mode = \"separate\"\ntimeout_sec = 60.0\nenv = {{ BLOB_SUM = \"{}\" }}\n",
            sum.trim()
        );
        let (_d, t) = task(&toml, check);
        assert_eq!(t.verifier_mode(), VerifierMode::Separate);
        let verifier = HarborVerifier::default();
        let outcome = verifier
            .verify_separate(&agent, &fresh, &t, "/app")
            .await
            .unwrap();
        assert_eq!(outcome.score, 1.0, "{outcome:?}");
        assert!(outcome.details["carried_bytes"].as_u64().unwrap() > 300_000);
        // The tests and the reward live in the verifier's sandbox only.
        let agent_side = agent
            .sh(
                "ls /tests /logs/verifier/reward.txt 2>&1 | wc -l; ls /tmp",
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert!(agent_side.stdout.starts_with("2\n"), "{agent_side:?}");
        assert!(
            !agent_side.stdout.contains("uniagent-harbor-workdir"),
            "{agent_side:?}"
        );
        // A working directory the agent's sandbox lacks, or `/`: verifier failures, not a 0.
        let err = verifier
            .verify_separate(&agent, &fresh, &t, "/nonexistent")
            .await
            .unwrap_err();
        assert!(matches!(err, RewardError::VerifierFailed { .. }), "{err:?}");
        let err = verifier
            .verify_separate(&agent, &fresh, &t, "/")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("workdir"), "{err}");
        let (a, f) = tokio::join!(agent.stop(), fresh.stop());
        a.unwrap();
        f.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(120), body)
        .await
        .expect("the separate verifier test finishes within 120 s");
}
