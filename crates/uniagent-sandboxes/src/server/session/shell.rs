//! One bash session on a pty, driven by events on the pty: every wait is a read that returns as
//! soon as the shell has printed what we wait for. No fixed sleeps anywhere.
//!
//! How a command runs:
//! 1. The text is syntax-checked ([`check_syntax`]).
//! 2. It is written to a file in the session's scratch directory, and the shell is sent one line:
//!    `__ua_n=<seq>; . '<file>'; __ua_s=$?; PS1=$__ua_ps; __ua_r $__ua_s`. Sourcing runs the text
//!    in the shell itself (cwd, variables and functions persist) whatever its size or bytes; the
//!    tty never sees the command text, so control characters in it are inert.
//! 3. The prompt is `__UA<nonce>_${__ua_n}_$?__`: it ends the output and carries the exit code
//!    and the sequence number, so one round trip gives both, and stale prompts are recognised.
//! 4. On timeout the command gets Ctrl-C; if no prompt follows, its process group is killed; the
//!    session is usable again when the call returns.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uniagent_core::sandbox::shell_quote;

use nix::sys::signal::Signal;
use nix::sys::termios::{self, LocalFlags, OutputFlags, SetArg};
use regex::bytes::Regex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use uniagent_core::sandbox::{
    BashAction, BashInterruptAction, BashObservation, CheckMode, SessionType,
};

use super::output::{clean_output, shorten, ExpectSearch, OutputBuffer, Prompt, PromptMarker};
use super::procs::{kill_session, signal_group};
use super::syntax::check_syntax;
use crate::server::errors::{class, ServerError, MAX_ECHO_BYTES};
use crate::server::limits::{deadline_after, seconds, MAX_INTERRUPT_RETRIES, MAX_TIMEOUT};
use crate::server::pyfmt::{py_float, py_repr};

/// What SWE-ReX reports in `expect_string` when the normal prompt ended the wait.
pub(crate) const PROMPT_EXPECT_STRING: &str = "SHELLPS1PREFIX";

/// Pagers print straight through: on a session's terminal `git log`, `git diff` or `man` would
/// otherwise start `less` or `more`, which waits for a key that no one presses until the
/// command times out. A command or `startup_source` may still set them otherwise.
const SESSION_ENV: [(&str, &str); 3] =
    [("PAGER", "cat"), ("GIT_PAGER", "cat"), ("MANPAGER", "cat")];

/// Settings shared by all sessions of a server.
#[derive(Debug, Clone)]
pub struct ShellOptions {
    /// The bash to start (a name looked up in `PATH`, or a path).
    pub bash: String,
    /// Output bytes kept per command before the rest is replaced by a truncation note.
    pub max_output_bytes: usize,
    /// Where sessions keep their command files (one sub-directory per session). Empty (the
    /// default): [`serve`](crate::server::serve) creates a private (0700) directory with a
    /// random name. A given directory must be owned by this user and closed to others.
    pub scratch_dir: PathBuf,
    /// How long a timed-out command gets after Ctrl-C, and again after its process group was
    /// killed, before the session is given up.
    pub interrupt_grace: Duration,
}

impl Default for ShellOptions {
    fn default() -> Self {
        Self {
            bash: "bash".into(),
            max_output_bytes: 16 << 20,
            scratch_dir: PathBuf::new(),
            interrupt_grace: Duration::from_millis(500),
        }
    }
}

struct Reader {
    pty: pty_process::OwnedReadPty,
    buf: OutputBuffer,
    pending: Vec<u8>,
    eof: bool,
    /// A command (or an interactive program) may still be running: the last wait did not end
    /// with the prompt of the latest command.
    busy: bool,
    /// A Ctrl-C went to the idle shell and its prompt has not been seen: bash may not have
    /// handled the SIGINT yet, and handling it would discard the next command line it reads.
    unanswered_sigint: bool,
}

enum Ended {
    Prompt(Prompt),
    Expect { index: usize },
}

enum WaitError {
    Timeout,
    Eof,
}

/// A bash shell on a pty.
pub struct BashSession {
    name: String,
    marker: PromptMarker,
    pid: i32,
    control: OwnedFd,
    writer: tokio::sync::Mutex<pty_process::OwnedWritePty>,
    reader: tokio::sync::Mutex<Reader>,
    child: std::sync::Mutex<Option<tokio::process::Child>>,
    dir: PathBuf,
    seq: AtomicU64,
    closed: AtomicBool,
    options: Arc<ShellOptions>,
}

impl std::fmt::Debug for BashSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BashSession")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

fn internal(what: &str, e: impl std::fmt::Display) -> ServerError {
    ServerError::exception(class::OS_ERROR, format!("{what}: {e}"))
}

impl BashSession {
    /// Starts bash on a new pty (24×80, echo off, `TERM=dumb`, pagers `cat`, no line editing), sources
    /// `startup_source`, installs the prompt marker and waits for the first prompt. Returns the
    /// session and what the shell printed before that prompt.
    pub async fn start(
        name: &str,
        startup_source: &[String],
        startup_timeout: Duration,
        dir: PathBuf,
        options: Arc<ShellOptions>,
    ) -> Result<(Self, String), ServerError> {
        let marker =
            PromptMarker::random().ok_or_else(|| internal("prompt marker", "invalid regex"))?;
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| ServerError::os_error(&e, &dir.to_string_lossy()))?;
        }
        let (pty, pts) = pty_process::open().map_err(|e| internal("openpty", e))?;
        pty.resize(pty_process::Size::new(24, 80))
            .map_err(|e| internal("pty resize", e))?;
        let mut attrs = termios::tcgetattr(pts.as_fd()).map_err(|e| internal("tcgetattr", e))?;
        attrs
            .local_flags
            .remove(LocalFlags::ECHO | LocalFlags::ECHOE | LocalFlags::ECHOK | LocalFlags::ECHONL);
        attrs.output_flags.remove(OutputFlags::ONLCR);
        termios::tcsetattr(pts.as_fd(), SetArg::TCSANOW, &attrs)
            .map_err(|e| internal("tcsetattr", e))?;
        let control = pty
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| internal("dup pty", e))?;
        let child = pty_process::Command::new(&options.bash)
            .args(["--noediting", "-i"])
            .env("TERM", "dumb")
            .envs(SESSION_ENV)
            .spawn(pts)
            .map_err(|e| match e {
                pty_process::Error::Io(io) => ServerError::os_error(&io, &options.bash),
                other => internal("spawn bash", other),
            })?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(-1);
        let (read_half, write_half) = pty.into_split();
        let session = Self {
            name: name.to_owned(),
            marker,
            pid,
            control,
            writer: tokio::sync::Mutex::new(write_half),
            reader: tokio::sync::Mutex::new(Reader {
                pty: read_half,
                buf: OutputBuffer::new(options.max_output_bytes, 4096),
                pending: Vec::new(),
                eof: false,
                busy: true,
                unanswered_sigint: false,
            }),
            child: std::sync::Mutex::new(Some(child)),
            dir,
            seq: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            options,
        };
        let mut line: Vec<String> = startup_source
            .iter()
            .map(|f| format!("source {f}"))
            .collect();
        line.push(format!(
            "__ua_n=0; __ua_ps={}; PS1=$__ua_ps; PS2=''; PS0=''; unset PROMPT_COMMAND; __ua_r() {{ return \"$1\"; }}",
            shell_quote(&session.marker.ps1())
        ));
        let started = async {
            session
                .send(format!("{}\n", line.join(" ; ")).as_bytes())
                .await?;
            let mut reader = session.reader.lock().await;
            let deadline = Some(deadline_after(startup_timeout));
            match session
                .wait(&mut reader, |p| p.seq.unwrap_or(0) == 0, &[], deadline)
                .await
            {
                Ok((out, _)) => Ok(clean_output(&out)),
                Err(WaitError::Timeout) => Err(ServerError::exception(
                    class::PEXPECT_TIMEOUT,
                    format!(
                        "Timeout exceeded: no prompt within {}s of starting session {}",
                        py_float(startup_timeout.as_secs_f64()),
                        py_repr(name)
                    ),
                )),
                Err(WaitError::Eof) => Err(session.eof_error()),
            }
        }
        .await;
        match started {
            Ok(output) => Ok((session, output)),
            Err(e) => {
                session.close().await;
                Err(e)
            }
        }
    }

    /// The session's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pid of the session's bash (also its session and process-group id).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn eof_error(&self) -> ServerError {
        ServerError::exception(
            class::PEXPECT_EOF,
            format!(
                "End Of File (EOF). The shell of session {} exited.",
                py_repr(&self.name)
            ),
        )
    }

    fn ensure_open(&self) -> Result<(), ServerError> {
        if self.is_closed() {
            return Err(ServerError::exception(
                class::RUNTIME_ERROR,
                "shell not initialized",
            ));
        }
        Ok(())
    }

    async fn send(&self, bytes: &[u8]) -> Result<(), ServerError> {
        let mut writer = self.writer.lock().await;
        writer
            .write_all(bytes)
            .await
            .map_err(|_| self.eof_error())?;
        writer.flush().await.map_err(|_| self.eof_error())
    }

    /// Reads until a prompt accepted by `accept` or an `expect` match, whichever starts first.
    /// Prompts that `accept` rejects are stale: they and everything before them are dropped.
    async fn wait(
        &self,
        reader: &mut Reader,
        accept: impl Fn(&Prompt) -> bool,
        expects: &[Regex],
        deadline: Option<Instant>,
    ) -> Result<(Vec<u8>, Ended), WaitError> {
        let pending = std::mem::take(&mut reader.pending);
        reader.buf.reset(pending);
        let mut chunk = vec![0u8; 64 * 1024];
        let mut search_from = 0usize;
        let mut expect_search = ExpectSearch::new(expects);
        loop {
            let mut pos = search_from.saturating_sub(self.marker.max_len());
            let mut prompt = None;
            while let Some(p) = self.marker.find(reader.buf.bytes(), pos) {
                if accept(&p) {
                    prompt = Some(p);
                    break;
                }
                reader.buf.discard_prefix(p.end);
                search_from = search_from.saturating_sub(p.end);
                pos = 0;
            }
            let bytes = reader.buf.bytes();
            let limit = prompt.map_or(bytes.len(), |p| p.start);
            let expect = expect_search.find(&bytes[..limit], search_from);
            if let Some((start, end, index)) = expect {
                let (out, rest) = reader.buf.take(start, end);
                reader.pending = rest;
                reader.busy = true;
                return Ok((out, Ended::Expect { index }));
            }
            if let Some(p) = prompt {
                let (out, rest) = reader.buf.take(p.start, p.end);
                reader.pending = rest;
                reader.busy = false;
                return Ok((out, Ended::Prompt(p)));
            }
            search_from = reader.buf.bytes().len();
            if reader.eof {
                return Err(WaitError::Eof);
            }
            let read = reader.pty.read(&mut chunk);
            let n = match deadline {
                Some(d) => match tokio::time::timeout_at(d, read).await {
                    Ok(r) => r,
                    Err(_) => {
                        // Keep what arrived: it precedes whatever prompt comes later.
                        let (_, rest) = reader.buf.take(0, 0);
                        reader.pending = rest;
                        reader.busy = true;
                        return Err(WaitError::Timeout);
                    }
                },
                None => read.await,
            };
            match n {
                Ok(0) | Err(_) => reader.eof = true,
                Ok(n) => search_from = reader.buf.push(&chunk[..n]),
            }
        }
    }

    /// Runs a `run_in_session` action.
    pub async fn run(&self, action: &BashAction) -> Result<BashObservation, ServerError> {
        self.ensure_open()?;
        let expects = compile_expects(&action.expect)?;
        if action.is_interactive_command || action.is_interactive_quit {
            return self.run_interactive(action, &expects).await;
        }
        check_syntax(&self.options.bash, &action.command).await?;
        let mut reader = self.reader.lock().await;
        self.ensure_open()?;
        if reader.eof {
            return Err(self.eof_error());
        }
        self.settle_interrupt(&mut reader).await;
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let file = self.dir.join(format!("c{seq}"));
        let path = file.to_string_lossy().into_owned();
        write_private(&file, action.command.as_bytes())
            .map_err(|e| ServerError::os_error(&e, &path))?;
        let line = format!(
            "__ua_n={seq}; . {}; __ua_s=$?; PS1=$__ua_ps; __ua_r $__ua_s\n",
            shell_quote(&path)
        );
        let sent = self.send(line.as_bytes()).await;
        let deadline = action.timeout.map(|t| deadline_after(seconds(t)));
        let waited = match sent {
            Ok(()) => {
                self.wait(&mut reader, |p| p.seq == Some(seq), &expects, deadline)
                    .await
            }
            Err(_) => Err(WaitError::Eof),
        };
        let _ = std::fs::remove_file(&file);
        let (raw, ended) = match waited {
            Ok(done) => done,
            Err(WaitError::Eof) => return Err(self.eof_error()),
            Err(WaitError::Timeout) => {
                self.recover(&mut reader, seq).await;
                return Err(command_timeout(action));
            }
        };
        drop(reader);
        let output = clean_output(&raw);
        let (exit_code, expect_string) = match ended {
            Ended::Prompt(p) => (Some(p.exit_code), PROMPT_EXPECT_STRING.to_owned()),
            Ended::Expect { index } => (None, action.expect[index].clone()),
        };
        let exit_code = if action.check == CheckMode::Ignore {
            None
        } else {
            exit_code
        };
        if action.check == CheckMode::Raise {
            if let Some(code) = exit_code.filter(|c| *c != 0) {
                let mut message = format!(
                    "Command {} failed with exit code {code}. Here is the output:\n{}",
                    py_repr(&shorten(&action.command, MAX_ECHO_BYTES)),
                    py_repr(&output)
                );
                if !action.error_msg.is_empty() {
                    message = format!("{}: {message}", action.error_msg);
                }
                return Err(ServerError::exception(class::NON_ZERO_EXIT, message));
            }
        }
        Ok(observation(output, exit_code, expect_string))
    }

    /// After a timeout: Ctrl-C, then SIGKILL to the foreground process group, then (if the
    /// shell itself is stuck) the whole session is killed and later calls get EOF.
    async fn recover(&self, reader: &mut Reader, seq: u64) {
        let grace = self.options.interrupt_grace;
        let _ = self.send(b"\x03").await;
        let accept = |p: &Prompt| p.seq >= Some(seq);
        // The shell is at its prompt again when it prints the command's own prompt (the command
        // ended, or SIGINT ended it) or, when the timeout was shorter than bash took to read the
        // command line, an earlier number's prompt with SIGINT's status 130: the Ctrl-C flushed
        // or discarded the unread line and nothing ran.
        let back = |p: &Prompt| p.seq >= Some(seq) || p.exit_code == 130;
        if let Ok((_, ended)) = self
            .wait(reader, back, &[], Some(Instant::now() + grace))
            .await
        {
            if let Ended::Prompt(p) = ended {
                if p.exit_code != 130 {
                    // The command ended on its own just as the Ctrl-C went out, so the idle
                    // shell got the SIGINT: let it print its prompt before the next command
                    // line is sent, or the signal could discard that line.
                    let _ = self
                        .wait(reader, |_| true, &[], Some(Instant::now() + grace))
                        .await;
                }
            }
            return;
        }
        let foreground = self.foreground_group();
        if let Some(pgid) = foreground.filter(|g| *g != self.pid) {
            signal_group(pgid, Signal::SIGKILL);
        }
        // Either the kill is certain, or the shell itself holds the terminal (the command is
        // over): the prompt only has to be scheduled, which on a loaded machine can take longer
        // than the grace. Only a shell that prints nothing even then is stuck.
        if foreground.is_some()
            && self
                .wait(reader, accept, &[], Some(Instant::now() + grace * 10))
                .await
                .is_ok()
        {
            return;
        }
        kill_session(self.pid);
        reader.eof = true;
    }

    /// Before a command line goes out: if an idle interrupt's prompt is still due, wait for it
    /// (bounded), so that the shell's SIGINT handling cannot swallow the line.
    async fn settle_interrupt(&self, reader: &mut Reader) {
        if std::mem::take(&mut reader.unanswered_sigint) {
            let deadline = Some(deadline_after(
                self.options.interrupt_grace.saturating_mul(4),
            ));
            let _ = self.wait(reader, |_| true, &[], deadline).await;
            reader.busy = false;
        }
    }

    fn foreground_group(&self) -> Option<i32> {
        nix::unistd::tcgetpgrp(self.control.as_fd())
            .ok()
            .map(nix::unistd::Pid::as_raw)
    }

    async fn run_interactive(
        &self,
        action: &BashAction,
        expects: &[Regex],
    ) -> Result<BashObservation, ServerError> {
        let mut reader = self.reader.lock().await;
        self.ensure_open()?;
        if reader.eof {
            return Err(self.eof_error());
        }
        self.settle_interrupt(&mut reader).await;
        let seq = self.seq.load(Ordering::SeqCst);
        self.send(format!("{}\n", action.command).as_bytes())
            .await?;
        let deadline = action.timeout.map(|t| deadline_after(seconds(t)));
        let (raw, ended) = match self
            .wait(&mut reader, |p| p.seq >= Some(seq), expects, deadline)
            .await
        {
            Ok(done) => done,
            Err(WaitError::Eof) => return Err(self.eof_error()),
            Err(WaitError::Timeout) => return Err(command_timeout(action)),
        };
        let expect_string = match ended {
            Ended::Prompt(_) => PROMPT_EXPECT_STRING.to_owned(),
            Ended::Expect { index } => action.expect[index].clone(),
        };
        let mut output = clean_output(&raw);
        if action.is_interactive_quit {
            // The program may have turned echo back on; turn it off again for the shell.
            if let Ok(mut attrs) = termios::tcgetattr(self.control.as_fd()) {
                attrs.local_flags.remove(LocalFlags::ECHO);
                let _ = termios::tcsetattr(self.control.as_fd(), SetArg::TCSANOW, &attrs);
            }
        } else {
            let trimmed = output.trim_start();
            let trimmed = trimmed
                .strip_prefix(action.command.as_str())
                .unwrap_or(trimmed);
            output = trimmed.trim().to_owned();
        }
        Ok(observation(output, Some(0), expect_string))
    }

    /// Runs a `bash_interrupt` action: Ctrl-C up to `n_retry` times, waiting `timeout` for the
    /// prompt each time, then SIGKILL to the foreground process group.
    pub async fn interrupt(
        &self,
        action: &BashInterruptAction,
    ) -> Result<BashObservation, ServerError> {
        self.ensure_open()?;
        let expects = compile_expects(&action.expect)?;
        let per_try = seconds(action.timeout);
        let retries = action.n_retry.min(MAX_INTERRUPT_RETRIES);
        // Ctrl-C first, without the reader lock: a command waiting without timeout holds it.
        self.send(b"\x03").await?;
        let waited_lock = tokio::time::timeout(
            per_try
                .saturating_mul(retries + 1)
                .saturating_add(self.options.interrupt_grace)
                .min(MAX_TIMEOUT),
            self.reader.lock(),
        )
        .await;
        let mut reader = match waited_lock {
            Ok(r) => r,
            Err(_) => {
                if let Some(pgid) = self.foreground_group().filter(|g| *g != self.pid) {
                    signal_group(pgid, Signal::SIGKILL);
                }
                tokio::time::timeout(self.options.interrupt_grace * 4, self.reader.lock())
                    .await
                    .map_err(|_| {
                        ServerError::exception(
                            class::PEXPECT_TIMEOUT,
                            "Failed to interrupt session",
                        )
                    })?
            }
        };
        if reader.eof {
            return Err(self.eof_error());
        }
        if !reader.busy {
            // Nothing runs: the shell is at its prompt. Wait (briefly) for the prompt the Ctrl-C
            // produces, so that the shell has handled its SIGINT before the next command is
            // sent; otherwise the signal could discard that command's line. A shell that
            // ignores SIGINT prints nothing: the session is idle all the same.
            // The wait lasts at least the grace (under load the prompt takes a while, and a zero
            // `timeout` must not turn into a lost next command) and at most four: an idle
            // shell's prompt comes at once or, when it ignores SIGINT, never.
            let grace = self.options.interrupt_grace;
            let deadline = Some(deadline_after(
                per_try.clamp(grace, grace.saturating_mul(4)),
            ));
            let seen = self
                .wait(&mut reader, |_| true, &[], deadline)
                .await
                .is_ok();
            reader.unanswered_sigint = !seen;
            reader.busy = false;
            return Ok(observation(
                String::new(),
                Some(0),
                PROMPT_EXPECT_STRING.to_owned(),
            ));
        }
        for attempt in 0..=retries {
            if attempt > 0 {
                self.send(b"\x03").await?;
            }
            if let Ok((raw, ended)) = self
                .wait(
                    &mut reader,
                    |_| true,
                    &expects,
                    Some(deadline_after(per_try)),
                )
                .await
            {
                let expect_string = match ended {
                    Ended::Prompt(_) => PROMPT_EXPECT_STRING.to_owned(),
                    Ended::Expect { index } => action.expect[index].clone(),
                };
                return Ok(observation(
                    clean_output(&raw).trim().to_owned(),
                    Some(0),
                    expect_string,
                ));
            }
        }
        if let Some(pgid) = self.foreground_group().filter(|g| *g != self.pid) {
            signal_group(pgid, Signal::SIGKILL);
            let deadline = Some(deadline_after(per_try.max(self.options.interrupt_grace)));
            if let Ok((raw, _)) = self.wait(&mut reader, |_| true, &expects, deadline).await {
                return Ok(observation(
                    clean_output(&raw).trim().to_owned(),
                    Some(0),
                    PROMPT_EXPECT_STRING.to_owned(),
                ));
            }
        }
        Err(ServerError::exception(
            class::PEXPECT_TIMEOUT,
            "Failed to interrupt session",
        ))
    }

    /// Kills the shell and every process of its session (background jobs included), reaps it
    /// and removes the scratch directory. Idempotent.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        kill_session(self.pid);
        let child = self.child.lock().ok().and_then(|mut c| c.take());
        if let Some(mut child) = child {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        }
        // Processes that were forking while we scanned.
        kill_session(self.pid);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// SWE-ReX's `CommandTimeoutError` for `action`.
fn command_timeout(action: &BashAction) -> ServerError {
    ServerError::exception(
        class::COMMAND_TIMEOUT,
        format!(
            "timeout after {} seconds while running command {}",
            py_float(action.timeout.unwrap_or(0.0)),
            py_repr(&shorten(&action.command, MAX_ECHO_BYTES))
        ),
    )
}

impl Drop for BashSession {
    /// A session dropped without `close` (its start was cancelled, say) still takes its
    /// processes and scratch files with it.
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            kill_session(self.pid);
            if let Ok(mut child) = self.child.lock() {
                if let Some(mut child) = child.take() {
                    let _ = child.start_kill();
                    let _ = child.try_wait();
                }
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Creates `path` (0600) and writes `bytes`: never through a symlink, never into an existing
/// file (`O_EXCL | O_NOFOLLOW`).
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(bytes)
}

fn observation(output: String, exit_code: Option<i32>, expect_string: String) -> BashObservation {
    BashObservation {
        output,
        exit_code,
        failure_reason: String::new(),
        expect_string,
        session_type: SessionType::Bash,
    }
}

fn compile_expects(patterns: &[String]) -> Result<Vec<Regex>, ServerError> {
    patterns
        .iter()
        .map(|p| {
            Regex::new(p).map_err(|e| ServerError::exception(class::REGEX_ERROR, e.to_string()))
        })
        .collect()
}
