//! The floor under the sandbox server: the same work with no HTTP, no pty and no server. A
//! session command is a bare `bash` driven over pipes (the command, then a marker line to know
//! where its output ends); `execute` is a plain spawn of `/bin/sh -c`, as the server's
//! `shell: true` runs it.

use std::process::Stdio;
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::{stats, time_each, Figures};

const MARKER: &str = "__uniagent_floor_end__";

/// A `bash` with its stdin and stdout on pipes (stderr merged by the command itself).
struct PipeShell {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PipeShell {
    fn start() -> Result<Self, String> {
        let mut child = Command::new("bash")
            .args(["--norc", "--noprofile"])
            .env_remove("TERM")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start bash: {e}"))?;
        let stdin = child.stdin.take().ok_or("bash has no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("bash has no stdout")?);
        Ok(Self {
            _child: child,
            stdin,
            stdout,
        })
    }

    /// Runs `command`; its output (stdout and stderr).
    async fn run(&mut self, command: &str) -> Result<String, String> {
        let script = format!("{{ {command}\n}} 2>&1\necho {MARKER}$?\n");
        self.stdin
            .write_all(script.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut output = String::new();
        loop {
            let mut line = String::new();
            if self
                .stdout
                .read_line(&mut line)
                .await
                .map_err(|e| e.to_string())?
                == 0
            {
                return Err("bash exited".into());
            }
            if line.starts_with(MARKER) {
                return Ok(output);
            }
            output.push_str(&line);
        }
    }
}

/// The floor's figures for the rows the server is compared on: session `echo hi` latency,
/// `execute` latency and the concurrent session throughput (`sessions` shells, `per` commands
/// each).
pub async fn measure(n: usize, sessions: usize, per: usize) -> Result<Figures, String> {
    let mut shell = PipeShell::start()?;
    // A plain loop: each call borrows the shell mutably, which `time_each`'s closure cannot lend.
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let out = shell.run("echo hi").await?;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
        if out != "hi\n" {
            return Err(format!("floor: wrong output {out:?}"));
        }
    }
    let session_echo = stats(samples);
    let execute_echo = time_each(n, || async {
        let out = Command::new("/bin/sh")
            .args(["-c", "echo hi"])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot spawn /bin/sh: {e}"))?;
        if out.stdout != b"hi\n" {
            return Err(format!("floor: wrong execute output {:?}", out.stdout));
        }
        Ok(())
    })
    .await?;

    let mut shells = (0..sessions)
        .map(|_| PipeShell::start())
        .collect::<Result<Vec<_>, _>>()?;
    // One command each first, so that every bash has started before the clock does (the
    // server's sessions are created before its throughput run too).
    for shell in &mut shells {
        shell.run("true").await?;
    }
    let t = Instant::now();
    let tasks: Vec<_> = shells
        .into_iter()
        .map(|mut shell| {
            tokio::spawn(async move {
                for _ in 0..per {
                    let out = shell.run("echo hi").await?;
                    if out != "hi\n" {
                        return Err(format!("floor: wrong output {out:?}"));
                    }
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    let throughput = (sessions * per) as f64 / t.elapsed().as_secs_f64();
    Ok(Figures {
        session_echo,
        execute_echo,
        throughput,
        ..Figures::default()
    })
}
