//! Trajectories per hour against a peer: the swe-mini tasks in Docker with the same scripted
//! actions, 64 rollouts in flight, through uniagent's runner and through mini-swe-agent.
//!
//! Both sides replay one action list per task (look around, read the file the fix touches,
//! apply the gold patch, run the task's tests, submit), so only the frameworks differ:
//! - **uniagent**: the `uniagent run` path (config → `swe` environment → Docker sandboxes →
//!   runner → trajectories file) with a scripted `ChatModel` calling `execute_bash` and
//!   `submit`. The environment's reward is left out: mini-swe-agent grades nothing.
//! - **mini-swe-agent** (its PyPI release, in `UNIAGENT_MINI_SWE_VENV`): its own SWE-bench
//!   batch path (`process_instance`: `DefaultAgent`, `DockerEnvironment` with its
//!   `swebench.yaml` settings, trajectory and preds files) with its `DeterministicModel`, in a
//!   thread pool of the same size (`peer_mini_swe.py`). Its wall time runs until the last of
//!   its containers is gone, as ours does (it stops them in the background).
//!
//! A third side is the floor: each rollout's actions as one `bash -c` in a plain container
//! (create, start, wait, remove through Docker's API), what Docker and the commands cost with
//! no framework at all.
//!
//! Per side: trajectories per hour; CPU seconds per trajectory, of the whole machine (Docker's
//! daemon, shims and the containers included: what the run costs) and of the framework's own
//! processes; peak memory per trajectory in flight (the framework's processes plus everything
//! in the containers, summed RSS).
//!
//! The Docker sandboxes need the server and the toolbox next to the bench binary:
//!
//! ```sh
//! cargo build --release -p uniagent-sandboxes --features server --bin uniagent-sandbox \
//!     -p uniagent-tools --bin uniagent-toolbox
//! cargo bench -p uniagent-cli --features docker --bench peer_trajectories
//! UNIAGENT_PEER_ROLLOUTS=64 cargo bench -p uniagent-cli --features docker --bench peer_trajectories
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use serde_json::{json, Value};
use uniagent_cli::run::{prepare, RunOptions};
use uniagent_core::agent::{AgentInteraction, CancellationToken, Trajectory};
use uniagent_core::runner::{JsonlSink, Runner};
use uniagent_core::{
    AssistantTurn, ChatModel, EpisodeSignal, FinishReason, Message, Result, Role, RolloutCache,
    SamplingParams, Task, ToolCall,
};
use uniagent_envs::EnvironmentRegistry;

const IMAGE: &str = "uniagent-swe-mini";

/// One swe-mini task and the actions both sides replay for it.
struct Script {
    instance_id: String,
    problem_statement: String,
    actions: Vec<String>,
}

/// The same actions for every framework: what a short, successful agent run does.
fn scripts(repo: &Path) -> Vec<Script> {
    let text = std::fs::read_to_string(repo.join("datasets/swe-mini/tasks.jsonl")).unwrap();
    text.lines()
        .map(|line| {
            let task: Value = serde_json::from_str(line).unwrap();
            let field = |k: &str| task[k].as_str().unwrap().to_owned();
            let patch = field("patch");
            let touched = patch
                .lines()
                .find_map(|l| l.strip_prefix("+++ b/"))
                .unwrap()
                .to_owned();
            let encoded = base64::engine::general_purpose::STANDARD.encode(&patch);
            let actions = [
                "ls".to_owned(),
                "git status --short && git log --oneline -1".to_owned(),
                "grep -rn 'def ' --include=*.py . | head -30".to_owned(),
                format!("cat {touched}"),
                format!("printf %s '{encoded}' | base64 -d | git apply && git diff --stat"),
                format!("{} 2>&1 | tail -5", field("test_cmd")),
            ];
            Script {
                instance_id: field("instance_id"),
                problem_statement: field("problem_statement"),
                actions: actions
                    .into_iter()
                    .map(|a| format!("cd /testbed && {a}"))
                    .collect(),
            }
        })
        .collect()
}

/// Replays each task's actions through `execute_bash`, then calls `submit`.
#[derive(Debug)]
struct Replayer {
    /// Problem statement → actions.
    actions: Vec<(String, Vec<String>)>,
}

#[async_trait]
impl ChatModel for Replayer {
    fn name(&self) -> &str {
        "scripted-replayer"
    }
    async fn query(
        &self,
        cache: &mut RolloutCache,
        _sampling: &SamplingParams,
    ) -> Result<AssistantTurn> {
        let messages = cache.messages();
        let prompt = messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.text().to_owned())
            .unwrap_or_default();
        let step = messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let actions = &self
            .actions
            .iter()
            .find(|(statement, _)| prompt.contains(statement.as_str()))
            .expect("the prompt holds a known problem statement")
            .1;
        let call = match actions.get(step) {
            Some(command) => ToolCall::new(
                format!("c{step}"),
                "execute_bash",
                json!({ "command": command }),
            ),
            None => ToolCall::new(format!("c{step}"), "submit", json!({})),
        };
        let message = Message::assistant_with_calls(Some(format!("Step {step}.")), vec![call]);
        cache.push_message(message.clone());
        Ok(AssistantTurn {
            message,
            finish_reason: FinishReason::ToolCalls,
            format_error: None,
            sampled_tokens: 0,
        })
    }
}

/// Busy CPU seconds of the whole machine so far (`/proc/stat`, all but idle and iowait).
fn machine_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    // /proc/stat counts in USER_HZ, which Linux fixes at 100 for user space.
    (total - fields[3] - fields[4]) as f64 / 100.0
}

/// CPU seconds of this process (user + system).
fn own_cpu_s() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(usage.user_time()) + secs(usage.system_time())
}

/// Summed RSS (KiB) of `root` and its descendants plus every process in a Docker container.
fn framework_and_container_rss_kib(root: u32) -> u64 {
    let mut parent = HashMap::new();
    let mut rss = HashMap::new();
    let mut in_container = HashSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        parent.insert(pid, field("PPid:").unwrap_or(0) as u32);
        rss.insert(pid, field("VmRSS:").unwrap_or(0));
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if cgroup.contains("/docker/") {
            in_container.insert(pid);
        }
    }
    let counted = |pid: u32| {
        let mut at = pid;
        for _ in 0..64 {
            if at == root || in_container.contains(&at) {
                return true;
            }
            match parent.get(&at) {
                Some(&p) if p > 1 => at = p,
                _ => return false,
            }
        }
        false
    };
    rss.iter()
        .filter(|(&pid, _)| counted(pid))
        .map(|(_, &kib)| kib)
        .sum()
}

/// Samples [`framework_and_container_rss_kib`] every 250 ms until stopped; returns the peak.
fn watch_memory(root: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::SeqCst) {
            peak = peak.max(framework_and_container_rss_kib(root));
            std::thread::sleep(Duration::from_millis(250));
        }
        peak
    })
}

fn containers() -> usize {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .count()
}

/// What one side measured.
struct Side {
    wall_s: f64,
    machine_cpu_s: f64,
    own_cpu_s: f64,
    peak_rss_kib: u64,
    endings: BTreeMap<String, usize>,
    note: String,
}

fn run_uniagent(repo: &Path, scripts: &[Script], n: usize, in_flight: usize) -> Side {
    let dir = tempfile::tempdir().unwrap();
    let samples = n / scripts.len();
    let config = format!(
        "tasks:\n  path: {}\n  layout: swe-bench\n\
environment:\n  type: swe\n  sandbox:\n    type: docker\n    image: \"{IMAGE}:{{instance_id}}\"\n  repo_dir: /testbed\n  bash_timeout: 60\n\
model:\n  type: openai\n  http: {{endpoints: [\"http://127.0.0.1:9/v1\"], model: unused}}\n\
loop:\n  max_turns: 12\n  tool_timeout: 60\n\
runner:\n  samples_per_task: {samples}\n  max_concurrent_rollouts: {in_flight}\n  max_concurrent_model_calls: {in_flight}\n",
        repo.join("datasets/swe-mini/tasks.jsonl").display()
    );
    let path = dir.path().join("peer.yaml");
    std::fs::write(&path, config).unwrap();
    let options = RunOptions::default();
    let prepared = prepare(&path, &options, &EnvironmentRegistry::builtin()).unwrap();
    let (parts, loop_config, runner_config) = prepared.rollout_parts().unwrap();
    let model = Arc::new(Replayer {
        actions: scripts
            .iter()
            .map(|s| (s.problem_statement.clone(), s.actions.clone()))
            .collect(),
    });
    // No reward: the peer grades nothing.
    let agent = AgentInteraction::new(model, parts.tools.clone(), loop_config).unwrap();
    let factory = parts.sandboxes.clone().unwrap();
    let runner = Runner::new(agent, runner_config)
        .unwrap()
        .with_sandboxes(move |t: &Task| factory.create(t));
    let tasks = prepared.tasks.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let out = dir.path().join("trajectories.jsonl");
    let mut sink = JsonlSink::new(BufWriter::new(std::fs::File::create(&out).unwrap()));

    let stop = Arc::new(AtomicBool::new(false));
    let memory = watch_memory(std::process::id(), Arc::clone(&stop));
    let (cpu0, own0, t0) = (machine_cpu_s(), own_cpu_s(), Instant::now());
    let summary = rt
        .block_on(runner.run(tasks, &CancellationToken::new(), &mut sink))
        .unwrap();
    let wall_s = t0.elapsed().as_secs_f64();
    let (machine, own) = (machine_cpu_s() - cpu0, own_cpu_s() - own0);
    stop.store(true, Ordering::SeqCst);
    let peak_rss_kib = memory.join().unwrap();
    drop(sink);

    let mut endings = BTreeMap::new();
    let mut patched = 0;
    let mut phases = BTreeMap::<String, Vec<f64>>::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let raw: Value = serde_json::from_str(line).unwrap();
        for (phase, secs) in raw["timings"].as_object().into_iter().flatten() {
            if let Some(secs) = secs.as_f64() {
                phases.entry(phase.clone()).or_default().push(secs);
            }
        }
        let t: Trajectory = serde_json::from_str(line).unwrap();
        assert!(
            t.error.is_none(),
            "a uniagent rollout failed: {:?}",
            t.error
        );
        *endings.entry(format!("{:?}", t.exit_reason)).or_default() += 1;
        if matches!(&t.signal, Some(EpisodeSignal::Submit { patch }) if patch.contains("+++ b/")) {
            patched += 1;
        }
    }
    assert_eq!(summary.rollouts as usize, n);
    Side {
        wall_s,
        machine_cpu_s: machine,
        own_cpu_s: own,
        peak_rss_kib,
        endings,
        note: format!(
            "{patched} submitted the gold patch; a rollout's phases, median / max s: {}",
            phases
                .iter_mut()
                .map(|(phase, v)| {
                    v.sort_by(f64::total_cmp);
                    format!("{phase} {:.2} / {:.2}", v[v.len() / 2], v[v.len() - 1])
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn run_peer(repo: &Path, venv: &Path, scripts: &[Script], n: usize, in_flight: usize) -> Side {
    let dir = tempfile::tempdir().unwrap();
    let rollouts: Vec<Value> = (0..n)
        .map(|i| {
            let s = &scripts[i % scripts.len()];
            json!({
                "instance_id": s.instance_id,
                "image": format!("{IMAGE}:{}", s.instance_id),
                "problem_statement": s.problem_statement,
                "actions": s.actions,
            })
        })
        .collect();
    let input = dir.path().join("rollouts.json");
    std::fs::write(&input, serde_json::to_vec(&rollouts).unwrap()).unwrap();
    let script = repo.join("crates/uniagent-cli/benches/peer_mini_swe.py");
    // A file, not a pipe: nothing reads a pipe while the child runs, and a full one blocks it.
    let report = dir.path().join("report.txt");
    let (cpu0, t0) = (machine_cpu_s(), Instant::now());
    let mut child = std::process::Command::new(venv.join("bin/python"))
        .arg(&script)
        .arg(&input)
        .arg(dir.path().join("out"))
        .arg(in_flight.to_string())
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .stdout(std::fs::File::create(&report).unwrap())
        .spawn()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let memory = watch_memory(child.id(), Arc::clone(&stop));
    let deadline = t0 + Duration::from_secs(3600);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("mini-swe-agent ran past an hour");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    let wall_s = t0.elapsed().as_secs_f64();
    let machine = machine_cpu_s() - cpu0;
    stop.store(true, Ordering::SeqCst);
    let peak_rss_kib = memory.join().unwrap();
    assert!(status.success(), "peer_mini_swe.py failed");
    let stdout = std::fs::read_to_string(&report).unwrap();
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let endings = report["endings"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap() as usize))
        .collect();
    let patched = report["submissions"]
        .as_object()
        .unwrap()
        .values()
        .filter(|p| p.as_str().unwrap_or_default().contains("+++ b/"))
        .count();
    assert_eq!(
        report["containers_left"], 0,
        "mini-swe-agent left containers"
    );
    Side {
        wall_s,
        machine_cpu_s: machine,
        own_cpu_s: report["cpu_self_s"].as_f64().unwrap()
            + report["cpu_children_s"].as_f64().unwrap(),
        peak_rss_kib,
        endings,
        note: format!(
            "{patched} submitted the gold patch; agents done at {:.1} s, containers gone at {:.1} s",
            report["done_s"].as_f64().unwrap(),
            report["clean_s"].as_f64().unwrap()
        ),
    }
}

/// The floor: each rollout's actions and its diff as one `bash -c` in a plain container,
/// created, started, waited for and removed through Docker's API, with no framework at all.
fn run_floor(scripts: &[Script], n: usize, in_flight: usize) -> Side {
    use bollard::models::{ContainerCreateBody, HostConfig};
    use bollard::query_parameters::{RemoveContainerOptionsBuilder, WaitContainerOptions};
    use futures::StreamExt as _;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let permits = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let stop = Arc::new(AtomicBool::new(false));
    let memory = watch_memory(std::process::id(), Arc::clone(&stop));
    let (cpu0, own0, t0) = (machine_cpu_s(), own_cpu_s(), Instant::now());
    let codes: Vec<i64> = rt.block_on(async {
        let runs = (0..n).map(|i| {
            let s = &scripts[i % scripts.len()];
            let script = format!(
                "{}\ncd /testbed && git add -A && git diff --cached > /dev/null",
                s.actions.join("\n")
            );
            let body = ContainerCreateBody {
                image: Some(format!("{IMAGE}:{}", s.instance_id)),
                cmd: Some(vec!["bash".into(), "-c".into(), script]),
                host_config: Some(HostConfig {
                    network_mode: Some("none".into()),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let (docker, permits) = (docker.clone(), Arc::clone(&permits));
            async move {
                let _permit = permits.acquire().await.unwrap();
                let none = None::<bollard::query_parameters::CreateContainerOptions>;
                let id = docker.create_container(none, body).await.unwrap().id;
                let start = None::<bollard::query_parameters::StartContainerOptions>;
                docker.start_container(&id, start).await.unwrap();
                let mut wait =
                    std::pin::pin!(docker.wait_container(&id, None::<WaitContainerOptions>));
                let code = match wait.next().await {
                    Some(Ok(exit)) => exit.status_code,
                    other => panic!("waiting for the floor's container: {other:?}"),
                };
                let force = RemoveContainerOptionsBuilder::new().force(true).build();
                docker.remove_container(&id, Some(force)).await.unwrap();
                code
            }
        });
        futures::future::join_all(runs).await
    });
    let wall_s = t0.elapsed().as_secs_f64();
    let (machine, own) = (machine_cpu_s() - cpu0, own_cpu_s() - own0);
    stop.store(true, Ordering::SeqCst);
    let peak_rss_kib = memory.join().unwrap();
    let mut endings = BTreeMap::new();
    for code in codes {
        *endings.entry(format!("exit {code}")).or_default() += 1;
    }
    Side {
        wall_s,
        machine_cpu_s: machine,
        own_cpu_s: own,
        peak_rss_kib,
        endings,
        note: "no framework: what Docker and the commands themselves cost".into(),
    }
}

fn print_side(name: &str, side: &Side, n: usize, in_flight: usize) {
    let per_hour = n as f64 / side.wall_s * 3600.0;
    println!(
        "  {name:<16} {:>7.1} s {:>8.0} traj/h   CPU/traj: machine {:>5.2} s, own {:>5.2} s   peak {:>6.1} MiB/traj in flight   {:?}",
        side.wall_s,
        per_hour,
        side.machine_cpu_s / n as f64,
        side.own_cpu_s / n as f64,
        side.peak_rss_kib as f64 / 1024.0 / in_flight.min(n) as f64,
        side.endings,
    );
    println!("  {:<16} {}", "", side.note);
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let repo = repo_root();
    let venv = std::env::var_os("UNIAGENT_MINI_SWE_VENV")
        .map_or_else(|| repo.join(".venv-mini-swe"), PathBuf::from);
    if !venv.join("bin/python").is_file() {
        println!(
            "SKIPPED: no mini-swe-agent venv at {} (scripts/setup/61-mini-swe-agent.sh)",
            venv.display()
        );
        return;
    }
    let scripts = scripts(&repo);
    for s in &scripts {
        let image = format!("{IMAGE}:{}", s.instance_id);
        let found = std::process::Command::new("docker")
            .args(["image", "inspect", "-f", "{{.Id}}", &image])
            .output();
        if !found.is_ok_and(|o| o.status.success()) {
            println!(
                "SKIPPED: no image {image} or no Docker (scripts/setup/50-swe-mini-images.sh)"
            );
            return;
        }
    }
    let setting = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = setting("UNIAGENT_PEER_ROLLOUTS", 192) / scripts.len() * scripts.len();
    let in_flight = setting("UNIAGENT_PEER_IN_FLIGHT", 64);
    if let Err(e) = uniagent_sandboxes::docker::Payload::locate(None, None) {
        panic!("{e} (the bench's header says how to build both binaries)");
    }
    let before = containers();
    // Untimed: a sandbox image's second start in a process commits the image with the server
    // in it, which every later start of that image uses; measure the steady state.
    let warm_up = scripts.len() * 2;
    run_uniagent(&repo, &scripts, warm_up, warm_up);
    let ours = run_uniagent(&repo, &scripts, n, in_flight);
    assert_eq!(containers(), before, "uniagent left containers");
    let floor = run_floor(&scripts, n, in_flight);
    assert_eq!(containers(), before, "the floor left containers");
    let peer = run_peer(&repo, &venv, &scripts, n, in_flight);
    println!(
        "peer trajectories bench: {n} rollouts over {} swe-mini tasks, {in_flight} in flight, Docker, {} actions + submit each",
        scripts.len(),
        scripts[0].actions.len()
    );
    print_side("uniagent", &ours, n, in_flight);
    print_side("mini-swe-agent", &peer, n, in_flight);
    print_side("floor", &floor, n, in_flight);
    println!(
        "  ratios uniagent / mini-swe-agent: trajectories per hour {:.2}x, machine CPU per trajectory {:.2}, peak memory {:.2}",
        peer.wall_s / ours.wall_s,
        ours.machine_cpu_s / peer.machine_cpu_s,
        ours.peak_rss_kib as f64 / peer.peak_rss_kib as f64
    );
    println!(
        "  against the floor: uniagent {:.2}x its wall time and {:.2}x its machine CPU, mini-swe-agent {:.2}x and {:.2}x",
        ours.wall_s / floor.wall_s,
        ours.machine_cpu_s / floor.machine_cpu_s,
        peer.wall_s / floor.wall_s,
        peer.machine_cpu_s / floor.machine_cpu_s
    );
}
