//! Our `uniagent-sandbox` against SWE-ReX's `swerex-remote` and against the floor (not part of
//! the test suite), all in one run on this machine:
//! - **against SWE-ReX**: both servers driven by the same HTTP client, one TCP connection per
//!   request as SWE-ReX's `RemoteRuntime` does;
//! - **against the floor** ([`floor`]): our server driven over keep-alive connections, as our
//!   `RemoteRuntime` does, against the same commands with no server at all (a bare `bash` over
//!   pipes, and over a pty; a plain spawn of `/bin/sh -c`).
//!
//! ```text
//! cargo bench -p uniagent-sandboxes --features server --bench sandbox_server -- [--quick] [--ours PATH] [--swerex PATH] [--no-swerex]
//! ```
//!
//! `--swerex` defaults to `$UNIAGENT_SWEREX_VENV/bin/swerex-remote` (see `scripts/env/swerex.sh`);
//! `--ours` to the `uniagent-sandbox` cargo built with this bench (same profile). Both servers
//! start with `TERM` unset, an empty `HOME` and an empty working directory.

use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};
use uniagent_core::testing::{free_port, sandbox_server_args};

mod floor;

#[derive(Debug, Parser)]
#[command(name = "sandbox_server", about = "uniagent-sandbox vs swerex-remote")]
struct Args {
    /// Fewer iterations and a smaller concurrency run (seconds instead of minutes for SWE-ReX).
    #[arg(long)]
    quick: bool,
    /// Our server binary.
    #[arg(long)]
    ours: Option<PathBuf>,
    /// The `swerex-remote` executable.
    #[arg(long)]
    swerex: Option<PathBuf>,
    /// Measure only our server.
    #[arg(long)]
    no_swerex: bool,
    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

const TOKEN: &str = "bench-token";

struct Server {
    name: &'static str,
    child: Child,
    url: String,
    ready: Duration,
    _home: tempfile::TempDir,
    _cwd: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(
    name: &'static str,
    program: &PathBuf,
    client: &reqwest::Client,
) -> Result<Server, String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let home = tempfile::tempdir().map_err(|e| e.to_string())?;
    let cwd = tempfile::tempdir().map_err(|e| e.to_string())?;
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let child = Command::new(program)
        .args(sandbox_server_args(port, TOKEN))
        .env_remove("TERM")
        .env("HOME", home.path())
        .current_dir(cwd.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let mut server = Server {
        name,
        child,
        url,
        ready: Duration::ZERO,
        _home: home,
        _cwd: cwd,
    };
    loop {
        let alive = client
            .get(format!("{}/is_alive", server.url))
            .header("X-API-Key", TOKEN)
            .send()
            .await;
        if alive.map(|r| r.status().is_success()).unwrap_or(false) {
            server.ready = started.elapsed();
            return Ok(server);
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(format!("{name} did not become alive within 30 s"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    path: &str,
    body: Value,
) -> Result<Value, String> {
    let r = client
        .post(format!("{url}{path}"))
        .header("X-API-Key", TOKEN)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    let body: Value = r.json().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(format!("{path}: {status} {body}"))
    }
}

fn echo(session: &str) -> Value {
    json!({"action_type": "bash", "session": session, "command": "echo hi", "timeout": 30, "check": "raise",
           "error_msg": "", "is_interactive_command": false, "is_interactive_quit": false, "expect": []})
}

/// Samples per latency figure, sessions and commands per session of the throughput run.
fn sizes(quick: bool) -> (usize, usize, usize) {
    if quick {
        (30, 8, 5)
    } else {
        (200, 32, 20)
    }
}

/// Runs `call` `n` times, one after another; the median and p95 of its latency in ms.
async fn time_each<F, Fut>(n: usize, mut call: F) -> Result<(f64, f64), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        call().await?;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(stats(samples))
}

/// `GET /is_alive`, its whole answer read.
async fn get_is_alive(client: &reqwest::Client, url: &str) -> Result<(), String> {
    let answer = client
        .get(format!("{url}/is_alive"))
        .header("X-API-Key", TOKEN)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    answer.bytes().await.map(drop).map_err(|e| e.to_string())
}

fn stats(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

#[derive(Debug, Default, Clone)]
struct Figures {
    ready_ms: f64,
    /// `GET /is_alive`: the HTTP round trip with no work behind it.
    is_alive: (f64, f64),
    session_echo: (f64, f64),
    execute_echo: (f64, f64),
    throughput: f64,
    hol_is_alive_ms: f64,
    hol_echo_ms: f64,
}

async fn measure(
    server: &Server,
    client: &reqwest::Client,
    quick: bool,
) -> Result<Figures, String> {
    let url = server.url.as_str();
    let (n, sessions, per) = sizes(quick);
    post(
        client,
        url,
        "/create_session",
        json!({"session_type": "bash", "session": "main"}),
    )
    .await?;
    let session_echo = time_each(n, || async {
        let out = post(client, url, "/run_in_session", echo("main")).await?;
        if out["output"] != "hi\n" {
            return Err(format!("{}: wrong output {out}", server.name));
        }
        Ok(())
    })
    .await?;
    let is_alive = time_each(n, || get_is_alive(client, url)).await?;
    let execute = json!({"command": "echo hi", "shell": true, "timeout": 10});
    let execute_echo = time_each(n, || async {
        post(client, url, "/execute", execute.clone())
            .await
            .map(drop)
    })
    .await?;

    for i in 0..sessions {
        post(
            client,
            url,
            "/create_session",
            json!({"session_type": "bash", "session": format!("c{i}")}),
        )
        .await?;
    }
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..sessions {
        let client = client.clone();
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                let out = post(&client, &url, "/run_in_session", echo(&format!("c{i}"))).await?;
                if out["output"] != "hi\n" {
                    return Err(format!("wrong output {out}"));
                }
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    let throughput = (sessions * per) as f64 / t.elapsed().as_secs_f64();

    post(
        client,
        url,
        "/create_session",
        json!({"session_type": "bash", "session": "hol-a"}),
    )
    .await?;
    post(
        client,
        url,
        "/create_session",
        json!({"session_type": "bash", "session": "hol-b"}),
    )
    .await?;
    let slow = {
        let client = client.clone();
        let url = url.to_owned();
        tokio::spawn(async move {
            post(&client, &url, "/run_in_session", json!({"action_type": "bash", "session": "hol-a", "command": "sleep 2", "timeout": 10})).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let alive = async {
        let t = Instant::now();
        get_is_alive(client, url).await?;
        Ok::<f64, String>(t.elapsed().as_secs_f64() * 1e3)
    };
    let other = async {
        let t = Instant::now();
        post(client, url, "/run_in_session", echo("hol-b")).await?;
        Ok::<f64, String>(t.elapsed().as_secs_f64() * 1e3)
    };
    let (alive, other) = tokio::join!(alive, other);
    slow.await.map_err(|e| e.to_string())??;
    Ok(Figures {
        ready_ms: server.ready.as_secs_f64() * 1e3,
        is_alive,
        session_echo,
        execute_echo,
        throughput,
        hol_is_alive_ms: alive?,
        hol_echo_ms: other?,
    })
}

fn print_report(ours: &Figures, theirs: Option<&Figures>, quick: bool) {
    let (_, sessions, per) = sizes(quick);
    println!(
        "{:<52} {:>14} {:>14} {:>10}",
        "figure", "uniagent", "swerex-remote", "ratio"
    );
    let row = |name: String, a: f64, b: Option<f64>, higher_is_better: bool| {
        let (b_text, ratio) = match b {
            Some(b) => (
                format!("{b:.2}"),
                if higher_is_better { a / b } else { b / a },
            ),
            None => ("-".into(), f64::NAN),
        };
        println!("{name:<52} {a:>14.3} {b_text:>14} {:>9.1}x", ratio);
    };
    row(
        "start -> first is_alive (ms)".into(),
        ours.ready_ms,
        theirs.map(|t| t.ready_ms),
        false,
    );
    row(
        "run_in_session `echo hi` median (ms)".into(),
        ours.session_echo.0,
        theirs.map(|t| t.session_echo.0),
        false,
    );
    row(
        "run_in_session `echo hi` p95 (ms)".into(),
        ours.session_echo.1,
        theirs.map(|t| t.session_echo.1),
        false,
    );
    row(
        "execute `echo hi` median (ms)".into(),
        ours.execute_echo.0,
        theirs.map(|t| t.execute_echo.0),
        false,
    );
    row(
        "execute `echo hi` p95 (ms)".into(),
        ours.execute_echo.1,
        theirs.map(|t| t.execute_echo.1),
        false,
    );
    row(
        format!("throughput {sessions} sessions x {per} cmds (cmd/s)"),
        ours.throughput,
        theirs.map(|t| t.throughput),
        true,
    );
    row(
        "is_alive while `sleep 2` runs (ms)".into(),
        ours.hol_is_alive_ms,
        theirs.map(|t| t.hol_is_alive_ms),
        false,
    );
    row(
        "echo in session B while `sleep 2` runs (ms)".into(),
        ours.hol_echo_ms,
        theirs.map(|t| t.hol_echo_ms),
        false,
    );
    println!("(ratio: how many times better uniagent is; same client, same machine, same run)");
}

/// Our server (keep-alive client) against the floor; a ratio is the server's cost in units of
/// the floor's (latency: ours / floor; throughput: ours / floor), next to the target.
fn print_floor(ours: &Figures, floor: &Figures, quick: bool) {
    let (_, sessions, per) = sizes(quick);
    println!();
    println!(
        "{:<52} {:>14} {:>14} {:>10} {:>8}",
        "figure (uniagent over keep-alive)", "uniagent", "floor", "ratio", "target"
    );
    let row = |name: String, a: f64, b: f64, target: &str| {
        println!("{name:<52} {a:>14.3} {b:>14.3} {:>9.2}x {target:>8}", a / b);
    };
    row(
        "run_in_session `echo hi` median (ms) / bash on a pipe".into(),
        ours.session_echo.0,
        floor.session_echo.0,
        "<= 3x",
    );
    row(
        "run_in_session `echo hi` p95 (ms)".into(),
        ours.session_echo.1,
        floor.session_echo.1,
        "",
    );
    row(
        format!("throughput {sessions} sessions x {per} cmds (cmd/s)"),
        ours.throughput,
        floor.throughput,
        ">= 0.5x",
    );
    row(
        "execute `echo hi` median (ms) / spawn of sh -c".into(),
        ours.execute_echo.0,
        floor.execute_echo.0,
        "<= 1.3x",
    );
    row(
        "execute `echo hi` p95 (ms)".into(),
        ours.execute_echo.1,
        floor.execute_echo.1,
        "",
    );
    println!(
        "of which the HTTP round trip (is_alive median / p95): {:.3} / {:.3} ms",
        ours.is_alive.0, ours.is_alive.1
    );
    println!("(ratio: the server's figure over the floor's; same machine, same run)");
}

/// The session rows against the same floor over a pty: what of the server's cost the pty
/// explains.
fn print_pty_floor(ours: &Figures, pty: &Figures, quick: bool) {
    let (_, sessions, per) = sizes(quick);
    println!("the same bash on a pty instead of pipes (no echo, as the server's sessions):");
    println!(
        "  run_in_session `echo hi` median / p95: {:.3} / {:.3} ms (uniagent {:.2}x / {:.2}x)",
        pty.session_echo.0,
        pty.session_echo.1,
        ours.session_echo.0 / pty.session_echo.0,
        ours.session_echo.1 / pty.session_echo.1
    );
    println!(
        "  throughput {sessions} sessions x {per} cmds: {:.0} cmd/s (uniagent {:.2}x)",
        pty.throughput,
        ours.throughput / pty.throughput
    );
}

async fn run(args: Args) -> Result<(), String> {
    let ours_path = match args.ours {
        Some(p) => p,
        None => PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox")),
    };
    let swerex_path = args.swerex.or_else(|| {
        std::env::var_os("UNIAGENT_SWEREX_VENV")
            .map(|v| PathBuf::from(v).join("bin").join("swerex-remote"))
    });
    // One TCP connection per request, as SWE-ReX's RemoteRuntime.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| e.to_string())?;
    let client = Arc::new(client);
    let ours_server = start("uniagent-sandbox", &ours_path, &client).await?;
    let ours = measure(&ours_server, &client, args.quick).await?;
    drop(ours_server);
    // Keep-alive connections, as our RemoteRuntime keeps them, on a fresh server.
    let kept_alive = Arc::new(reqwest::Client::new());
    let ours_server = start("uniagent-sandbox", &ours_path, &kept_alive).await?;
    let ours_kept_alive = measure(&ours_server, &kept_alive, args.quick).await?;
    drop(ours_server);
    let (n, sessions, per) = sizes(args.quick);
    let floor = floor::measure(floor::Attach::Pipes, n, sessions, per).await?;
    let pty_floor = floor::measure(floor::Attach::Pty, n, sessions, per).await?;
    let theirs = match (args.no_swerex, swerex_path) {
        (true, _) => None,
        (false, None) => {
            eprintln!("sandbox_server: no swerex-remote (set UNIAGENT_SWEREX_VENV or --swerex); measuring only ours");
            None
        }
        (false, Some(path)) => {
            let server = start("swerex-remote", &path, &client).await?;
            let figures = measure(&server, &client, args.quick).await?;
            Some(figures)
        }
    };
    print_report(&ours, theirs.as_ref(), args.quick);
    print_floor(&ours_kept_alive, &floor, args.quick);
    print_pty_floor(&ours_kept_alive, &pty_floor, args.quick);
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandbox_server: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandbox_server: {e}");
            ExitCode::FAILURE
        }
    }
}
