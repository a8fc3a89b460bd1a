//! The shared conformance suite through the `faas` backend, against a real `uniagent-pool`
//! process on 127.0.0.1 backed by the local Docker Engine; then the pool's own routes.

#![cfg(all(feature = "pool", feature = "faas", feature = "conformance"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pool_common;

use pool_common::deadline::{deadline, DEFAULT};

use std::time::Duration;

use pool_common::{
    docker_or_skip, get_json, post_json, unique, wait_for_containers, PoolProcess, PoolSpec,
};
use uniagent_core::{Deployment, DeploymentExt};
use uniagent_sandboxes::{conformance, FaasDeployment};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_through_faas_and_a_warm_pool() {
    deadline(
        "the_conformance_suite_passes_through_faas_and_a_warm_pool",
        DEFAULT,
        async {
            if !docker_or_skip("faas conformance").await {
                return;
            }
            let pool = PoolProcess::start(
                &unique("conf"),
                &PoolSpec {
                    warm: 1,
                    ..PoolSpec::default()
                },
                0,
            );
            let report = conformance::run_all(&FaasDeployment::new(pool.faas()).unwrap()).await;
            println!("{}", report.summary());
            assert!(report.is_success(), "{}", report.summary());
            assert_eq!(
                report.passed.len(),
                conformance::CHECKS.len(),
                "nothing may be skipped through faas:\n{}",
                report.summary()
            );
            // The released sandbox is removed; the warm pool is refilled to one.
            wait_for_containers(&pool.name, 1, Duration::from_secs(60)).await;
            let capacity = get_json(&format!("{}/v1/capacity", pool.url)).await;
            assert_eq!(capacity["leased"], 0, "{capacity}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_listed_renewed_released_and_guarded_by_their_token() {
    deadline(
        "leases_are_listed_renewed_released_and_guarded_by_their_token",
        DEFAULT,
        async {
            if !docker_or_skip("faas routes").await {
                return;
            }
            let pool = PoolProcess::start(&unique("routes"), &PoolSpec::default(), 0);
            let sandbox = FaasDeployment::new(pool.faas()).unwrap();
            sandbox.start().await.unwrap();
            let info = sandbox.info().await.unwrap();
            assert_eq!(info.endpoint, pool.url);
            assert!(!info.lease.warm, "no warm pool configured");
            let listed = get_json(&format!("{}/v1/leases", pool.url)).await;
            assert_eq!(
                listed["leases"][0]["id"],
                info.lease.id.as_str(),
                "{listed}"
            );
            assert!(
                listed["leases"][0].get("token").is_none(),
                "tokens are never listed"
            );

            let http = reqwest::Client::new();
            let lease_url = format!("{}/v1/leases/{}", pool.url, info.lease.id);
            // Wrong token: the lease is not found, neither for control nor for the sandbox route.
            let wrong = http
                .post(format!("{lease_url}/renew"))
                .header("x-api-key", "wrong")
                .send()
                .await
                .unwrap();
            assert_eq!(wrong.status(), 404);
            let body: serde_json::Value = wrong.json().await.unwrap();
            assert_eq!(body["error"]["kind"], "lease_not_found");
            let wrong = http
                .get(format!("{lease_url}/sandbox/is_alive"))
                .header("x-api-key", "wrong")
                .send()
                .await
                .unwrap();
            assert_eq!(wrong.status(), 404);
            // Malformed and unknown requests get typed answers, not crashes.
            let bad = http
                .post(format!("{}/v1/leases", pool.url))
                .body("{not json")
                .send()
                .await
                .unwrap();
            assert_eq!(bad.status(), 400);
            let leases = format!("{}/v1/leases", pool.url);
            let unknown =
                post_json(&leases, &serde_json::json!({"image": "no-such-image:1"})).await;
            assert_eq!(unknown["error"]["kind"], "unknown_image", "{unknown}");
            let too_long = post_json(
                &leases,
                &serde_json::json!({"image": pool_common::image(), "ttl_secs": 1e9}),
            )
            .await;
            assert_eq!(too_long["error"]["kind"], "limit_exceeded", "{too_long}");

            // The renewer keeps the 3 s lease alive well past its TTL.
            tokio::time::sleep(Duration::from_secs(7)).await;
            assert_eq!(
                sandbox
                    .sh("echo still", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .stdout,
                "still\n"
            );
            sandbox.stop().await.unwrap();
            let err = sandbox
                .sh("echo no", Duration::from_secs(10))
                .await
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    uniagent_core::Error::Sandbox {
                        retryable: false,
                        ..
                    }
                ),
                "{err}"
            );
            wait_for_containers(&pool.name, 0, Duration::from_secs(30)).await;

            // A dropped (never stopped) deployment releases its lease too.
            let dropped = FaasDeployment::new(pool.faas()).unwrap();
            dropped.start().await.unwrap();
            wait_for_containers(&pool.name, 1, Duration::from_secs(5)).await;
            drop(dropped);
            let listed = get_json(&format!("{}/v1/leases", pool.url)).await;
            assert_eq!(listed["leases"].as_array().unwrap().len(), 0, "{listed}");
            wait_for_containers(&pool.name, 0, Duration::from_secs(30)).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_with_an_api_key_refuses_clients_without_it() {
    deadline(
        "a_pool_with_an_api_key_refuses_clients_without_it",
        DEFAULT,
        async {
            if !docker_or_skip("faas api key").await {
                return;
            }
            let spec = PoolSpec {
                api_key: Some("k-123".into()),
                ..PoolSpec::default()
            };
            let pool = PoolProcess::start(&unique("key"), &spec, 0);
            let http = reqwest::Client::new();
            for (key, status) in [(None, 401), (Some("wrong"), 401), (Some("k-123"), 200)] {
                let mut request = http.get(format!("{}/v1/capacity", pool.url));
                if let Some(key) = key {
                    request = request.bearer_auth(key);
                }
                assert_eq!(request.send().await.unwrap().status(), status, "{key:?}");
            }
            let without = FaasDeployment::new(pool.faas())
                .unwrap()
                .start()
                .await
                .unwrap_err();
            assert!(!without.is_retryable(), "{without}");
            std::env::set_var("UNIAGENT_TEST_FAAS_KEY", "k-123");
            let mut config = pool.faas();
            config.api_key_env = Some("UNIAGENT_TEST_FAAS_KEY".into());
            let sandbox = FaasDeployment::new(config).unwrap();
            sandbox.start().await.unwrap();
            assert_eq!(
                sandbox
                    .sh("echo ok", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .stdout,
                "ok\n"
            );
            sandbox.stop().await.unwrap();
            wait_for_containers(&pool.name, 0, Duration::from_secs(30)).await;
        },
    )
    .await;
}
