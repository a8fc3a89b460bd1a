//! `uniagent serve CONFIG [--host H] [--port P] [--max-in-flight N] [--set KEY=VALUE]...
//! [--metrics-addr HOST:PORT]`: the rollout service verl's agent loop calls (`docs/verl.md`).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use crate::env::EnvironmentRegistry;
use crate::error::{CliError, Result};
use crate::serve::{router, RolloutService, ServeOptions};

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The config file, as for `run` (`model: {type: verl, tokenizer: DIR}`; `tasks:` optional).
    pub config: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port; 0 picks a free one (the first stdout line says which).
    #[arg(long, default_value_t = 8100)]
    pub port: u16,
    /// Rollouts running at once; more are answered 429 with `Retry-After`.
    #[arg(long, default_value_t = ServeOptions::default().max_in_flight)]
    pub max_in_flight: usize,
    /// Override a config value (dotted key), repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Serve Prometheus metrics on `GET /metrics` at HOST:PORT (port 0 picks a free one; the
    /// address is printed on stderr as `metrics on http://HOST:PORT/metrics`).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
}

/// Serves until Ctrl-C / SIGTERM; rollouts in flight then end as cancelled (their sandboxes
/// stopped, their clients answered `status: failure`), and new requests get 503.
pub(super) fn main(args: ServeArgs, registry: &EnvironmentRegistry) -> Result<()> {
    let options = ServeOptions {
        overrides: args.set.clone(),
        max_in_flight: args.max_in_flight,
    };
    let service = Arc::new(RolloutService::from_config(
        &args.config,
        &options,
        registry,
    )?);
    super::runtime()?.block_on(async move {
        service.preflight().await?;
        let listener = super::listen(&args.host, args.port).await?;
        let exporter = super::metrics::start(args.metrics_addr.as_deref()).await?;
        let on_signal = Arc::clone(&service);
        let shutdown = async move {
            super::shutdown_signal().await;
            on_signal.shut_down();
        };
        let limits = uniagent_http::ServeLimits {
            max_connections: options.max_in_flight + 64,
            ..uniagent_http::ServeLimits::default()
        };
        let served = uniagent_http::serve(listener, router(service), limits, shutdown)
            .await
            .map_err(|e| CliError::runtime(e.to_string()));
        super::metrics::finish(exporter, std::time::Duration::ZERO).await;
        served
    })
}
