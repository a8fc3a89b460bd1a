//! `uniagent view DIR... [--host 127.0.0.1] [--port P] [--allow-host NAME]...`: the web viewer
//! over output directories. With `--port 0` a free port is picked; the first line on stdout is
//! always `listening on http://HOST:PORT`. Stops on Ctrl-C or SIGTERM. Requests must name an IP
//! address, `localhost` or an `--allow-host` name as their `Host`, and come from no other site.

use std::path::PathBuf;

use clap::Args;
use uniagent_http::{ServeLimits, SitePolicy};

use crate::error::{CliError, Result};
use crate::view::Viewer;

/// Arguments of `view`.
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// Output directories of `run`, `train` or the gateway (missing ones show a warning
    /// until they appear).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 8765)]
    pub port: u16,
    /// A host name the viewer answers to besides IP addresses and `localhost` (when it is
    /// reached by name, e.g. through a tunnel); repeatable.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
}

/// Runs `view` until interrupted.
pub(super) fn main(args: ViewArgs) -> Result<()> {
    super::runtime()?.block_on(async move {
        let listener = super::listen(&args.host, args.port).await?;
        let viewer = Viewer::new(&args.dirs);
        let app = viewer.router_for(SitePolicy::local().allow_hosts(&args.allow_hosts));
        uniagent_http::serve(
            listener,
            app,
            ServeLimits::default(),
            super::shutdown_signal(),
        )
        .await
        .map_err(|e| CliError::runtime(format!("serving: {e}")))
    })
}
