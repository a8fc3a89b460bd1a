//! `uniagent-sandbox`: the SWE-ReX-compatible sandbox server.
//!
//! ```text
//! UNIAGENT_SANDBOX_TOKEN=TOKEN uniagent-sandbox [--host 127.0.0.1] [--port 8000] [--metrics-addr HOST:PORT]
//! uniagent-sandbox --auth-token-file FILE ...      # a file only its owner can read
//! uniagent-sandbox --auth-token TOKEN ...          # as swerex-remote; visible in `ps`
//! uniagent-sandbox --auth-public-key-file FILE [--sandbox-name NAME] ...
//! ```
//!
//! Flags follow `swerex-remote` (`--host`, `--port`, `--auth-token`, `-v/--version`), except that
//! the host defaults to 127.0.0.1 and an empty token needs `--insecure-no-auth`. The token is
//! best passed in the environment (removed from it before any shell starts, so sessions do not
//! inherit it) or a 0600 file. On start it prints one line, `uniagent-sandbox listening on
//! http://HOST:PORT`, to stdout (with the real port when `--port 0` asked for a free one).
//!
//! With `--auth-public-key-file` the server holds no secret: it accepts per-sandbox tokens
//! (`uniagent_sandboxes::signed_token`) signed by one of the file's Ed25519 public keys, naming this
//! sandbox (`--sandbox-name`, else `UNIAGENT_SANDBOX_NAME`, which Kubernetes' downward API sets)
//! and not expired (docs/decisions/0008-k8s-sandboxes.md, "The auth token").
//!
//! `uniagent-sandbox --relay-mux 127.0.0.1:PORT` (hidden) is the in-container half of the
//! docker backend's relay for `network: none`: it reads frames of many connections from stdin
//! (`uniagent_sandboxes::mux`), opens a TCP connection to the address for each (retrying while the
//! server is still starting), and writes their answers back to stdout as frames, until stdin
//! ends. The host runs one through `docker exec` per sandbox, not one per connection.

use std::process::ExitCode;
use std::sync::Arc;

mod common;

use clap::Parser;
use common::listen::{announce, stop_signals, Listen};
use uniagent_sandboxes::server::{seconds, serve, ServerConfig, ServerLimits, ShellOptions};
use uniagent_sandboxes::signed_token::{PublicKeys, Verifier};

/// The environment variable the token may come in.
const TOKEN_ENV: &str = "UNIAGENT_SANDBOX_TOKEN";

/// The environment variable that may name this sandbox for `--auth-public-key-file`.
const NAME_ENV: &str = "UNIAGENT_SANDBOX_NAME";

#[derive(Debug, Parser)]
#[command(
    name = "uniagent-sandbox",
    version,
    about = "SWE-ReX-compatible sandbox server"
)]
struct Args {
    #[command(flatten)]
    listen: Listen<8000>,
    /// Token clients must send in `X-API-Key` (prefer `UNIAGENT_SANDBOX_TOKEN` or
    /// `--auth-token-file`: arguments are visible to every user through `ps`).
    #[arg(long)]
    auth_token: Option<String>,
    /// Read the token from this file (it must not be readable by group or others).
    #[arg(long, value_name = "FILE", conflicts_with = "auth_token")]
    auth_token_file: Option<std::path::PathBuf>,
    /// Accept instead per-sandbox tokens signed by a key of FILE (lines `KEY_ID
    /// BASE64_PUBLIC_KEY`, `#` comments; docs/formats.md) that name this sandbox and have not
    /// expired. The server then holds no secret.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["auth_token", "auth_token_file", "insecure_no_auth"])]
    auth_public_key_file: Option<std::path::PathBuf>,
    /// This sandbox's name, which signed tokens must name as their audience (default: the
    /// environment variable UNIAGENT_SANDBOX_NAME).
    #[arg(long, value_name = "NAME")]
    sandbox_name: Option<String>,
    /// Serve without authentication when the token is empty (SWE-ReX's `--auth-token ""`).
    #[arg(long)]
    insecure_no_auth: bool,
    /// Open bash sessions at most.
    #[arg(long, default_value_t = ServerLimits::default().max_sessions)]
    max_sessions: usize,
    /// `/execute` children running at once (more requests wait).
    #[arg(long, default_value_t = ServerLimits::default().max_executes)]
    max_executes: usize,
    /// Client connections served at once.
    #[arg(long, default_value_t = ServerLimits::default().max_connections)]
    max_connections: usize,
    /// Largest JSON request body in bytes.
    #[arg(long, default_value_t = ServerLimits::default().max_body_bytes)]
    max_body_bytes: usize,
    /// Largest `/upload` body in bytes.
    #[arg(long, default_value_t = ServerLimits::default().max_upload_bytes)]
    max_upload_bytes: usize,
    /// Largest file `/read_file` returns, in bytes.
    #[arg(long, default_value_t = ServerLimits::default().max_read_bytes)]
    max_read_bytes: u64,
    /// Seconds a client may take to send a request's headers.
    #[arg(long, default_value_t = 30.0)]
    header_timeout: f64,
    /// Exit (closing every session) this many seconds after start: a container whose controlling
    /// process died still ends on time.
    #[arg(long, value_name = "SECONDS")]
    lifetime: Option<f64>,
    /// Shut down (closing every session) when the process that started this one dies, even by
    /// SIGKILL: the deployment that owned the server is gone.
    #[arg(long)]
    exit_with_parent: bool,
    /// Output bytes kept per command before the rest is replaced by a truncation note.
    #[arg(long, default_value_t = 16 << 20)]
    max_output_bytes: usize,
    /// The bash used for sessions and syntax checks.
    #[arg(long, default_value = "bash")]
    bash: String,
    /// Relay the multiplexed connections on stdin/stdout to this TCP address instead of
    /// serving (used by the docker backend).
    #[arg(long, hide = true, value_name = "ADDR", conflicts_with_all = ["auth_token", "auth_token_file", "auth_public_key_file"])]
    relay_mux: Option<String>,
    /// Serve Prometheus metrics on `GET /metrics` at HOST:PORT (port 0 picks a free one; the
    /// address is printed on stderr as `metrics on http://HOST:PORT/metrics`).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
}

fn main() -> ExitCode {
    // Read and drop the token from the environment first, while the process has one thread:
    // shells and `/execute` children inherit the environment.
    let env_token = std::env::var(TOKEN_ENV).ok();
    std::env::remove_var(TOKEN_ENV);
    let args = Args::parse();
    if let Some(address) = args.relay_mux {
        return relay_mux(address);
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
    let auth = match auth_of(&args, env_token) {
        Ok(auth) => auth,
        Err(e) => {
            eprintln!("uniagent-sandbox: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args, auth)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uniagent-sandbox: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How clients authenticate.
enum Auth {
    /// One shared token (empty only with `--insecure-no-auth`).
    Token(String),
    /// Signed per-sandbox tokens.
    Signed(Arc<Verifier>),
}

/// Signed tokens with `--auth-public-key-file`, else the token of [`token_of`].
fn auth_of(args: &Args, env_token: Option<String>) -> Result<Auth, String> {
    let Some(path) = &args.auth_public_key_file else {
        // Checked here: clap's `requires` lets it pass when the required flag conflicts with
        // one that is present (`--auth-token`).
        if args.sandbox_name.is_some() {
            return Err("--sandbox-name is only for --auth-public-key-file".to_owned());
        }
        return token_of(args, env_token).map(Auth::Token);
    };
    if env_token.is_some() {
        return Err(format!(
            "{TOKEN_ENV} is set: a shared token and --auth-public-key-file exclude each other"
        ));
    }
    let name = match &args.sandbox_name {
        Some(name) => name.clone(),
        None => std::env::var(NAME_ENV).map_err(|_| {
            format!(
                "--auth-public-key-file needs this sandbox's name: --sandbox-name or {NAME_ENV}"
            )
        })?,
    };
    if name.is_empty() {
        return Err(format!(
            "the sandbox name (--sandbox-name or {NAME_ENV}) is empty"
        ));
    }
    let keys = PublicKeys::read(path).map_err(|e| e.to_string())?;
    Ok(Auth::Signed(Arc::new(Verifier::new(name, keys))))
}

/// The token from `--auth-token`, `--auth-token-file` or the environment, in that order.
fn token_of(args: &Args, env_token: Option<String>) -> Result<String, String> {
    if let Some(token) = &args.auth_token {
        return Ok(token.clone());
    }
    if let Some(path) = &args.auth_token_file {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.mode() & 0o077 != 0 {
            return Err(format!(
                "{}: the token file must not be readable by group or others (chmod 600)",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(text.trim_end_matches(['\n', '\r']).to_owned());
    }
    match env_token {
        Some(token) => Ok(token),
        None if args.insecure_no_auth => Ok(String::new()),
        None => Err(format!(
            "no token: set {TOKEN_ENV}, or pass --auth-token-file or --auth-token"
        )),
    }
}

async fn run(args: Args, auth: Auth) -> std::io::Result<()> {
    let (mut term, mut interrupt) = stop_signals()?;
    let listener = args.listen.bind().await?;
    let _exporter = match &args.metrics_addr {
        Some(addr) => {
            let catalogues = [
                uniagent_metrics::CORE_CATALOGUE,
                uniagent_sandboxes::telemetry::CATALOGUE,
            ];
            let exporter = uniagent_metrics::Exporter::start(addr, &catalogues)
                .await
                .map_err(std::io::Error::other)?;
            eprintln!("{}", uniagent_metrics::announce_line(exporter.addr()));
            Some(exporter)
        }
        None => None,
    };
    let mut config = match auth {
        Auth::Token(token) => ServerConfig::new(token),
        Auth::Signed(verifier) => {
            eprintln!(
                "uniagent-sandbox: accepting signed tokens for {:?} (keys: {})",
                verifier.audience(),
                verifier.keys().kids().collect::<Vec<_>>().join(", ")
            );
            let mut config = ServerConfig::new("");
            config.signed_tokens = Some(verifier);
            config
        }
    };
    config.insecure_no_auth = args.insecure_no_auth;
    config.shell = ShellOptions {
        bash: args.bash,
        max_output_bytes: args.max_output_bytes,
        ..ShellOptions::default()
    };
    config.limits = ServerLimits {
        max_sessions: args.max_sessions,
        max_executes: args.max_executes,
        max_connections: args.max_connections,
        max_body_bytes: args.max_body_bytes,
        max_upload_bytes: args.max_upload_bytes,
        max_read_bytes: args.max_read_bytes,
        header_timeout: seconds(args.header_timeout).max(std::time::Duration::from_millis(100)),
        ..ServerLimits::default()
    };
    let lifetime = args.lifetime.map(seconds);
    let parent = args
        .exit_with_parent
        .then(|| nix::unistd::getppid().as_raw());
    announce(&listener, "uniagent-sandbox listening on")?;
    let shutdown = async move {
        let end_of_life = async {
            match lifetime {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        let orphaned = async {
            match parent {
                // Polled: PR_SET_PDEATHSIG would fire when the *thread* that spawned us exits,
                // and needs code between fork and exec.
                Some(parent) => loop {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    if nix::unistd::getppid().as_raw() != parent {
                        break;
                    }
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
            () = end_of_life => eprintln!("uniagent-sandbox: lifetime over, shutting down"),
            () = orphaned => eprintln!("uniagent-sandbox: the parent process died, shutting down"),
        }
    };
    serve(listener, config, shutdown).await
}

/// Runs the multiplexer on stdin/stdout. One thread: the work is copying bytes.
fn relay_mux(address: String) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("uniagent-sandbox: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(uniagent_sandboxes::mux::serve_stdio(address.clone()));
    // Not waiting for the runtime's shutdown: a blocking read of stdin cannot be cancelled.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uniagent-sandbox: relay to {address}: {e}");
            ExitCode::FAILURE
        }
    }
}
