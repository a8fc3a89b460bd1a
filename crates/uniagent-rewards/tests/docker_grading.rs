//! `grade_predictions` in Docker: a task image (the sandbox base image plus a repository at
//! `/testbed`), one fresh container per instance; the gold patch resolves, the empty and the
//! wrong patch do not, and no container is left behind.
//!
//! Skips (printing why) only when no Docker daemon answers; then the sandbox base image must
//! exist (scripts/setup/40-docker-image.sh builds it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::path::Path;
use std::process::Command as Process;
use std::time::Instant;

use serde_json::json;
use uniagent_core::{Deployment, Task};
use uniagent_envs::docker::{daemon_reachable, list_managed};
use uniagent_envs::{DockerConfig, DockerDeployment};
use uniagent_rewards::grade::{grade_predictions, GradeRun, Prediction, SweInstance};

const CALC: &str = "def add(a, b):\n    return a - b\n";
const TESTS: &str = "import unittest\n\nfrom calc import add\n\n\nclass CalcTest(unittest.TestCase):\n    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n";
const NEW_TEST: &str = "\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n";

fn run(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = Process::new(program)
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Removes the test's image, also when the test panics.
struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        let _ = Process::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

fn diff(repo: &Path, file: &str, content: &str) -> String {
    let before = std::fs::read_to_string(repo.join(file)).unwrap();
    std::fs::write(repo.join(file), content).unwrap();
    let patch = run(repo, "git", &["diff"]);
    std::fs::write(repo.join(file), before).unwrap();
    patch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grades_a_swe_style_dataset_in_fresh_containers() {
    if let Err(e) = daemon_reachable().await {
        eprintln!("SKIPPED: no Docker daemon is reachable ({e})");
        return;
    }
    let base_image = std::env::var("UNIAGENT_DOCKER_IMAGE")
        .unwrap_or_else(|_| "uniagent-sandbox-base:latest".into());
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("testbed");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("calc.py"), CALC).unwrap();
    std::fs::write(repo.join("test_calc.py"), TESTS).unwrap();
    run(&repo, "git", &["init", "-q"]);
    run(&repo, "git", &["add", "."]);
    run(
        &repo,
        "git",
        &[
            "-c",
            "user.email=t@e",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "base",
        ],
    );
    let base = run(&repo, "git", &["rev-parse", "HEAD"]).trim().to_owned();
    let test_patch = diff(&repo, "test_calc.py", &format!("{TESTS}{NEW_TEST}"));
    let gold = diff(&repo, "calc.py", &CALC.replace("a - b", "a + b"));
    let wrong = diff(&repo, "calc.py", &CALC.replace("a - b", "a * b + 1"));
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!("FROM {base_image}\nCOPY testbed /testbed\n"),
    )
    .unwrap();
    let image = format!(
        "uniagent-grade-test:{}-{:x}",
        std::process::id(),
        fastrand_id()
    );
    let _guard = ImageGuard(image.clone());
    run(dir.path(), "docker", &["build", "-q", "-t", &image, "."]);

    let row = |id: &str| {
        SweInstance::from_json(&json!({
            "instance_id": id, "repo": "example/calc", "base_commit": base, "patch": gold,
            "test_patch": test_patch, "FAIL_TO_PASS": ["test_add (test_calc.CalcTest.test_add)"],
            "PASS_TO_PASS": ["test_zero (test_calc.CalcTest.test_zero)"],
            "test_cmd": "python3 -m unittest -v test_calc", "log_parser": "parse_log_django",
            "image_name": image,
        }))
        .unwrap()
    };
    let dataset = vec![row("calc-gold"), row("calc-empty"), row("calc-wrong")];
    let pred = |id: &str, patch: &str| Prediction {
        instance_id: id.into(),
        model_patch: Some(patch.into()),
        model_name_or_path: "test-model".into(),
    };
    let predictions = vec![
        pred("calc-gold", &gold),
        pred("calc-empty", ""),
        pred("calc-wrong", &wrong),
    ];
    let run_id = format!("grade-test-{}", std::process::id());
    let server = uniagent_envs::host::find_server_binary(None).ok();
    let factory = {
        let run_id = run_id.clone();
        move |task: &Task| -> uniagent_core::Result<Box<dyn Deployment>> {
            Ok(Box::new(DockerDeployment::new(DockerConfig {
                image: task.metadata["image"].as_str().unwrap().to_owned(),
                memory_bytes: Some(512 << 20),
                run_id: Some(run_id.clone()),
                server_binary: server.clone(),
                ..DockerConfig::default()
            })))
        }
    };
    let out = tempfile::tempdir().unwrap();
    let grade_run = GradeRun {
        out_dir: Some(out.path().to_path_buf()),
        concurrency: 2,
        ..GradeRun::default()
    };
    let started = Instant::now();
    let report = grade_predictions(&dataset, &predictions, &factory, &grade_run)
        .await
        .unwrap();
    // Informational only (timing is for benches): seconds per graded instance.
    eprintln!(
        "graded 2 containers in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(report.resolved_ids, ["calc-gold"], "{report:?}");
    assert_eq!(report.unresolved_ids, ["calc-wrong"], "{report:?}");
    assert_eq!(report.empty_patch_ids, ["calc-empty"], "{report:?}");
    assert!(report.error_ids.is_empty(), "{report:?}");

    let docker = uniagent_envs::docker::engine().await.unwrap();
    let left = list_managed(&docker, Some(&run_id)).await.unwrap();
    assert!(left.is_empty(), "containers left behind: {left:?}");
}

fn fastrand_id() -> u32 {
    // Distinct per test run without a random crate: time and pid.
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}
