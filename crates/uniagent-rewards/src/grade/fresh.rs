//! Grading one patch in a fresh sandbox, as the SWE-bench harness does: clean repository,
//! apply the patch, put the test files back to `base_commit`, apply the dataset's
//! `test_patch`, run the tests, read the log with the package's rules. R2E-Gym instances run
//! the image's hidden tests with its `run_tests.sh` instead and are judged by
//! [`crate::r2e`].

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::sandbox::CommandResponse;
use uniagent_core::{Deployment, DeploymentExt};

use super::extract::{encode_base64, GIT, GIT_ENV};
use super::instance::{SweInstance, TaskFormat};
use super::test_config::{holds_pytest_sections, restore_pytest_sections};
use crate::error::RewardError;
use crate::r2e::{self, R2eComparison, R2eStatusMap, SummaryReading};
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
    /// How long the test command may run (past it the instance is an error, as in the
    /// harness); `test_timeout_secs` in configs.
    #[serde(rename = "test_timeout_secs", with = "crate::config::timeout_secs")]
    pub test_timeout: Duration,
    /// How long each preparation step (applying patches) may run; `setup_timeout_secs` in
    /// configs.
    #[serde(rename = "setup_timeout_secs", with = "crate::config::timeout_secs")]
    pub setup_timeout: Duration,
    /// Bytes of test output kept from its start.
    pub log_head_bytes: usize,
    /// Bytes of test output kept from its end (where pytest's `-rA` summary is).
    pub log_tail_bytes: usize,
    /// Undo the patch's changes to files that steer the test run instead of the code under
    /// test (`conftest.py`, `sitecustomize.py`, `usercustomize.py`, `*.pth`, `pytest.ini`,
    /// `.pytest.ini`, `pytest.toml`), and to the pytest sections of `setup.cfg`, `tox.ini` and
    /// `pyproject.toml` (their other sections keep the patch's edits). The harness does not;
    /// an honest fix rarely touches them, and a reward that trains a policy must not let it
    /// rewrite test outcomes (`addopts = -p plugin_in_repo`, `--deselect`).
    pub protect_test_harness_files: bool,
    /// Grade a test that some line reported `FAILED`/`ERROR` as failing even when a later line
    /// says it passed. The package keeps the last line; code under test can print a passing
    /// line after the runner's report. An honest run reports a test failing then passing only
    /// with a rerun plugin, so this rarely differs from the harness. For R2E-Gym instances it
    /// also reads every summary, not only the text up to a second summary header
    /// ([`SummaryReading::Strict`]).
    pub fail_on_conflicting_lines: bool,
}

impl Default for GradeOptions {
    fn default() -> Self {
        Self {
            test_timeout: Duration::from_secs(1800),
            setup_timeout: Duration::from_secs(300),
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
    /// The image lacks R2E-Gym's hidden tests (`/r2e_tests`) or `run_tests.sh`.
    R2eHarnessMissing,
}

/// How an R2E-Gym run compared with `expected_output_json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct R2eReport {
    /// The parsed map (test name → status).
    pub statuses: R2eStatusMap,
    /// The comparison with the expected map.
    pub comparison: R2eComparison,
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
    /// The per-test report, when the tests ran (SWE-bench instances).
    pub tests_status: Option<TestsReport>,
    /// The parsed map and its comparison, when the tests ran (R2E-Gym instances).
    pub r2e: Option<R2eReport>,
    /// What kept the instance from being graded.
    pub error: Option<InfraError>,
    /// Details on the error or on an invalid run.
    pub message: Option<String>,
    /// Files of the patch that were put back to `base_commit` before the tests ran.
    pub reverted_paths: Vec<String>,
    /// Configuration files whose pytest sections were put back to `base_commit`.
    pub pytest_config_restored: Vec<String>,
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
            r2e: None,
            error: None,
            message: None,
            reverted_paths: Vec::new(),
            pytest_config_restored: Vec::new(),
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
        "conftest.py"
            | "sitecustomize.py"
            | "usercustomize.py"
            | "pytest.ini"
            | ".pytest.ini"
            | "pytest.toml"
            | ".pytest.toml"
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
    let work = upload_patches(sandbox, instance, patch).await?;
    let patch_text = String::from_utf8_lossy(patch);
    let (reverted, restore) = paths_to_restore(instance, &patch_text, options);
    let mut log = String::new();
    if let Some(failed) =
        prepare_repository(sandbox, instance, &work, &restore, options, &mut log).await?
    {
        return Ok(failed);
    }
    let mut restored = Vec::new();
    if options.protect_test_harness_files {
        for path in patch_paths(&patch_text) {
            if holds_pytest_sections(&path)
                && !restore.contains(&path)
                && restore_pytest_config(sandbox, instance, &path).await?
            {
                log.push_str(&format!(
                    ">>>>> Restored the pytest sections of {path} to base_commit\n"
                ));
                restored.push(path);
            }
        }
    }
    let test_cmd = match instance.format {
        TaskFormat::R2eGym { .. } => format!(
            "bash {}",
            shell_quote(&format!("{work}/hidden/run_tests.sh"))
        ),
        TaskFormat::SweBench => instance.test_cmd.clone(),
    };
    let tests = run(
        sandbox,
        &test_cmd,
        Some(instance.repo_dir.as_str()),
        options.test_timeout,
    )
    .await?;
    let response = match tests {
        Run::Finished(r) => r,
        Run::TimedOut => {
            log.push_str(">>>>> Tests Timed Out\n");
            return Ok(InstanceGrade::error(
                id,
                InfraError::TestsTimedOut,
                format!(
                    "the tests ran past {} s",
                    options.test_timeout.as_secs_f64()
                ),
                log,
            ));
        }
    };
    let mut grade = match &instance.format {
        TaskFormat::R2eGym { expected } => {
            let output = head_and_tail(
                &response.stdout,
                options.log_head_bytes,
                options.log_tail_bytes,
            );
            let mut grade = grade_r2e(id, &output, expected, options, log);
            if grade.verdict == Verdict::Error {
                grade.message = Some(never_ran_reason(&response.stdout, response.exit_code));
            }
            grade
        }
        TaskFormat::SweBench => grade_swebench(instance, &response, options, log)?,
    };
    grade.exit_code = response.exit_code;
    grade.reverted_paths = reverted;
    grade.pytest_config_restored = restored;
    Ok(grade)
}

/// Writes the model's patch and the test patch into a fresh work directory; returns its path.
async fn upload_patches(
    sandbox: &Arc<dyn Deployment>,
    instance: &SweInstance,
    patch: &[u8],
) -> Result<String, RewardError> {
    let work = sandbox
        .sh("mktemp -d", Duration::from_secs(60))
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
    Ok(work)
}

/// The paths put back to `base_commit` after the model's patch: the test patch's, and (when
/// protecting the harness) files that steer the test run. Returns (the model's paths among
/// them: what the grade reports as reverted, every path to restore).
fn paths_to_restore(
    instance: &SweInstance,
    patch_text: &str,
    options: &GradeOptions,
) -> (Vec<String>, Vec<String>) {
    let mut reverted: Vec<String> = Vec::new();
    let mut restore: Vec<String> = patch_paths(&instance.test_patch);
    if options.protect_test_harness_files {
        for path in patch_paths(patch_text) {
            if steers_the_test_run(&path) && !restore.contains(&path) {
                reverted.push(path.clone());
                restore.push(path);
            }
        }
    }
    for path in patch_paths(patch_text) {
        if restore.contains(&path) && !reverted.contains(&path) {
            reverted.push(path);
        }
    }
    (reverted, restore)
}

/// Runs [`prepare_script`]; its output goes to `log`. `Some` grade when the repository could not
/// be brought to the graded state.
async fn prepare_repository(
    sandbox: &Arc<dyn Deployment>,
    instance: &SweInstance,
    work: &str,
    restore: &[String],
    options: &GradeOptions,
    log: &mut String,
) -> Result<Option<InstanceGrade>, RewardError> {
    let prepare = prepare_script(work, instance, restore);
    let prepared = run(
        sandbox,
        &prepare,
        Some(instance.repo_dir.as_str()),
        options.setup_timeout,
    )
    .await?;
    let (code, output) = match prepared {
        Run::Finished(r) => (r.exit_code, r.stdout),
        Run::TimedOut => (None, "preparation timed out".to_owned()),
    };
    log.push_str(&output);
    let (error, message) = match code {
        Some(0) => return Ok(None),
        Some(10) => (
            InfraError::PatchApply,
            "the patch does not apply".to_owned(),
        ),
        Some(11) => (
            InfraError::TestPatchApply,
            "the test patch does not apply".to_owned(),
        ),
        Some(13) => (
            InfraError::R2eHarnessMissing,
            "the image has no R2E-Gym run_tests.sh or /r2e_tests".to_owned(),
        ),
        other => (
            InfraError::Sandbox,
            format!("preparing the repository failed (exit code {other:?})"),
        ),
    };
    let id = &instance.instance_id;
    Ok(Some(InstanceGrade::error(
        id,
        error,
        message,
        std::mem::take(log),
    )))
}

/// A SWE-bench verdict: the test output framed as the harness frames it, parsed with the
/// instance's log parser, and the FAIL_TO_PASS / PASS_TO_PASS lists checked against it.
fn grade_swebench(
    instance: &SweInstance,
    response: &CommandResponse,
    options: &GradeOptions,
    mut log: String,
) -> Result<InstanceGrade, RewardError> {
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
    let mut grade = InstanceGrade::new(&instance.instance_id, Verdict::Unresolved);
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
{hide}if ! {GIT} apply --verbose --binary "$w/model.patch"; then
    echo ">>>>> git apply failed, trying patch --fuzz=5"
    patch --batch --fuzz=5 -p1 -i "$w/model.patch" || {{ echo ">>>>> Patch Apply Failed"; exit 10; }}
fi
echo ">>>>> Applied Patch"
"#,
        hide = match instance.format {
            TaskFormat::R2eGym { .. } => R2E_HIDE,
            TaskFormat::SweBench => "",
        }
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
    if matches!(instance.format, TaskFormat::R2eGym { .. }) {
        script.push_str(R2E_UNHIDE);
    }
    script
}

/// R2E-Gym, before the patch applies: its untracked harness in the repository (`.venv`, the
/// hidden tests' link, `run_tests.sh`) moves out of the patch's reach, so a patch that adds or
/// edits files there changes nothing that runs. `run_tests.sh` comes from the repository (as
/// the image builds it) or `/root` (as R2E-Gym's runtime leaves it). Exit 13: no harness.
const R2E_HIDE: &str = r#"mkdir -p "$w/hidden"
for p in .venv r2e_tests; do
    if [ -e "$p" ] || [ -L "$p" ]; then mv -- "$p" "$w/hidden/$p" || exit 12; fi
done
if [ -f run_tests.sh ]; then mv -- run_tests.sh "$w/hidden/run_tests.sh" || exit 12
elif [ -f /root/run_tests.sh ]; then cp -- /root/run_tests.sh "$w/hidden/run_tests.sh" || exit 12
else echo ">>>>> No run_tests.sh in the image"; exit 13; fi
"#;

/// R2E-Gym, after the patch: whatever the patch put at the harness's paths goes, the harness
/// comes back, the hidden tests are linked in (from `/r2e_tests`, or `/root/r2e_tests` as
/// R2E-Gym's runtime moves them) without stale bytecode, as R2E-Gym's runtime prepares them.
const R2E_UNHIDE: &str = r#"rm -rf -- .venv r2e_tests run_tests.sh
if [ -e "$w/hidden/.venv" ] || [ -L "$w/hidden/.venv" ]; then mv -- "$w/hidden/.venv" .venv || exit 12; fi
if [ -d /r2e_tests ]; then t=/r2e_tests
elif [ -d /root/r2e_tests ]; then t=/root/r2e_tests
elif [ -d "$w/hidden/r2e_tests" ]; then t="$w/hidden/r2e_tests"
else echo ">>>>> No /r2e_tests in the image"; exit 13; fi
find "$t" -name '*.pyc' -delete 2>/dev/null
find "$t" -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null
ln -s "$t" r2e_tests || exit 12
echo ">>>>> Hidden tests linked from $t"
"#;

/// Puts the pytest sections of the configuration file `path` back to `base_commit`'s (see
/// [`restore_pytest_sections`]); whether the file changed.
async fn restore_pytest_config(
    sandbox: &Arc<dyn Deployment>,
    instance: &SweInstance,
    path: &str,
) -> Result<bool, RewardError> {
    let rev = shell_quote(&format!("{}:{path}", instance.base_commit));
    let file = shell_quote(path);
    let read = |script: String| async move {
        match run(
            sandbox,
            &script,
            Some(instance.repo_dir.as_str()),
            Duration::from_secs(60),
        )
        .await?
        {
            Run::Finished(r) if r.exit_code == Some(0) => Ok(Some(r.stdout)),
            Run::Finished(_) => Ok(None),
            Run::TimedOut => Err(RewardError::SetupFailed {
                step: format!("reading {path}"),
                exit_code: None,
                output: "timed out".into(),
            }),
        }
    };
    let Some(patched) = read(format!("cat -- {file}")).await? else {
        // The patch deleted it: nothing of the agent's is read.
        return Ok(false);
    };
    let base = read(format!("{GIT_ENV}\n{GIT} cat-file blob {rev}")).await?;
    match restore_pytest_sections(base.as_deref(), &patched) {
        None => Ok(false),
        Some(text) => {
            let target = format!("{}/{path}", instance.repo_dir.trim_end_matches('/'));
            sandbox.write_text(&target, &text).await?;
            Ok(true)
        }
    }
}

/// Judges an R2E-Gym run: the cleaned output parsed and compared with `expected`. No summary
/// at all is a run that never ran its tests (an error, as for SWE-bench instances).
fn grade_r2e(
    id: &str,
    output: &str,
    expected: &R2eStatusMap,
    options: &GradeOptions,
    mut log: String,
) -> InstanceGrade {
    let output = r2e::clean_output(output);
    log.push_str(">>>>> R2E-Gym test output\n");
    log.push_str(&output);
    if !log.ends_with('\n') {
        log.push('\n');
    }
    let reading = if options.fail_on_conflicting_lines {
        SummaryReading::Strict
    } else {
        SummaryReading::Faithful
    };
    let parse = r2e::parse_log(&output, reading);
    if !parse.has_summary {
        let mut grade = InstanceGrade::new(id, Verdict::Error);
        grade.error = Some(InfraError::TestsNeverRan);
        grade.log = log;
        return grade;
    }
    let comparison = r2e::compare(&parse.statuses, expected);
    let mut grade = InstanceGrade::new(
        id,
        if comparison.matches {
            Verdict::Resolved
        } else {
            Verdict::Unresolved
        },
    );
    grade.conflicting_ids = parse.conflicting;
    grade.r2e = Some(R2eReport {
        statuses: parse.statuses,
        comparison,
    });
    grade.log = log;
    grade
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
