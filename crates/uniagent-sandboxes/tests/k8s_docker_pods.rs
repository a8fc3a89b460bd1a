//! The fake cluster's Docker kubelet (`PodRunner::Docker`): each pod a container of its own
//! image. The `k8s` backend passes the conformance suite on such pods (the sandbox image, not
//! the host, is what commands see); a pod whose image is missing is the pod's `ErrImagePull`,
//! reported as the backend's typed image-pull error; and the fake removes every container it
//! made, also those of warm pools when it is dropped. Skips (saying so) only when no Docker
//! daemon answers.

#![cfg(all(feature = "k8s-fake", feature = "docker", feature = "conformance"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker_common;

use std::time::Duration;

use docker_common::deadline::{deadline, DEFAULT};
use docker_common::{config_or_skip, containers_of};
use uniagent_core::{Deployment, DeploymentExt, Error};
use uniagent_sandboxes::conformance;
use uniagent_sandboxes::k8s::fake::{FakeCluster, FakeOptions, PodRunner, Resource, FAKE_KID};
use uniagent_sandboxes::k8s::{K8sConfig, K8sDeployment};

const NS: &str = "docker-pods";

/// A fake running its pods in Docker, with the keys ConfigMap the templates mount; `None` (after
/// printing why) without a Docker daemon.
async fn fake_or_skip(test: &str) -> Option<(FakeCluster, String)> {
    let image = config_or_skip(test).await?.image;
    let fake = FakeCluster::start(FakeOptions {
        pods: PodRunner::Docker,
        server_binary: Some(env!("CARGO_BIN_EXE_uniagent-sandbox").into()),
        ..FakeOptions::default()
    })
    .await
    .unwrap();
    fake.create_warm_pool(NS, "keys-only", 0).await.unwrap();
    Some((fake, image))
}

fn config(fake: &FakeCluster, image: &str, warm: u32, run: &str) -> K8sConfig {
    K8sConfig {
        namespace: NS.into(),
        image: image.into(),
        carrier_image: "carrier:1".into(),
        work_dir: "/work".into(),
        warm,
        cpus: 0.5,
        memory_bytes: 256 << 20,
        api_url: Some(fake.api_url()),
        signing_key_file: Some(fake.signing_key_file().to_path_buf()),
        key_id: FAKE_KID.into(),
        run_id: Some(run.into()),
        start_timeout: Duration::from_secs(60),
        ..K8sConfig::default()
    }
}

/// Waits (at most 60 s) until the fake's containers number `n`.
async fn containers_become(fake: &FakeCluster, n: usize) {
    let run = fake.container_run_id();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let have = containers_of(&run).await;
        if have == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{have} pod containers, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_on_pods_in_docker() {
    deadline("k8s docker pods conformance", DEFAULT, async {
        let Some((fake, image)) = fake_or_skip("k8s-docker-conformance").await else {
            return;
        };
        let sandbox = K8sDeployment::new(config(&fake, &image, 0, "conformance")).unwrap();
        let report = conformance::run_all(&sandbox).await;
        assert!(report.is_success(), "{}", report.summary());
        assert!(report.skipped.is_empty(), "{}", report.summary());
        // The commands ran in the image: its Debian, not this machine's root.
        let probe = K8sDeployment::new(config(&fake, &image, 0, "probe")).unwrap();
        probe.start().await.unwrap();
        let info = probe.info().await.unwrap();
        let os = probe
            .sh("cat /etc/debian_version; pwd", Duration::from_secs(20))
            .await
            .unwrap()
            .stdout;
        assert!(os.ends_with("/work\n"), "{os}");
        // The pod IP reaches the container (a port Docker publishes on it).
        assert!(info.url.starts_with("http://127."), "{info:?}");
        probe.stop().await.unwrap();
        assert!(fake.pod_containers_started() >= 2);
        let (claims, _) = fake
            .store()
            .list(Resource::SandboxClaims, Some(NS), |_| true);
        assert!(claims.is_empty(), "{claims:?}");
        containers_become(&fake, 0).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_is_an_image_pull_error_and_the_fake_removes_its_containers() {
    deadline("k8s docker pods faults", DEFAULT, async {
        let Some((fake, image)) = fake_or_skip("k8s-docker-faults").await else {
            return;
        };
        let missing = config(&fake, "uniagent-no-such-image:0", 0, "missing");
        let err = K8sDeployment::new(missing)
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
        assert!(
            err.to_string().contains("uniagent-no-such-image:0"),
            "{err}"
        );
        // A warm pool of two: two running containers, which dropping the fake removes.
        let warm = K8sDeployment::new(config(&fake, &image, 2, "warm")).unwrap();
        warm.start().await.unwrap();
        warm.stop().await.unwrap();
        let pool = fake
            .store()
            .list(Resource::SandboxWarmPools, Some(NS), |p| {
                p["spec"]["replicas"] == 2
            })
            .0;
        let pool = pool[0]["metadata"]["name"].as_str().unwrap().to_owned();
        fake.wait_pool_ready(NS, &pool, 2, Duration::from_secs(60))
            .await
            .unwrap();
        containers_become(&fake, 2).await;
        let run = fake.container_run_id();
        drop(fake);
        assert_eq!(
            containers_of(&run).await,
            0,
            "the fake's drop removes its containers"
        );
    })
    .await;
}
