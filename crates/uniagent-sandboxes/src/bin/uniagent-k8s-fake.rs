//! `uniagent-k8s-fake`: a fake Kubernetes API server with the agent-sandbox controller and
//! router, for tests of the `k8s` backend in a process of its own (see
//! `uniagent_sandboxes::k8s::fake`).
//!
//! ```text
//! uniagent-k8s-fake [--host 127.0.0.1] [--port 0] [--router-port 0]
//!                   [--warm-pool NAMESPACE/NAME=REPLICAS]... [--adopt-delay-ms 0]
//!                   [--cold-delay-ms 300] [--bookmark-interval-ms 5000]
//!                   [--server-binary PATH] [--key-file FILE] [--loopback-octet R]
//!                   [--pods processes|docker]
//! ```
//!
//! stdout gets three lines: `listening on http://HOST:PORT` (the API server),
//! `router on http://HOST:PORT` and `signing key file PATH` (the base64 seed of the key
//! sandboxes accept, key id `fake`). Faults: `POST /_fake/*` on the API server. SIGTERM or
//! SIGINT kills every sandbox and exits 0; 2 is bad usage, 1 a failure.

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use uniagent_sandboxes::k8s::fake::{FakeCluster, FakeOptions, PodRunner};

#[derive(Debug, Parser)]
#[command(
    name = "uniagent-k8s-fake",
    version,
    about = "A fake Kubernetes API server with the agent-sandbox controller and router"
)]
struct Args {
    /// Address the API server and the router listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// API server port (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Router port (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    router_port: u16,
    /// A warm pool to create at start, `NAMESPACE/NAME=REPLICAS` (its template and the keys
    /// ConfigMap too); repeatable.
    #[arg(long, value_name = "NAMESPACE/NAME=REPLICAS")]
    warm_pool: Vec<String>,
    /// Delay before a claim adopts a warm sandbox.
    #[arg(long, default_value_t = 0)]
    adopt_delay_ms: u64,
    /// Least time a cold-started sandbox takes to become Ready.
    #[arg(long, default_value_t = 300)]
    cold_delay_ms: u64,
    /// Interval of watch bookmarks.
    #[arg(long, default_value_t = 5000)]
    bookmark_interval_ms: u64,
    /// Events kept for watches to resume from.
    #[arg(long, default_value_t = 10_000)]
    history_limit: usize,
    /// The `uniagent-sandbox` binary (default: next to this one, or on PATH).
    #[arg(long)]
    server_binary: Option<PathBuf>,
    /// Public key file for sandboxes whose template names no key ConfigMap.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// The `R` of the sandboxes' addresses `127.R.x.y` (2..=254).
    #[arg(long, value_parser = clap::value_parser!(u8).range(2..=254))]
    loopback_octet: Option<u8>,
    /// What runs each pod: a `uniagent-sandbox` process, or a Docker container of the pod's
    /// image (needs a build with the `docker` feature and a Docker daemon).
    #[arg(long, value_enum, default_value_t = Pods::Processes)]
    pods: Pods,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Pods {
    Processes,
    Docker,
}

fn parse_pool(text: &str) -> Option<(String, String, u32)> {
    let (path, replicas) = text.split_once('=')?;
    let (namespace, name) = path.split_once('/')?;
    Some((
        namespace.to_string(),
        name.to_string(),
        replicas.parse().ok()?,
    ))
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut pools = Vec::new();
    for text in &args.warm_pool {
        match parse_pool(text) {
            Some(pool) => pools.push(pool),
            None => {
                eprintln!("error: --warm-pool {text:?}: expected NAMESPACE/NAME=REPLICAS");
                return ExitCode::from(2);
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(args, pools)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(
    args: Args,
    pools: Vec<(String, String, u32)>,
) -> Result<(), Box<dyn std::error::Error>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let options = FakeOptions {
        api_addr: SocketAddr::new(args.host, args.port),
        router_addr: SocketAddr::new(args.host, args.router_port),
        adopt_delay: Duration::from_millis(args.adopt_delay_ms),
        cold_delay: Duration::from_millis(args.cold_delay_ms),
        bookmark_interval: Duration::from_millis(args.bookmark_interval_ms),
        history_limit: args.history_limit,
        server_binary: args.server_binary,
        key_file: args.key_file,
        loopback_octet: args.loopback_octet,
        pods: match args.pods {
            Pods::Processes => PodRunner::Processes,
            Pods::Docker => PodRunner::Docker,
        },
    };
    let fake = FakeCluster::start(options).await?;
    for (namespace, name, replicas) in &pools {
        fake.create_warm_pool(namespace, name, *replicas).await?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", fake.api_url())?;
        writeln!(out, "router on {}", fake.router_url())?;
        writeln!(
            out,
            "signing key file {}",
            fake.signing_key_file().display()
        )?;
        out.flush()?;
    }
    tokio::select! {
        _ = term.recv() => {}
        _ = interrupt.recv() => {}
    }
    fake.shutdown().await;
    Ok(())
}
