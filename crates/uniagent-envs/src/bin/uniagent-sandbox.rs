//! `uniagent-sandbox`: the SWE-ReX-compatible sandbox server.
//!
//! ```text
//! uniagent-sandbox --auth-token TOKEN [--host 127.0.0.1] [--port 8000]
//! ```
//!
//! Flags follow `swerex-remote` (`--host`, `--port`, `--auth-token`, `-v/--version`), except that
//! the host defaults to 127.0.0.1. On start it prints one line, `uniagent-sandbox listening on
//! http://HOST:PORT`, to stdout (with the real port when `--port 0` asked for a free one).
//!
//! `uniagent-sandbox --relay-stdio 127.0.0.1:PORT` (hidden) is the in-container half of the
//! docker backend's relay for `network: none`: it connects to the address (retrying while the
//! server is still starting), copies stdin to the connection and the connection to stdout, and
//! exits when either side closes. The host runs it through `docker exec`, one per connection.

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

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
    #[arg(long, required_unless_present = "relay_stdio")]
    auth_token: Option<String>,
    /// Output bytes kept per command before the rest is replaced by a truncation note.
    #[arg(long, default_value_t = 16 << 20)]
    max_output_bytes: usize,
    /// The bash used for sessions and syntax checks.
    #[arg(long, default_value = "bash")]
    bash: String,
    /// Relay stdin/stdout to this TCP address instead of serving (used by the docker backend).
    #[arg(long, hide = true, value_name = "ADDR", conflicts_with = "auth_token")]
    relay_stdio: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(address) = &args.relay_stdio {
        return match relay_stdio(address) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("uniagent-sandbox: relay to {address}: {e}");
                ExitCode::FAILURE
            }
        };
    }
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
    let mut config = ServerConfig::new(args.auth_token.unwrap_or_default());
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

/// How long the relay retries a refused connection (the server may still be starting).
const RELAY_CONNECT_PATIENCE: Duration = Duration::from_secs(5);

/// Copies stdin to a TCP connection to `address` and the connection to stdout, until either
/// side closes. Plain threads and blocking I/O: one connection, nothing to schedule.
fn relay_stdio(address: &str) -> std::io::Result<()> {
    let started = Instant::now();
    let stream = loop {
        match TcpStream::connect(address) {
            Ok(stream) => break stream,
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && started.elapsed() < RELAY_CONNECT_PATIENCE =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    };
    stream.set_nodelay(true)?;
    let mut upstream = stream.try_clone()?;
    // stdin → connection; at the end of stdin, half-close so the server sees the end too.
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if upstream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = upstream.shutdown(Shutdown::Write);
    });
    // connection → stdout, flushed per chunk (stdout is line-buffered); its end ends the relay.
    let mut downstream = stream;
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match downstream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        stdout.write_all(&buf[..n])?;
        stdout.flush()?;
    }
}
