//! Docker backend start-up benchmark (not part of the test suite):
//!
//! ```text
//! cargo bench -p uniagent-sandboxes --features docker,host --bench docker_start
//! ```
//!
//! Measures, on the sandbox image (`$UNIAGENT_DOCKER_IMAGE`, else
//! `uniagent-sandbox-base:latest`):
//! 1. `start()` to the first successful `execute`, 50 times one after another (median, p90);
//!    next to Docker's own floor in the same run: a container of the same image that runs
//!    `echo ok`, created, started and its output followed through the same daemon API
//!    (what any backend pays before a command's output reaches the host);
//! 2. 32 concurrent starts, each followed by an `execute` (wall time, per-sandbox median);
//! 3. in the same run, as baselines: the `host` backend (the same server as a local process),
//!    and SWE-ReX's own `DockerDeployment` (1.4.0) doing 1. and 2. on the same image, with the
//!    ratios SWE-ReX / ours.
//!
//! The SWE-ReX baseline needs the project's SWE-ReX venv (`$UNIAGENT_SWEREX_VENV`, else
//! `.venv-swerex`, from `scripts/setup/20-swerex.sh`); without it the bench says why it skipped
//! it. The image has no pip and no network, so `scripts/bench/swerex-docker-image.sh` derives
//! `uniagent-swerex-baseline:<hash>` from it with the venv's site-packages and a `swerex-remote`
//! command (cached by content hash), and `benches/swerex_docker_baseline.py` measures it with
//! the venv's python. After the run the bench checks that neither side left containers behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::future::join_all;
use uniagent_core::Deployment;
use uniagent_sandboxes::{DockerConfig, DockerDeployment, HostConfig, HostDeployment, NetworkMode};

mod common;

use common::{block_on, start_to_first_command};

const SEQUENTIAL: usize = 50;
const CONCURRENT: usize = 32;

fn main() {
    block_on(run());
}

fn config(network: NetworkMode) -> DockerConfig {
    DockerConfig {
        image: std::env::var("UNIAGENT_DOCKER_IMAGE")
            .unwrap_or_else(|_| "uniagent-sandbox-base:latest".into()),
        memory_bytes: Some(256 << 20),
        network,
        max_concurrent_starts: 8,
        server_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"))),
        run_id: Some(run_id()),
        ..DockerConfig::default()
    }
}

fn run_id() -> String {
    format!("bench-{}", std::process::id())
}

fn stats(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (
        ms(samples[samples.len() / 2]),
        ms(samples[(samples.len() * 9 / 10).min(samples.len() - 1)]),
    )
}

async fn sequential_docker(network: NetworkMode) -> (f64, f64) {
    let mut samples = Vec::new();
    for _ in 0..SEQUENTIAL {
        let sandbox = DockerDeployment::new(config(network));
        samples.push(start_to_first_command(&sandbox).await);
        sandbox.stop().await.unwrap_or_else(|e| panic!("stop: {e}"));
    }
    stats(samples)
}

/// Docker's floor for one command in a fresh container: create a container of the image
/// whose command is `echo ok`, start it and follow its output until the line arrives, through
/// the same API client; removal is not timed (nor is `stop()` on our side).
async fn sequential_floor(network: NetworkMode) -> (f64, f64) {
    use bollard::models::{ContainerCreateBody, HostConfig as DockerHostConfig};
    use bollard::query_parameters::{LogsOptionsBuilder, RemoveContainerOptionsBuilder};
    use futures::StreamExt;

    let docker = uniagent_sandboxes::docker::engine()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let image = config(network).image;
    let network_mode = match network {
        NetworkMode::None => "none",
        _ => "bridge",
    };
    let mut samples = Vec::new();
    for _ in 0..SEQUENTIAL {
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            cmd: Some(vec!["/bin/sh".into(), "-c".into(), "echo ok".into()]),
            labels: Some(
                [(
                    uniagent_sandboxes::docker::LABEL_RUN_ID.to_owned(),
                    run_id(),
                )]
                .into_iter()
                .collect(),
            ),
            host_config: Some(DockerHostConfig {
                network_mode: Some(network_mode.into()),
                memory: Some(256 << 20),
                ..Default::default()
            }),
            ..Default::default()
        };
        let t0 = Instant::now();
        let id = docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                body,
            )
            .await
            .unwrap_or_else(|e| panic!("floor create: {e}"))
            .id;
        docker
            .start_container(
                &id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .unwrap_or_else(|e| panic!("floor start: {e}"));
        // Followed, not waited for: the output reaches the host before the container's exit
        // (and, on a bridge, its network's teardown) is done.
        let follow = LogsOptionsBuilder::new().follow(true).stdout(true).build();
        let mut output = Vec::new();
        let mut stream = std::pin::pin!(docker.logs(&id, Some(follow)));
        while !output.ends_with(b"\n") {
            let Some(chunk) = stream.next().await else {
                break;
            };
            output.extend_from_slice(chunk.unwrap_or_else(|e| panic!("floor logs: {e}")).as_ref());
        }
        samples.push(t0.elapsed());
        assert_eq!(output, b"ok\n", "the floor's container printed {output:?}");
        docker
            .remove_container(
                &id,
                Some(RemoveContainerOptionsBuilder::new().force(true).build()),
            )
            .await
            .unwrap_or_else(|e| panic!("floor remove: {e}"));
    }
    stats(samples)
}

async fn concurrent_docker() -> (f64, f64) {
    let sandboxes: Vec<DockerDeployment> = (0..CONCURRENT)
        .map(|_| DockerDeployment::new(config(NetworkMode::None)))
        .collect();
    let t0 = Instant::now();
    let samples = join_all(sandboxes.iter().map(start_to_first_command)).await;
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    join_all(sandboxes.iter().map(|s| s.stop())).await;
    (wall, stats(samples).0)
}

async fn sequential_host() -> (f64, f64) {
    let mut samples = Vec::new();
    for _ in 0..SEQUENTIAL {
        let sandbox = HostDeployment::new(HostConfig {
            server_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"))),
            ..HostConfig::default()
        });
        samples.push(start_to_first_command(&sandbox).await);
        sandbox.stop().await.unwrap_or_else(|e| panic!("stop: {e}"));
    }
    stats(samples)
}

async fn run() {
    if let Err(e) = uniagent_sandboxes::docker::daemon_reachable().await {
        eprintln!("docker_start: no Docker daemon ({e}); nothing to measure");
        return;
    }
    // Warm-up: an image's first start in a process uploads the payload into its container, the
    // second commits the payload image that every later start uses.
    for what in ["uploads the payload", "commits the payload image"] {
        let warm = DockerDeployment::new(config(NetworkMode::None));
        let took = start_to_first_command(&warm).await;
        warm.stop().await.unwrap_or_else(|e| panic!("stop: {e}"));
        println!("warm-up start ({what}): {:.0} ms", took.as_secs_f64() * 1e3);
    }

    let (iso_med, iso_p90) = sequential_docker(NetworkMode::None).await;
    let (floor_iso_med, floor_iso_p90) = sequential_floor(NetworkMode::None).await;
    let (br_med, br_p90) = sequential_docker(NetworkMode::Bridge).await;
    let (floor_br_med, floor_br_p90) = sequential_floor(NetworkMode::Bridge).await;
    let (host_med, host_p90) = sequential_host().await;
    let (wall, conc_med) = concurrent_docker().await;
    let swerex = tokio::task::spawn_blocking(swerex_baseline)
        .await
        .unwrap_or_else(|e| panic!("SWE-ReX baseline task: {e}"));
    println!("start() -> first execute, {SEQUENTIAL} sequential starts:");
    println!("  docker network=none (exec relay) median {iso_med:7.1} ms  p90 {iso_p90:7.1} ms");
    println!("  docker network=bridge (published) median {br_med:7.1} ms  p90 {br_p90:7.1} ms");
    println!("  Docker floor, network=none        median {floor_iso_med:7.1} ms  p90 {floor_iso_p90:7.1} ms  (ours/floor {:.2}x)", iso_med / floor_iso_med.max(f64::EPSILON));
    println!("  Docker floor, network=bridge      median {floor_br_med:7.1} ms  p90 {floor_br_p90:7.1} ms  (ours/floor {:.2}x)", br_med / floor_br_med.max(f64::EPSILON));
    println!("  host backend (baseline)           median {host_med:7.1} ms  p90 {host_p90:7.1} ms");
    println!(
        "  docker/host ratio: {:.1}x",
        iso_med / host_med.max(f64::EPSILON)
    );
    println!("{CONCURRENT} concurrent starts (max_concurrent_starts=8): wall {wall:.0} ms, per-sandbox median {conc_med:.0} ms");
    match swerex {
        Ok(b) => {
            let ratio = |theirs: f64, ours: f64| theirs / ours.max(f64::EPSILON);
            println!(
                "SWE-ReX {} DockerDeployment on {} (baseline, same run):",
                b.version, b.image
            );
            println!(
                "  {SEQUENTIAL} sequential starts: median {:7.1} ms  p90 {:7.1} ms  \
                 (SWE-ReX/ours: {:.1}x vs network=none, {:.1}x vs network=bridge)",
                b.seq_median,
                b.seq_p90,
                ratio(b.seq_median, iso_med),
                ratio(b.seq_median, br_med)
            );
            println!(
                "  the same, is_alive polled every 10 ms instead of 0.25 s: median {:7.1} ms  p90 {:7.1} ms  \
                 (SWE-ReX/ours: {:.1}x vs network=bridge)",
                b.tight_median,
                b.tight_p90,
                ratio(b.tight_median, br_med)
            );
            println!(
                "  {CONCURRENT} concurrent starts (unbounded): wall {:.0} ms, per-sandbox median {:.0} ms  \
                 (SWE-ReX/ours: wall {:.1}x, per-sandbox median {:.1}x)",
                b.conc_wall,
                b.conc_median,
                ratio(b.conc_wall, wall),
                ratio(b.conc_median, conc_med)
            );
        }
        Err(why) => println!("SWE-ReX DockerDeployment baseline: skipped ({why})"),
    }
    leftover_check();
}

/// SWE-ReX's figures, from the driver's JSON line.
struct SwerexFigures {
    version: String,
    image: String,
    seq_median: f64,
    seq_p90: f64,
    tight_median: f64,
    tight_p90: f64,
    conc_wall: f64,
    conc_median: f64,
}

/// Builds (or reuses) the derived image and runs `benches/swerex_docker_baseline.py` with the
/// SWE-ReX venv's python. `Err` is the reason the baseline was not measured.
fn swerex_baseline() -> Result<SwerexFigures, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..");
    let venv = std::env::var_os("UNIAGENT_SWEREX_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv-swerex"));
    let python = venv.join("bin/python");
    if !python.exists() {
        return Err(format!(
            "no SWE-ReX venv at {} (scripts/setup/20-swerex.sh installs it)",
            venv.display()
        ));
    }
    let image = Command::new("bash")
        .arg(root.join("scripts/bench/swerex-docker-image.sh"))
        .env("UNIAGENT_SWEREX_VENV", &venv)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("scripts/bench/swerex-docker-image.sh: {e}"))?;
    if !image.status.success() {
        return Err(format!(
            "scripts/bench/swerex-docker-image.sh failed ({})",
            image.status
        ));
    }
    let image = String::from_utf8_lossy(&image.stdout).trim().to_owned();
    let out = Command::new(&python)
        .arg(manifest.join("benches/swerex_docker_baseline.py"))
        .args(["--image", &image])
        .args(["--sequential", &SEQUENTIAL.to_string()])
        .args(["--concurrent", &CONCURRENT.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!(
            "swerex_docker_baseline.py failed ({}), see its stderr above",
            out.status
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| format!("swerex_docker_baseline.py printed {line:?}: {e}"))?;
    let num = |key: &str| {
        json[key]
            .as_f64()
            .ok_or_else(|| format!("swerex_docker_baseline.py: no number {key:?} in {line}"))
    };
    Ok(SwerexFigures {
        version: json["swerex_version"].as_str().unwrap_or("?").to_owned(),
        image,
        seq_median: num("sequential_median_ms")?,
        seq_p90: num("sequential_p90_ms")?,
        tight_median: num("tight_poll_median_ms")?,
        tight_p90: num("tight_poll_p90_ms")?,
        conc_wall: num("concurrent_wall_ms")?,
        conc_median: num("concurrent_median_ms")?,
    })
}

/// Containers this run left behind: ours carry the bench's run id, SWE-ReX's are named after
/// the derived image. Reports them and removes them, so a failed run does not pile up.
fn leftover_check() {
    let filters = [
        format!("label=dev.uniagent.run-id={}", run_id()),
        "name=uniagent-swerex-baseline".to_owned(),
    ];
    // `docker run --rm` removes SWE-ReX's containers after they are killed, asynchronously:
    // give the daemon a few seconds before calling anything left over.
    let mut left = Vec::new();
    for _ in 0..10 {
        left = containers(&filters);
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    if left.is_empty() {
        println!("leftover containers after the run: none");
        return;
    }
    println!(
        "leftover containers after the run: {} ({}), removing them",
        left.len(),
        left.join(" ")
    );
    let _ = Command::new("docker")
        .args(["rm", "-f"])
        .args(&left)
        .stdout(Stdio::null())
        .status();
}

/// The ids of the containers matching any of `filters` (`docker ps -a --filter`).
fn containers(filters: &[String]) -> Vec<String> {
    let mut left = Vec::new();
    for filter in filters {
        let out = Command::new("docker")
            .args(["ps", "-aq", "--filter", filter])
            .output();
        match out {
            Ok(out) if out.status.success() => left.extend(
                String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .map(str::to_owned),
            ),
            Ok(out) => eprintln!("docker ps --filter {filter}: {}", out.status),
            Err(e) => eprintln!("docker ps --filter {filter}: {e}"),
        }
    }
    left
}
