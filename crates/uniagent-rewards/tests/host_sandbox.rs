//! The sandbox rewards on a real host sandbox: a git repository with a Python bug, its
//! unittest suite, a test patch and an agent that tampers with the tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::sync::Arc;
use std::time::Duration;

use reward_common::{score_submission as score, sh};
use serde_json::json;
use uniagent_core::{
    Deployment, DeploymentExt, ErrorKind, Message, RewardContext, RewardSpec, Task,
};
use uniagent_rewards::{CommandReward, CommandScore, LogFormat, TestsReward};
use uniagent_sandboxes::{HostConfig, HostDeployment};

mod reward_common;

/// A started host sandbox, or `None` (with the reason printed) when the server is not built.
async fn sandbox() -> Option<Arc<dyn Deployment>> {
    let server = reward_common::server_binary()?;
    let deployment: Arc<dyn Deployment> = Arc::new(HostDeployment::new(HostConfig {
        server_binary: Some(server),
        ..HostConfig::default()
    }));
    deployment.start().await.unwrap();
    Some(deployment)
}

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";
const TESTS: &str = "import unittest\n\nfrom calc import add, sub\n\n\nclass CalcTest(unittest.TestCase):\n    def test_sub(self):\n        self.assertEqual(sub(5, 3), 2)\n";
const NEW_TEST: &str = "\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n";

/// Builds the repository (base commit: the bug, and tests without `test_add`) and the test
/// patch adding `test_add`. Returns the repository's path, the base commit and the patch.
async fn repository(d: &Arc<dyn Deployment>) -> (String, String, String) {
    let repo = format!("{}/repo", sh(d, "pwd").await.trim());
    d.write_text(&format!("{repo}/calc.py"), CALC)
        .await
        .unwrap();
    d.write_text(&format!("{repo}/test_calc.py"), TESTS)
        .await
        .unwrap();
    let base = sh(
        d,
        &format!(
            "cd {repo} && git init -q && git config user.email t@example.com && \
             git config user.name t && git add . && git commit -qm base && git rev-parse HEAD"
        ),
    )
    .await;
    d.write_text(
        &format!("{repo}/test_calc.py"),
        &format!("{TESTS}{NEW_TEST}"),
    )
    .await
    .unwrap();
    let patch = sh(
        d,
        &format!("cd {repo} && git diff && git checkout -q test_calc.py"),
    )
    .await;
    assert!(patch.contains("+    def test_add"), "{patch}");
    (repo, base.trim().to_owned(), patch)
}

/// The unittest ids as this Python prints them (3.11 added the method name in parentheses).
async fn test_id(d: &Arc<dyn Deployment>, method: &str) -> String {
    let new_style = sh(
        d,
        "python3 -c 'import sys; print(sys.version_info >= (3, 11))'",
    )
    .await;
    if new_style.trim() == "True" {
        format!("{method} (test_calc.CalcTest.{method})")
    } else {
        format!("{method} (test_calc.CalcTest)")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tests_reward_judges_the_real_test_suite_and_ignores_tampering() {
    let Some(d) = sandbox().await else { return };
    let (repo, base, patch) = repository(&d).await;
    let (add, sub) = (test_id(&d, "test_add").await, test_id(&d, "test_sub").await);
    let task = Task::new("calc-1", vec![Message::user("fix add")])
        .with_metadata(
            "FAIL_TO_PASS",
            json!(serde_json::to_string(&[&add]).unwrap()),
        )
        .with_metadata("PASS_TO_PASS", json!([sub]))
        .with_metadata("test_patch", json!(patch))
        .with_metadata("base_commit", json!(base))
        .with_metadata("test_cmd", json!("python3 -m unittest -v test_calc"))
        .with_metadata("repo_dir", json!(repo));
    let reward = TestsReward::from_task_metadata().with_log_format(LogFormat::Unittest);

    // The bug is still there: the new test fails, the old one passes.
    let out = score(&reward, &task, &d).await.unwrap();
    assert!(!out.success, "{out:?}");
    assert_eq!(out.details["fail_to_pass_failing"], json!([add]), "{out:?}");
    assert_eq!(out.details["pass_to_pass_passed"], json!(1), "{out:?}");

    // The agent rewrites the test file so that everything "passes", without fixing the bug.
    d.write_text(
        &format!("{repo}/test_calc.py"),
        "import unittest\n\nclass CalcTest(unittest.TestCase):\n    def test_add(self):\n        pass\n\n    def test_sub(self):\n        pass\n",
    )
    .await
    .unwrap();
    let out = score(&reward, &task, &d).await.unwrap();
    assert!(!out.success, "tampered tests were trusted: {out:?}");

    // The agent breaks `sub` while fixing `add`: PASS_TO_PASS catches it.
    d.write_text(
        &format!("{repo}/calc.py"),
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n",
    )
    .await
    .unwrap();
    let out = score(&reward, &task, &d).await.unwrap();
    assert!(!out.success, "{out:?}");
    assert_eq!(out.details["pass_to_pass_failing"], json!([sub]), "{out:?}");

    // The real fix.
    d.write_text(
        &format!("{repo}/calc.py"),
        &CALC.replacen("a - b", "a + b", 1),
    )
    .await
    .unwrap();
    let out = score(&reward, &task, &d).await.unwrap();
    assert!(out.success, "{out:?}");
    assert_eq!(out.score, 1.0);
    assert_eq!(out.details["exit_code"], json!(0));

    // A test id the log never mentions counts as failing.
    let ghost = task
        .clone()
        .with_metadata("PASS_TO_PASS", json!(["test_ghost (x.Y)"]));
    let out = score(&reward, &ghost, &d).await.unwrap();
    assert!(!out.success);
    assert_eq!(out.details["missing_from_log"], json!(["test_ghost (x.Y)"]));
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_task_data_is_a_typed_error_and_a_hang_scores_zero() {
    let Some(d) = sandbox().await else { return };
    let (repo, base, patch) = repository(&d).await;
    let task = Task::new("calc-2", vec![Message::user("fix add")])
        .with_metadata(
            "FAIL_TO_PASS",
            json!(["test_add (test_calc.CalcTest.test_add)"]),
        )
        .with_metadata("test_patch", json!(patch))
        .with_metadata("repo_dir", json!(repo));
    let reward = TestsReward::new("python3 -m unittest -v test_calc");

    let err = score(&reward, &task, &d).await.unwrap_err();
    assert!(err.to_string().contains("base_commit"), "{err}");

    let bad_patch = task
        .clone()
        .with_metadata("base_commit", json!(base))
        .with_metadata("test_patch", json!(patch.replace("CalcTest", "Nope")));
    let err = score(&reward, &bad_patch, &d).await.unwrap_err();
    assert!(err.to_string().contains("applying the test patch"), "{err}");
    assert_eq!(err.kind(), ErrorKind::Internal);

    let hang = TestsReward::new("sleep 30")
        .in_repo(&repo)
        .with_timeout(Duration::from_secs(1));
    let task = task.with_metadata("base_commit", json!(base));
    let out = score(&hang, &task, &d).await.unwrap();
    assert_eq!((out.score, out.success), (0.0, false));
    assert_eq!(out.details["timed_out"], json!(true));
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_reward_reads_exit_codes_and_printed_scores() {
    let Some(d) = sandbox().await else { return };
    let task = Task::new("cmd", vec![Message::user("create done.txt")])
        .with_metadata("reward_command", json!("test -f done.txt"));
    let from_task = CommandReward::from_task_metadata();
    assert_eq!(score(&from_task, &task, &d).await.unwrap().score, 0.0);
    sh(&d, "touch done.txt").await;
    let out = score(&from_task, &task, &d).await.unwrap();
    assert_eq!((out.score, out.success), (1.0, true));

    let printed = CommandReward::new("echo checking; echo 0.25").scored_by(CommandScore::LastLine);
    let out = score(&printed, &task, &d).await.unwrap();
    assert_eq!((out.score, out.success), (0.25, false));
    let failed = CommandReward::new("echo 1; exit 3").scored_by(CommandScore::LastLine);
    let out = score(&failed, &task, &d).await.unwrap();
    assert_eq!(out.score, 0.0);
    assert_eq!(out.details["exit_code"], json!(3));

    let hang = CommandReward::new("sleep 30").with_timeout(Duration::from_secs(1));
    assert_eq!(
        score(&hang, &task, &d).await.unwrap().details["timed_out"],
        json!(true)
    );

    let no_command = Task::new("cmd", vec![]);
    let err = score(&from_task, &no_command, &d).await.unwrap_err();
    assert!(err.to_string().contains("reward_command"), "{err}");

    let ctx = RewardContext {
        task: &task,
        messages: &[],
        signal: None,
        deployment: None,
    };
    let err = from_task.score(&ctx).await.unwrap_err();
    assert!(err.to_string().contains("has none"), "{err}");
    d.stop().await.unwrap();
}
