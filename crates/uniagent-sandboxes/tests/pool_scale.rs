//! Many concurrent leases across three pools (one per simulated node), then every container
//! gone. The count is `$UNIAGENT_POOL_SCALE_LEASES` (default 200, the figure: about
//! 105 s on a 2-core machine under other builds' load).

#![cfg(all(feature = "pool", feature = "faas"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pool_common;

use pool_common::deadline::{deadline, LONG};

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use pool_common::{
    docker_or_skip, faas_config, unique, wait_for_containers, PoolProcess, PoolSpec,
};
use uniagent_core::{Deployment, DeploymentExt, RetryConfig};
use uniagent_sandboxes::FaasDeployment;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_leases_across_three_pools_then_every_container_is_gone() {
    deadline(
        "concurrent_leases_across_three_pools_then_every_container_is_gone",
        LONG,
        async {
            if !docker_or_skip("scale").await {
                return;
            }
            let leases: usize = std::env::var("UNIAGENT_POOL_SCALE_LEASES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(200);
            // Room for all of them, plus slack so that a slow release does not make a pool full.
            let spec = PoolSpec {
                capacity: leases / 3 + 4,
                lease_ttl: 30.0,
                ..PoolSpec::default()
            };
            let pools: Vec<PoolProcess> = (0..3)
                .map(|i| PoolProcess::start(&unique(&format!("scale{i}")), &spec, 0))
                .collect();
            let mut config = faas_config(&pools.iter().collect::<Vec<_>>());
            config.lease_ttl = Duration::from_secs(30);
            // Correctness, not speed: on a loaded machine a lease request waits for cold starts queued
            // behind each pool's start limit, so both deadlines are generous.
            config.timeout = Duration::from_secs(240);
            config.retry = RetryConfig {
                max_elapsed: Duration::from_secs(240),
                ..RetryConfig::default()
            };
            let clock = Instant::now();
            let results = join_all((0..leases).map(|i| {
                let config = config.clone();
                async move {
                    let sandbox = FaasDeployment::new(config).unwrap();
                    sandbox.start().await?;
                    let out = sandbox
                        .sh(&format!("echo {i}"), Duration::from_secs(30))
                        .await?;
                    assert_eq!(out.stdout, format!("{i}\n"));
                    let node = sandbox.info().await.unwrap().lease.node;
                    sandbox.stop().await?;
                    Ok::<_, uniagent_core::Error>(node)
                }
            }))
            .await;
            let took = clock.elapsed();
            let mut per_node: HashMap<String, usize> = HashMap::new();
            for result in results {
                *per_node.entry(result.unwrap()).or_default() += 1;
            }
            println!(
                "{leases} leases (start, one command, stop) in {took:?}; per pool {per_node:?}"
            );
            assert_eq!(per_node.values().sum::<usize>(), leases);
            assert_eq!(per_node.len(), 3, "every pool served some: {per_node:?}");
            for pool in &pools {
                wait_for_containers(&pool.name, 0, Duration::from_secs(60)).await;
            }
        },
    )
    .await;
}
