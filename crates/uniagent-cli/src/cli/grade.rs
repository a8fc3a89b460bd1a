//! `uniagent grade --dataset FILE --predictions FILE [--out DIR] [--concurrency N]`: grades
//! model patches the way the SWE-bench harness does — only the patch enters a fresh sandbox of
//! the task's image, the dataset's test patch is applied over it and the tests are run and
//! parsed (R2E-Gym rows: the image's hidden tests, compared with `expected_output_json`) —
//! and writes per-instance logs and the harness's report.

use std::path::PathBuf;

use clap::Args;
use uniagent_core::{Deployment, Task};
use uniagent_rewards::grade::{
    grade_predictions, load_dataset, load_predictions, sandbox_task, GradeRun,
};
use uniagent_sandboxes::DeploymentConfig;

use crate::env::fill_template;
use crate::error::{CliError, Result};

/// Arguments of `grade`.
#[derive(Debug, Args)]
pub struct GradeArgs {
    /// The dataset (JSON or JSONL rows in the SWE-bench or SWE-rebench layout, each with a
    /// `test_cmd`, directly or in `install_config`; or in R2E-Gym's layout, graded by its
    /// image's hidden tests against `expected_output_json`).
    #[arg(long)]
    pub dataset: PathBuf,
    /// The predictions (`instance_id`, `model_patch`, `model_name_or_path`), as JSONL, a JSON
    /// array or the harness's `{instance_id: prediction}` object.
    #[arg(long)]
    pub predictions: PathBuf,
    /// Where per-instance logs and `report.json` go; rerunning with it resumes.
    #[arg(long, default_value = "grade-out")]
    pub out: PathBuf,
    /// Instances graded at once (each holds a sandbox).
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The image of an instance, with `{instance_id}` and the row's other fields filled in;
    /// default: the row's `image_name` / `docker_image` / `image`.
    #[arg(long)]
    pub image: Option<String>,
}

/// Runs `grade`.
pub(super) fn main(args: GradeArgs) -> Result<()> {
    let dataset = load_dataset(&args.dataset)
        .map_err(|e| CliError::dataset(args.dataset.display(), None, e))?;
    let predictions = load_predictions(&args.predictions)
        .map_err(|e| CliError::dataset(args.predictions.display(), None, e))?;
    if args.concurrency == 0 {
        return Err(CliError::preflight("--concurrency must be at least 1"));
    }
    // Every graded instance needs an image before any sandbox starts.
    let mut configs = std::collections::BTreeMap::new();
    for instance in &dataset {
        if !predictions
            .iter()
            .any(|p| p.instance_id == instance.instance_id)
        {
            continue;
        }
        let task = sandbox_task(instance);
        let image = match (&args.image, &instance.image) {
            (Some(template), _) => fill_template(template, &task, true)
                .map_err(|e| CliError::preflight(format!("--image: {e}")))?,
            (None, Some(image)) => image.clone(),
            (None, None) => {
                return Err(CliError::dataset(
                    args.dataset.display(),
                    None,
                    format!(
                        "instance `{}` names no image (`image_name`, `docker_image` or `image`); pass --image",
                        instance.instance_id
                    ),
                ))
            }
        };
        let config: DeploymentConfig = serde_json::from_value(serde_json::json!({
            "type": "docker",
            "image": image,
        }))
        .map_err(|e| CliError::runtime(format!("docker config: {e}")))?;
        configs.insert(instance.instance_id.clone(), config);
    }
    let run = GradeRun {
        out_dir: Some(args.out.clone()),
        concurrency: args.concurrency,
        ..GradeRun::default()
    };
    let factory = move |task: &Task| -> uniagent_core::Result<Box<dyn Deployment>> {
        match configs.get(&task.id) {
            Some(config) => config.build(),
            None => Err(uniagent_core::Error::invalid_input(format!(
                "no sandbox image for instance `{}`",
                task.id
            ))),
        }
    };
    let rt = super::runtime()?;
    let report = rt
        .block_on(grade_predictions(&dataset, &predictions, &factory, &run))
        .map_err(|e| CliError::runtime(e.to_string()))?;
    eprintln!(
        "graded {} of {} submitted: {} resolved, {} unresolved, {} empty patches, {} errors (report: {})",
        report.completed_instances + report.error_instances + report.empty_patch_instances,
        report.submitted_instances,
        report.resolved_instances,
        report.unresolved_instances,
        report.empty_patch_instances,
        report.error_instances,
        args.out.join("report.json").display()
    );
    let text = serde_json::to_string(&report)
        .map_err(|e| CliError::runtime(format!("printing the report: {e}")))?;
    println!("{text}");
    Ok(())
}
