//! `datasets/harbor-mini` is what Harbor accepts, and uniagent reads each task as Harbor does:
//! Harbor's own task model (`harbor` 0.26.0, `tests/harbor/load_tasks.py`) loads every task
//! directory, and its name, instruction (canary stripped), timeouts, resources and metadata
//! equal what `HarborTask::load` reads. Also a task with Harbor's deprecated keys and a canary.
//!
//! Needs `UNIAGENT_HARBOR_VENV` (scripts/setup/64-harbor.sh); skips with a printed reason when
//! it is unset, fails when it is set and the venv is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use uniagent_rewards::harbor::HarborTask;

fn harbor_reads(venv: &Path, dirs: &[PathBuf]) -> Value {
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup/64-harbor.sh",
        python.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/harbor/load_tasks.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(venv.join("harbor-src"))
        .args(dirs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Harbor refused a task: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ours(dir: &Path) -> Value {
    let t = HarborTask::load(dir).unwrap();
    let env = &t.config.environment;
    json!({
        "name": t.name,
        "instruction": t.instruction,
        "agent_timeout_sec": t.config.agent.timeout_sec,
        "verifier_timeout_sec": t.config.verifier.timeout_sec,
        "build_timeout_sec": env.build_timeout_sec,
        "cpus": env.cpus,
        "memory_mb": env.memory_mib().unwrap(),
        "docker_image": env.docker_image,
        "workdir": env.workdir,
        "metadata": t.config.metadata,
    })
}

/// Numbers as f64, so that Harbor's `1` and our `1.0` compare equal.
fn normalized(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64().unwrap()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalized(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

#[test]
fn harbor_accepts_harbor_mini_and_reads_it_as_uniagent_does() {
    let Ok(venv) = std::env::var("UNIAGENT_HARBOR_VENV") else {
        eprintln!("skipped: UNIAGENT_HARBOR_VENV is not set (scripts/setup/64-harbor.sh)");
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/harbor-mini");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("task.toml").is_file())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 8);
    // One more with the deprecated keys and a canary line.
    let extra = tempfile::tempdir().unwrap();
    let files = [
        ("task.toml", "version = \"1.0\"\n[environment]\nmemory = \"2G\"\nallow_internet = false\ndocker_image = \"img:1\"\nworkdir = \"/srv\"\n[agent]\ntimeout_sec = 30\n"),
        ("instruction.md", "<!-- harbor-canary GUID 0f7e -->\n\nDo the thing.\n"),
        ("tests/test.sh", "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    ];
    for (path, text) in files {
        let path = extra.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dirs.push(extra.path().to_path_buf());
    let harbor = harbor_reads(Path::new(&venv), &dirs);
    for dir in &dirs {
        let theirs = &harbor[dir.to_str().unwrap()];
        assert_eq!(
            normalized(&ours(dir)),
            normalized(theirs),
            "{}",
            dir.display()
        );
    }
    assert_eq!(
        harbor[extra.path().to_str().unwrap()]["instruction"],
        "Do the thing.\n"
    );
}
