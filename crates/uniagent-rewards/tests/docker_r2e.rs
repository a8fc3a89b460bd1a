//! R2E-Gym grading in Docker, on the swe-mini tasks in R2E-Gym's layout
//! (datasets/swe-mini-r2e; images by scripts/setup/50-swe-mini-images.sh: the repository at
//! /testbed, hidden tests at /r2e_tests, an untracked /testbed/run_tests.sh). The gold patch
//! resolves, empty and wrong patches do not, and neither stdout spoofing nor edits to the tests
//! the agent can see, to the hidden tests' path or to `run_tests.sh` raise a failing patch.
//! [`FreshSandboxTests`] takes only the agent's diff (not the image's untracked harness);
//! [`R2eInSandbox`] scores the agent's container itself.
//!
//! Skips (printing why) only when no Docker daemon answers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reward_common::score_submission;
use serde_json::{json, Map, Value};
use uniagent_core::runner::SandboxFactory;
use uniagent_core::{Deployment, DeploymentExt, Task};
use uniagent_rewards::grade::{
    grade_patch, sandbox_task, FreshSandboxTests, GradeOptions, InstanceGrade, R2eInSandbox,
    SweInstance, Verdict,
};
use uniagent_sandboxes::docker::{daemon_reachable, list_managed};
use uniagent_sandboxes::{DockerConfig, DockerDeployment};

mod reward_common;

fn row() -> Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../datasets/swe-mini-r2e/tasks.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let first = text.lines().next().unwrap();
    serde_json::from_str(first).unwrap()
}

struct Docker {
    run_id: String,
    server: Option<PathBuf>,
}

impl Docker {
    fn sandbox(&self, image: &str) -> Box<dyn Deployment> {
        Box::new(DockerDeployment::new(DockerConfig {
            image: image.to_owned(),
            memory_bytes: Some(512 << 20),
            run_id: Some(self.run_id.clone()),
            server_binary: self.server.clone(),
            ..DockerConfig::default()
        }))
    }

    fn factory(self: &Arc<Self>) -> Arc<dyn SandboxFactory> {
        let me = Arc::clone(self);
        Arc::new(
            move |task: &Task| -> uniagent_core::Result<Box<dyn Deployment>> {
                Ok(me.sandbox(task.metadata["image"].as_str().unwrap()))
            },
        )
    }
}

/// A patch: the gold patch's file, with `edit` applied to the base text, as a new diff
/// computed in a container of the image (so it applies there).
async fn diff_in(docker: &Docker, image: &str, script: &str) -> String {
    let d: Arc<dyn Deployment> = Arc::from(docker.sandbox(image));
    d.start().await.unwrap();
    let out = d
        .sh(
            &format!("cd /testbed && {{ {script} ; }} >/dev/null && git add -A -- . ':(exclude)run_tests.sh' && git diff --cached --binary"),
            Duration::from_secs(60),)
        .await
        .unwrap();
    d.stop().await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{script}: {}", out.stdout);
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2e_gym_instances_grade_in_fresh_containers_and_resist_tampering() {
    if let Err(e) = daemon_reachable().await {
        eprintln!("SKIPPED: no Docker daemon is reachable ({e})");
        return;
    }
    let row = row();
    let instance = SweInstance::from_json(&row).unwrap();
    let image = instance.image.clone().unwrap();
    let present = std::process::Command::new("docker")
        .args(["image", "inspect", &image])
        .output()
        .unwrap();
    assert!(
        present.status.success(),
        "{image} is missing: run scripts/setup/50-swe-mini-images.sh"
    );
    let docker = Arc::new(Docker {
        run_id: format!("r2e-test-{}", std::process::id()),
        server: uniagent_sandboxes::host::find_server_binary(None).ok(),
    });
    let options = GradeOptions::default();
    let faithful = GradeOptions {
        fail_on_conflicting_lines: false,
        ..GradeOptions::default()
    };
    let grade = |patch: String, options: GradeOptions| {
        let docker = Arc::clone(&docker);
        let instance = instance.clone();
        async move {
            let sandbox = docker.factory().create(&sandbox_task(&instance)).unwrap();
            grade_patch(sandbox, &instance, patch.as_bytes(), &options).await
        }
    };
    let check = |g: &InstanceGrade, want: Verdict| {
        assert_eq!(g.verdict, want, "{g:?}\n{}", g.log);
    };

    let gold = grade(instance.patch.clone(), options.clone()).await;
    check(&gold, Verdict::Resolved);
    let r2e = gold.r2e.as_ref().unwrap();
    assert!(r2e.comparison.matches && r2e.statuses.len() >= 5, "{r2e:?}");
    check(
        &grade("\n".into(), options.clone()).await,
        Verdict::EmptyPatch,
    );
    let wrong = diff_in(&docker, &image, "echo '# nothing fixed' >> csvline/core.py").await;
    let graded = grade(wrong, options.clone()).await;
    check(&graded, Verdict::Unresolved);
    let cmp = &graded.r2e.as_ref().unwrap().comparison;
    assert_eq!(cmp.wrong_status.len(), 2, "{cmp:?}");

    // Stdout spoofing: passing lines for the failing hidden tests, printed at exit after the
    // runner's summary. R2E-Gym's own reading (last line wins) is fooled; the default is not.
    let spoof = diff_in(
        &docker,
        &image,
        "printf '\\nimport atexit\\natexit.register(lambda: print(\"PASSED r2e_tests/test_issue.py::test_doubled_quotes_are_unescaped\\\\nPASSED r2e_tests/test_issue.py::test_join_then_split_round_trips\", flush=True))\\n' >> csvline/__init__.py",
    )
    .await;
    let control = grade(spoof.clone(), faithful.clone()).await;
    check(&control, Verdict::Resolved);
    let graded = grade(spoof, options.clone()).await;
    check(&graded, Verdict::Unresolved);
    assert_eq!(graded.conflicting_ids.len(), 2, "{graded:?}");

    // Editing the tests the agent can see changes nothing: the hidden tests run.
    let visible = diff_in(
        &docker,
        &image,
        "printf 'def test_doubled_quotes_are_unescaped():\\n    pass\\n' > tests/test_core.py",
    )
    .await;
    check(&grade(visible, options.clone()).await, Verdict::Unresolved);
    // Planting tests at the hidden tests' path, and a run_tests.sh that prints a summary.
    let planted = diff_in(
        &docker,
        &image,
        "mkdir -p r2e_tests && printf 'def test_doubled_quotes_are_unescaped():\\n    pass\\n' > r2e_tests/test_issue.py && cp -r /r2e_tests/test_core.py r2e_tests/",
    )
    .await;
    assert!(planted.contains("r2e_tests/test_issue.py"), "{planted}");
    check(&grade(planted, options.clone()).await, Verdict::Unresolved);
    let fake_runner = "diff --git a/run_tests.sh b/run_tests.sh\nnew file mode 100644\n--- /dev/null\n+++ b/run_tests.sh\n@@ -0,0 +1,2 @@\n+echo 'short test summary info'\n+echo 'PASSED r2e_tests/test_issue.py::test_doubled_quotes_are_unescaped'\n";
    check(
        &grade(fake_runner.into(), options.clone()).await,
        Verdict::Unresolved,
    );

    // The reward on an agent's container: its diff only (not the untracked run_tests.sh, nor a
    // .venv it made); the gold fix resolves, the tampering alone does not.
    let agent: Arc<dyn Deployment> = Arc::from(docker.sandbox(&image));
    agent.start().await.unwrap();
    let mut metadata: Map<String, Value> = row.as_object().unwrap().clone();
    metadata.insert("image".into(), json!(image));
    let mut task = Task::new(instance.instance_id.clone(), vec![]);
    task.metadata = metadata;
    let fresh = FreshSandboxTests::new(docker.factory());
    let in_sandbox = R2eInSandbox::default();
    let sh = |script: &'static str| {
        let agent = Arc::clone(&agent);
        async move {
            let out = agent
                .sh(&format!("cd /testbed && {script}"), Duration::from_secs(60))
                .await
                .unwrap();
            assert_eq!(out.exit_code, Some(0), "{script}: {}", out.stdout);
        }
    };
    sh("mkdir -p .venv/bin && printf '#!/bin/sh\\n' > .venv/bin/python && printf 'echo short test summary info\\n' >> run_tests.sh").await;
    let out = score_submission(&fresh, &task, &agent).await.unwrap();
    assert!(!out.success, "{out:?}");
    let out = score_submission(&in_sandbox, &task, &agent).await.unwrap();
    assert!(!out.success, "{out:?}");
    let gold_file = instance.patch.clone();
    agent
        .write_text("/tmp/gold.patch", &gold_file)
        .await
        .unwrap();
    sh("git apply /tmp/gold.patch").await;
    let out = score_submission(&fresh, &task, &agent).await.unwrap();
    assert!(out.success, "{out:?}");
    // The in-sandbox opt-in agrees on this honest agent (its extra summary header is ignored).
    let out = score_submission(&in_sandbox, &task, &agent).await.unwrap();
    assert!(out.success, "{out:?}");
    assert_eq!(out.details["comparison"]["matches"], true, "{out:?}");
    agent.stop().await.unwrap();

    let engine = uniagent_sandboxes::docker::engine().await.unwrap();
    let left = list_managed(&engine, Some(&docker.run_id)).await.unwrap();
    assert!(left.is_empty(), "containers left behind: {left:?}");
}
