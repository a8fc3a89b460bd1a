//! Grading a predictions file: one fresh sandbox per instance, concurrently, with per-instance
//! logs, resume, and the harness's run report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use futures::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uniagent_core::runner::SandboxFactory;
use uniagent_core::Task;

use super::fresh::{grade_patch, GradeOptions, InstanceGrade, Verdict};
use super::instance::{Prediction, SweInstance};
use crate::error::RewardError;

/// A grading run's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GradeRun {
    /// Where per-instance logs and the report go (`None`: nothing written, no resume).
    pub out_dir: Option<PathBuf>,
    /// Instances graded at once (each holds a sandbox).
    pub concurrency: usize,
    /// How each instance is graded.
    pub options: GradeOptions,
}

impl Default for GradeRun {
    fn default() -> Self {
        Self {
            out_dir: None,
            concurrency: 4,
            options: GradeOptions::default(),
        }
    }
}

/// The run report, with the keys of the harness's (`make_run_report`, schema 2) plus
/// `failure_reasons` for errors.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GradeReport {
    /// Instances in the dataset.
    pub total_instances: usize,
    /// Predictions given.
    pub submitted_instances: usize,
    /// Instances whose tests ran to a verdict.
    pub completed_instances: usize,
    /// FULL resolutions.
    pub resolved_instances: usize,
    /// Completed, not resolved.
    pub unresolved_instances: usize,
    /// Empty or absent patches.
    pub empty_patch_instances: usize,
    /// Infrastructure failures.
    pub error_instances: usize,
    /// Ids of completed instances.
    pub completed_ids: Vec<String>,
    /// Dataset instances without a prediction.
    pub incomplete_ids: Vec<String>,
    /// Ids with an empty patch.
    pub empty_patch_ids: Vec<String>,
    /// Ids predicted.
    pub submitted_ids: Vec<String>,
    /// Ids resolved.
    pub resolved_ids: Vec<String>,
    /// Ids unresolved.
    pub unresolved_ids: Vec<String>,
    /// Ids with an infrastructure failure.
    pub error_ids: Vec<String>,
    /// Why each error id failed (`patch_apply`, `tests_never_ran`, ...).
    pub failure_reasons: BTreeMap<String, String>,
    /// The harness's report schema.
    pub schema_version: u32,
}

/// The task handed to the [`SandboxFactory`] for an instance: id, and metadata `image`,
/// `repo_dir` and `instance_id` (a factory picks the image from there).
pub fn sandbox_task(instance: &SweInstance) -> Task {
    let mut task = Task::new(instance.instance_id.clone(), Vec::new())
        .with_metadata("instance_id", json!(instance.instance_id))
        .with_metadata("repo_dir", json!(instance.repo_dir));
    if let Some(image) = &instance.image {
        task = task.with_metadata("image", json!(image));
    }
    task
}

/// Grades every prediction against its dataset instance, each in a fresh sandbox from
/// `sandboxes`, `run.concurrency` at a time. With an output directory, each instance gets
/// `<out>/<model>/<instance_id>/{patch.diff, test_output.txt, report.json}` and the run gets
/// `<out>/report.json`; instances with a `report.json` already are not graded again (resume).
///
/// A prediction for an instance not in the dataset is an error (`InvalidInput`), as is an
/// unwritable output directory; everything that goes wrong for one instance is that
/// instance's `error` verdict.
pub async fn grade_predictions(
    dataset: &[SweInstance],
    predictions: &[Prediction],
    sandboxes: &dyn SandboxFactory,
    run: &GradeRun,
) -> Result<GradeReport, RewardError> {
    let by_id: BTreeMap<&str, &SweInstance> = dataset
        .iter()
        .map(|i| (i.instance_id.as_str(), i))
        .collect();
    for p in predictions {
        if !by_id.contains_key(p.instance_id.as_str()) {
            return Err(RewardError::BadMetadata {
                field: "instance_id".into(),
                message: format!(
                    "prediction for `{}` has no instance in the dataset",
                    p.instance_id
                ),
            });
        }
    }
    let by_id = &by_id;
    let grades: Vec<Result<InstanceGrade, RewardError>> = stream::iter(predictions)
        .map(|prediction| async move {
            let instance = by_id[prediction.instance_id.as_str()];
            grade_one(instance, prediction, sandboxes, run).await
        })
        .buffer_unordered(run.concurrency.max(1))
        .collect()
        .await;
    let grades = grades.into_iter().collect::<Result<Vec<_>, _>>()?;
    let report = summarise(dataset, predictions, &grades);
    if let Some(out) = &run.out_dir {
        write_json(
            &out.join("report.json"),
            &serde_json::to_value(&report).map_err(internal)?,
        )?;
    }
    Ok(report)
}

async fn grade_one(
    instance: &SweInstance,
    prediction: &Prediction,
    sandboxes: &dyn SandboxFactory,
    run: &GradeRun,
) -> Result<InstanceGrade, RewardError> {
    let dir = run.out_dir.as_ref().map(|out| {
        out.join(prediction.model_name_or_path.replace('/', "__"))
            .join(&instance.instance_id)
    });
    if let Some(done) = dir.as_deref().and_then(read_previous) {
        return Ok(done);
    }
    let patch = prediction.model_patch.clone().unwrap_or_default();
    let grade = match sandboxes.create(&sandbox_task(instance)) {
        Ok(sandbox) => grade_patch(sandbox, instance, patch.as_bytes(), &run.options).await,
        Err(e) => InstanceGrade {
            verdict: Verdict::Error,
            error: Some(super::fresh::InfraError::SandboxStart),
            message: Some(e.to_string()),
            ..InstanceGrade::new(&instance.instance_id, Verdict::Error)
        },
    };
    if let Some(dir) = dir {
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        write_text(&dir.join("patch.diff"), &patch)?;
        write_text(&dir.join("test_output.txt"), &grade.log)?;
        write_json(&dir.join("report.json"), &harness_report(&grade, &patch))?;
    }
    Ok(grade)
}

/// The per-instance `report.json`: the harness's keys under the instance id, plus ours under
/// `uniagent`.
fn harness_report(grade: &InstanceGrade, patch: &str) -> Value {
    let applied = !matches!(
        grade.error,
        Some(super::fresh::InfraError::PatchApply | super::fresh::InfraError::TestPatchApply)
    ) && grade.verdict != Verdict::EmptyPatch
        && grade.tests_status.is_some();
    let mut report = serde_json::Map::new();
    report.insert(
        grade.instance_id.clone(),
        json!({
            "patch_is_None": false,
            "patch_exists": !patch.trim().is_empty(),
            "patch_successfully_applied": applied,
            "resolved": grade.verdict == Verdict::Resolved,
            "tests_status": grade.tests_status,
        }),
    );
    report.insert("uniagent".into(), json!(grade));
    Value::Object(report)
}

fn read_previous(dir: &Path) -> Option<InstanceGrade> {
    let text = std::fs::read_to_string(dir.join("report.json")).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    let mut grade: InstanceGrade = serde_json::from_value(value.get("uniagent")?.clone()).ok()?;
    grade.log = std::fs::read_to_string(dir.join("test_output.txt")).unwrap_or_default();
    Some(grade)
}

fn summarise(
    dataset: &[SweInstance],
    predictions: &[Prediction],
    grades: &[InstanceGrade],
) -> GradeReport {
    let predicted: BTreeSet<&str> = predictions.iter().map(|p| p.instance_id.as_str()).collect();
    let mut report = GradeReport {
        total_instances: dataset.len(),
        submitted_instances: predicted.len(),
        submitted_ids: predicted.iter().map(|s| (*s).to_owned()).collect(),
        incomplete_ids: dataset
            .iter()
            .filter(|i| !predicted.contains(i.instance_id.as_str()))
            .map(|i| i.instance_id.clone())
            .collect(),
        schema_version: 2,
        ..GradeReport::default()
    };
    for grade in grades {
        let id = grade.instance_id.clone();
        match grade.verdict {
            Verdict::Resolved => {
                report.completed_ids.push(id.clone());
                report.resolved_ids.push(id);
            }
            Verdict::Unresolved => {
                report.completed_ids.push(id.clone());
                report.unresolved_ids.push(id);
            }
            Verdict::EmptyPatch => report.empty_patch_ids.push(id),
            Verdict::Error => {
                let reason = grade
                    .error
                    .as_ref()
                    .and_then(|e| serde_json::to_value(e).ok())
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "error".into());
                report.failure_reasons.insert(id.clone(), reason);
                report.error_ids.push(id);
            }
        }
    }
    for ids in [
        &mut report.completed_ids,
        &mut report.resolved_ids,
        &mut report.unresolved_ids,
        &mut report.empty_patch_ids,
        &mut report.error_ids,
    ] {
        ids.sort();
    }
    report.completed_instances = report.completed_ids.len();
    report.resolved_instances = report.resolved_ids.len();
    report.unresolved_instances = report.unresolved_ids.len();
    report.empty_patch_instances = report.empty_patch_ids.len();
    report.error_instances = report.error_ids.len();
    report
}

fn internal(e: serde_json::Error) -> RewardError {
    RewardError::BadConfig {
        message: format!("cannot serialise the report: {e}"),
    }
}

fn io_error(path: &Path, e: std::io::Error) -> RewardError {
    RewardError::BadConfig {
        message: format!("cannot write {}: {e}", path.display()),
    }
}

fn write_text(path: &Path, text: &str) -> Result<(), RewardError> {
    std::fs::write(path, text).map_err(|e| io_error(path, e))
}

fn write_json(path: &Path, value: &Value) -> Result<(), RewardError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
    }
    let text = serde_json::to_string_pretty(value).map_err(internal)?;
    // Written whole, then renamed: an interrupted run never leaves a half report to resume from.
    let tmp = path.with_extension("json.tmp");
    write_text(&tmp, &text)?;
    std::fs::rename(&tmp, path).map_err(|e| io_error(path, e))
}
