//! `uniagent-sandbox`: the SWE-ReX-compatible sandbox server.
//!
//! ```text
//! uniagent-sandbox --auth-token TOKEN [--host 127.0.0.1] [--port 8000]
//! ```
//!
//! Flags follow `swerex-remote` (`--host`, `--port`, `--auth-token`, `-v/--version`), except that
//! the host defaults to 127.0.0.1. On start it prints one line, `uniagent-sandbox listening on
//! http://HOST:PORT`, to stdout (with the real port when `--port 0` asked for a free one).

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use uniagent_envs::server::{serve, ServerConfig, ShellOptions};

#[derive(Debug, Parser)]
#[command(
    name = "uniagent-sandbox",
    version,
    about = "SWE-ReX-compatible sandbox server"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Token clients must send in `X-API-Key`; empty disables authentication.
    #[arg(long)]
    auth_token: String,
    /// Output bytes kept per command before the rest is replaced by a truncation note.
    #[arg(long, default_value_t = 16 << 20)]
    max_output_bytes: usize,
    /// The bash used for sessions and syntax checks.
    #[arg(long, default_value = "bash")]
    bash: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("uniagent-sandbox: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uniagent-sandbox: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    // Install the handlers before serving, so a SIGTERM at any time after start shuts down
    // cleanly (closing every session) instead of killing the process.
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
    let addr = listener.local_addr()?;
    let mut config = ServerConfig::new(args.auth_token);
    config.shell = ShellOptions {
        bash: args.bash,
        max_output_bytes: args.max_output_bytes,
        ..ShellOptions::default()
    };
    let mut stdout = std::io::stdout();
    writeln!(stdout, "uniagent-sandbox listening on http://{addr}")?;
    stdout.flush()?;
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    serve(listener, config, shutdown).await
}
