//! `grade_predictions` in Docker: a task image (the sandbox base image plus a repository at
//! `/testbed`), one fresh container per instance; the gold patch resolves, the empty and the
//! wrong patch do not, and no container is left behind.
//!
//! Skips (printing why) only when no Docker daemon answers; then the sandbox base image must
//! exist (scripts/setup/40-docker-image.sh builds it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::time::Instant;

use uniagent_core::{Deployment, Task};
use uniagent_rewards::grade::{grade_predictions, GradeRun, Prediction, SweInstance};
use uniagent_sandboxes::docker::{daemon_reachable, list_managed};
use uniagent_sandboxes::{DockerConfig, DockerDeployment};

mod calc_task;

use calc_task::CalcTask;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grades_a_swe_style_dataset_in_fresh_containers() {
    if let Err(e) = daemon_reachable().await {
        eprintln!("SKIPPED: no Docker daemon is reachable ({e})");
        return;
    }
    let tag = format!(
        "uniagent-grade-test:{}-{:x}",
        std::process::id(),
        fastrand_id()
    );
    let task = CalcTask::build(&tag);
    let (gold, wrong) = (&task.gold, &task.wrong);
    let row = |id: &str| SweInstance::from_json(&task.row(id)).unwrap();
    let dataset = vec![row("calc-gold"), row("calc-empty"), row("calc-wrong")];
    let pred = |id: &str, patch: &str| Prediction {
        instance_id: id.into(),
        model_patch: Some(patch.into()),
        model_name_or_path: "test-model".into(),
    };
    let predictions = vec![
        pred("calc-gold", gold),
        pred("calc-empty", ""),
        pred("calc-wrong", wrong),
    ];
    let run_id = format!("grade-test-{}", std::process::id());
    let server = uniagent_sandboxes::host::find_server_binary(None).ok();
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

    let docker = uniagent_sandboxes::docker::engine().await.unwrap();
    let left = list_managed(&docker, Some(&run_id)).await.unwrap();
    assert!(left.is_empty(), "containers left behind: {left:?}");
}

fn fastrand_id() -> u32 {
    // Distinct per test run without a random crate: time and pid.
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}
