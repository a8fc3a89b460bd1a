//! `uniagent view DIR... [--host 127.0.0.1] [--port P]`: the web viewer over output
//! directories. With `--port 0` a free port is picked; the first line on stdout is always
//! `listening on http://HOST:PORT`. Stops on Ctrl-C or SIGTERM.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

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
}

/// Runs `view` until interrupted.
pub fn main(args: ViewArgs) -> Result<()> {
    super::runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .map_err(|e| {
                CliError::preflight(format!("cannot listen on {}:{}: {e}", args.host, args.port))
            })?;
        let addr = listener
            .local_addr()
            .map_err(|e| CliError::runtime(format!("reading the bound address: {e}")))?;
        let mut out = std::io::stdout();
        let _ = writeln!(out, "listening on http://{addr}");
        let _ = out.flush();
        let viewer = Viewer::new(&args.dirs);
        axum::serve(listener, viewer.router())
            .with_graceful_shutdown(shutdown())
            .await
            .map_err(|e| CliError::runtime(format!("serving: {e}")))
    })
}

async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
