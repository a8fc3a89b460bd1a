//! `uniagent-docker`: housekeeping for the docker sandbox backend.
//!
//! ```text
//! uniagent-docker cleanup --run-id RUN   remove every container of run RUN
//! uniagent-docker cleanup --stale        remove containers of crashed or expired runs, and
//!                                        payload images whose binaries were rebuilt
//! uniagent-docker list [--run-id RUN]    list uniagent containers
//! ```
//!
//! Every container the backend starts is labelled `dev.uniagent.run-id=<run id>` (from the
//! configuration, `$UNIAGENT_RUN_ID`, or random per process); `cleanup` force-removes them with
//! their anonymous volumes and prints one line per container.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use uniagent_sandboxes::docker::{
    engine, list_managed, prune_payload_images, reap_run, reap_stale, Reaped,
};

#[derive(Debug, Parser)]
#[command(
    name = "uniagent-docker",
    version,
    about = "Housekeeping for uniagent's docker sandboxes"
)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Remove containers of one run, or of every crashed or expired run.
    Cleanup {
        /// The run whose containers to remove.
        #[arg(long, required_unless_present = "stale", conflicts_with = "stale")]
        run_id: Option<String>,
        /// Remove containers whose owner process is gone or whose lifetime passed, and payload
        /// images built from binaries that were since rebuilt or deleted.
        #[arg(long)]
        stale: bool,
    },
    /// List uniagent containers.
    List {
        /// Only this run's containers.
        #[arg(long)]
        run_id: Option<String>,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("uniagent-docker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("uniagent-docker: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> uniagent_core::Result<ExitCode> {
    let docker = engine().await?;
    match args.command {
        Cmd::Cleanup { run_id, stale } => {
            let reaped = match (run_id, stale) {
                (Some(run), _) => reap_run(&docker, &run).await?,
                (None, _) => {
                    // Containers first: an image is removable once no container uses it.
                    let reaped = reap_stale(&docker).await?;
                    for tag in prune_payload_images(&docker).await? {
                        println!("removed image {tag}");
                    }
                    reaped
                }
            };
            Ok(report(&reaped))
        }
        Cmd::List { run_id } => {
            for c in list_managed(&docker, run_id.as_deref()).await? {
                println!(
                    "{}\trun={}\towner={}\tdeadline={}",
                    c.id,
                    c.run_id,
                    c.owner.map(|o| o.label()).unwrap_or_default(),
                    c.deadline.map(|d| d.to_string()).unwrap_or_default()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn report(reaped: &Reaped) -> ExitCode {
    for id in &reaped.removed {
        println!("removed {id}");
    }
    for (id, error) in &reaped.failed {
        eprintln!("failed {id}: {error}");
    }
    if reaped.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
