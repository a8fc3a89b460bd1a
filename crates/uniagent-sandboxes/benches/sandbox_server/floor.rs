//! The floor under the sandbox server: the same work with no HTTP and no server. A session
//! command is a bare `bash` driven over pipes (the command, then a marker line to know where its
//! output ends), and the same over a pty (no echo, as the server sets its pty up), which tells
//! the pty's share from the server's; `execute` is a plain spawn of `/bin/sh -c`, as the
//! server's `shell: true` runs it.

use std::pin::Pin;
use std::process::Stdio;
use std::time::Instant;

use nix::sys::termios::{self, LocalFlags, OutputFlags, SetArg};
use std::os::fd::AsFd;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::{stats, time_each, Figures};

const MARKER: &str = "__uniagent_floor_end__";

/// How the floor's `bash` is attached.
#[derive(Debug, Clone, Copy)]
pub enum Attach {
    /// stdin and stdout on pipes.
    Pipes,
    /// A pty, echo off, `\n` not turned into `\r\n`, as the server's sessions.
    Pty,
}

/// A `bash` driven over its input and output (stderr merged by the command itself).
struct BareShell {
    _child: Child,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    output: BufReader<Pin<Box<dyn AsyncRead + Send>>>,
}

impl BareShell {
    fn start(attach: Attach) -> Result<Self, String> {
        match attach {
            Attach::Pipes => {
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
                let stdout = child.stdout.take().ok_or("bash has no stdout")?;
                Ok(Self {
                    _child: child,
                    input: Box::pin(stdin),
                    output: BufReader::new(Box::pin(stdout)),
                })
            }
            Attach::Pty => {
                let (pty, pts) = pty_process::open().map_err(|e| format!("openpty: {e}"))?;
                let mut attrs =
                    termios::tcgetattr(pts.as_fd()).map_err(|e| format!("tcgetattr: {e}"))?;
                attrs.local_flags.remove(
                    LocalFlags::ECHO | LocalFlags::ECHOE | LocalFlags::ECHOK | LocalFlags::ECHONL,
                );
                attrs.output_flags.remove(OutputFlags::ONLCR);
                termios::tcsetattr(pts.as_fd(), SetArg::TCSANOW, &attrs)
                    .map_err(|e| format!("tcsetattr: {e}"))?;
                // Interactive, as the server's sessions (bash on a terminal is anyway), with
                // empty prompts so that only the commands' output comes back.
                let child = pty_process::Command::new("bash")
                    .args(["--norc", "--noprofile", "--noediting", "-i"])
                    .env("TERM", "dumb")
                    .env("PS1", "")
                    .env("PS2", "")
                    .kill_on_drop(true)
                    .spawn(pts)
                    .map_err(|e| format!("cannot start bash on a pty: {e}"))?;
                let (read, write) = pty.into_split();
                Ok(Self {
                    _child: child,
                    input: Box::pin(write),
                    output: BufReader::new(Box::pin(read)),
                })
            }
        }
    }

    /// Runs `command`; its output (stdout and stderr). Gives up after 30 s.
    async fn run(&mut self, command: &str) -> Result<String, String> {
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            self.run_unbounded(command),
        )
        .await
        .map_err(|_| format!("the floor's bash did not answer `{command}` within 30 s"))?
    }

    async fn run_unbounded(&mut self, command: &str) -> Result<String, String> {
        let script = format!("{{ {command}\n}} 2>&1\necho {MARKER}$?\n");
        self.input
            .write_all(script.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut output = String::new();
        loop {
            let mut line = String::new();
            if self
                .output
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

/// The floor's figures for the rows the server is compared on, with `bash` attached as
/// `attach` says: session `echo hi` latency, `execute` latency and the concurrent session
/// throughput (`sessions` shells, `per` commands each).
pub async fn measure(
    attach: Attach,
    n: usize,
    sessions: usize,
    per: usize,
) -> Result<Figures, String> {
    let mut shell = BareShell::start(attach)?;
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
        .map(|_| BareShell::start(attach))
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
