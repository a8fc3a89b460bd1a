//! The `k8s` backend against the fake cluster (`k8s::fake`: an API server kube talks to as to a
//! real one, the agent-sandbox controller running real `uniagent-sandbox` processes on loopback
//! "pod IPs", and the router): the shared conformance suite by pod IP and through the router,
//! then the backend's own behaviour: a claim per sandbox deleted on stop, drop and cancel; cold
//! starts; a server that dies mid-command; a never-Ready claim; the watch dropped and compacted
//! while waiting; quota, RBAC and an API server that restarts.

#![cfg(all(feature = "k8s-fake", feature = "conformance"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use uniagent_core::{Deployment, DeploymentExt, Error};
use uniagent_sandboxes::k8s::fake::{
    FakeCluster, FakeOptions, Forbidden, Resource, SandboxFault, FAKE_KID,
};
use uniagent_sandboxes::k8s::{K8sConfig, K8sDeployment, Reach};
use uniagent_sandboxes::{conformance, DeploymentConfig};

const NS: &str = "uniagent-agent-sandboxes";
const TEST_DEADLINE: Duration = Duration::from_secs(120);

/// Runs `body` under the test's overall deadline.
async fn within<F: Future<Output = ()>>(name: &str, body: F) {
    if tokio::time::timeout(TEST_DEADLINE, body).await.is_err() {
        panic!("{name} did not finish within {TEST_DEADLINE:?}");
    }
}

async fn fake() -> FakeCluster {
    let fake = FakeCluster::start(FakeOptions::default())
        .await
        .expect("the fake cluster starts (is uniagent-sandbox built?)");
    // The keys ConfigMap the rendered templates mount (and a pool the tests do not use).
    fake.create_warm_pool(NS, "keys-only", 0).await.unwrap();
    fake
}

/// Settings reaching `fake`, applying their own template and pool of `warm`.
fn config(fake: &FakeCluster, warm: u32, run: &str) -> K8sConfig {
    K8sConfig {
        namespace: NS.into(),
        image: "python:3.12-slim".into(),
        carrier_image: "registry.example/uniagent-sandbox-carrier:0.1".into(),
        work_dir: "/".into(),
        warm,
        api_url: Some(fake.api_url()),
        signing_key_file: Some(fake.signing_key_file().to_path_buf()),
        key_id: FAKE_KID.into(),
        run_id: Some(run.into()),
        start_timeout: Duration::from_secs(30),
        ..K8sConfig::default()
    }
}

fn claims(fake: &FakeCluster) -> Vec<Value> {
    fake.store()
        .list(Resource::SandboxClaims, Some(NS), |_| true)
        .0
}

fn claim(fake: &FakeCluster, name: &str) -> Option<Value> {
    fake.store().get(Resource::SandboxClaims, NS, name)
}

async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_by_pod_ip_through_the_router_and_a_port_forward() {
    within("conformance", async {
        let fake = fake().await;
        let mut reaches = vec![Reach::PodIp, Reach::Router];
        if cfg!(feature = "k8s-port-forward") {
            reaches.push(Reach::PortForward);
        }
        for reach in reaches {
            let cfg = K8sConfig {
                reach,
                router_url: Some(fake.router_url()),
                ..config(&fake, 1, &format!("conf-{reach:?}").to_lowercase())
            };
            let sandbox = DeploymentConfig::from(cfg).build().unwrap();
            fake.faults().reset_counters();
            let report = conformance::run_all(sandbox.as_ref()).await;
            let forwarded = fake
                .faults()
                .request_counts()
                .get(&("create".to_owned(), "pods/portforward".to_owned()))
                .copied()
                .unwrap_or(0);
            // Every connection of a port-forwarded sandbox went through the API server.
            assert_eq!(
                forwarded > 0,
                reach == Reach::PortForward,
                "{reach:?}: {forwarded}"
            );
            println!("{reach:?}: {}", report.summary());
            assert!(report.is_success(), "{reach:?}: {}", report.summary());
            assert_eq!(
                report.passed.len(),
                conformance::CHECKS.len(),
                "nothing may be skipped through k8s:\n{}",
                report.summary()
            );
        }
        // Every claim was deleted; no sandbox but the pools' warm ones runs.
        wait_until("no claims left", || claims(&fake).is_empty()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_per_sandbox_labelled_and_deleted_on_stop_and_on_drop() {
    within("claims", async {
        let fake = fake().await;
        let cfg = config(&fake, 2, "labels");
        let first = K8sDeployment::for_rollout(cfg.clone(), Some("task-1:0".into())).unwrap();
        first.start().await.unwrap();
        let info = first.info().await.unwrap();
        assert!(info.url.starts_with("http://127."), "{info:?}");
        let object = claim(&fake, &info.claim).expect("the claim exists");
        assert_eq!(
            object["metadata"]["labels"]["uniagent.dev/run-id"],
            "labels"
        );
        assert_eq!(
            object["spec"]["lifecycle"]["shutdownPolicy"],
            "DeleteForeground"
        );
        assert_eq!(
            first
                .sh("echo $((6*7))", Duration::from_secs(10))
                .await
                .unwrap()
                .stdout,
            "42\n"
        );
        // A second sandbox is another claim and another pod.
        let second = K8sDeployment::new(cfg.clone()).unwrap();
        second.start().await.unwrap();
        let other = second.info().await.unwrap();
        assert_ne!(other.claim, info.claim);
        assert_ne!(other.pod_ips, info.pod_ips);
        first.stop().await.unwrap();
        assert!(claim(&fake, &info.claim).is_none());
        assert!(first.sh("true", Duration::from_secs(5)).await.is_err());
        drop(second);
        // The drop asked for the deletion before returning.
        assert!(
            claim(&fake, &other.claim)
                .is_none_or(|c| c["metadata"]["deletionTimestamp"].is_string()),
            "a dropped deployment deletes its claim"
        );
        wait_until("no claims left", || claims(&fake).is_empty()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_start_deletes_its_claim_and_a_cold_start_works() {
    within("cancel", async {
        let fake = fake().await;
        // warm 0: every claim is a cold start.
        let cold = K8sDeployment::new(config(&fake, 0, "cold")).unwrap();
        cold.start().await.unwrap();
        assert_eq!(
            cold.sh("echo cold", Duration::from_secs(10))
                .await
                .unwrap()
                .stdout,
            "cold\n"
        );
        cold.stop().await.unwrap();
        // A start cancelled while its claim is pending leaves no claim.
        fake.faults().set_claims_never_ready(true);
        let pending = K8sDeployment::new(config(&fake, 0, "cancel")).unwrap();
        let _ = tokio::time::timeout(Duration::from_millis(500), pending.start()).await;
        wait_until("the cancelled claim gone", || claims(&fake).is_empty()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_never_ready_times_out_naming_why_and_leaves_nothing() {
    within("never ready", async {
        let fake = fake().await;
        fake.faults().set_claims_never_ready(true);
        let cfg = K8sConfig {
            start_timeout: Duration::from_secs(2),
            ..config(&fake, 1, "never")
        };
        let sandbox = K8sDeployment::new(cfg).unwrap();
        let err = sandbox.start().await.unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        assert!(err.to_string().contains("Ready"), "{err}");
        wait_until("no claims left", || claims(&fake).is_empty()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_and_compacted_watch_while_waiting_is_survived() {
    within("watch faults", async {
        let fake = fake().await;
        let cfg = config(&fake, 0, "watch");
        let faults = fake.faults();
        let chaos = tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(60)).await;
                faults.drop_watches();
                faults.compact_history();
            }
        });
        let sandbox = K8sDeployment::new(cfg).unwrap();
        sandbox.start().await.unwrap();
        chaos.await.unwrap();
        assert_eq!(
            sandbox
                .sh("echo ok", Duration::from_secs(10))
                .await
                .unwrap()
                .stdout,
            "ok\n"
        );
        sandbox.stop().await.unwrap();
        wait_until("no claims left", || claims(&fake).is_empty()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_command_is_a_typed_sandbox_error() {
    within("lost", async {
        let fake = fake().await;
        let sandbox = K8sDeployment::new(config(&fake, 1, "lost")).unwrap();
        sandbox.start().await.unwrap();
        let err = sandbox
            .sh("kill -9 $PPID; sleep 30", Duration::from_secs(20))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Sandbox { .. }), "{err:?}");
        sandbox.stop().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_rbac_and_api_failures_are_typed_and_retried_where_retryable() {
    within("api faults", async {
        let fake = fake().await;
        // Three 500s: retried with backoff, then the claim is made.
        fake.faults().fail_next(3, 500);
        let cfg = config(&fake, 1, "retry");
        let sandbox = K8sDeployment::new(cfg.clone()).unwrap();
        sandbox.start().await.unwrap();
        sandbox.stop().await.unwrap();
        // RBAC: a typed configuration error naming the verb, resource and the Role file.
        fake.faults()
            .forbid("create", "sandboxclaims", Forbidden::Rbac);
        let err = K8sDeployment::new(cfg.clone())
            .unwrap()
            .start()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err:?}");
        assert!(err.to_string().contains("rbac.yaml"), "{err}");
        // Quota: retryable, retried until the start deadline, then reported as such.
        fake.faults().clear_request_faults();
        fake.faults()
            .forbid("create", "sandboxclaims", Forbidden::Quota);
        let short = K8sConfig {
            start_timeout: Duration::from_secs(2),
            ..cfg.clone()
        };
        let err = K8sDeployment::new(short)
            .unwrap()
            .start()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Sandbox {
                    retryable: true,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("quota_exceeded"), "{err}");
        fake.faults().clear_request_faults();
        // The API server goes away and comes back: a start during the outage waits it out.
        fake.stop_api().await;
        let restart = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            fake.restart_api().await.unwrap();
        };
        let sandbox = K8sDeployment::new(cfg).unwrap();
        let (started, ()) = tokio::join!(sandbox.start(), restart);
        started.unwrap();
        sandbox.stop().await.unwrap();
        wait_until("no claims left", || claims(&fake).is_empty()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_failures_and_unschedulable_pods_are_diagnosed_while_pending() {
    within("pending diagnoses", async {
        let fake = fake().await;
        // Cold starts only, so every sandbox is made after the fault is set.
        fake.faults().set_sandbox_fault(SandboxFault::ImagePull);
        let err = K8sDeployment::new(config(&fake, 0, "pull"))
            .unwrap()
            .start()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Sandbox {
                    retryable: false,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("image_pull_failed"), "{err}");
        fake.faults().set_sandbox_fault(SandboxFault::Unschedulable);
        let short = K8sConfig {
            start_timeout: Duration::from_secs(7),
            ..config(&fake, 0, "unschedulable")
        };
        let err = K8sDeployment::new(short)
            .unwrap()
            .start()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Sandbox {
                    retryable: true,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("unschedulable"), "{err}");
        fake.faults().set_sandbox_fault(SandboxFault::None);
        wait_until("no claims left", || claims(&fake).is_empty()).await;
    })
    .await;
}
