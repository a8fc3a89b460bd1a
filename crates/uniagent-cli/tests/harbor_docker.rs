//! `uniagent run` on `datasets/harbor-mini` (Harbor task directories) in Docker: the images are
//! built from each task's `environment/` by the run's preflight, and the task's verifier scores
//! each rollout in the agent's container. A model that does what Harbor's oracle does (writes
//! `solution/solve.sh` to `/solution` and runs it) solves all 8 tasks, with the multi-key
//! rewards kept in the details; a model that finishes at once solves none (a real 0, not an
//! error). Skips (saying so) only when no Docker daemon answers; with one, the base image must
//! exist (scripts/setup/40-docker-image.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{assistant_turns, first_user_text, repo_root, stderr, tool_call, write, ChatServer};
use serde_json::{json, Value};

fn dataset() -> std::path::PathBuf {
    repo_root().join("datasets/harbor-mini")
}

/// (instruction, solve.sh) of every task.
fn solutions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dataset()).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.join("task.toml").is_file() {
            continue;
        }
        out.push((
            std::fs::read_to_string(dir.join("instruction.md")).unwrap(),
            std::fs::read_to_string(dir.join("solution/solve.sh")).unwrap(),
        ));
    }
    out
}

/// Harbor's oracle through the tools: `solve.sh` written to `/solution`, run, then `finish`.
fn oracle() -> common::Responder {
    let solutions = solutions();
    Arc::new(move |body: &Value| {
        let prompt = first_user_text(body);
        let solve = solutions
            .iter()
            .find(|(instruction, _)| prompt.contains(instruction.trim()))
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        match assistant_turns(body) {
            0 => tool_call(
                "c0",
                "str_replace_editor",
                json!({"command": "create", "path": "/solution/solve.sh", "file_text": solve}),
            ),
            1 => tool_call(
                "c1",
                "execute_bash",
                json!({"command": "bash /solution/solve.sh > /tmp/oracle.txt 2>&1; echo exit=$?"}),
            ),
            _ => tool_call("c2", "finish", json!({"answer": "done"})),
        }
    })
}

fn config(url: &str) -> String {
    format!(
        "tasks:\n  harbor: {}\n\
environment:\n  type: harbor\n\
model:\n  type: openai\n  http: {{endpoints: [\"{url}\"], model: oracle, timeout: 60}}\n\
loop:\n  max_turns: 6\n  tool_timeout: 60\n\
runner:\n  max_concurrent_rollouts: 4\n",
        dataset().display()
    )
}

async fn run(responder: common::Responder) -> Option<(Value, Vec<Value>)> {
    run_config(responder, config).await
}

/// `uniagent run` of the config `config(model_url)` against a model answering by `responder`:
/// the summary and the trajectories; `None` (skipped) without a Docker daemon.
async fn run_config(
    responder: common::Responder,
    config: impl Fn(&str) -> String,
) -> Option<(Value, Vec<Value>)> {
    if common::skip_without_docker() {
        return None;
    }
    let server = ChatServer::start(responder).await;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "harbor.yaml", &config(&server.base_url));
    let path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        common::uniagent()
            .current_dir(&path)
            .args(["run", "harbor.yaml", "--out", "out", "--quiet"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap();
    let lines = std::fs::read_to_string(dir.path().join("out/trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Some((summary, lines))
}

#[test]
fn the_oracle_solves_every_harbor_mini_task_and_an_empty_agent_none() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let body = async {
            let Some((summary, lines)) = run(oracle()).await else {
                return;
            };
            assert_eq!(summary["rollouts"], 8, "{summary}");
            for l in &lines {
                assert_eq!(l["reward"]["success"], true, "{}: {l}", l["task_id"]);
            }
            // The multi-key rewards are kept whole.
            let sales = lines
                .iter()
                .find(|l| l["task_id"] == "sales-report")
                .unwrap();
            assert_eq!(
                sales["reward"]["details"]["rewards"],
                json!({"reward": 1.0, "total": 1.0, "by_region": 1.0})
            );
            let empty: common::Responder =
                Arc::new(|_: &Value| tool_call("c0", "finish", json!({"answer": "nothing"})));
            let (summary, lines) = run(empty).await.unwrap();
            assert_eq!(summary["success_rate"], 0.0, "{summary}");
            for l in &lines {
                assert_eq!(l["reward"]["score"], 0.0, "{}: {l}", l["task_id"]);
                assert!(l["reward"]["details"]["rewards"].is_object(), "{l}");
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(900), body)
            .await
            .expect("both runs finish within 15 minutes")
    });
}

#[test]
fn uniagent_oracle_passes_harbor_mini_and_names_a_broken_task() {
    if common::skip_without_docker() {
        return;
    }
    let out = common::uniagent()
        .args(["oracle", "--harbor"])
        .arg(dataset())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ok ")).count(),
        8,
        "{text}"
    );
    // A copy of a task whose solution does nothing: broken, exit 1, and the results say why.
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("lazy-hello");
    let copy = std::process::Command::new("cp")
        .arg("-r")
        .arg(dataset().join("hello-file"))
        .arg(&task)
        .status()
        .unwrap();
    assert!(copy.success());
    std::fs::write(
        task.join("solution/solve.sh"),
        "#!/bin/bash\necho nothing to do\n",
    )
    .unwrap();
    let results = dir.path().join("oracle.json");
    let out = common::uniagent()
        .args(["oracle", "--harbor"])
        .arg(&task)
        .arg("--out")
        .arg(&results)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(text.trim(), "broken lazy-hello: scored 0.0", "{text}");
    assert!(
        stderr(&out).contains("1 of 1 tasks are broken"),
        "{}",
        stderr(&out)
    );
    let results: Value = serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    assert_eq!(results[0]["oracle"]["output"], "nothing to do\n");
    assert_eq!(results[0]["rewards"]["reward"], 0.0);
}

/// Writes a Harbor task `name` under `root` on the sandbox base image, working in `/app`.
fn write_task(root: &std::path::Path, name: &str, toml: &str, instruction: &str, test: &str) {
    let files = [
        ("task.toml", toml),
        ("instruction.md", instruction),
        (
            "environment/Dockerfile",
            "FROM uniagent-sandbox-base:latest\nWORKDIR /app\n",
        ),
        ("tests/test.sh", test),
    ];
    for (path, text) in files {
        let path = root.join(name).join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// What a task's sandbox holds (its network interfaces, its cgroup's memory limit and CPU
/// quota) compared with `EXPECT` (the verifier's variable); each key of `reward.json` says what
/// was seen.
const LIMITS_TEST: &str = r#"#!/bin/bash
net=$(ls /sys/class/net | tr '\n' ' ')
mem=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)
if [ -f /sys/fs/cgroup/cpu.max ]; then cpu=$(cut -d' ' -f1 /sys/fs/cgroup/cpu.max); else cpu=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us); fi
seen="net=[$net] mem=$mem cpu=$cpu"
echo "$seen"
if [ "$seen" = "$EXPECT" ]; then ok=1; else ok=0; fi
printf '{"reward": %s}' "$ok" > /logs/verifier/reward.json
"#;

/// A task's `[environment]` resources are its sandbox's limits, and only its own: `no-network`
/// leaves it only loopback although the configured network is the bridge, `cpus` and
/// `memory_mb` are its cgroup's quota and limit; a task without them runs under the configured
/// limits. `[agent] timeout_sec` ends the rollout of a task whose agent sleeps past it.
#[test]
fn a_tasks_resources_and_timeout_bound_its_own_rollout() {
    let root = tempfile::tempdir().unwrap();
    let limited = "[environment]\ncpus = 0.5\nmemory_mb = 300\nnetwork_mode = \"no-network\"\n\
        [verifier]\nenv = { EXPECT = \"net=[lo ] mem=314572800 cpu=50000\" }\n";
    let open = "[verifier]\nenv = { EXPECT = \"net=[eth0 lo ] mem=2147483648 cpu=100000\" }\n";
    write_task(
        root.path(),
        "limited",
        limited,
        "Limited task.\n",
        LIMITS_TEST,
    );
    write_task(root.path(), "open", open, "Open task.\n", LIMITS_TEST);
    write_task(
        root.path(),
        "slow",
        "[agent]\ntimeout_sec = 2.0\n",
        "Slow task.\n",
        "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
    );
    // The slow task's agent sleeps far past its 2 s; the others finish at once.
    let responder: common::Responder = Arc::new(|body: &Value| {
        if first_user_text(body).contains("Slow") && assistant_turns(body) == 0 {
            tool_call("c0", "execute_bash", json!({"command": "sleep 60"}))
        } else {
            tool_call("c1", "finish", json!({"answer": "done"}))
        }
    });
    let dir = root.path().to_path_buf();
    let config = move |url: &str| {
        format!(
            "tasks:\n  harbor: {}\n\
environment:\n  type: harbor\n  sandbox: {{type: docker, image: \"{{image}}\", work_dir: \"{{workdir}}\", network: bridge}}\n\
model:\n  type: openai\n  http: {{endpoints: [\"{url}\"], model: m, timeout: 60}}\n\
loop:\n  max_turns: 4\n  tool_timeout: 120\n\
runner:\n  max_concurrent_rollouts: 3\n",
            dir.display()
        )
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let started = std::time::Instant::now();
        let ran = tokio::time::timeout(
            std::time::Duration::from_secs(180),
            run_config(responder, config),
        )
        .await
        .expect("the run finishes within 3 minutes");
        let Some((_summary, lines)) = ran else {
            return;
        };
        let by_id = |id: &str| lines.iter().find(|l| l["task_id"] == id).unwrap().clone();
        for id in ["limited", "open"] {
            let l = by_id(id);
            assert_eq!(l["reward"]["score"], 1.0, "{id}: {}", l["reward"]);
        }
        let slow = by_id("slow");
        assert_eq!(slow["exit_reason"], "wall_clock_timeout", "{slow}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(50),
            "the 60 s sleep was not cut at the task's 2 s: {:?}",
            started.elapsed()
        );
    });
}

/// `test.sh` of the separate-verifier tasks: the verifier's image (from `tests/Dockerfile`,
/// holding `/verifier-only`), the agent's greeting carried over, and the agent having seen no
/// `/tests`.
const SEPARATE_TEST: &str = "#!/bin/bash
ok=1
[ -d /verifier-only ] || ok=0
[ \"$(cat /app/greeting.txt 2>/dev/null)\" = hello ] || ok=0
[ \"$(cat /app/saw-tests 2>/dev/null)\" = no ] || ok=0
echo $ok > /logs/verifier/reward.txt
";

/// A task with `environment_mode = "separate"` is graded in a fresh sandbox of the image built
/// from its `tests/Dockerfile`, holding the agent's final `/app`: solved it scores 1, left alone
/// 0 (a real score); the agent's sandbox never held `tests/`.
#[test]
fn a_separate_verifier_grades_the_agents_work_in_a_fresh_sandbox() {
    let root = tempfile::tempdir().unwrap();
    for (name, instruction) in [
        (
            "sep-solved",
            "Separate solved: write hello to /app/greeting.txt.\n",
        ),
        (
            "sep-unsolved",
            "Separate unsolved: write hello to /app/greeting.txt.\n",
        ),
    ] {
        write_task(
            root.path(),
            name,
            "[verifier]\nenvironment_mode = \"separate\"\ntimeout_sec = 60.0\n",
            instruction,
            SEPARATE_TEST,
        );
        std::fs::write(
            root.path().join(name).join("tests/Dockerfile"),
            "FROM uniagent-sandbox-base:latest\nRUN mkdir /verifier-only\nWORKDIR /app\n",
        )
        .unwrap();
    }
    let responder: common::Responder = Arc::new(|body: &Value| {
        let solve = first_user_text(body).contains("Separate solved");
        if solve && assistant_turns(body) == 0 {
            let command = "if [ -e /tests ]; then echo yes; else echo no; fi > /app/saw-tests; \
                           echo hello > /app/greeting.txt";
            tool_call("c0", "execute_bash", json!({ "command": command }))
        } else {
            tool_call("c1", "finish", json!({"answer": "done"}))
        }
    });
    let dir = root.path().to_path_buf();
    let config = move |url: &str| {
        format!(
            "tasks:\n  harbor: {}\n\
environment:\n  type: harbor\n\
model:\n  type: openai\n  http: {{endpoints: [\"{url}\"], model: m, timeout: 60}}\n\
loop:\n  max_turns: 4\n  tool_timeout: 60\n\
runner:\n  max_concurrent_rollouts: 2\n",
            dir.display()
        )
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ran = tokio::time::timeout(
            std::time::Duration::from_secs(180),
            run_config(responder, config),
        )
        .await
        .expect("the run finishes within 3 minutes");
        let Some((_summary, lines)) = ran else {
            return;
        };
        let by_id = |id: &str| lines.iter().find(|l| l["task_id"] == id).unwrap().clone();
        let solved = by_id("sep-solved");
        assert_eq!(solved["reward"]["score"], 1.0, "{}", solved["reward"]);
        assert!(
            solved["reward"]["details"]["carried_bytes"]
                .as_u64()
                .unwrap()
                > 0
        );
        let unsolved = by_id("sep-unsolved");
        assert_eq!(unsolved["reward"]["score"], 0.0, "{}", unsolved["reward"]);
        assert_eq!(unsolved["exit_reason"], "finished", "{unsolved}");
    });
}
