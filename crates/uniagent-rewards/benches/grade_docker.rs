//! Seconds per instance of `grade_predictions` in Docker, next to the same work done by hand,
//! in one run:
//!
//! 1. **One shared image** (a rollout run's case): the grader against the same steps through a
//!    `DockerDeployment` (start, write both patches, `git apply` them, run the test command,
//!    stop). The ratio is the grader's own overhead (base64 transfer, hardened git, restoring
//!    test files, log reading, per-instance files).
//! 2. **One image per instance** (SWE-bench's case: every instance has its own image, started
//!    once): the grader against plain Docker, no uniagent code at all (create a container of
//!    the image whose command applies both patches, passed in its environment, and runs the
//!    tests; start it, wait for it, read its output, remove it). Each side gets its own fresh
//!    images, so both pay their first start of an image.
//!
//! Each at one and four instances at a time.
//!
//! `cargo bench -p uniagent-rewards --bench grade_docker [-- N]` (N instances, default 8).
//! Needs a Docker daemon and the sandbox base image (`$UNIAGENT_DOCKER_IMAGE`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: panics are failures

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use futures::StreamExt;
use uniagent_core::runner::SandboxFactory;
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

/// The script both baselines run: the two patches by plain `git apply`, then the tests.
fn by_hand_script(gold: &str, test: &str) -> String {
    format!("cd /testbed && git apply {gold} && git apply {test} && {TEST_CMD} 2>&1")
}

/// Baseline 1: a `DockerDeployment`, both patches written through it, the script, stop.
async fn by_hand(image: String, gold: String, test_patch: String) {
    let d: Arc<dyn Deployment> = Arc::new(DockerDeployment::new(config(&image)));
    d.start().await.unwrap();
    d.write_text("/tmp/gold.patch", &gold).await.unwrap();
    d.write_text("/tmp/test.patch", &test_patch).await.unwrap();
    let script = by_hand_script("/tmp/gold.patch", "/tmp/test.patch");
    let out = d.sh(&script, Duration::from_secs(600)).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.stdout);
    d.stop().await.unwrap();
}

/// Baseline 2, plain Docker: a container of `image` whose command writes both patches from its
/// environment and runs the script; started, waited for, its output read, removed.
async fn by_hand_plain_docker(image: String, gold: String, test_patch: String) {
    use bollard::models::{ContainerCreateBody, HostConfig};
    use bollard::query_parameters::{LogsOptionsBuilder, RemoveContainerOptionsBuilder};

    let docker = uniagent_sandboxes::docker::engine().await.unwrap();
    let script = format!(
        "printf '%s' \"$GOLD\" > /tmp/gold.patch && printf '%s' \"$TEST\" > /tmp/test.patch && {}",
        by_hand_script("/tmp/gold.patch", "/tmp/test.patch")
    );
    let body = ContainerCreateBody {
        image: Some(image),
        cmd: Some(vec!["/bin/bash".into(), "-c".into(), script]),
        env: Some(vec![format!("GOLD={gold}"), format!("TEST={test_patch}")]),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            memory: Some(512 << 20),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            body,
        )
        .await
        .unwrap()
        .id;
    docker
        .start_container(
            &id,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .unwrap();
    let mut waited = std::pin::pin!(
        docker.wait_container(&id, None::<bollard::query_parameters::WaitContainerOptions>)
    );
    let mut exit_code = None;
    while let Some(status) = waited.next().await {
        // A non-zero exit arrives as an error carrying the code.
        exit_code = Some(match status {
            Ok(s) => s.status_code,
            Err(bollard::errors::Error::DockerContainerWaitError { code, .. }) => code,
            Err(e) => panic!("waiting for the container: {e}"),
        });
    }
    let logs = LogsOptionsBuilder::new().stdout(true).stderr(true).build();
    let mut output = Vec::new();
    let mut stream = std::pin::pin!(docker.logs(&id, Some(logs)));
    while let Some(chunk) = stream.next().await {
        output.extend_from_slice(chunk.unwrap().as_ref());
    }
    docker
        .remove_container(
            &id,
            Some(RemoveContainerOptionsBuilder::new().force(true).build()),
        )
        .await
        .unwrap();
    assert_eq!(exit_code, Some(0), "{}", String::from_utf8_lossy(&output));
}

/// Images `FROM base` that differ only in a label: each has its own id, as each SWE-bench
/// instance's image has. Removed again when dropped.
struct OwnImages(Vec<String>);

impl OwnImages {
    fn build(base: &str, prefix: &str, count: usize) -> Self {
        let tags = (0..count)
            .map(|i| {
                let tag = format!("{base}-{prefix}{i}");
                let dir = tempfile::tempdir().unwrap();
                std::fs::write(
                    dir.path().join("Dockerfile"),
                    format!("FROM {base}\nLABEL dev.uniagent.bench-instance={prefix}{i}\n"),
                )
                .unwrap();
                calc_task::run(dir.path(), "docker", &["build", "-q", "-t", &tag, "."]);
                tag
            })
            .collect();
        OwnImages(tags)
    }
}

impl Drop for OwnImages {
    fn drop(&mut self) {
        for tag in &self.0 {
            let _ = std::process::Command::new("docker")
                .args(["rmi", "-f", tag])
                .output();
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .filter_map(|a| a.parse().ok())
        .next()
        .unwrap_or(8);
    if let Err(e) = uniagent_sandboxes::docker::daemon_reachable().await {
        eprintln!("grade_docker: no Docker daemon ({e}); nothing measured");
        return;
    }
    let task = CalcTask::build(&format!("uniagent-grade-bench:{}", std::process::id()));
    let factory = |task: &Task| -> uniagent_core::Result<Box<dyn Deployment>> {
        Ok(Box::new(DockerDeployment::new(config(
            task.metadata["image"].as_str().unwrap(),
        ))))
    };
    let instances = |images: &[String]| -> Vec<SweInstance> {
        images
            .iter()
            .enumerate()
            .map(|(i, image)| {
                let mut row = task.row(&format!("calc-{i}"));
                row["image_name"] = image.as_str().into();
                SweInstance::from_json(&row).unwrap()
            })
            .collect()
    };

    // 1. One shared image. Warm-up, untimed: the first two starts of an image upload the
    //    payload and then commit it (seconds), which would otherwise land on one side.
    for _ in 0..2 {
        by_hand(
            task.image.clone(),
            task.gold.clone(),
            task.test_patch.clone(),
        )
        .await;
    }
    let shared = instances(&vec![task.image.clone(); n]);
    for concurrency in [1, 4] {
        let (graded, manual) = alternate(concurrency, &shared, &shared, &factory, |i| {
            by_hand(
                i.image.clone().unwrap(),
                task.gold.clone(),
                task.test_patch.clone(),
            )
        })
        .await;
        report("one shared image", n, concurrency, graded, manual);
    }

    // 2. One image per instance, fresh for each side and each concurrency.
    for concurrency in [1, 4] {
        let ours = OwnImages::build(&task.image, &format!("g{concurrency}-"), n);
        let theirs = OwnImages::build(&task.image, &format!("h{concurrency}-"), n);
        let (graded, manual) = alternate(
            concurrency,
            &instances(&ours.0),
            &instances(&theirs.0),
            &factory,
            |i| {
                by_hand_plain_docker(
                    i.image.clone().unwrap(),
                    task.gold.clone(),
                    task.test_patch.clone(),
                )
            },
        )
        .await;
        report(
            "one image per instance, against plain Docker",
            n,
            concurrency,
            graded,
            manual,
        );
    }
}

fn report(case: &str, n: usize, concurrency: usize, graded: f64, manual: f64) {
    let (per_graded, per_manual) = (graded / n as f64, manual / n as f64);
    println!(
        "grade_docker, {case}: {n} instances, {concurrency} at a time (wall time per instance)"
    );
    println!("  grade_predictions: {per_graded:.2} s per instance");
    println!("  the same tests by hand: {per_manual:.2} s per instance");
    println!("  ratio: {:.2}x", per_graded / per_manual);
}

/// Grades `graded` `concurrency` instances at a time, each group followed by the same number
/// of `by_hand` runs over `manual`'s instances (so drift in the machine's load hits both
/// alike); the two wall times in seconds. The patch of every instance is its gold patch.
async fn alternate<F, Fut>(
    concurrency: usize,
    graded: &[SweInstance],
    manual: &[SweInstance],
    factory: &dyn SandboxFactory,
    by_hand: F,
) -> (f64, f64)
where
    F: Fn(&SweInstance) -> Fut,
    Fut: Future<Output = ()>,
{
    let (mut graded_s, mut manual_s) = (0.0, 0.0);
    for (group, by_hand_group) in graded.chunks(concurrency).zip(manual.chunks(concurrency)) {
        let run = GradeRun {
            concurrency,
            ..GradeRun::default()
        };
        let predictions: Vec<Prediction> = group
            .iter()
            .map(|i| Prediction {
                instance_id: i.instance_id.clone(),
                model_patch: Some(i.patch.clone()),
                model_name_or_path: "bench".into(),
            })
            .collect();
        let started = Instant::now();
        let report = grade_predictions(group, &predictions, factory, &run)
            .await
            .unwrap();
        graded_s += started.elapsed().as_secs_f64();
        assert_eq!(report.resolved_instances, group.len(), "{report:?}");
        let started = Instant::now();
        futures::future::join_all(by_hand_group.iter().map(&by_hand)).await;
        manual_s += started.elapsed().as_secs_f64();
    }
    (graded_s, manual_s)
}
