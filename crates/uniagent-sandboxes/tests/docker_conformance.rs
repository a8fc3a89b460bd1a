//! The shared conformance suite passes on the docker backend.

#![cfg(all(feature = "docker", feature = "conformance"))]

mod docker_common;

use docker_common::deadline::{deadline, DEFAULT};

use docker_common::{config_or_skip, containers_of};
use uniagent_sandboxes::{conformance, DockerDeployment};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_on_docker() {
    deadline("the_conformance_suite_passes_on_docker", DEFAULT, async {
        let Some(config) = config_or_skip("conformance").await else {
            return;
        };
        let run = config.run_id.clone().unwrap();
        let report = conformance::run_all(&DockerDeployment::new(config)).await;
        assert!(report.is_success(), "{}", report.summary());
        assert!(report.skipped.is_empty(), "{}", report.summary());
        assert_eq!(containers_of(&run).await, 0, "nothing leaks");
    })
    .await;
}
