//! Grading in fresh sandboxes on the host backend: the gold patch resolves, empty and wrong
//! patches do not, infrastructure failures are errors, and no tampering raises a failing
//! patch's score (test edits, sitecustomize, conftest, pytest `addopts` in pyproject.toml,
//! setup.cfg and tox.ini, stdout and marker spoofing, PATH shadowing, killing the sandbox,
//! replace objects, filters, hooks, deleting `.git`).
//!
//! The "image" is a template repository on the host; the sandbox factory clones it to the
//! instance's `repo_dir` and returns a fresh host sandbox, so every grade starts clean.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use uniagent_core::runner::SandboxFactory;
use uniagent_core::{Deployment, Task};
use uniagent_rewards::grade::{
    grade_patch, grade_predictions, FreshSandboxTests, GradeOptions, GradeRun, InfraError,
    Prediction, SweInstance, Verdict,
};
use uniagent_rewards::swebench::Parser;
use uniagent_sandboxes::{HostConfig, HostDeployment};

mod calc_task;
mod reward_common;

use reward_common::score_submission;

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";
const FIXED: &str = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n";
const TESTS: &str = "import unittest\n\nfrom calc import add, sub\n\n\nclass CalcTest(unittest.TestCase):\n    def test_sub(self):\n        self.assertEqual(sub(5, 3), 2)\n";
const NEW_TEST: &str = "\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n";

fn git(dir: &Path, args: &[&str]) -> String {
    calc_task::run(dir, "git", args)
}

/// The template repository (base commit with the bug), the test patch and the gold patch.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    template: PathBuf,
    base: String,
    test_patch: String,
    gold: String,
    server: PathBuf,
}

/// Diff of `edit` applied to a scratch clone of the template.
fn diff_of(fx_template: &Path, scratch: &Path, edit: impl FnOnce(&Path)) -> String {
    let _ = std::fs::remove_dir_all(scratch);
    git(
        fx_template.parent().unwrap(),
        &[
            "clone",
            "-q",
            fx_template.to_str().unwrap(),
            scratch.to_str().unwrap(),
        ],
    );
    edit(scratch);
    git(scratch, &["add", "-A"]);
    git(scratch, &["diff", "--cached", "--binary"])
}

fn fixture() -> Option<Fixture> {
    let server = reward_common::server_binary()?;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let template = root.join("template");
    std::fs::create_dir_all(&template).unwrap();
    std::fs::write(template.join("calc.py"), CALC).unwrap();
    std::fs::write(template.join("test_calc.py"), TESTS).unwrap();
    git(&template, &["init", "-q"]);
    git(
        &template,
        &["-c", "user.email=t@e", "-c", "user.name=t", "add", "."],
    );
    git(
        &template,
        &[
            "-c",
            "user.email=t@e",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "base",
        ],
    );
    let base = git(&template, &["rev-parse", "HEAD"]).trim().to_owned();
    let scratch = root.join("scratch");
    let test_patch = diff_of(&template, &scratch, |d| {
        std::fs::write(d.join("test_calc.py"), format!("{TESTS}{NEW_TEST}")).unwrap();
    });
    let gold = diff_of(&template, &scratch, |d| {
        std::fs::write(d.join("calc.py"), FIXED).unwrap()
    });
    Some(Fixture {
        _dir: dir,
        root,
        template,
        base,
        test_patch,
        gold,
        server,
    })
}

impl Fixture {
    /// An instance graded in its own `repo_dir` (so fresh sandboxes never share one).
    fn instance(
        &self,
        id: &str,
        test_cmd: &str,
        parser: Parser,
        f2p: &[&str],
        p2p: &[&str],
    ) -> SweInstance {
        let row = json!({
            "instance_id": id, "repo": "example/calc", "base_commit": self.base,
            "patch": self.gold, "test_patch": self.test_patch,
            "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "test_cmd": test_cmd,
            "log_parser": parser.name(), "repo_dir": self.root.join("graded").join(id).to_str().unwrap(),
        });
        SweInstance::from_json(&row).unwrap()
    }

    fn unittest(&self, id: &str) -> SweInstance {
        self.instance(
            id,
            "python3 -m unittest -v test_calc",
            Parser::Django,
            &["test_add (test_calc.CalcTest.test_add)"],
            &["test_sub (test_calc.CalcTest.test_sub)"],
        )
    }

    fn host(&self) -> Box<dyn Deployment> {
        Box::new(HostDeployment::new(HostConfig {
            server_binary: Some(self.server.clone()),
            ..HostConfig::default()
        }))
    }

    /// A factory of fresh sandboxes: clones the template to the task's `repo_dir`.
    fn factory(self: &Arc<Self>) -> Arc<dyn SandboxFactory> {
        let fx = Arc::clone(self);
        Arc::new(
            move |task: &Task| -> uniagent_core::Result<Box<dyn Deployment>> {
                let repo = PathBuf::from(task.metadata["repo_dir"].as_str().unwrap());
                let _ = std::fs::remove_dir_all(&repo);
                std::fs::create_dir_all(repo.parent().unwrap()).unwrap();
                git(
                    &fx.root,
                    &[
                        "clone",
                        "-q",
                        fx.template.to_str().unwrap(),
                        repo.to_str().unwrap(),
                    ],
                );
                Ok(fx.host())
            },
        )
    }

    /// A patch that changes the template by `edit`.
    fn patch(&self, name: &str, edit: impl FnOnce(&Path)) -> String {
        diff_of(&self.template, &self.root.join(name), edit)
    }

    async fn grade(
        self: &Arc<Self>,
        instance: &SweInstance,
        patch: &str,
        options: &GradeOptions,
    ) -> uniagent_rewards::grade::InstanceGrade {
        let sandbox = self
            .factory()
            .create(&uniagent_rewards::grade::sandbox_task(instance))
            .unwrap();
        grade_patch(sandbox, instance, patch.as_bytes(), options).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gold_resolves_and_empty_wrong_and_broken_patches_do_not() {
    let Some(fx) = fixture() else { return };
    let fx = Arc::new(fx);
    let options = GradeOptions::default();

    let gold = fx.grade(&fx.unittest("gold"), &fx.gold, &options).await;
    assert_eq!(gold.verdict, Verdict::Resolved, "{gold:?}\n{}", gold.log);
    assert!(
        gold.log.contains(">>>>> Start Test Output")
            && gold.log.contains(">>>>> Test Exit Code: 0")
    );

    let empty = fx.grade(&fx.unittest("empty"), "  \n", &options).await;
    assert_eq!(empty.verdict, Verdict::EmptyPatch);

    let wrong = fx.patch("wrong", |d| {
        std::fs::write(d.join("calc.py"), CALC.replace("a - b", "b - a")).unwrap()
    });
    let graded = fx.grade(&fx.unittest("wrong"), &wrong, &options).await;
    assert_eq!(graded.verdict, Verdict::Unresolved, "{graded:?}");
    assert_eq!(graded.exit_code, Some(1));

    // Infrastructure failures are errors, not test failures.
    let garbage =
        "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n";
    let graded = fx.grade(&fx.unittest("garbage"), garbage, &options).await;
    assert_eq!(
        (graded.verdict, graded.error.clone()),
        (Verdict::Error, Some(InfraError::PatchApply)),
        "{graded:?}"
    );
    let mut broken_tests = fx.unittest("broken-test-patch");
    broken_tests.test_patch = broken_tests.test_patch.replace("CalcTest", "Nope");
    let graded = fx.grade(&broken_tests, &fx.gold, &options).await;
    assert_eq!(graded.error, Some(InfraError::TestPatchApply), "{graded:?}");
    let mut no_python = fx.unittest("no-interpreter");
    no_python.test_cmd = "python3-missing -m unittest -v test_calc".into();
    let graded = fx.grade(&no_python, &fx.gold, &options).await;
    assert_eq!(
        graded.error,
        Some(InfraError::TestsNeverRan),
        "{graded:?}\n{}",
        graded.log
    );
    let mut hang = fx.unittest("hang");
    hang.test_cmd = "sleep 30".into();
    let quick = GradeOptions {
        test_timeout: Duration::from_secs(1),
        ..GradeOptions::default()
    };
    let graded = fx.grade(&hang, &fx.gold, &quick).await;
    assert_eq!(graded.error, Some(InfraError::TestsTimedOut), "{graded:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampering_patches_cannot_raise_a_failing_patch() {
    let Some(fx) = fixture() else { return };
    let fx = Arc::new(fx);
    let options = GradeOptions::default();
    let unprotected = GradeOptions {
        fail_on_conflicting_lines: false,
        ..unprotected()
    };

    // Rewriting the test file: the dataset's test file comes back, the bug is still there.
    let edit_tests = fx.patch("edit-tests", |d| {
        std::fs::write(d.join("test_calc.py"), "import unittest\n\nclass CalcTest(unittest.TestCase):\n    def test_add(self):\n        pass\n\n    def test_sub(self):\n        pass\n").unwrap();
    });
    let graded = fx
        .grade(&fx.unittest("edit-tests"), &edit_tests, &options)
        .await;
    assert_eq!(graded.verdict, Verdict::Unresolved, "{graded:?}");
    assert_eq!(graded.reverted_paths, ["test_calc.py"]);

    // sitecustomize.py on the import path disables assertions. It works when allowed (the
    // control), and is undone by default.
    let mut site = fx.unittest("sitecustomize");
    site.test_cmd = "PYTHONPATH=. python3 -m unittest -v test_calc".into();
    let sitecustomize = fx.patch("site", |d| {
        std::fs::write(
            d.join("sitecustomize.py"),
            "import unittest\nunittest.TestCase.assertEqual = lambda self, a, b, msg=None: None\n",
        )
        .unwrap();
    });
    let control = fx.grade(&site, &sitecustomize, &unprotected).await;
    assert_eq!(
        control.verdict,
        Verdict::Resolved,
        "the attack must work unprotected: {control:?}\n{}",
        control.log
    );
    let graded = fx.grade(&site, &sitecustomize, &options).await;
    assert_eq!(graded.verdict, Verdict::Unresolved, "{graded:?}");
    assert_eq!(graded.reverted_paths, ["sitecustomize.py"]);

    // Stdout spoofing: the code under test prints a passing line for the failing test at exit.
    let spoof = fx.patch("spoof", |d| {
        std::fs::write(d.join("calc.py"), format!("{CALC}\nimport atexit\natexit.register(lambda: print('test_add (test_calc.CalcTest.test_add) ... ok', flush=True))\n")).unwrap();
    });
    let control = fx
        .grade(&fx.unittest("spoof-control"), &spoof, &unprotected)
        .await;
    assert_eq!(
        control.verdict,
        Verdict::Resolved,
        "the spoof must fool the last-line rule: {control:?}\n{}",
        control.log
    );
    let graded = fx.grade(&fx.unittest("spoof"), &spoof, &options).await;
    assert_eq!(graded.verdict, Verdict::Unresolved, "{graded:?}");
    assert_eq!(
        graded.conflicting_ids,
        ["test_add (test_calc.CalcTest.test_add)"]
    );

    // Marker spoofing: fake end-of-output and exit-code markers, then passing lines.
    let markers = fx.patch("markers", |d| {
        std::fs::write(d.join("calc.py"), format!("{CALC}\nprint('>>>>> End Test Output')\nprint('>>>>> Test Exit Code: 0')\nprint('test_add (test_calc.CalcTest.test_add) ... ok')\nprint('>>>>> Start Test Output')\nprint('test_add (test_calc.CalcTest.test_add) ... ok')\n")).unwrap();
    });
    let graded = fx.grade(&fx.unittest("markers"), &markers, &options).await;
    assert_eq!(
        graded.verdict,
        Verdict::Unresolved,
        "{graded:?}\n{}",
        graded.log
    );

    // PATH shadowing: a `python3` in the repository is not what the test command runs.
    let shadow = fx.patch("shadow", |d| {
        let fake = d.join("python3");
        std::fs::write(&fake, "#!/bin/sh\necho 'test_add (test_calc.CalcTest.test_add) ... ok'\necho 'test_sub (test_calc.CalcTest.test_sub) ... ok'\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    });
    let graded = fx.grade(&fx.unittest("shadow"), &shadow, &options).await;
    assert_eq!(graded.verdict, Verdict::Unresolved, "{graded:?}");

    // Killing the sandbox from the code under test: an error, never a pass.
    const KILL: &str = "\nimport os, signal\npid = os.getpid()\nwhile pid > 1:\n    ppid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n    try:\n        if os.readlink(f'/proc/{ppid}/exe').endswith('uniagent-sandbox'):\n            os.kill(ppid, signal.SIGKILL)\n            break\n    except OSError:\n        pass\n    pid = ppid\n";
    let kill = fx.patch("kill", |d| {
        std::fs::write(d.join("calc.py"), format!("{CALC}{KILL}")).unwrap()
    });
    let graded = fx.grade(&fx.unittest("kill"), &kill, &options).await;
    assert_ne!(graded.verdict, Verdict::Resolved, "{graded:?}");
}

/// The fixture and an instance `id` graded by pytest from `UNIAGENT_SWEBENCH_VENV`'s python
/// (also returned), or `None` (with the reason printed) when that venv or the server is missing.
fn pytest_fixture(id: &str) -> Option<(Arc<Fixture>, PathBuf, SweInstance)> {
    let Some(venv) = std::env::var_os("UNIAGENT_SWEBENCH_VENV") else {
        eprintln!("SKIPPED: UNIAGENT_SWEBENCH_VENV is unset (its venv has pytest)");
        return None;
    };
    let fx = Arc::new(fixture()?);
    let python = PathBuf::from(venv).join("bin/python");
    let instance = fx.instance(
        id,
        &format!(
            "{} -m pytest -rA -p no:cacheprovider test_calc.py",
            python.display()
        ),
        Parser::Pytest,
        &["test_calc.py::CalcTest::test_add"],
        &["test_calc.py::CalcTest::test_sub"],
    );
    Some((fx, python, instance))
}

/// Grading options with the protection of test-harness files off: a tampering patch that
/// resolves under them shows that the attack works.
fn unprotected() -> GradeOptions {
    GradeOptions {
        protect_test_harness_files: false,
        ..GradeOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conftest_cannot_rewrite_pytest_outcomes() {
    let Some((fx, python, instance)) = pytest_fixture("conftest") else {
        return;
    };
    assert!(
        python.exists(),
        "UNIAGENT_SWEBENCH_VENV is set but {} is missing",
        python.display()
    );
    let conftest = fx.patch("conftest", |d| {
        std::fs::write(d.join("conftest.py"), "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    outcome = yield\n    report = outcome.get_result()\n    report.outcome = 'passed'\n    report.longrepr = None\n").unwrap();
    });
    let control = fx.grade(&instance, &conftest, &unprotected()).await;
    assert_eq!(
        control.verdict,
        Verdict::Resolved,
        "the attack must work unprotected: {control:?}\n{}",
        control.log
    );
    let graded = fx
        .grade(&instance, &conftest, &GradeOptions::default())
        .await;
    assert_eq!(
        graded.verdict,
        Verdict::Unresolved,
        "{graded:?}\n{}",
        graded.log
    );
    let gold = fx
        .grade(&instance, &fx.gold, &GradeOptions::default())
        .await;
    assert_eq!(gold.verdict, Verdict::Resolved, "{gold:?}\n{}", gold.log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pytest_config_in_the_patch_cannot_load_a_plugin_that_rewrites_outcomes() {
    let Some((fx, _, instance)) = pytest_fixture("pytest-config") else {
        return;
    };
    // A plugin module in the repository (not a conftest) that passes every test, loaded by
    // `addopts` in each configuration file pytest reads options from.
    const PLUGIN: &str = "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    outcome = yield\n    report = outcome.get_result()\n    report.outcome = 'passed'\n    report.longrepr = None\n";
    let configs = [
        (
            "pyproject.toml",
            "[project]\nname = \"calc\"\n\n[tool.pytest.ini_options]\naddopts = \"-p grade_helper\"\n",
        ),
        ("setup.cfg", "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = -p grade_helper\n"),
        ("tox.ini", "[tox]\nenvlist = py3\n\n[pytest]\naddopts = -p grade_helper\n"),
    ];
    for (file, config) in configs {
        let patch = fx.patch(&format!("cfg-{file}"), |d| {
            std::fs::write(d.join("grade_helper.py"), PLUGIN).unwrap();
            std::fs::write(d.join(file), config).unwrap();
        });
        let control = fx.grade(&instance, &patch, &unprotected()).await;
        assert_eq!(
            control.verdict,
            Verdict::Resolved,
            "{file}: the attack must work unprotected: {control:?}\n{}",
            control.log
        );
        let graded = fx.grade(&instance, &patch, &GradeOptions::default()).await;
        assert_eq!(
            graded.verdict,
            Verdict::Unresolved,
            "{file}: {graded:?}\n{}",
            graded.log
        );
        assert_eq!(graded.pytest_config_restored, [file], "{graded:?}");
        assert!(
            graded
                .log
                .contains(&format!("Restored the pytest sections of {file}")),
            "{}",
            graded.log
        );
    }
    // The gold patch plus an honest edit to the same files still resolves.
    let honest = fx.patch("cfg-honest", |d| {
        std::fs::write(d.join("calc.py"), FIXED).unwrap();
        std::fs::write(
            d.join("setup.cfg"),
            "[metadata]\nname = calc\nversion = 2\n",
        )
        .unwrap();
    });
    let graded = fx.grade(&instance, &honest, &GradeOptions::default()).await;
    assert_eq!(
        graded.verdict,
        Verdict::Resolved,
        "{graded:?}\n{}",
        graded.log
    );
    assert!(graded.pytest_config_restored.is_empty(), "{graded:?}");
}

/// Runs `script` in the agent's sandbox, in its repository.
async fn agent_sh(d: &Arc<dyn Deployment>, repo: &str, script: &str) {
    reward_common::sh(d, &format!("cd {repo} && {script}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reward_takes_only_the_diff_from_the_agents_sandbox() {
    let Some(fx) = fixture() else { return };
    let fx = Arc::new(fx);
    let instance = fx.unittest("agent");
    let agent_repo = fx.root.join("agent-repo");
    git(
        &fx.root,
        &[
            "clone",
            "-q",
            fx.template.to_str().unwrap(),
            agent_repo.to_str().unwrap(),
        ],
    );
    let agent_repo = agent_repo.to_str().unwrap().to_owned();
    let agent: Arc<dyn Deployment> = Arc::from(fx.host());
    agent.start().await.unwrap();
    let mut task = Task::new("agent", vec![]);
    for (k, v) in [
        ("base_commit", json!(fx.base)),
        ("test_patch", json!(fx.test_patch)),
        ("FAIL_TO_PASS", json!(instance.tests.fail_to_pass)),
        ("PASS_TO_PASS", json!(instance.tests.pass_to_pass)),
        ("test_cmd", json!(instance.test_cmd)),
        ("log_parser", json!("parse_log_django")),
        ("repo_dir", json!(instance.repo_dir)),
    ] {
        task = task.with_metadata(k, v);
    }
    // The agent's repository is a clone elsewhere on the host; fresh sandboxes are cloned to
    // the task's `repo_dir`.
    let reward = FreshSandboxTests::new(fx.factory()).with_agent_repo_dir(agent_repo.clone());

    // Tampering without a fix: tests rewritten, a replace object that makes base's test file
    // look like the agent's, a smudge/clean filter and hooks that would rewrite the tests.
    agent_sh(&agent, &agent_repo, r#"
        printf 'import unittest\n\nclass CalcTest(unittest.TestCase):\n    def test_add(self):\n        pass\n\n    def test_sub(self):\n        pass\n' > test_calc.py
        new=$(git hash-object -w test_calc.py); old=$(git rev-parse HEAD:test_calc.py)
        git replace -f "$old" "$new"
        printf '*.py filter=evil\n' > .gitattributes
        git config filter.evil.clean 'sed s/a-b/a+b/'
        git config filter.evil.smudge 'cat'
        mkdir -p .git/hooks
        printf '#!/bin/sh\necho hacked > /tmp/uniagent-hook-ran\n' > .git/hooks/pre-commit
        chmod +x .git/hooks/pre-commit
        cp .git/hooks/pre-commit .git/hooks/post-checkout
    "#).await;
    let out = score_submission(&reward, &task, &agent).await.unwrap();
    assert!(!out.success, "{out:?}");
    assert!(
        !Path::new("/tmp/uniagent-hook-ran").exists(),
        "an agent hook ran during grading"
    );

    // The real fix in the same tampered repository resolves.
    agent_sh(
        &agent,
        &agent_repo,
        &format!("printf '%s' '{FIXED}' > calc.py"),
    )
    .await;
    let out = score_submission(&reward, &task, &agent).await.unwrap();
    assert!(out.success, "{out:?}");

    // Deleting .git leaves nothing to grade: 0, not an error and not a pass.
    agent_sh(&agent, &agent_repo, "rm -rf .git").await;
    let out = score_submission(&reward, &task, &agent).await.unwrap();
    assert!(!out.success);
    assert_eq!(out.details["verdict"], json!("patch_unavailable"));
    agent.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grade_predictions_reports_like_the_harness_and_resumes() {
    let Some(fx) = fixture() else { return };
    let fx = Arc::new(fx);
    let dataset: Vec<SweInstance> = ["a-1", "a-2", "a-3", "a-4"]
        .iter()
        .map(|id| fx.unittest(id))
        .collect();
    let wrong = fx.patch("wrong2", |d| {
        std::fs::write(d.join("calc.py"), CALC.replace("a - b", "b - a")).unwrap()
    });
    let pred = |id: &str, patch: Option<&str>| Prediction {
        instance_id: id.into(),
        model_patch: patch.map(str::to_owned),
        model_name_or_path: "org/model".into(),
    };
    let predictions = vec![
        pred("a-1", Some(&fx.gold)),
        pred("a-2", Some("")),
        pred("a-3", Some(&wrong)),
    ];
    let out = tempfile::tempdir().unwrap();
    let run = GradeRun {
        out_dir: Some(out.path().to_path_buf()),
        concurrency: 2,
        ..GradeRun::default()
    };
    let report = grade_predictions(&dataset, &predictions, fx.factory().as_ref(), &run)
        .await
        .unwrap();
    assert_eq!(report.resolved_ids, ["a-1"]);
    assert_eq!(report.empty_patch_ids, ["a-2"]);
    assert_eq!(report.unresolved_ids, ["a-3"]);
    assert_eq!(report.incomplete_ids, ["a-4"]);
    assert_eq!(
        (
            report.total_instances,
            report.submitted_instances,
            report.completed_instances
        ),
        (4, 3, 2)
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("report.json")).unwrap())
            .unwrap();
    for key in [
        "resolved_ids",
        "unresolved_ids",
        "error_ids",
        "empty_patch_ids",
        "completed_instances",
        "schema_version",
    ] {
        assert!(written.get(key).is_some(), "report lacks {key}");
    }
    let instance_dir = out.path().join("org__model/a-1");
    let per_instance: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(instance_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(per_instance["a-1"]["resolved"], json!(true));
    assert!(
        std::fs::read_to_string(instance_dir.join("test_output.txt"))
            .unwrap()
            .contains(">>>>> End Test Output")
    );

    // Resume: graded instances are not graded again (this factory cannot make sandboxes).
    let refuse = |_: &Task| -> uniagent_core::Result<Box<dyn Deployment>> {
        Err(uniagent_core::Error::InvalidInput {
            message: "no sandboxes on resume".into(),
        })
    };
    let again = grade_predictions(&dataset, &predictions, &refuse, &run)
        .await
        .unwrap();
    assert_eq!(again, report);

    let stray = vec![pred("not-in-dataset", Some(&fx.gold))];
    assert!(grade_predictions(&dataset, &stray, &refuse, &run)
        .await
        .is_err());
}
