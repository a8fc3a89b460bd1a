//! Seconds per instance of `grade_predictions` in Docker, next to the same work done by hand in
//! the same kind of container: start a container of the task image, apply the patch and the
//! test patch with `git apply`, run the test command, stop. The ratio is the grader's overhead
//! (base64 transfer, hardened git, restoring test files, log reading, per-instance files).
//!
//! `cargo bench -p uniagent-rewards --bench grade_docker [-- N]` (N instances, default 6).
//! Needs a Docker daemon and the sandbox base image (`$UNIAGENT_DOCKER_IMAGE`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: panics are failures

use std::path::Path;
use std::process::Command as Process;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use uniagent_core::{Deployment, DeploymentExt, Task};
use uniagent_envs::{DockerConfig, DockerDeployment};
use uniagent_rewards::grade::{grade_predictions, GradeRun, Prediction, SweInstance};

const CALC: &str = "def add(a, b):\n    return a - b\n";
const TESTS: &str = "import unittest\n\nfrom calc import add\n\n\nclass CalcTest(unittest.TestCase):\n    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n";
const NEW_TEST: &str = "\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n";
const TEST_CMD: &str = "python3 -m unittest -v test_calc";

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

fn diff(repo: &Path, file: &str, content: &str) -> String {
    let before = std::fs::read_to_string(repo.join(file)).unwrap();
    std::fs::write(repo.join(file), content).unwrap();
    let patch = run(repo, "git", &["diff"]);
    std::fs::write(repo.join(file), before).unwrap();
    patch
}

fn config(image: &str) -> DockerConfig {
    DockerConfig {
        image: image.to_owned(),
        memory_bytes: Some(512 << 20),
        server_binary: uniagent_envs::host::find_server_binary(None).ok(),
        ..DockerConfig::default()
    }
}

/// The baseline: one container, both patches by plain `git apply`, the tests, stop.
async fn by_hand(image: &str, gold: &str, test_patch: &str) {
    let d: Arc<dyn Deployment> = Arc::new(DockerDeployment::new(config(image)));
    d.start().await.unwrap();
    d.write_text("/tmp/gold.patch", gold).await.unwrap();
    d.write_text("/tmp/test.patch", test_patch).await.unwrap();
    let out = d
        .sh(&format!("cd /testbed && git apply /tmp/gold.patch && git apply /tmp/test.patch && {TEST_CMD} 2>&1"), 600.0)
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.stdout);
    d.stop().await.unwrap();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .filter_map(|a| a.parse().ok())
        .next()
        .unwrap_or(6);
    if let Err(e) = uniagent_envs::docker::daemon_reachable().await {
        eprintln!("grade_docker: no Docker daemon ({e}); nothing measured");
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
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!("FROM {base_image}\nCOPY testbed /testbed\n"),
    )
    .unwrap();
    let image = format!("uniagent-grade-bench:{}", std::process::id());
    run(dir.path(), "docker", &["build", "-q", "-t", &image, "."]);

    let dataset: Vec<SweInstance> = (0..n)
        .map(|i| {
            SweInstance::from_json(&json!({
                "instance_id": format!("calc-{i}"), "repo": "example/calc", "base_commit": base,
                "test_patch": test_patch, "FAIL_TO_PASS": ["test_add (test_calc.CalcTest.test_add)"],
                "PASS_TO_PASS": ["test_zero (test_calc.CalcTest.test_zero)"], "test_cmd": TEST_CMD,
                "log_parser": "parse_log_django", "image_name": image,
            }))
            .unwrap()
        })
        .collect();
    let predictions: Vec<Prediction> = dataset
        .iter()
        .map(|i| Prediction {
            instance_id: i.instance_id.clone(),
            model_patch: Some(gold.clone()),
            model_name_or_path: "bench".into(),
        })
        .collect();
    let factory = |task: &Task| -> uniagent_core::Result<Box<dyn Deployment>> {
        Ok(Box::new(DockerDeployment::new(config(
            task.metadata["image"].as_str().unwrap(),
        ))))
    };

    // Alternate the two so drift in the machine's load hits both alike.
    let (mut graded, mut manual) = (0.0, 0.0);
    for instance in dataset.chunks(1) {
        let run = GradeRun {
            concurrency: 1,
            ..GradeRun::default()
        };
        let started = Instant::now();
        let own: Vec<Prediction> = predictions
            .iter()
            .filter(|p| p.instance_id == instance[0].instance_id)
            .cloned()
            .collect();
        let report = grade_predictions(instance, &own, &factory, &run)
            .await
            .unwrap();
        graded += started.elapsed().as_secs_f64();
        assert_eq!(report.resolved_instances, 1, "{report:?}");
        let started = Instant::now();
        by_hand(&image, &gold, &test_patch).await;
        manual += started.elapsed().as_secs_f64();
    }
    let _ = Process::new("docker").args(["rmi", "-f", &image]).output();
    let (per_graded, per_manual) = (graded / n as f64, manual / n as f64);
    println!("grade_docker: {n} instances, one at a time");
    println!("  grade_predictions: {per_graded:.2} s per instance");
    println!("  same tests by hand in the same containers: {per_manual:.2} s per instance");
    println!("  ratio: {:.2}x", per_graded / per_manual);
}
