//! `/execute`: one-off processes without a pty, as SWE-ReX's `subprocess.run` call, with
//! HEAD's improvement (stdin from `/dev/null`) and a timeout that kills the whole process group.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt};
use uniagent_core::sandbox::{Command, CommandLine, CommandResponse};

use super::errors::{class, ServerError, MAX_ECHO_BYTES};
use super::limits::seconds;
use super::pyfmt::{decode_backslashreplace, py_float, py_repr, py_repr_list};
use super::session::{shorten, signal_group};

/// Python's `os.defpath`: the search path when `env` replaces the environment without `PATH`.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Kills the child's process group when dropped before the child was reaped (a cancelled
/// request, a timeout).
struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, Signal::SIGKILL);
        }
    }
}

/// Runs one `/execute` request. `max_output_bytes` bounds each stream (the rest is counted and
/// replaced by a truncation note).
pub async fn execute(
    command: &Command,
    max_output_bytes: usize,
) -> Result<CommandResponse, ServerError> {
    let argv = argv_of(command)?;
    let program = resolve_program(&argv[0], command.env.as_ref())?;
    let mut cmd = tokio::process::Command::new(&program);
    cmd.arg0(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(env) = &command.env {
        cmd.env_clear().envs(env);
    }
    if let Some(cwd) = &command.cwd {
        if let Err(e) = std::fs::read_dir(cwd) {
            return Err(ServerError::os_error(&e, cwd));
        }
        cmd.current_dir(cwd);
    }
    let (merged_reader, merged_writer) = if command.merge_output_streams {
        // Close-on-exec: the child gets the write end as its stdout and stderr only. Without it
        // the original descriptors stay open in the child too, every background process it
        // starts inherits them, and the output never reaches end-of-file until the timeout.
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| ServerError::os_error(&std::io::Error::from(e), "pipe"))?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    match merged_writer {
        Some(w) => {
            let w2 = w
                .try_clone()
                .map_err(|e| ServerError::os_error(&e, "pipe"))?;
            cmd.stdout(Stdio::from(w)).stderr(Stdio::from(w2));
        }
        None => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| ServerError::os_error(&e, &argv[0]))?;
    // The parent's copies of the merged pipe's write end were moved into `cmd`; drop them.
    drop(cmd);
    let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(-1);
    let mut guard = GroupGuard { pgid, armed: true };
    let stdout_task: Box<dyn AsyncRead + Unpin + Send> = match merged_reader {
        Some(r) => {
            let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(r)
                .map_err(|e| ServerError::os_error(&e, "pipe"))?;
            Box::new(pipe)
        }
        None => match child.stdout.take() {
            Some(s) => Box::new(s),
            None => Box::new(tokio::io::empty()),
        },
    };
    let stderr_task: Box<dyn AsyncRead + Unpin + Send> = match child.stderr.take() {
        Some(s) => Box::new(s),
        None => Box::new(tokio::io::empty()),
    };
    let run = async {
        let (out, err) = tokio::join!(
            read_limited(stdout_task, max_output_bytes),
            read_limited(stderr_task, max_output_bytes)
        );
        let status = child.wait().await;
        (out, err, status)
    };
    let result = match command.timeout {
        Some(t) => {
            let limit = seconds(t);
            match tokio::time::timeout(limit, run).await {
                Ok(r) => r,
                Err(_) => {
                    signal_group(pgid, Signal::SIGKILL);
                    let _ = child.wait().await;
                    guard.armed = false;
                    return Err(ServerError::exception(
                        class::COMMAND_TIMEOUT,
                        format!("Timeout ({}s) exceeded while running command", py_float(t)),
                    ));
                }
            }
        }
        None => run.await,
    };
    let (stdout, stderr, status) = result;
    guard.armed = false;
    let status = status.map_err(|e| ServerError::os_error(&e, &argv[0]))?;
    let exit_code = status.code().or_else(|| status.signal().map(|s| -s));
    let response = CommandResponse {
        stdout,
        stderr,
        exit_code,
    };
    if command.check && exit_code != Some(0) {
        let shown = match &command.command {
            CommandLine::Text(s) => py_repr(&shorten(s, MAX_ECHO_BYTES)),
            CommandLine::Argv(v) => shorten(&py_repr_list(v), MAX_ECHO_BYTES),
        };
        let mut message = format!(
            "Command {shown} failed with exit code {}. Stdout:\n{}\nStderr:\n{}",
            exit_code.unwrap_or(-1),
            py_repr(&response.stdout),
            py_repr(&response.stderr)
        );
        if !command.error_msg.is_empty() {
            message = format!("{}: {message}", command.error_msg);
        }
        return Err(ServerError::exception(class::NON_ZERO_EXIT, message));
    }
    Ok(response)
}

/// The argv Python's `subprocess` would run: `shell` prepends `/bin/sh -c`; a string without
/// `shell` is one program name.
pub(crate) fn argv_of(command: &Command) -> Result<Vec<String>, ServerError> {
    let mut argv = match &command.command {
        CommandLine::Text(s) => vec![s.clone()],
        CommandLine::Argv(v) => v.clone(),
    };
    if command.shell {
        argv.splice(0..0, ["/bin/sh".to_owned(), "-c".to_owned()]);
    }
    if argv.is_empty() {
        return Err(ServerError::exception(
            "builtins.IndexError",
            "list index out of range",
        ));
    }
    Ok(argv)
}

/// Finds `program` the way Python's `subprocess` does: a name with `/` is a path; otherwise the
/// `PATH` of `env` (or `os.defpath` when `env` has none), or the server's own `PATH`.
pub(crate) fn resolve_program(
    program: &str,
    env: Option<&BTreeMap<String, String>>,
) -> Result<PathBuf, ServerError> {
    let not_found = || {
        ServerError::os_error(
            &std::io::Error::from_raw_os_error(nix::errno::Errno::ENOENT as i32),
            program,
        )
    };
    if program.is_empty() {
        return Err(not_found());
    }
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path = match env {
        Some(env) => env
            .get("PATH")
            .cloned()
            .unwrap_or_else(|| DEFAULT_PATH.to_owned()),
        None => std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_owned()),
    };
    let mut denied = false;
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let candidate = Path::new(dir).join(program);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            if meta.is_file() {
                if nix::unistd::access(&candidate, nix::unistd::AccessFlags::X_OK).is_ok() {
                    return Ok(candidate);
                }
                denied = true;
            }
        }
    }
    if denied {
        return Err(ServerError::os_error(
            &std::io::Error::from_raw_os_error(nix::errno::Errno::EACCES as i32),
            program,
        ));
    }
    Err(not_found())
}

async fn read_limited(mut stream: impl AsyncRead + Unpin, limit: usize) -> String {
    let mut kept = Vec::new();
    let mut omitted = 0usize;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
                omitted += n.saturating_sub(room);
            }
        }
    }
    let mut text = decode_backslashreplace(&kept);
    if omitted > 0 {
        text.push_str(&super::session::truncation_note(omitted));
    }
    text
}
