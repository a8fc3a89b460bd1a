//! A SWE-style task image for Docker grading: the sandbox base image plus a git repository at
//! `/testbed` whose `add` subtracts, a test patch that adds a failing test, and patches that fix
//! it (or not), and the process helper of the grading tests. Shared by `tests/docker_grading.rs`,
//! `tests/fresh_grading.rs` and `benches/grade_docker.rs`.

#![allow(dead_code)] // each user takes what it needs

use std::path::Path;
use std::process::Command as Process;

use serde_json::{json, Value};

pub const CALC: &str = "def add(a, b):\n    return a - b\n";
pub const TESTS: &str = "import unittest\n\nfrom calc import add\n\n\nclass CalcTest(unittest.TestCase):\n    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n";
pub const NEW_TEST: &str = "\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n";
pub const TEST_CMD: &str = "python3 -m unittest -v test_calc";

/// Runs `program` in `dir` and returns its stdout; a failure panics with its stderr.
pub fn run(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = Process::new(program)
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The task image, removed again when dropped (also when a test panics).
pub struct CalcTask {
    /// The image's tag.
    pub image: String,
    /// The repository's one commit.
    pub base: String,
    /// Adds `test_add`, which fails at `base`.
    pub test_patch: String,
    /// The fix.
    pub gold: String,
    /// A wrong fix (`test_add` still fails).
    pub wrong: String,
}

impl CalcTask {
    /// Builds the image `tag` on top of `$UNIAGENT_DOCKER_IMAGE` (default the sandbox base).
    pub fn build(tag: &str) -> Self {
        let base_image = std::env::var("UNIAGENT_DOCKER_IMAGE")
            .unwrap_or_else(|_| "uniagent-sandbox-base:latest".into());
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("testbed");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("calc.py"), CALC).unwrap();
        std::fs::write(repo.join("test_calc.py"), TESTS).unwrap();
        run(&repo, "git", &["init", "-q"]);
        run(&repo, "git", &["add", "."]);
        let identity = ["-c", "user.email=t@e", "-c", "user.name=t"];
        run(
            &repo,
            "git",
            &[&identity[..], &["commit", "-qm", "base"]].concat(),
        );
        let base = run(&repo, "git", &["rev-parse", "HEAD"]).trim().to_owned();
        let test_patch = diff(&repo, "test_calc.py", &format!("{TESTS}{NEW_TEST}"));
        let gold = diff(&repo, "calc.py", &CALC.replace("a - b", "a + b"));
        let wrong = diff(&repo, "calc.py", &CALC.replace("a - b", "a * b + 1"));
        std::fs::write(
            dir.path().join("Dockerfile"),
            format!("FROM {base_image}\nCOPY testbed /testbed\n"),
        )
        .unwrap();
        run(dir.path(), "docker", &["build", "-q", "-t", tag, "."]);
        Self {
            image: tag.to_owned(),
            base,
            test_patch,
            gold,
            wrong,
        }
    }

    /// A dataset row of instance `id` in the `swebench` layout.
    pub fn row(&self, id: &str) -> Value {
        json!({
            "instance_id": id, "repo": "example/calc", "base_commit": self.base,
            "patch": self.gold, "test_patch": self.test_patch,
            "FAIL_TO_PASS": ["test_add (test_calc.CalcTest.test_add)"],
            "PASS_TO_PASS": ["test_zero (test_calc.CalcTest.test_zero)"],
            "test_cmd": TEST_CMD, "log_parser": "parse_log_django", "image_name": self.image,
        })
    }
}

impl Drop for CalcTask {
    fn drop(&mut self) {
        let _ = Process::new("docker")
            .args(["rmi", "-f", &self.image])
            .output();
    }
}

/// The patch that turns `file` into `content` (the work tree is restored afterwards).
fn diff(repo: &Path, file: &str, content: &str) -> String {
    let before = std::fs::read_to_string(repo.join(file)).unwrap();
    std::fs::write(repo.join(file), content).unwrap();
    let patch = run(repo, "git", &["diff"]);
    std::fs::write(repo.join(file), before).unwrap();
    patch
}
