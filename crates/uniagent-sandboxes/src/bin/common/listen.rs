//! What the envs' servers share on their command line and at start: the address flags, the
//! bind, the `listening on` line scripts wait for, and the signals that stop them.

use std::io::Write as _;

use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// `--host` and `--port`, with `PORT` as the default port.
#[derive(Debug, clap::Args)]
pub struct Listen<const PORT: u16> {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = PORT)]
    pub port: u16,
}

impl<const PORT: u16> Listen<PORT> {
    /// Binds the address.
    pub async fn bind(&self) -> std::io::Result<TcpListener> {
        TcpListener::bind((self.host.as_str(), self.port)).await
    }
}

/// Prints `{banner} http://HOST:PORT` (the real port when 0 asked for a free one) as the first
/// line on stdout: scripts wait for it before they send requests.
pub fn announce(listener: &TcpListener, banner: &str) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{banner} http://{addr}")?;
    stdout.flush()
}

/// SIGTERM and SIGINT, installed now: a signal that arrives at any later time stops the
/// server cleanly instead of killing the process.
pub fn stop_signals() -> std::io::Result<(Signal, Signal)> {
    Ok((
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    ))
}
