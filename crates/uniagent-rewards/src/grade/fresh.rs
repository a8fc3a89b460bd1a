//! Grading one patch in a fresh sandbox, as the SWE-bench harness does: clean repository,
//! apply the patch, put the test files back to `base_commit`, apply the dataset's
//! `test_patch`, run the tests, read the log with the package's rules.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uniagent_core::{Deployment, DeploymentExt};

use super::extract::{encode_base64, GIT, GIT_ENV};
use super::instance::SweInstance;
use crate::error::RewardError;
use crate::sandbox::{run, shell_quote, Run};
use crate::suite::patch_paths;
use crate::swebench::{
    eval_log, grade_tests, InvalidRun, Resolution, TestsReport, END_TEST_OUTPUT, START_TEST_OUTPUT,
    TEST_EXIT_CODE,
};

/// How grading runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GradeOptions {
    /// Seconds the test command may run (past it the instance is an error, as in the harness).
    #[serde(deserialize_with = "crate::config::timeout_secs")]
    pub test_timeout_secs: f64,
    /// Seconds each preparation step (applying patches) may run.
    #[serde(deserialize_with = "crate::config::timeout_secs")]
    pub setup_timeout_secs: f64,
    /// Bytes of test output kept from its start.
    pub log_head_bytes: usize,
    /// Bytes of test output kept from its end (where pytest's `-rA` summary is).
    pub log_tail_bytes: usize,
    /// Undo the patch's changes to files that steer the test run instead of the code under
    /// test (`conftest.py`, `sitecustomize.py`, `usercustomize.py`, `*.pth`, `pytest.ini`).
    /// The harness does not; an honest fix rarely touches them, and a reward that trains a
    /// policy must not let it rewrite test outcomes.
    pub protect_test_harness_files: bool,
    /// Grade a test that some line reported `FAILED`/`ERROR` as failing even when a later line
    /// says it passed. The package keeps the last line; code under test can print a passing
    /// line after the runner's report. An honest run reports a test failing then passing only
    /// with a rerun plugin, so this rarely differs from the harness.
    pub fail_on_conflicting_lines: bool,
}

impl Default for GradeOptions {
    fn default() -> Self {
        Self {
            test_timeout_secs: 1800.0,
            setup_timeout_secs: 300.0,
            log_head_bytes: 1 << 20,
            log_tail_bytes: 4 << 20,
            protect_test_harness_files: true,
            fail_on_conflicting_lines: true,
        }
    }
}

/// The verdict on one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// FULL resolution.
    Resolved,
    /// The tests ran and the instance is not (fully) resolved.
    Unresolved,
    /// The patch was empty (or absent).
    EmptyPatch,
    /// Infrastructure failure: no verdict on the model's work (see [`InfraError`]).
    Error,
}

/// Why an instance could not be graded; never a model failure in itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InfraError {
    /// The sandbox could not be created or started.
    SandboxStart,
    /// The sandbox failed while grading.
    Sandbox,
    /// The model patch does not apply to `base_commit`.
    PatchApply,
    /// The dataset's `test_patch` does not apply after the model patch.
    TestPatchApply,
    /// The test command ran past its timeout.
    TestsTimedOut,
    /// The test command never ran tests (interpreter or runner missing, nothing collected).
    TestsNeverRan,
}

/// The outcome of grading one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceGrade {
    /// `instance_id`
    pub instance_id: String,
    /// The verdict.
    pub verdict: Verdict,
    /// FULL / PARTIAL / NO, when the tests ran.
    pub resolution: Option<Resolution>,
    /// The per-test report, when the tests ran.
    pub tests_status: Option<TestsReport>,
    /// What kept the instance from being graded.
    pub error: Option<InfraError>,
    /// Details on the error or on an invalid run.
    pub message: Option<String>,
    /// Files of the patch that were put back to `base_commit` before the tests ran.
    pub reverted_paths: Vec<String>,
    /// Tests reported failing and later passing (graded failing unless
    /// [`GradeOptions::fail_on_conflicting_lines`] is off).
    pub conflicting_ids: Vec<String>,
    /// The test command's exit code, as the sandbox reported it.
    pub exit_code: Option<i32>,
    /// The log in the harness's layout (setup output, markers, test output with its middle cut
    /// when large, exit code).
    #[serde(skip)]
    pub log: String,
}

impl InstanceGrade {
    pub(crate) fn new(instance_id: &str, verdict: Verdict) -> Self {
        Self {
            instance_id: instance_id.to_owned(),
            verdict,
            resolution: None,
            tests_status: None,
            error: None,
            message: None,
            reverted_paths: Vec::new(),
            conflicting_ids: Vec::new(),
            exit_code: None,
            log: String::new(),
        }
    }

    fn error(instance_id: &str, error: InfraError, message: String, log: String) -> Self {
        Self {
            error: Some(error),
            message: Some(message),
            log,
            ..Self::new(instance_id, Verdict::Error)
        }
    }

    /// 1.0 when resolved, else 0.0.
    pub fn score(&self) -> f64 {
        if self.verdict == Verdict::Resolved {
            1.0
        } else {
            0.0
        }
    }
}

/// File names a patch may not change when [`GradeOptions::protect_test_harness_files`] is on.
fn steers_the_test_run(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    matches!(
        name,
        "conftest.py" | "sitecustomize.py" | "usercustomize.py" | "pytest.ini"
    ) || name.ends_with(".pth")
}

/// Grades `patch` for `instance` in `sandbox`, a fresh (not yet started) sandbox of the
/// instance's image, which is stopped before this returns.
pub async fn grade_patch(
    sandbox: Box<dyn Deployment>,
    instance: &SweInstance,
    patch: &[u8],
    options: &GradeOptions,
) -> InstanceGrade {
    let id = &instance.instance_id;
    if patch.iter().all(u8::is_ascii_whitespace) {
        return InstanceGrade::new(id, Verdict::EmptyPatch);
    }
    let sandbox: Arc<dyn Deployment> = Arc::from(sandbox);
    if let Err(e) = sandbox.start().await {
        // A sandbox that half-started may still hold resources.
        let _ = sandbox.stop().await;
        return InstanceGrade::error(id, InfraError::SandboxStart, e.to_string(), String::new());
    }
    let grade = match grade_started(&sandbox, instance, patch, options).await {
        Ok(grade) => grade,
        Err(e) => InstanceGrade::error(id, InfraError::Sandbox, e.to_string(), String::new()),
    };
    let _ = sandbox.stop().await;
    grade
}

async fn grade_started(
    sandbox: &Arc<dyn Deployment>,
    instance: &SweInstance,
    patch: &[u8],
    options: &GradeOptions,
) -> Result<InstanceGrade, RewardError> {
    let id = &instance.instance_id;
    let work = sandbox
        .sh("mktemp -d", 60.0)
        .await?
        .stdout
        .trim()
        .to_owned();
    if work.is_empty() {
        return Err(RewardError::SetupFailed {
            step: "creating a work directory".into(),
            exit_code: None,
            output: String::new(),
        });
    }
    sandbox
        .write_text(&format!("{work}/model.b64"), &encode_base64(patch))
        .await?;
    sandbox
        .write_text(
            &format!("{work}/test.b64"),
            &encode_base64(instance.test_patch.as_bytes()),
        )
        .await?;

    let patch_text = String::from_utf8_lossy(patch);
    let mut reverted: Vec<String> = Vec::new();
    let mut restore: Vec<String> = patch_paths(&instance.test_patch);
    if options.protect_test_harness_files {
        for path in patch_paths(&patch_text) {
            if steers_the_test_run(&path) && !restore.contains(&path) {
                reverted.push(path.clone());
                restore.push(path);
            }
        }
    }
    for path in patch_paths(&patch_text) {
        if restore.contains(&path) && !reverted.contains(&path) {
            reverted.push(path);
        }
    }

    let mut log = String::new();
    let prepare = prepare_script(&work, instance, &restore);
    let prepared = run(
        sandbox,
        &prepare,
        Some(instance.repo_dir.as_str()),
        options.setup_timeout_secs,
    )
    .await?;
    let (code, output) = match prepared {
        Run::Finished(r) => (r.exit_code, r.stdout),
        Run::TimedOut => (None, "preparation timed out".to_owned()),
    };
    log.push_str(&output);
    match code {
        Some(0) => {}
        Some(10) => {
            return Ok(InstanceGrade::error(
                id,
                InfraError::PatchApply,
                "the patch does not apply".into(),
                log,
            ))
        }
        Some(11) => {
            return Ok(InstanceGrade::error(
                id,
                InfraError::TestPatchApply,
                "the test patch does not apply".into(),
                log,
            ))
        }
        other => {
            return Ok(InstanceGrade::error(
                id,
                InfraError::Sandbox,
                format!("preparing the repository failed (exit code {other:?})"),
                log,
            ))
        }
    }

    let tests = run(
        sandbox,
        &instance.test_cmd,
        Some(instance.repo_dir.as_str()),
        options.test_timeout_secs,
    )
    .await?;
    let response = match tests {
        Run::Finished(r) => r,
        Run::TimedOut => {
            log.push_str(">>>>> Tests Timed Out\n");
            return Ok(InstanceGrade::error(
                id,
                InfraError::TestsTimedOut,
                format!("the tests ran past {} s", options.test_timeout_secs),
                log,
            ));
        }
    };
    let output = head_and_tail(
        &response.stdout,
        options.log_head_bytes,
        options.log_tail_bytes,
    );
    log.push_str(START_TEST_OUTPUT);
    log.push('\n');
    log.push_str(&defuse_markers(&output));
    if !log.ends_with('\n') {
        log.push('\n');
    }
    log.push_str(END_TEST_OUTPUT);
    log.push('\n');
    // The sandbox's exit code, not one printed by the code under test; a signal is non-zero.
    let exit_code = response.exit_code;
    log.push_str(&format!("{TEST_EXIT_CODE}: {}\n", exit_code.unwrap_or(-1)));

    let eval = eval_log(instance.parser, &log)?;
    let mut grade = InstanceGrade::new(id, Verdict::Unresolved);
    grade.exit_code = exit_code;
    grade.reverted_paths = reverted;
    match &eval.invalid {
        None => {}
        Some(InvalidRun::SuiteNeverRan) => {
            grade.verdict = Verdict::Error;
            grade.error = Some(InfraError::TestsNeverRan);
            grade.message = Some(never_ran_reason(&response.stdout, exit_code));
            grade.log = log;
            return Ok(grade);
        }
        Some(other) => {
            // The log contradicts the run (or carries a failure marker): unresolved, as in the
            // harness, with the reason kept.
            grade.message = Some(format!("invalid test run: {other:?}"));
            grade.log = log;
            return Ok(grade);
        }
    }
    grade.conflicting_ids = eval
        .status_map
        .failed_then_passed()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let map = if options.fail_on_conflicting_lines {
        eval.status_map.with_conflicts_failed()
    } else {
        eval.status_map
    };
    let report = grade_tests(&map, &instance.tests, instance.eval_type, true);
    let resolution = report.resolution();
    grade.verdict = if resolution == Resolution::Full {
        Verdict::Resolved
    } else {
        Verdict::Unresolved
    };
    grade.resolution = Some(resolution);
    grade.tests_status = Some(report);
    grade.log = log;
    Ok(grade)
}

/// The shell script that makes the fresh repository (the image's, at `base_commit`, with its
/// untracked build artefacts, so no reset or clean) the graded state: apply the model patch (git apply, then `patch` with fuzz, as the harness tries), put `restore`
/// back to `base_commit` (read as blobs: no filters, no hooks), apply the test patch. Exit
/// code 10: the model patch does not apply; 11: the test patch does not apply.
fn prepare_script(work: &str, instance: &SweInstance, restore: &[String]) -> String {
    let w = shell_quote(work);
    let mut script = format!(
        r#"{GIT_ENV}
export HOME={w} XDG_CONFIG_HOME={w}
w={w}
base64 -d < "$w/model.b64" > "$w/model.patch" || exit 12
base64 -d < "$w/test.b64" > "$w/test.patch" || exit 12
if ! {GIT} apply --verbose --binary "$w/model.patch"; then
    echo ">>>>> git apply failed, trying patch --fuzz=5"
    patch --batch --fuzz=5 -p1 -i "$w/model.patch" || {{ echo ">>>>> Patch Apply Failed"; exit 10; }}
fi
echo ">>>>> Applied Patch"
"#
    );
    for path in restore {
        let rev = shell_quote(&format!("{}:{path}", instance.base_commit));
        let file = shell_quote(path);
        script.push_str(&format!(
            "if {GIT} cat-file -e {rev} 2>/dev/null; then rm -rf -- {file}; mkdir -p -- \"$(dirname -- {file})\"; {GIT} cat-file blob {rev} > {file} || exit 12; else rm -rf -- {file}; fi\n"
        ));
    }
    if !instance.test_patch.trim().is_empty() {
        script.push_str(&format!(
            "{GIT} apply --verbose --binary \"$w/test.patch\" || {{ echo \">>>>> Test Patch Apply Failed\"; exit 11; }}\n"
        ));
    }
    script
}

/// Test output with its middle cut when it is larger than `head + tail` bytes (on char
/// boundaries), so the runner's summary at the end survives any size.
pub fn head_and_tail(text: &str, head: usize, tail: usize) -> String {
    if text.len() <= head.saturating_add(tail) {
        return text.to_owned();
    }
    let mut head_end = head;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - tail;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!(
        "{}\n[... {} bytes of test output cut ...]\n{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

/// The harness's `>>>>> ` markers inside the test output are the code under test speaking:
/// they are broken up so they cannot end the output early, void the run or fake an exit code.
fn defuse_markers(output: &str) -> String {
    output.replace(">>>>>", ">>>>\u{2060}>")
}

/// Why a run that shows no test results never ran its suite, in words.
fn never_ran_reason(output: &str, exit_code: Option<i32>) -> String {
    let hint = if exit_code == Some(127) || output.contains("command not found") {
        "the test command or its interpreter is missing"
    } else if output.contains("no tests ran") || output.contains("collected 0 items") {
        "no tests were collected"
    } else if output.contains("ModuleNotFoundError") || output.contains("ImportError") {
        "an import failed before any test ran"
    } else {
        "no test results in the output"
    };
    format!("{hint} (exit code {exit_code:?})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_and_tail_keep_both_ends() {
        let text = format!(
            "{}{}{}",
            "h".repeat(10),
            "m".repeat(100),
            "PASSED t.py::x\n"
        );
        let cut = head_and_tail(&text, 10, 15);
        assert!(cut.starts_with("hhhhhhhhhh\n[... 100 bytes"), "{cut}");
        assert!(cut.ends_with("PASSED t.py::x\n"), "{cut}");
        assert_eq!(head_and_tail("short", 1, 10), "short");
        let wide = "é".repeat(50);
        let cut = head_and_tail(&wide, 3, 3);
        assert!(cut.starts_with('é') && cut.ends_with('é'), "{cut}");
    }

    #[test]
    fn harness_files_are_recognised() {
        for path in [
            "conftest.py",
            "tests/conftest.py",
            "sitecustomize.py",
            "a/b/x.pth",
            "pytest.ini",
        ] {
            assert!(steers_the_test_run(path), "{path}");
        }
        assert!(!steers_the_test_run("src/conftest_helpers.py"));
        assert!(defuse_markers(">>>>> End Test Output").contains('\u{2060}'));
    }
}
