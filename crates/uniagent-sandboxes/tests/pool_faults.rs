//! Faults with real processes: `uniagent-pool` processes on 127.0.0.1 (one per simulated node)
//! over the local Docker Engine, killed, restarted and filled up. TTLs are short (3 s leases).

#![cfg(all(feature = "pool", feature = "faas"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pool_common;

use pool_common::deadline::{deadline, DEFAULT};

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pool_common::{
    docker_or_skip, faas_config, get_json, pool_containers, post_json, unique, wait_for_containers,
    PoolProcess, PoolSpec,
};
use uniagent_core::{Deployment, DeploymentExt, Error, RetryConfig};
use uniagent_sandboxes::{FaasConfig, FaasDeployment};

/// Few, quick retries: a test must see the failure, not wait it out.
fn quick(mut config: FaasConfig) -> FaasConfig {
    config.retry = RetryConfig {
        max_attempts: 2,
        initial_backoff: Duration::from_millis(50),
        max_elapsed: Duration::from_secs(2),
        ..RetryConfig::default()
    };
    config
}

async fn started(config: FaasConfig) -> FaasDeployment {
    let sandbox = FaasDeployment::new(config).unwrap();
    sandbox.start().await.unwrap();
    sandbox
}

/// The error of a start with `config` and no retries.
async fn start_error_at_once(mut config: FaasConfig) -> Error {
    config.retry = RetryConfig::none();
    FaasDeployment::new(config)
        .unwrap()
        .start()
        .await
        .unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_answers_with_a_typed_retryable_error_and_never_hangs() {
    deadline("a_full_pool_answers_with_a_typed_retryable_error_and_never_hangs", DEFAULT, async {
    if !docker_or_skip("capacity").await {
        return;
    }
    let spec = PoolSpec {
        capacity: 2,
        ..PoolSpec::default()
    };
    let pool = PoolProcess::start(&unique("full"), &spec, 0);
    let first = started(pool.faas()).await;
    let second = started(pool.faas()).await;

    let clock = Instant::now();
    let err = start_error_at_once(pool.faas()).await;
    assert!(
        matches!(&err, Error::Sandbox { retryable: true, message, .. } if message.contains("slots")),
        "{err}"
    );
    assert!(
        clock.elapsed() < Duration::from_secs(10),
        "{:?}",
        clock.elapsed()
    );

    // A bounded wait: rounds with backoff for at most `max_elapsed`, then the same error.
    let clock = Instant::now();
    let err = FaasDeployment::new(quick(pool.faas()))
        .unwrap()
        .start()
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(
        clock.elapsed() < Duration::from_secs(10),
        "{:?}",
        clock.elapsed()
    );

    // A freed slot is leased again.
    first.stop().await.unwrap();
    let third = started(quick(pool.faas())).await;
    assert_eq!(
        third
            .sh("echo ok", Duration::from_secs(10))
            .await
            .unwrap()
            .stdout,
        "ok\n"
    );
    drop((second, third));
    wait_for_containers(&pool.name, 0, Duration::from_secs(30)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_pool_fails_its_sandboxes_and_new_leases_go_to_the_others() {
    deadline(
        "a_killed_pool_fails_its_sandboxes_and_new_leases_go_to_the_others",
        DEFAULT,
        async {
            if !docker_or_skip("killed pool").await {
                return;
            }
            let spec = PoolSpec {
                capacity: 4,
                ..PoolSpec::default()
            };
            let mut a = PoolProcess::start(&unique("ka"), &spec, 0);
            let b = PoolProcess::start(&unique("kb"), &spec, 0);
            let config = quick(faas_config(&[&a, &b]));
            let mut sandboxes = Vec::new();
            for _ in 0..4 {
                sandboxes.push(started(config.clone()).await);
            }
            let mut on_a = Vec::new();
            let mut on_b = Vec::new();
            for sandbox in sandboxes {
                let endpoint = sandbox.info().await.unwrap().endpoint;
                if endpoint == a.url {
                    on_a.push(sandbox);
                } else {
                    on_b.push(sandbox);
                }
            }
            assert_eq!(
                (on_a.len(), on_b.len()),
                (2, 2),
                "least loaded first spreads them"
            );

            a.kill();
            for sandbox in &on_a {
                let err = sandbox
                    .sh("echo hi", Duration::from_secs(10))
                    .await
                    .unwrap_err();
                // What the agent loop ends a rollout with as `sandbox_error`: an infrastructure error,
                // not a timeout.
                let last = match &err {
                    Error::RetriesExhausted { last, .. } => last.as_ref(),
                    other => other,
                };
                assert!(matches!(last, Error::Sandbox { .. }), "{err}");
                assert_ne!(err.kind(), uniagent_core::ErrorKind::Timeout, "{err}");
            }
            for sandbox in &on_b {
                assert_eq!(
                    sandbox
                        .sh("echo hi", Duration::from_secs(10))
                        .await
                        .unwrap()
                        .stdout,
                    "hi\n"
                );
            }
            // The batch goes on: new leases skip the dead pool.
            let fresh = started(config.clone()).await;
            assert_eq!(fresh.info().await.unwrap().endpoint, b.url);
            drop(on_a); // releasing on a dead pool fails quietly; its containers go with `a`'s cleanup
            drop((on_b, fresh));
            wait_for_containers(&b.name, 0, Duration::from_secs(30)).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigtermed_pool_drains_live_leases_finish_and_new_ones_go_elsewhere() {
    deadline(
        "a_sigtermed_pool_drains_live_leases_finish_and_new_ones_go_elsewhere",
        DEFAULT,
        async {
            if !docker_or_skip("drain").await {
                return;
            }
            let spec = PoolSpec {
                capacity: 4,
                warm: 1,
                drain_grace: 120.0,
                ..PoolSpec::default()
            };
            let mut a = PoolProcess::start(&unique("da"), &spec, 0);
            let b = PoolProcess::start(&unique("db"), &PoolSpec::default(), 0);
            let live = started(quick(a.faas())).await;
            assert_eq!(
                live.sh("echo before", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .stdout,
                "before\n"
            );
            // The leased sandbox and (once refilled) the warm one.
            wait_for_containers(&a.name, 2, Duration::from_secs(120)).await;

            a.terminate();
            let capacity = format!("{}/v1/capacity", a.url);
            let deadline = Instant::now() + Duration::from_secs(10);
            while get_json(&capacity).await["draining"] != true {
                assert!(Instant::now() < deadline, "the pool never said it drains");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let shown = get_json(&capacity).await;
            assert_eq!(
                (shown["available"].clone(), shown["leased"].clone()),
                (0.into(), 1.into()),
                "{shown}"
            );
            // The warm sandbox goes at once; the leased one keeps working, renewals included (its
            // 3 s lease outlives several TTLs here).
            wait_for_containers(&a.name, 1, Duration::from_secs(30)).await;
            tokio::time::sleep(Duration::from_secs(4)).await;
            assert_eq!(
                live.sh("echo during", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .stdout,
                "during\n"
            );
            // New leases are refused with a retryable error and go to the other pool.
            let err = start_error_at_once(a.faas()).await;
            assert!(
                matches!(
                    &err,
                    Error::Sandbox {
                        retryable: true,
                        ..
                    }
                ),
                "{err}"
            );
            let elsewhere = started(quick(faas_config(&[&a, &b]))).await;
            assert_eq!(elsewhere.info().await.unwrap().endpoint, b.url);
            assert!(
                a.wait_exit(Duration::ZERO).is_none(),
                "the pool left before its lease ended"
            );

            // The last lease ends: the pool removes it and exits 0, long before the grace is over.
            live.stop().await.unwrap();
            let status = tokio::task::block_in_place(|| a.wait_exit(Duration::from_secs(60)))
                .expect("the drained pool did not exit");
            assert!(status.success(), "{status:?}");
            assert!(
                pool_containers(&a.name).await.is_empty(),
                "the drained pool left containers"
            );
            elsewhere.stop().await.unwrap();
            wait_for_containers(&b.name, 0, Duration::from_secs(30)).await;
        },
    )
    .await;
}

/// Not a test on its own (hence ignored): the controller process the next test starts with
/// `--ignored`. It leases sandboxes, says `CONTROLLER-READY` and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_sigkilled_controller_..., started by that test"]
async fn controller_child_process() {
    deadline("controller_child_process", DEFAULT, async {
        let url = std::env::var("UNIAGENT_POOL_TEST_CONTROLLER")
            .expect("started by a_sigkilled_controller_leaves_leases_that_expire_...");
        let mut config = FaasConfig {
            control_url: url,
            image: pool_common::image(),
            lease_ttl: Duration::from_secs(3),
            ..FaasConfig::default()
        };
        config.retry = RetryConfig::none();
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(started(config.clone()).await);
        }
        println!("\nCONTROLLER-READY");
        tokio::time::sleep(Duration::from_secs(300)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_controller_leaves_leases_that_expire_and_are_removed_within_the_ttl() {
    deadline(
        "a_sigkilled_controller_leaves_leases_that_expire_and_are_removed_within_the_ttl",
        DEFAULT,
        async {
            if !docker_or_skip("killed controller").await {
                return;
            }
            let pool = PoolProcess::start(&unique("ctl"), &PoolSpec::default(), 0);
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "controller_child_process",
                    "--ignored",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("UNIAGENT_POOL_TEST_CONTROLLER", &pool.url)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let mut seen = Vec::new();
            for line in BufReader::new(child.stdout.take().unwrap()).lines() {
                let line = line.unwrap_or_default();
                if line.contains("CONTROLLER-READY") {
                    break;
                }
                seen.push(line);
            }
            assert!(
                !seen.iter().any(|l| l.contains("test result")),
                "the controller did not get its leases: {seen:#?}"
            );
            assert_eq!(pool_containers(&pool.name).await.len(), 3);
            // Well past the TTL the leases live on: the controller renews them.
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert_eq!(
                pool_containers(&pool.name).await.len(),
                3,
                "renewed leases are kept"
            );

            child.kill().unwrap(); // SIGKILL: no stop, no drop, no release
            child.wait().unwrap();
            let killed = Instant::now();
            wait_for_containers(&pool.name, 0, Duration::from_secs(20)).await;
            let took = killed.elapsed();
            println!("containers removed {took:?} after the controller was killed (lease TTL 3 s)");
            // TTL plus the reaper's tick plus removal, with room for a loaded machine.
            assert!(took < Duration::from_secs(15), "{took:?}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_pool_recovers_live_leases_from_labels_and_reaps_only_expired_ones() {
    deadline(
        "a_restarted_pool_recovers_live_leases_from_labels_and_reaps_only_expired_ones",
        DEFAULT,
        async {
            if !docker_or_skip("restarted pool").await {
                return;
            }
            let spec = PoolSpec {
                capacity: 4,
                lease_ttl: 3.0,
                max_ttl: 6.0,
                ..PoolSpec::default()
            };
            let mut pool = PoolProcess::start(&unique("rst"), &spec, 0);
            let live = started(pool.faas()).await;
            live.write_text("/tmp/marker", "before the restart")
                .await
                .unwrap();
            // An abandoned lease: granted over plain HTTP and never renewed.
            let abandoned = post_json(
                &format!("{}/v1/leases", pool.url),
                &serde_json::json!({"image": pool_common::image(), "ttl_secs": 3}),
            )
            .await;
            let abandoned_id = abandoned["id"].as_str().unwrap().to_owned();
            let live_id = live.info().await.unwrap().lease.id;

            pool.restart();
            let listed = get_json(&format!("{}/v1/leases", pool.url)).await;
            let ids: Vec<&str> = listed["leases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["id"].as_str().unwrap())
                .collect();
            assert!(
                ids.contains(&live_id.as_str()) && ids.contains(&abandoned_id.as_str()),
                "{listed}"
            );
            assert!(
                listed["leases"][0]["recovered"].as_bool().unwrap(),
                "{listed}"
            );
            // The live client reaches its same sandbox again, through the restarted pool.
            assert_eq!(
                live.read_text("/tmp/marker").await.unwrap(),
                "before the restart"
            );

            // Past max_ttl, the abandoned lease is reaped; the renewed one stays.
            wait_for_containers(&pool.name, 1, Duration::from_secs(20)).await;
            let listed = get_json(&format!("{}/v1/leases", pool.url)).await;
            assert_eq!(listed["leases"].as_array().unwrap().len(), 1, "{listed}");
            assert_eq!(listed["leases"][0]["id"], live_id.as_str());
            assert_eq!(
                live.sh("echo alive", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .stdout,
                "alive\n"
            );
            live.stop().await.unwrap();
            wait_for_containers(&pool.name, 0, Duration::from_secs(30)).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_sandbox_that_died_is_replaced_not_leased() {
    deadline(
        "a_warm_sandbox_that_died_is_replaced_not_leased",
        DEFAULT,
        async {
            if !docker_or_skip("dead warm sandbox").await {
                return;
            }
            let spec = PoolSpec {
                warm: 1,
                ..PoolSpec::default()
            };
            let pool = PoolProcess::start(&unique("dead"), &spec, 0);
            let ready = Instant::now();
            while get_json(&format!("{}/v1/capacity", pool.url)).await["warm"] != 1 {
                assert!(ready.elapsed() < Duration::from_secs(60), "no warm sandbox");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Kill the ready warm sandbox's container behind the pool's back.
            let docker = uniagent_sandboxes::docker::engine().await.unwrap();
            for id in pool_containers(&pool.name).await {
                docker
                    .kill_container(&id, None::<bollard::query_parameters::KillContainerOptions>)
                    .await
                    .unwrap();
            }
            let sandbox = started(quick(pool.faas())).await;
            assert!(
                !sandbox.info().await.unwrap().lease.warm,
                "the dead warm one was not handed out"
            );
            assert_eq!(
                sandbox
                    .sh("echo fresh", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .stdout,
                "fresh\n"
            );
            sandbox.stop().await.unwrap();
        },
    )
    .await;
}
