//! Seconds per instance of `grade_predictions` in Docker, next to the same work done by hand in
//! the same kind of container: start a container of the task image, apply the patch and the
//! test patch with `git apply`, run the test command, stop. The ratio is the grader's overhead
//! (base64 transfer, hardened git, restoring test files, log reading, per-instance files).
//!
//! `cargo bench -p uniagent-rewards --bench grade_docker [-- N]` (N instances, default 6).
//! Needs a Docker daemon and the sandbox base image (`$UNIAGENT_DOCKER_IMAGE`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: panics are failures

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use uniagent_core::{Deployment, DeploymentExt, Task};
use uniagent_rewards::grade::{grade_predictions, GradeRun, Prediction, SweInstance};
use uniagent_sandboxes::{DockerConfig, DockerDeployment};

#[path = "../tests/calc_task/mod.rs"]
mod calc_task;

use calc_task::{CalcTask, TEST_CMD};

fn config(image: &str) -> DockerConfig {
    DockerConfig {
        image: image.to_owned(),
        memory_bytes: Some(512 << 20),
        server_binary: uniagent_sandboxes::host::find_server_binary(None).ok(),
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
        .sh(&format!("cd /testbed && git apply /tmp/gold.patch && git apply /tmp/test.patch && {TEST_CMD} 2>&1"), Duration::from_secs(600))
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
    if let Err(e) = uniagent_sandboxes::docker::daemon_reachable().await {
        eprintln!("grade_docker: no Docker daemon ({e}); nothing measured");
        return;
    }
    let task = CalcTask::build(&format!("uniagent-grade-bench:{}", std::process::id()));
    let (image, gold, test_patch) = (&task.image, &task.gold, &task.test_patch);
    let dataset: Vec<SweInstance> = (0..n)
        .map(|i| SweInstance::from_json(&task.row(&format!("calc-{i}"))).unwrap())
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
        by_hand(image, gold, test_patch).await;
        manual += started.elapsed().as_secs_f64();
    }
    let (per_graded, per_manual) = (graded / n as f64, manual / n as f64);
    println!("grade_docker: {n} instances, one at a time");
    println!("  grade_predictions: {per_graded:.2} s per instance");
    println!("  same tests by hand in the same containers: {per_manual:.2} s per instance");
    println!("  ratio: {:.2}x", per_graded / per_manual);
}
