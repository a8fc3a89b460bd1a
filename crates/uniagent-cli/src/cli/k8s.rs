//! `uniagent k8s`: housekeeping of the claims the `k8s` sandbox backend creates (feature `k8s`).
//!
//! - `reap --run ID`: delete every claim of run ID; `reap --stale`: the claims of crashed workers
//!   on this host and those past their `shutdownTime`. One line `deleted NAME` per claim on
//!   stdout, `failed NAME: ERROR` on stderr; exit 1 when any deletion failed.
//! - `list [--run ID]`: one tab-separated line per claim.
//!
//! The cluster and namespace come from `--config` (a `run`/`train` config whose
//! `environment.sandbox` is `type: k8s`) and the flags, the flags winning.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use uniagent_sandboxes::k8s::K8sConfig;

use crate::error::{CliError, Result};

/// Arguments of `k8s`.
#[derive(Debug, Args)]
pub struct K8sArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: K8sCommand,
}

/// `k8s` subcommands.
#[derive(Debug, Subcommand)]
pub enum K8sCommand {
    /// Delete the claims of a run, or of crashed and expired workers.
    Reap(ReapArgs),
    /// List uniagent's claims: `NAME run=RUN rollout=R owner=HOST:PID:TICKS shutdown=TIME
    /// ready=BOOL deleting=BOOL`, tab-separated.
    List(ListArgs),
}

/// Where the claims are.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// A `run`/`train` config whose `environment.sandbox` has `type: k8s`: its cluster and
    /// namespace settings.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Namespace of the claims (default: the config's, else `uniagent-agent-sandboxes`).
    #[arg(long)]
    pub namespace: Option<String>,
    /// API server URL without credentials (e.g. `kubectl proxy`'s).
    #[arg(long)]
    pub api_url: Option<String>,
    /// Kubeconfig file.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long)]
    pub context: Option<String>,
}

/// Arguments of `k8s reap`.
#[derive(Debug, Args)]
pub struct ReapArgs {
    /// The run whose claims to delete (its `run_id`, or `$UNIAGENT_RUN_ID` of the run).
    #[arg(
        long,
        value_name = "ID",
        required_unless_present = "stale",
        conflicts_with = "stale"
    )]
    pub run: Option<String>,
    /// Delete the claims whose owner process on this host is gone or whose `shutdownTime`
    /// passed.
    #[arg(long)]
    pub stale: bool,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Arguments of `k8s list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only the claims of this run.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Runs `k8s`.
pub(super) fn main(args: K8sArgs) -> Result<()> {
    let runtime = super::runtime()?;
    match args.command {
        K8sCommand::Reap(args) => {
            let cfg = cluster(&args.cluster)?;
            let reaped = runtime.block_on(async {
                match &args.run {
                    Some(run) => uniagent_sandboxes::k8s::reaper::reap_run(&cfg, run).await,
                    None => uniagent_sandboxes::k8s::reaper::reap_stale(&cfg).await,
                }
            });
            let reaped = reaped.map_err(|e| CliError::runtime(format!("k8s reap: {e}")))?;
            for name in &reaped.deleted {
                println!("deleted {name}");
            }
            for (name, error) in &reaped.failed {
                eprintln!("failed {name}: {}", crate::error::one_line(error));
            }
            if reaped.failed.is_empty() {
                Ok(())
            } else {
                Err(CliError::runtime(format!(
                    "k8s reap: {} of {} claims could not be deleted",
                    reaped.failed.len(),
                    reaped.failed.len() + reaped.deleted.len()
                )))
            }
        }
        K8sCommand::List(args) => {
            let cfg = cluster(&args.cluster)?;
            let claims = runtime
                .block_on(uniagent_sandboxes::k8s::reaper::list(
                    &cfg,
                    args.run.as_deref(),
                ))
                .map_err(|e| CliError::runtime(format!("k8s list: {e}")))?;
            for c in claims {
                let owner = c.owner.map(|o| o.label()).unwrap_or_default();
                let shutdown = c
                    .shutdown_unix
                    .and_then(|t| uniagent_sandboxes::k8s::render::rfc3339(t).ok())
                    .unwrap_or_default();
                println!(
                    "{}\trun={}\trollout={}\towner={owner}\tshutdown={shutdown}\tready={}\tdeleting={}",
                    c.name,
                    c.run_id,
                    c.rollout.unwrap_or_default(),
                    c.ready,
                    c.deleting
                );
            }
            Ok(())
        }
    }
}

/// The k8s settings of `--config` (if any) with the flags applied.
fn cluster(args: &ClusterArgs) -> Result<K8sConfig> {
    let mut cfg = match &args.config {
        Some(file) => from_config(file)?,
        None => K8sConfig::default(),
    };
    if let Some(ns) = &args.namespace {
        cfg.namespace = ns.clone();
    }
    if args.api_url.is_some() {
        cfg.api_url = args.api_url.clone();
    }
    if args.kubeconfig.is_some() {
        cfg.kubeconfig = args.kubeconfig.clone();
    }
    if args.context.is_some() {
        cfg.context = args.context.clone();
    }
    Ok(cfg)
}

fn from_config(file: &std::path::Path) -> Result<K8sConfig> {
    let doc = crate::config::ConfigDoc::load(file, &[])?;
    let path = ["environment", "sandbox"];
    let Some(value) = doc.value().pointer("/environment/sandbox") else {
        return Err(CliError::config(
            file.display().to_string(),
            path.join("."),
            "missing: `k8s --config` reads the k8s settings there",
        ));
    };
    match doc.decode::<uniagent_sandboxes::DeploymentConfig>(&path, value)? {
        uniagent_sandboxes::DeploymentConfig::K8s(cfg) => Ok(cfg),
        other => Err(CliError::config(
            file.display().to_string(),
            "environment.sandbox.type",
            format!("is `{}`, not `k8s`", other.backend()),
        )),
    }
}
