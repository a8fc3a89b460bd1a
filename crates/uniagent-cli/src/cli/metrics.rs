//! `--metrics-addr HOST:PORT` and `--metrics-linger SECS`: the Prometheus endpoint of `run`,
//! `train` and `gateway` (see `uniagent_metrics`).

use std::time::Duration;

use clap::Args;
use uniagent_core::telemetry::MetricDef;
use uniagent_metrics::{Exporter, MetricsError};

use crate::config::OutputConfig;
use crate::error::{CliError, Result};

/// The endpoint's flags (they override `output.metrics_addr` / `output.metrics_linger`).
#[derive(Debug, Clone, Default, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics on `GET /metrics` at HOST:PORT (port 0 picks a free one; the
    /// address is printed on stderr as `metrics on http://HOST:PORT/metrics`).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// After the work ends, serve the final values this many seconds longer, for a last
    /// scrape (default 0).
    #[arg(long, value_name = "SECS")]
    pub metrics_linger: Option<f64>,
}

impl MetricsArgs {
    /// Applies the flags over the config's `output` section.
    pub(crate) fn apply(&self, output: &mut OutputConfig) -> Result<()> {
        if let Some(addr) = &self.metrics_addr {
            output.metrics_addr = Some(addr.clone());
        }
        if let Some(secs) = self.metrics_linger {
            output.metrics_linger = Duration::try_from_secs_f64(secs).map_err(|_| {
                CliError::config(
                    "--metrics-linger",
                    "output.metrics_linger",
                    format!("must be a non-negative number of seconds, got {secs}"),
                )
            })?;
        }
        Ok(())
    }
}

/// Every metric a `uniagent` process can emit: the loop's, the sandboxes', the gateway's, the
/// rollout service's and
/// (when uniagent-train is built in) the trainer's.
pub(crate) fn catalogues() -> Vec<&'static [MetricDef]> {
    [
        uniagent_core::telemetry::CATALOGUE,
        uniagent_sandboxes::telemetry::CATALOGUE,
        uniagent_gateway::telemetry::CATALOGUE,
        crate::serve::telemetry::CATALOGUE,
        #[cfg(any(feature = "tch", feature = "parquet"))]
        uniagent_train::telemetry::CATALOGUE,
    ]
    .into_iter()
    .collect()
}

/// Starts the endpoint when an address is configured, and announces it on stderr.
pub(crate) async fn start(addr: Option<&str>) -> Result<Option<Exporter>> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let exporter = Exporter::start(addr, &catalogues())
        .await
        .map_err(|e| match e {
            MetricsError::Address(_) => {
                CliError::config("--metrics-addr", "output.metrics_addr", e)
            }
            _ => CliError::preflight(e),
        })?;
    eprintln!("{}", uniagent_metrics::announce_line(exporter.addr()));
    Ok(Some(exporter))
}

/// Serves on for `linger`, then stops the endpoint.
pub(crate) async fn finish(exporter: Option<Exporter>, linger: Duration) {
    if let Some(exporter) = exporter {
        exporter.finish(linger).await;
    }
}
